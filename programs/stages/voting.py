"""Execution-based voting: candidates that return the same answer form a class; the largest wins.

PET-SQL's cross-consistency votes over PreSQL and the FinSQLs of several LMs; self-consistency
(the PET-SQL baseline) votes over samples of one LM. Both are :func:`vote` over different candidate
lists. "The same answer" uses the Spider EX comparison of :func:`sqlweave.metrics.results_match`:
rows as a multiset, up to a permutation of columns, in order only when both queries sort.

Rules, in order:

1. the class with the largest summed weight wins (weights default to 1 per candidate);
2. an empty result (no rows, or only NULLs) is a valid answer but loses a tie to a non-empty
   one: agreeing on "nothing" is the commonest way for wrong queries to agree;
3. a remaining tie goes to the class holding the earliest candidate, so callers list their most
   trusted candidate first (PET-SQL's PreSQL, the greedy sample);
4. failed candidates never vote; if all fail, the first candidate is returned.

The winning SQL is the earliest member of the winning class.

Candidates that go only to this vote need not all be drawn: once the leading class cannot be
overtaken by the candidates still to come (:func:`vote_settled`), :class:`~.sampling.Sampler` with
``settle`` stops, and a local model stops decoding the samples' batch (adaptive
self-consistency; ``direct`` and ``weave`` do this with the ``vote`` selector). The sampler's
tally hands the outcomes it already has to the vote (:class:`Candidates`), so no candidate runs
twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import dspy

from sqlweave.db import Database, ExecutionError, QueryResult
from sqlweave.metrics import has_top_level_order_by, results_match
from sqlweave.programs.base import resolve_database
from sqlweave.programs.stages.feedback import FEEDBACK_TIMEOUT_S, execute_quietly, is_empty
from sqlweave.programs.stages.repair import REPAIR_SCOPES as REPAIR_SCOPES  # re-exported
from sqlweave.programs.stages.repair import PoolRepair as PoolRepair
from sqlweave.programs.stages.repair import repair_failed as repair_failed

logger = logging.getLogger(__name__)

#: Rows fetched per candidate for comparison; results cut here are compared on what was fetched.
VOTE_MAX_ROWS = 10_000


@dataclass
class ExecutionGroup:
    """Candidates (indices into the input list) whose results are execution-equivalent."""

    members: list[int]
    result: QueryResult
    weight: float = 0.0
    ordered: bool = False

    @property
    def first(self) -> int:
        """The earliest member: the class's representative and its tie-break position."""
        return self.members[0]

    @property
    def empty(self) -> bool:
        return is_empty(self.result)


@dataclass
class VoteResult:
    """Outcome of :func:`vote`. ``support`` is the winning class's summed weight (0 if all failed),
    ``total`` the summed weight of all candidates; ``outcomes`` holds each candidate's result or
    error in input order."""

    sql: str
    groups: list[ExecutionGroup]
    winner_index: int
    support: float
    total: float = 0.0
    outcomes: list[QueryResult | ExecutionError] = field(default_factory=list)

    @property
    def share(self) -> float:
        """Winning weight as a fraction of all weight: a confidence signal for callers."""
        return self.support / self.total if self.total else 0.0


def equivalent(a: QueryResult, b: QueryResult, ordered: bool = False) -> bool:
    """Whether two results denote the same answer (Spider EX semantics, symmetric).

    Different row counts or column counts never match; results with no rows match each other.
    """
    if len(a.rows) != len(b.rows):
        return False
    if a.rows and b.rows and len(a.rows[0]) != len(b.rows[0]):
        return False
    return results_match(a, b, "spider", ordered=ordered)


