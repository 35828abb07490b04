"""Sampling candidates from one generator: the greedy one and samples with distinct rollout ids.

:class:`Sampler` is the one place a sampled rollout is drawn (it alone opens the local engine's
batch of samples, :func:`~sqlweave.lm.batched_samples`); :func:`settle_for` is the one decision
of whether drawing may stop once the execution vote (:mod:`~sqlweave.programs.stages.voting`) is
settled; :func:`sampled_origins` names what each candidate came from, for the output contract.
Kept apart from the vote so that each module has one job: this one calls the LM, the vote only
executes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from sqlweave.db import Database
from sqlweave.lm import EarlyStop, batched_samples
from sqlweave.programs.base import resolve_database
from sqlweave.programs.stages import declares
from sqlweave.programs.stages.feedback import FEEDBACK_TIMEOUT_S
from sqlweave.programs.stages.voting import Candidates, VoteTally, vote
from sqlweave.sqltext import extract_sql

logger = logging.getLogger(__name__)


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


@dataclass(eq=False, repr=False)  # a module keeps identity equality and DSPy's repr
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

    predictor: dspy.Module
    n: int = 5
    temperature: float = 0.7
    greedy_first: bool = True
    sql_field: str = "sql"
    settle: bool = False
    settle_timeout_s: float = FEEDBACK_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("n must be >= 1")

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
            self._rollout_lm,
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
            self._rollout_lm,
            n=1,
            samples=0,  # one call: nothing to batch
            greedy=False,
        )

    def rest(self, db: Database | str | Path, **inputs: Any) -> Candidates:
        """Rollouts 1 to ``n - 1``, sampled together: :meth:`forward`'s candidates after
        :meth:`first`'s (the same rollout ids, so the same seeds)."""
        return self._samples(db, inputs, self.n - 1)

    def probe(self, db: Database | str | Path, **inputs: Any) -> Candidates:
        """Rollout 1 alone, sampled at ``temperature``: the first sample :meth:`rest` would
        draw (the same rollout id and seed), asked where a cascade stopped, so the answer's
        confidence sees whether a sampled query agrees (docs/decisions.md, rules 38 and 39)."""
        return self._samples(db, inputs, 1)

    def _samples(self, db: Database | str | Path, inputs: dict[str, Any], n: int) -> Candidates:
        """Rollouts 1 to ``n``, sampled together (what :meth:`rest` and :meth:`probe` draw)."""
        return self.draw(
            resolve_database(db), inputs, self._rollout_lm, n=n, samples=n, greedy=False, start=1
        )

    def _rollout_lm(self, i: int) -> Any:
        """The model rollout ``i`` is made on (:func:`sample_lm`: greedy or sampled, its seed)."""
        return sample_lm(i, self.temperature, greedy_first=self.greedy_first)

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
