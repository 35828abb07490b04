"""Correctors in sequence: ``corrector="rules+intersect"`` runs ``rules``, then ``intersect`` on
what ``rules`` returned.

A combination of correctors is a chain of registered ones, not a class of its own: any corrector
the registry names (a user's included) can follow any other, and the search can try a chain like
any other corrector name. A name registered for a combination (``rules_intersect``) is a
:class:`Chain` subclass that only declares its ``steps``, so recorded runs, presets and
artefacts that name it build the very chain its ``+`` spelling builds.

What a chain returns, following the corrector protocol (:class:`~sqlweave.programs.roles.Corrector`):

* ``sql``: the last step's answer; ``rounds``: the steps' rounds summed; ``history``: their
  attempts in order; ``fired``: the rules that fired, in order (when a step reports them);
* any other field (an execution corrector's ``result``): the last step's.

A chain does nothing (``is_noop``) when every step does nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import dspy

from sqlweave.programs.roles import Corrector

#: What joins corrector names into a chain (``rules+intersect``).
SEPARATOR = "+"


def chain_names(spec: str) -> list[str]:
    """The corrector names of a chain spec (``"rules+intersect"`` -> rules, intersect)."""
    names = [part.strip() for part in spec.split(SEPARATOR)]
    if len(names) < 2 or not all(names):
        raise ValueError(f"a corrector chain is names joined by {SEPARATOR!r}, not {spec!r}")
    return names


class Chain(dspy.Module):
    """Correctors called one after the other, each on the SQL the one before returned.

    ``steps``: corrector names (or modules); a subclass may declare them as the class attribute
    :attr:`STEPS` instead. ``settings``: per name, the options only that corrector takes (as for
    :func:`sqlweave.programs.stages.build`).
    """

    #: The steps a named combination declares (a subclass registered under its own name).
    STEPS: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        steps: Sequence[str | dspy.Module] | None = None,
        *,
        settings: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        from sqlweave.programs import stages

        super().__init__()
        specs = list(steps if steps is not None else self.STEPS)
        if len(specs) < 2:
            raise ValueError("a corrector chain needs at least two correctors")
        self.steps: list[Corrector] = [
            stages.build("corrector", s, settings=settings) for s in specs
        ]
        names = [stages.name_of("corrector", s) for s in specs]
        #: The spec that rebuilds it (None when a step is an unregistered instance).
        self.spec = None if None in names else SEPARATOR.join(names)  # type: ignore[arg-type]

    @property
    def is_noop(self) -> bool:
        """The stage capability: a chain of do-nothing correctors does nothing."""
        from sqlweave.programs.stages import declares

        return all(declares(step, "is_noop") for step in self.steps)

    def forward(self, sql: str, **ask: Any) -> dspy.Prediction:
        """Each step on the one before's answer; the merged prediction (module docstring)."""
        outs = []
        for step in self.steps:
            out = step(sql=sql, **ask)
            outs.append(out)
            sql = out.sql
        fields: dict[str, Any] = {
            "sql": sql,
            "rounds": sum(int(getattr(o, "rounds", 0) or 0) for o in outs),
            "history": [h for o in outs for h in (getattr(o, "history", None) or [])],
        }
        if any("fired" in o for o in outs):
            fields["fired"] = [f for o in outs for f in (o.get("fired") or [])]
        last = {k: v for k, v in outs[-1].items() if k not in fields}
        return dspy.Prediction(**fields, **last)


__all__ = ["SEPARATOR", "Chain", "chain_names"]
