"""A candidate pool's ``repair`` stage: a corrector for the candidates that fail to run.

``direct`` and ``ensemble`` repair their pool before the selection; where it acts
(:data:`REPAIR_SCOPES`) decides whether a settling sampler stays exact (:attr:`PoolRepair.revives`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dspy

from sqlweave.db import ExecutionError, QueryResult
from sqlweave.programs import stages as stage_registry
from sqlweave.programs.stages.roles import Corrector

#: Where a ``repair`` stage acts on a pool: ``fallback`` only when no candidate runs (a settled
#: vote is never touched, so a settling sampler stays exact), ``all`` on every failing one.
REPAIR_SCOPES = ("fallback", "all")


def repair_failed(
    sqls: list[str],
    origins: list[str],
    outcome: Callable[[str], QueryResult | ExecutionError],
    repair: Corrector,
    ask: dict[str, Any],
    *,
    scope: str = "fallback",
    limit: int | None = None,
) -> int:
    """Repair, in place, the candidates that fail to run; returns how many were replaced.

    The ``limit`` distinct failing queries most candidates wrote (the earliest of ties; None:
    all) go to the corrector ``repair`` once each, with ``ask`` (db, question, evidence,
    schema); where its answer runs, every copy is replaced and its origin marked
    ``:repaired``. With ``scope="fallback"`` nothing happens while some candidate runs.

    A repaired query that runs is not a right one: on spider-train-val, completing the joins of
    every failing candidate of the ensemble's pool cost a point (its wrong readings, now
    running, outvote right ones) while repairing only pools where nothing ran cost none, and
    lifted bird-52, whose lookup tables the model leaves unjoined, from 50.0 to 67.3.
    """
    failing: dict[str, int] = {}
    for sql in sqls:
        if isinstance(outcome(sql), ExecutionError):
            failing[sql] = failing.get(sql, 0) + 1
    if not failing or (scope == "fallback" and len(failing) < len(set(sqls))):
        return 0
    replaced = 0
    for broken in sorted(failing, key=lambda sql: -failing[sql])[:limit]:
        fixed = repair(sql=broken, **ask).sql
        if not fixed or fixed == broken or isinstance(outcome(fixed), ExecutionError):
            continue
        for i, sql in enumerate(sqls):
            if sql == broken:
                sqls[i] = fixed
                origins[i] = f"{origins[i]}:repaired"
                replaced += 1
    return replaced


class PoolRepair(dspy.Module):
    """The ``repair`` stage of a candidate pool (``direct``, ``ensemble``): the corrector
    ``corrector`` (a registry name or module; ``execution`` gets one round and schema hints)
    for the candidates that fail to run, where ``scope`` says, at most ``limit`` distinct
    queries (:func:`repair_failed`). ``none`` is no repair."""

    def __init__(
        self,
        corrector: str | dspy.Module = "none",
        scope: str = "fallback",
        limit: int | None = None,
    ) -> None:
        if scope not in REPAIR_SCOPES:
            raise ValueError(
                f"repair_scope must be one of {', '.join(REPAIR_SCOPES)}, not {scope!r}"
            )
        if limit is not None and (
            not isinstance(limit, int) or isinstance(limit, bool) or limit < 0
        ):
            raise ValueError(f"repair_max must be None or an integer >= 0, got {limit!r}")
        super().__init__()
        self.corrector = stage_registry.build(
            "corrector", corrector, settings={"execution": {"max_rounds": 1, "schema_hints": True}}
        )
        self.scope, self.limit = scope, limit

    @property
    def active(self) -> bool:
        """Whether it repairs anything (not ``none``)."""
        return not stage_registry.declares(self.corrector, "is_noop")

    @property
    def revives(self) -> bool:
        """Whether it may change a settled vote: repairing every failing candidate can revive
        one the vote counted out, so a sampler must not stop early; a fallback repair acts
        only where nothing ran, which no settled vote is."""
        return self.active and self.scope == "all"

    def forward(
        self,
        sqls: list[str],
        origins: list[str],
        outcome: Callable[[str], QueryResult | ExecutionError],
        ask: dict[str, Any],
        ran: Any = None,
    ) -> int:
        """:func:`repair_failed` on the pool, in place; records the corrector in ``ran`` (a
        :class:`~sqlweave.programs.stages.Ran`) when it replaced something."""
        if not self.active:
            return 0
        replaced = repair_failed(
            sqls, origins, outcome, self.corrector, ask, scope=self.scope, limit=self.limit
        )
        if replaced and ran is not None:
            ran.record("corrector", self.corrector)
        return replaced


__all__ = ["REPAIR_SCOPES", "PoolRepair", "repair_failed"]
