"""Stage roles, their implementations by name, and the one output contract of every program.

A sqlweave program is a composition of stages, each a ``dspy.Module`` with one job that can be
used inside any DSPy program. The replaceable roles and their call protocols (keyword arguments;
an implementation accepts and ignores what it does not read):

``linker``
    ``linker(question=, schema=, sql=draft, db_schema=, evidence=, dialect=, db=)`` returns
    ``Prediction(linked=LinkedSchema, schema=pruned Schema, ...)``. An empty link means "keep the
    whole schema": a linker that finds nothing must not leave the generator with nothing.
``selector``
    ``selector(candidates=[sql, ...], db=, question=, evidence=, db_schema=)`` returns
    ``Prediction(sql, choice, lm_called, ...)`` (``choice``: 1-based position of ``sql``).
``corrector``
    ``corrector(sql=, db=, question=, evidence=, db_schema=)`` returns
    ``Prediction(sql, rounds, history, ...)`` (``history``: the attempts, as dicts with ``sql``
    and ``feedback``).

The implementations, by registry name (:func:`available`):

============  ===============================================================================
role          names
============  ===============================================================================
linker        ``none``; ``tables`` (PET-SQL: tables a draft reads); ``columns`` (RSL-SQL's
              backward link); ``values`` (columns holding values the question names, plus the
              draft's tables); ``forward`` (RSL-SQL: the LM lists columns); ``bidirectional``
              (RSL-SQL: forward ∪ backward ∪ evidence)
selector      ``first``; ``vote`` (PET-SQL's execution-majority vote); ``lm`` (RSL-SQL's
              selection, the LM chooses between executed candidates)
corrector     ``none``; ``execution`` (Dubo-SQL / RSL-SQL: fix while the SQL fails or returns
              nothing); ``rules`` (MageSQL's rule-based correction, no LM call); ``mage``
              (MageSQL's rules, then its guideline prompt on predicted-hard cases)
============  ===============================================================================

The other stages are shared classes rather than roles with alternatives: schema context
(:mod:`sqlweave.caches`, one cache per database), demo source
(:class:`~sqlweave.programs.demos.DemoSource`), generator
(:class:`~sqlweave.programs.base.Generator`) and sampler
(:class:`~sqlweave.programs.voting.Sampler`).

A seed takes ``linker=``, ``selector=`` and ``corrector=`` constructor arguments: a registry name
(saved with a compiled artefact, and what ``sqlweave ... --set linker=bidirectional`` passes) or
a stage instance (used as given, not saved). Its paper's choice is the default.

**The output contract.** Every program returns, besides its own intermediate fields,
``sql`` (the answer), ``stages`` (names of the stages that ran, in order), ``candidates`` (the
SQL the selection chose among; ``[sql]`` without one), ``linked`` (``table.column`` names kept
by linking, ``[]`` without), ``demos`` (questions of the examples shown) and ``history`` (the
correction attempts). LM calls and tokens are never counted by hand: they come from
:func:`sqlweave.lm.track_usage`.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import Any

import dspy

#: role -> name -> ``module:Class`` (imported on first use, so the registry costs nothing).
STAGES: dict[str, dict[str, str]] = {
    "linker": {
        "none": "sqlweave.programs.linking:NoLinker",
        "tables": "sqlweave.programs.linking:DraftTablesLinker",
        "columns": "sqlweave.programs.linking:DraftColumnsLinker",
        "values": "sqlweave.programs.linking:ValueLinker",
        "forward": "sqlweave.programs.linking:ForwardLinker",
        "bidirectional": "sqlweave.programs.linking:BidirectionalLinker",
    },
    "selector": {
        "first": "sqlweave.programs.voting:FirstSelector",
        "vote": "sqlweave.programs.voting:VoteSelector",
        "lm": "sqlweave.programs.selection:CandidateSelector",
    },
    "corrector": {
        "none": "sqlweave.programs.correction:NoCorrector",
        "execution": "sqlweave.programs.correction:CorrectionLoop",
        "rules": "sqlweave.programs.correction:RuleCorrector",
        "mage": "sqlweave.programs.mage:MageCorrector",
    },
}

ROLES = tuple(STAGES)

#: The fields every program's prediction carries.
CONTRACT = ("sql", "stages", "candidates", "linked", "demos", "history")


def available(role: str | None = None) -> Any:
    """The implementation names of ``role``, or every role's when ``role`` is None."""
    if role is None:
        return {r: sorted(names) for r, names in STAGES.items()}
    return sorted(_names(role))


def _names(role: str) -> dict[str, str]:
    try:
        return STAGES[role]
    except KeyError:
        raise ValueError(f"unknown stage role {role!r}; choose one of {', '.join(ROLES)}") from None


def stage_class(role: str, name: str) -> type:
    """The class registered as ``name`` for ``role``; a ``ValueError`` names the choices."""
    names = _names(role)
    try:
        target = names[name]
    except KeyError:
        raise ValueError(
            f"unknown {role} {name!r}; choose one of {', '.join(sorted(names))}"
        ) from None
    module_name, cls_name = target.split(":")
    return getattr(importlib.import_module(module_name), cls_name)


