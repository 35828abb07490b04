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
overtaken by the candidates still to come (:func:`vote_settled`), :class:`Sampler` with
``settle`` stops, and a local model stops decoding the samples' batch (adaptive
self-consistency; ``direct`` and ``weave`` do this with the ``vote`` selector). The sampler's
tally hands the outcomes it already has to the vote (:class:`Candidates`), so no candidate runs
twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from sqlweave.db import Database, ExecutionError, QueryResult
from sqlweave.lm import EarlyStop, batched_samples
from sqlweave.metrics import has_top_level_order_by, results_match
from sqlweave.programs.base import resolve_database
from sqlweave.programs.stages import declares
from sqlweave.programs.stages.feedback import FEEDBACK_TIMEOUT_S, execute_quietly, is_empty
from sqlweave.programs.stages.repair import REPAIR_SCOPES as REPAIR_SCOPES  # re-exported
from sqlweave.programs.stages.repair import PoolRepair as PoolRepair
from sqlweave.programs.stages.repair import repair_failed as repair_failed
from sqlweave.sqltext import extract_sql

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
    e.g. :attr:`Candidates.outcomes` of a settling :class:`Sampler`) are reused, not run again.
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
    """What a :class:`Sampler` returns: its candidates' SQL in rollout order, read-only, and
    ``outcomes``, the execution results (or errors) its tally already had, by SQL.

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

    Exact for candidates known in order (a prefix of the vote's list, as :class:`Sampler`
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


def sample_lm(i: int, temperature: float, lm: Any = None, greedy_first: bool = True) -> Any:
    """The LM for rollout ``i``: ``lm`` (default: the current one) unchanged for ``i == 0`` with
    ``greedy_first``, else a copy at ``temperature`` with ``rollout_id=i`` (DSPy 3.4 keys its
    cache on ``rollout_id``, so equal prompts still give fresh samples; a ``seed`` in the LM's
    settings is varied too)."""
    lm = lm if lm is not None else dspy.settings.lm
    if lm is None or (i == 0 and greedy_first):
        return lm
    updates: dict[str, Any] = {"rollout_id": i, "temperature": temperature}
    seed = (getattr(lm, "kwargs", None) or {}).get("seed")
    if isinstance(seed, int):
        updates["seed"] = seed + i
    return lm.copy(**updates)


class Sampler(dspy.Module):
    """``n`` SQL candidates from one generator: the first greedy (with ``greedy_first``), the
    others sampled at ``temperature`` with distinct rollout ids (:func:`sample_lm`).

    ``predictor`` is a :class:`~sqlweave.programs.base.SQLProgram` or another module that declares
    ``takes_db`` (called with ``db=``), or any module / predictor whose output has a
    ``sql_field``; it is called with the other inputs.
    Garbage output becomes an empty candidate, never an exception.

    ``settle`` is for candidates that go to the unweighted execution vote (:func:`vote`, the
    ``vote`` selector) and nowhere else: sampling stops once the candidates so far decide the
    vote whatever the rest would return (:func:`vote_settled`), so fewer than ``n`` may come
    back. The vote then picks the same class of answers it would pick from all ``n``. A local
    model decoding the samples together stops their batch at that point too, when the predictor
    says how a call's answer becomes its candidate (``candidate_reader()``, as
    :class:`~sqlweave.programs.base.Generator` does).

    Every sampled rollout in sqlweave goes through a Sampler (:meth:`draw`): it alone opens the
    local engine's batch of samples (:func:`~sqlweave.lm.batched_samples`).
    """

    def __init__(
        self,
        predictor: dspy.Module,
        n: int = 5,
        temperature: float = 0.7,
        greedy_first: bool = True,
        sql_field: str = "sql",
        settle: bool = False,
        settle_timeout_s: float = FEEDBACK_TIMEOUT_S,
    ) -> None:
        super().__init__()
        if n < 1:
            raise ValueError("n must be >= 1")
        self.predictor = predictor
        self.n = n
        self.temperature = temperature
        self.greedy_first = greedy_first
        self.sql_field = sql_field
        self.settle = settle
        self.settle_timeout_s = settle_timeout_s

    def _call(self, db: Database, inputs: dict[str, Any]) -> str:
        try:
            if declares(self.predictor, "takes_db"):
                out = self.predictor(db=db, **inputs)
            else:
                out = self.predictor(**inputs)
            raw = getattr(out, self.sql_field, "") or ""
        except AdapterParseError as err:
            raw = err.lm_response or ""
        return extract_sql(raw)

    def _rollout(self, lm: Any, db: Database, inputs: dict[str, Any]) -> str:
        with dspy.context(lm=lm) if lm is not None else nullcontext():
            return self._call(db, inputs)

    def forward(self, db: Database | str | Path, **inputs: Any) -> Candidates:
        """The candidates in rollout order (the greedy one first); with ``settle``, those made
        before the vote was decided. A local model decodes the rollouts together, the greedy
        one (with ``greedy_first``) as one more sequence of the samples' batch."""
        first = 1 if self.greedy_first else 0
        return self.draw(
            resolve_database(db),
            inputs,
            lambda i: sample_lm(i, self.temperature, greedy_first=self.greedy_first),
            n=self.n,
            samples=self.n - first,
            greedy=bool(first) and self.temperature > 0,
        )

    def first(self, db: Database | str | Path, **inputs: Any) -> Candidates:
        """Rollout 0 alone (the greedy candidate with ``greedy_first``): what a cascade asks
        of every prompt before it decides whether to draw the rest (:meth:`rest`)."""
        return self.draw(
            resolve_database(db),
            inputs,
            lambda i: sample_lm(i, self.temperature, greedy_first=self.greedy_first),
            n=1,
            samples=0,  # one call: nothing to batch
            greedy=False,
        )

    def rest(self, db: Database | str | Path, **inputs: Any) -> Candidates:
        """Rollouts 1 to ``n - 1``, sampled together: :meth:`forward`'s candidates after
        :meth:`first`'s (the same rollout ids, so the same seeds)."""
        return self.draw(
            resolve_database(db),
            inputs,
            lambda i: sample_lm(i, self.temperature, greedy_first=self.greedy_first),
            n=self.n - 1,
            samples=self.n - 1,
            greedy=False,
            start=1,
        )

    def draw(
        self,
        db: Database,
        inputs: dict[str, Any],
        lm_of: Callable[[int], Any],
        *,
        n: int,
        samples: int,
        greedy: bool,
        start: int = 0,
    ) -> Candidates:
        """``n`` candidates, rollout ``i`` made on ``lm_of(i)`` (None: the current LM), in order,
        ``i`` counted from ``start`` (:meth:`rest` draws rollouts 1 on).

        The rollouts share one prompt, so they run inside one
        :func:`~sqlweave.lm.batched_samples` block for the ``samples`` of them sampled at
        ``temperature``; with ``greedy`` the block's first call may be a greedy one decoding
        beside them. :meth:`forward` draws the sampler's own ``n`` rollouts; a program whose
        rollouts use several LMs (PET-SQL's FinSQLs and their samples) names them here.
        """
        candidates: list[str] = []
        tally = VoteTally(db, self.settle_timeout_s) if self.settle and n > 1 else None
        early_stop = None if tally is None else self._early_stop(tally, candidates, n)
        with batched_samples(
            samples, temperature=self.temperature, greedy=greedy, early_stop=early_stop
        ) as block:
            for i in range(start, start + n):
                if tally is not None and candidates and tally.settled(candidates, start + n - i):
                    logger.debug("sampler: the vote is settled after %d of %d", i - start, n)
                    break
                if block is not None:  # the rollout a batch opened here would start at
                    block.rollout = i
                candidates.append(self._rollout(lm_of(i), db, inputs))
        return Candidates(candidates, None if tally is None else tally.outcomes)

    def _early_stop(self, tally: VoteTally, candidates: list[str], n: int) -> EarlyStop | None:
        """The batch's early stop for a settling vote: judge the batch's candidates with the
        tally, read by the predictor's own reader; None when the predictor has none (its
        candidates are then checked only as they come back)."""
        reader = getattr(self.predictor, "candidate_reader", None)
        read = reader() if callable(reader) else None
        if read is None:
            return None

        def judge(batch: Sequence[str | None]) -> bool:
            """Whether the batch's candidates settle the vote: the first is the rollout that
            made the batch (the next candidate); the finished samples follow it in the order the
            next rollouts take them, and every other rollout is still to come."""
            batch = batch[: n - len(candidates)]  # earlier rollouts may have been cache hits
            if not batch:
                return False
            head, *rest = batch
            known = [*candidates, head, *(sql for sql in rest if sql is not None)]
            return tally.settled(known, n - len(known))

        return EarlyStop(judge, lambda answer: extract_sql(read(answer)))


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


