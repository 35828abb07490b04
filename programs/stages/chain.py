"""Correctors in sequence: ``corrector="rules+intersect"`` runs ``rules``, then ``intersect`` on
what ``rules`` returned.

A combination of correctors is a chain of registered ones, not a class of its own: any corrector
the registry names (a user's included) can follow any other, and the search can try a chain like
any other corrector name. A name registered for a combination (``rules_intersect``) is a
:class:`Chain` subclass built from its ``+`` spelling, so recorded runs, presets and artefacts
that name it build the very chain ``rules+intersect`` builds.

What a chain returns, following the corrector protocol (:class:`~sqlweave.programs.stages.roles.Corrector`):

* ``sql``: the last step's answer; ``rounds``: the steps' rounds summed; ``history``: their
  attempts in order; ``fired``: the rules that fired, in order (when a step reports them);
* any other field (an execution corrector's ``result``): the last step's.

A chain does nothing (``is_noop``) when every step does nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dspy

from sqlweave.programs.stages.roles import Corrector, declares

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

    ``steps``: the correctors, built (:func:`sqlweave.programs.stages.build` builds a chain from
    its spec, ``corrector="rules+intersect"``, and a registered combination builds its own);
    ``spec``: the ``a+b`` names that rebuild it (None when a step is an unregistered instance,
    which artefacts cannot save).
    """

    def __init__(self, steps: Sequence[Corrector], *, spec: str | None = None) -> None:
        super().__init__()
        if len(steps) < 2:
            raise ValueError("a corrector chain needs at least two correctors")
        self.steps = list(steps)
        #: The spec that rebuilds it (:func:`sqlweave.programs.stages.name_of` reads it).
        self.spec = spec

    @property
    def is_noop(self) -> bool:
        """The stage capability: a chain of do-nothing correctors does nothing."""
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