def build(
    role: str,
    spec: str | dspy.Module | None,
    *,
    settings: Mapping[str, Mapping[str, Any]] | None = None,
    **options: Any,
) -> dspy.Module:
    """The stage for ``spec``: a registry name built with ``options``, or a module used as is.

    ``settings`` maps registry names to the options only that implementation takes, so a
    program can configure its default stage (``settings={"execution": {"max_rounds": 1}}``)
    and still accept any other name in its place.

    ``None`` is what a program's saved switches hold for a stage that was passed as an instance
    of an unregistered class: it cannot be rebuilt from a file, so the error says to pass it again.
    """
    if isinstance(spec, dspy.Module):
        return spec
    if spec is None:
        raise ValueError(
            f"this program was built with its own {role} (an instance, which artefacts cannot "
            f"save): pass it again, e.g. {role}=MyStage(), or register its class in "
            "sqlweave.programs.stages.STAGES"
        )
    if not isinstance(spec, str):
        raise TypeError(f"{role} must be a registry name or a dspy.Module, got {spec!r}")
    return stage_class(role, spec)(**options, **(settings or {}).get(spec, {}))


def name_of(role: str, spec: str | dspy.Module) -> str | None:
    """The registry name of ``spec`` (a name, or an instance of a registered class), else None.

    Programs record this among their switches, so an artefact rebuilds the same stage; a user's
    own stage class has no name and is not saved (pass it again after loading).
    """
    if isinstance(spec, str):
        stage_class(role, spec)  # validates
        return spec
    for name in _names(role):
        if type(spec) is stage_class(role, name):
            return name
    return None


def role_switches(**specs: str | dspy.Module) -> dict[str, str | None]:
    """``{role: registry name}`` for a program's switches: ``role_switches(linker=..., ...)``."""
    return {role: name_of(role, spec) for role, spec in specs.items()}


def check_samples(samples: Any, selector: str | dspy.Module) -> int:
    """``samples`` validated for a program that adds sampled candidates to its own query.

    Extra samples only matter when a selector chooses among the candidates: with ``first`` the
    greedy query would always win and the samples would be paid for and thrown away, so that
    combination is refused (the switch search records it as invalid rather than running it).
    """
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
        raise ValueError(f"samples must be an integer >= 1, got {samples!r}")
    if samples > 1 and name_of("selector", selector) == "first":
        raise ValueError(
            "samples > 1 needs a selector that chooses among the candidates "
            "(selector='vote' or 'lm'); 'first' would keep the greedy query only"
        )
    return samples


def is_none(role: str, stage: Any) -> bool:
    """Whether ``stage`` is the role's do-nothing choice (``none`` linker or corrector)."""
    return stage is None or name_of(role, stage) == "none"


def link(
    linker: dspy.Module,
    *,
    question: str,
    db: Any,
    db_schema: str,
    evidence: str = "",
    sql: str = "",
) -> Any:
    """Call ``linker`` with the role's protocol; None for the ``none`` linker (nothing to prune).

    The schema is introspected here (cached per database), so a program passes only its own
    schema text and, where it has one, the draft SQL the linker may read.
    """
    if is_none("linker", linker):
        return None
    from sqlweave.schema import introspect

    return linker(
        question=question,
        schema=introspect(db),
        sql=sql,
        db_schema=db_schema,
        evidence=evidence,
        dialect=db.dialect,
        db=db,
    ).linked


def _texts(items: Iterable[Any] | None, attr: str) -> list[str]:
    out = []
    for item in items or []:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, Mapping) or hasattr(item, "get"):
            out.append(str(item.get(attr, "")))
        else:
            out.append(str(getattr(item, attr, item)))
    return out


def result(
    sql: str,
    *,
    stages: Iterable[str],
    candidates: Iterable[str] | None = None,
    linked: Any = None,
    demos: Iterable[Any] | None = None,
    history: Iterable[Any] | None = None,
    **extra: Any,
) -> dspy.Prediction:
    """A program's prediction in the output contract (module docstring), plus ``extra`` fields.

    ``linked`` may be a :class:`~sqlweave.programs.linking.LinkedSchema` or a list of names;
    ``demos`` examples or their questions; ``candidates`` defaults to ``[sql]``.
    """
    if linked is None:
        names: list[str] = []
    elif hasattr(linked, "names"):
        names = list(linked.names())
    else:
        names = [str(n) for n in linked]
    cands = [str(c) for c in candidates] if candidates is not None else [sql]
    return dspy.Prediction(
        sql=sql,
        stages=list(stages),
        candidates=cands,
        linked=names,
        demos=_texts(demos, "question"),
        history=[dict(h) if isinstance(h, Mapping) else h for h in history or []],
        **extra,
    )


__all__ = [
    "CONTRACT",
    "ROLES",
    "STAGES",
    "available",
    "build",
    "check_samples",
    "is_none",
    "link",
    "name_of",
    "result",
    "role_switches",
    "stage_class",
]