class SelfConsistency(Sampler):
    """Sample ``n`` SQL candidates from one generator and return the execution-majority answer:
    a :class:`Sampler` followed by :func:`vote`.

    With ``greedy_first`` the first candidate uses the LM unchanged (usually temperature 0), and
    wins ties as the most trusted. Predictors that pin their own LM are not varied.
    """

    def forward(self, db: Database | str | Path, **inputs: Any) -> dspy.Prediction:  # type: ignore[override]
        """Returns ``Prediction(sql, candidates, vote)`` with the :class:`VoteResult`."""
        database = resolve_database(db)
        candidates = super().forward(db=database, **inputs)
        result = vote(list(candidates), database, known=candidates.outcomes)
        return dspy.Prediction(sql=result.sql, candidates=list(candidates), vote=result)


def sampled_origins(generator: str, n: int, greedy_first: bool = True) -> list[str]:
    """The origins of ``n`` candidates a :class:`Sampler` drew from ``generator`` (the output
    contract's ``candidate_origins``): ``"<generator>:greedy"`` for the first with
    ``greedy_first``, ``"<generator>:sampled"`` for the others."""
    return [f"{generator}:{'greedy' if i == 0 and greedy_first else 'sampled'}" for i in range(n)]


def origin_generator(origin: str | None) -> str:
    """The generator an origin of :func:`sampled_origins` names (``"sea:greedy"`` -> ``"sea"``);
    ``"?"`` for a candidate recorded without one."""
    return str(origin or "?").split(":", 1)[0]


def origin_is_greedy(origin: str | None) -> bool:
    """Whether an origin names a generator's greedy candidate (``"sea:greedy"``, also once
    repaired: ``"sea:greedy:repaired"``)."""
    return str(origin or "").split(":")[1:2] == ["greedy"]


def settle_for(selector: Any, *, needs_all: bool = False) -> dict[str, Any]:
    """:class:`Sampler` settings for candidates that go to ``selector`` (and are otherwise only
    recorded): the one decision of whether drawing candidates may stop early.

    ``settle`` when the selector declares ``settles_early`` (its answer is the unweighted
    execution vote's, which samples need not outlast once it is decided) and nothing else needs
    every candidate (``needs_all``: weights, candidates mended before the vote, a repair that
    may revive one the vote counted out); nothing otherwise. ``ensemble`` asks the same before
    each generator.
    """
    if needs_all or not declares(selector, "settles_early"):
        return {}
    return {"settle": True, "settle_timeout_s": getattr(selector, "timeout_s", FEEDBACK_TIMEOUT_S)}