def execution_groups(
    candidates: Sequence[str],
    db: Database,
    weights: Sequence[float] | None = None,
    *,
    timeout_s: float = FEEDBACK_TIMEOUT_S,
    max_rows: int = VOTE_MAX_ROWS,
    known: Mapping[str, QueryResult | ExecutionError] | None = None,
) -> tuple[list[ExecutionGroup], list[QueryResult | ExecutionError]]:
    """Execute every candidate and group those with equivalent results; failures are left out.

    Returns ``(groups in order of their first member, per-candidate outcomes)``. Two candidates
    are compared in row order only when both sort at the top level. ``known`` outcomes (by SQL,
    e.g. :attr:`Candidates.outcomes` of a settling :class:`~.sampling.Sampler`) are reused, not
    run again.
    """
    if weights is not None and len(weights) != len(candidates):
        raise ValueError(f"{len(weights)} weights for {len(candidates)} candidates")
    known = known or {}
    outcomes = [
        known[sql]
        if sql in known
        else execute_quietly(db, sql, timeout_s=timeout_s, max_rows=max_rows)
        for sql in candidates
    ]
    return group_outcomes(candidates, outcomes, db.dialect, weights), outcomes


def group_outcomes(
    candidates: Sequence[str | None],
    outcomes: Sequence[QueryResult | ExecutionError | None],
    dialect: str,
    weights: Sequence[float] | None = None,
) -> list[ExecutionGroup]:
    """Group executed candidates by equivalent results, in order (:func:`execution_groups`
    without the execution). A candidate whose outcome is an error or None (not known yet)
    joins no group; members keep their positions in ``candidates``."""
    groups: list[ExecutionGroup] = []
    for i, (sql, outcome) in enumerate(zip(candidates, outcomes, strict=True)):
        if outcome is None:
            continue
        if isinstance(outcome, ExecutionError):
            logger.debug("vote: candidate %d failed: %s", i, outcome.feedback())
            continue
        weight = 1.0 if weights is None else float(weights[i])
        ordered = has_top_level_order_by(sql or "", dialect)
        for group in groups:
            if equivalent(group.result, outcome, ordered=ordered and group.ordered):
                group.members.append(i)
                group.weight += weight
                break
        else:
            groups.append(ExecutionGroup([i], outcome, weight, ordered))
    return groups


def _rank(group: ExecutionGroup) -> tuple[float, bool, int]:
    """The vote's order of classes: weight, then non-empty, then the earliest member."""
    # Round weights so float sums like 0.1 + 0.2 tie with 0.3 instead of deciding by noise.
    return (round(group.weight, 9), not group.empty, -group.first)


def ranked_groups(groups: Sequence[ExecutionGroup]) -> list[ExecutionGroup]:
    """The classes in the vote's order, the winner first (module docstring, rules 1-3)."""
    return sorted(groups, key=_rank, reverse=True)


def vote_settled(groups: Sequence[ExecutionGroup], undecided: float) -> bool:
    """Whether candidates still to come (``undecided``: their summed weight) can no longer change
    which class :func:`vote` picks, whatever they return.

    The leading class wins outright if it outweighs the runner-up with every undecided candidate
    added to it; on an exact tie it still wins if it is non-empty and holds the first candidate
    (rules 2 and 3 of the module docstring). With nothing undecided the vote is settled. Adaptive
    self-consistency: once settled, the remaining samples need not be decoded.
    """
    if undecided <= 0:
        return True
    if not groups:
        return False
    ranked = sorted(groups, key=_rank, reverse=True)
    runner_up = ranked[1].weight if len(ranked) > 1 else 0.0
    margin = round(ranked[0].weight - runner_up - undecided, 9)
    return margin > 0 or (margin == 0 and not ranked[0].empty and ranked[0].first == 0)


