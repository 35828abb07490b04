"""Presets: named, measured configurations of a program, and the one users get by default.

A preset is a program name plus switches, chosen by a rule of ``docs/decisions.md`` on the
decision set (``spider-train-select``, cross-validated by database) and measured once on the
reported slices. ``sqlweave ask``, ``evaluate``, ``compile``, ``serve`` and the Python API run
:data:`DEFAULT_PRESET` when given no program options; ``--preset NAME`` (``preset=`` in Python)
picks another, ``--set`` still overrides one switch, and an artefact records the preset it was
built from (``inspect`` shows it).

The default is the preset with the best measured EX whose time per question stays within the
budget the README states (10 s a question on a 2-core laptop with the bundled 1.5B model).

A preset also names the switches whose best value depends on the database (``space``): the
decision set chose them on average over 128 databases, and the join repair, for one, is worth
points on some databases and costs them on others. A switch-search compile that starts from the
preset with no space of its own (``sqlweave compile --db mine.sqlite --synthesize N``) searches
those switches on the user's database, the rest staying as the decision set chose them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Seconds per question (cold, 2-core CPU, the bundled 1.5B model) a default may take.
BUDGET_S_PER_QUESTION = 10.0


@dataclass(frozen=True)
class Preset:
    """A named configuration: ``program`` built with ``switches``; ``summary`` says what it
    does, ``measured`` where its figures come from (docs/results.md); ``space``, the switches a
    compile on the user's own data searches (module doc), the preset's value first."""

    name: str
    program: str
    switches: Mapping[str, Any] = field(default_factory=dict)
    summary: str = ""
    measured: str = ""
    space: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)

    @property
    def prompts(self) -> int:
        """Prompts a question is asked: one per generator (``generators``), else one."""
        return len(str(self.switches.get("generators", "")).split(","))

    @property
    def stopped(self) -> int:
        """Candidates (and LM calls) a question takes where a ``cascade`` stops: one greedy
        candidate per prompt, and the ``probe`` sample when it is on."""
        return self.prompts + int(bool(self.switches.get("probe")))

    @property
    def candidates(self) -> int:
        """Candidates a question draws at most (before any repair; a ``cascade`` stops at one per
        prompt where those agree): ``samples`` for each prompt, or the
        sum of a per-generator ``samples`` (``"direct=3,sea=2"``; unnamed generators draw 4)."""
        samples = self.switches.get("samples", 1)
        if isinstance(samples, str) and "=" in samples:
            # imported here: presets are read before any program is needed
            from sqlweave.programs.ensemble import parse_samples

            names = str(self.switches.get("generators", "")).split(",")
            return sum(parse_samples(samples, names).values())
        return int(samples) * self.prompts

    def describe(self) -> str:
        """One line: the program and its switches."""
        sets = " ".join(f"{k}={v}" for k, v in self.switches.items())
        return f"{self.program}" + (f" {sets}" if sets else "")


PRESETS: dict[str, Preset] = {
    "fast": Preset(
        name="fast",
        program="direct",
        switches={},
        summary="one LM call, then MageSQL's rule-based correction (no LM call)",
        measured="spider-dev-200 60.0, bird-52 25.0, 1.5 s/question",
    ),
    "accurate": Preset(
        name="accurate",
        program="ensemble",
        switches={
            "generators": "direct,dubo_v1",
            "samples": 4,
            "temperature": "direct=1.0,dubo_v1=0.7",
            "greedy_weight": 1.0,
            "early_stop": False,
            "repair": "joins",
            "repair_scope": "fallback",
            "selector": "grounded",
            "corrector": "rules_intersect",
            "cascade": True,
            "probe": True,
        },
        summary="two prompts reading different evidence, direct's schema and Dubo-SQL's DDL "
        "with sample rows, each asked for its greedy query; where the two agree (both run, "
        "non-empty, one answer, every text they compare stored) that is the answer, and one "
        "sample of the first prompt tells the confidence whether a sampled query agrees; "
        "otherwise each draws 3 more (at 1.0 and 0.7), the joins a query forgot are added "
        "where no candidate runs, a vote (one each) among the candidates whose values the "
        "database stores, then the rules and the 'both' rewrite; each part kept by rules 16, "
        "19, 27, 29 and 39",
        measured="spider-dev-200 72.0, bird-52 76.9 (read once each; before the probe, the "
        "same stops read 74.5 / 69.2), 5.0 / 8.5 s/question cold; decision set (1,000 Spider "
        "train questions on 128 databases) 79.5 with 4.9 LM calls a question "
        "(docs/decisions.md, rules 27, 29 and 39)",
        # the join repair's worth depends on the database (issue 59: +25 on bird-52's one
        # database, a lookup join no question asked for on others)
        space={"repair": ("joins", "none"), "repair_scope": ("fallback", "all")},
    ),
}

#: What runs when no program option is given (module doc).
DEFAULT_PRESET = "accurate"


def names() -> list[str]:
    """The presets' names, the default first."""
    return [DEFAULT_PRESET, *sorted(n for n in PRESETS if n != DEFAULT_PRESET)]


def get_preset(name: str) -> Preset:
    """The preset called ``name``; a ValueError naming the known ones otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(names())}") from None


def search_space(preset: str | None) -> dict[str, list[Any]]:
    """The switches a compile starting from ``preset`` searches when it is given no space of its
    own (``{}`` for no preset, or a preset that names none)."""
    if preset is None:
        return {}
    return {switch: list(choices) for switch, choices in get_preset(preset).space.items()}


def resolve(
    program: str | None, preset: str | None, switches: Mapping[str, Any] | None = None
) -> tuple[str, dict[str, Any], str | None]:
    """``(program name, switches, preset name or None)`` for what a user asked.

    No program and no preset: :data:`DEFAULT_PRESET`. A preset: its program and switches, with
    ``switches`` on top (``--set`` overrides one switch); a ``program`` given beside it must be
    the preset's own. A program alone: that program with ``switches`` (no preset).
    """
    given = dict(switches or {})
    if preset is None and program is None:
        preset = DEFAULT_PRESET
    if preset is None:
        return str(program), given, None
    chosen = get_preset(preset)
    if program is not None and program != chosen.program:
        raise ValueError(
            f"preset {preset!r} is a configuration of {chosen.program!r}, not {program!r}: "
            "give one of --program and --preset"
        )
    return chosen.program, {**chosen.switches, **given}, chosen.name