class Candidates(Sequence[str]):
    """What a :class:`~.sampling.Sampler` returns: its candidates' SQL in rollout order,
    read-only, and ``outcomes``, the execution results (or errors) its tally already had, by SQL.

    Every selector reads it as a sequence of SQL (it compares equal to a list of the same SQL).
    :class:`VoteSelector` also hands ``outcomes`` to :func:`vote` (``known=``), so a candidate
    the tally ran while sampling is not run again; it is empty when the sampler kept no tally.
    """

    __slots__ = ("_sqls", "outcomes")

    def __init__(
        self,
        sqls: Iterable[str],
        outcomes: Mapping[str, QueryResult | ExecutionError] | None = None,
    ) -> None:
        self._sqls = list(sqls)
        #: Execution outcomes already known, by SQL (a settling sampler's tally).
        self.outcomes: dict[str, QueryResult | ExecutionError] = dict(outcomes or {})

    def __getitem__(self, index: Any) -> Any:
        return self._sqls[index]

    def __len__(self) -> int:
        return len(self._sqls)

    def __iter__(self) -> Iterator[str]:
        return iter(self._sqls)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Candidates):
            return self._sqls == other._sqls
        if isinstance(other, Sequence) and not isinstance(other, str):
            return self._sqls == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to a list, so unhashable like one

    def __repr__(self) -> str:
        return f"Candidates({self._sqls!r})"


class VoteTally:
    """The unweighted execution vote over candidates that arrive one by one: each distinct SQL
    is executed once, and :meth:`settled` says when the rest cannot change the winner.

    Exact for candidates known in order (a prefix of the vote's list, as :class:`~.sampling.Sampler`
    checks before each rollout): candidates added later only join classes or start new ones.
    With unknown candidates (None) between known ones it assumes an unknown candidate will not
    merge classes the known ones keep apart; results equal as multisets but sorted in one and
    not in the other can (see :func:`equivalent`), which at worst ends a batch too early.
    """

    def __init__(
        self,
        db: Database,
        timeout_s: float = FEEDBACK_TIMEOUT_S,
        known: Mapping[str, QueryResult | ExecutionError] | None = None,
    ) -> None:
        self.db = db
        self.timeout_s = timeout_s
        #: Outcomes by SQL; ``known`` ones (e.g. :attr:`Candidates.outcomes`) are not run again.
        self._outcomes: dict[str, QueryResult | ExecutionError] = dict(known or {})

    def outcome(self, sql: str) -> QueryResult | ExecutionError:
        if sql not in self._outcomes:
            self._outcomes[sql] = execute_quietly(
                self.db, sql, timeout_s=self.timeout_s, max_rows=VOTE_MAX_ROWS
            )
        return self._outcomes[sql]

    @property
    def outcomes(self) -> dict[str, QueryResult | ExecutionError]:
        """Every outcome so far, by SQL."""
        return dict(self._outcomes)

    def settled(self, candidates: Sequence[str | None], later: int = 0) -> bool:
        """Whether ``candidates`` (in the vote's order; None: one not known yet) and ``later``
        more after them can no longer change :func:`vote`'s winning class."""
        outcomes = [None if sql is None else self.outcome(sql) for sql in candidates]
        groups = group_outcomes(candidates, outcomes, self.db.dialect)
        undecided = sum(sql is None for sql in candidates) + later
        return vote_settled(groups, float(undecided))


def vote(
    candidates: Sequence[str],
    db: Database,
    weights: Sequence[float] | None = None,
    *,
    timeout_s: float = FEEDBACK_TIMEOUT_S,
    known: Mapping[str, QueryResult | ExecutionError] | None = None,
) -> VoteResult:
    """Majority vote over execution results (rules in the module docstring); ``known`` outcomes
    (by SQL) are reused rather than run again."""
    if not candidates:
        raise ValueError("vote needs at least one candidate")
    groups, outcomes = execution_groups(candidates, db, weights, timeout_s=timeout_s, known=known)
    total = float(len(candidates)) if weights is None else float(sum(weights))
    if not groups:
        logger.debug("vote: every candidate failed; returning the first")
        return VoteResult(candidates[0], [], 0, 0.0, total, outcomes)
    best = max(groups, key=_rank)
    return VoteResult(candidates[best.first], groups, best.first, best.weight, total, outcomes)


class VoteSelector(dspy.Module):
    """The ``vote`` selector: the execution-majority candidate (:func:`vote`; no LM call).

    Follows the selector protocol of :mod:`sqlweave.programs.stages`: returns
    ``Prediction(sql, choice, lm_called, vote)`` with ``choice`` 1-based.
    """

    #: Stage capabilities (stages.CAPABILITIES): the plain vote may stop its sampler early and
    #: reads weights. A subclass that needs every candidate sets ``settles_early = False``.
    settles_early = True
    takes_weights = True

    def __init__(self, timeout_s: float = FEEDBACK_TIMEOUT_S) -> None:
        super().__init__()
        self.timeout_s = timeout_s

    def forward(
        self,
        candidates: Sequence[str],
        db: Database | str | Path,
        weights: Sequence[float] | None = None,
        **_: Any,
    ) -> dspy.Prediction:
        """The vote (the selector protocol, :class:`~sqlweave.programs.stages.roles.Selector`; the
        question, evidence and schema are accepted and not read)."""
        # A settling sampler's candidates bring the outcomes its tally had: run only the rest.
        known = candidates.outcomes if isinstance(candidates, Candidates) else None
        result = vote(
            list(candidates), resolve_database(db), weights, timeout_s=self.timeout_s, known=known
        )
        return dspy.Prediction(
            sql=result.sql, choice=result.winner_index + 1, lm_called=False, vote=result
        )


class AcrossSelector(VoteSelector):
    """The ``across`` selector: the answer held by the most *different* sources (generators,
    prompts) wins; the vote's order (weight, non-empty, earliest) breaks ties. No LM call.

    Several samples of one prompt agreeing are weaker evidence than two prompts agreeing: a
    prompt's samples share its misreadings. Without ``sources`` it is the (weighted) vote. It
    needs every candidate (a settled vote can still be overturned across sources), so a sampler
    feeding it must not stop early (it does not declare ``settles_early``).
    """

    settles_early = False
    takes_sources = True

    def forward(  # type: ignore[override]
        self,
        candidates: Sequence[str],
        db: Database | str | Path,
        weights: Sequence[float] | None = None,
        sources: Sequence[str] | None = None,
        **_: Any,
    ) -> dspy.Prediction:
        if sources is not None and len(sources) != len(candidates):
            raise ValueError(f"{len(sources)} sources for {len(candidates)} candidates")
        voted = super().forward(candidates, db, weights)
        result: VoteResult = voted.vote
        if sources is None or not result.groups:
            return voted
        # The vote's order first, so the first of equally many sources is the vote's choice.
        best = min(
            ranked_groups(result.groups), key=lambda g: -len({sources[m] for m in g.members})
        )
        return overturned(candidates, result, best)


def overturned(
    candidates: Sequence[str], result: VoteResult, winner: ExecutionGroup
) -> dspy.Prediction:
    """A selector's prediction when it keeps the vote's classes but crowns ``winner`` (one of
    ``result.groups``): its earliest member is the answer (``across``, ``ranked``)."""
    result = replace(
        result, sql=list(candidates)[winner.first], winner_index=winner.first, support=winner.weight
    )
    return dspy.Prediction(sql=result.sql, choice=winner.first + 1, lm_called=False, vote=result)


class FirstSelector(dspy.Module):
    """The ``first`` selector: the first non-empty candidate, unexecuted (a single-answer
    pipeline's choice; the selector protocol of :mod:`sqlweave.programs.stages`)."""

    picks_first = True  # the stage capability programs read (stages.CAPABILITIES)

    def forward(self, candidates: Sequence[str], **_: Any) -> dspy.Prediction:
        if not candidates:
            raise ValueError("a selector needs at least one candidate")
        index = next((i for i, sql in enumerate(candidates) if sql.strip()), 0)
        return dspy.Prediction(sql=candidates[index], choice=index + 1, lm_called=False)
