"""The demo and instruction optimizers, each a :class:`~sqlweave.optimizers.base.SQLTeleprompter`.

- :class:`Labeled` (``labeled``): ``max_demos`` train pairs per SQL-writing predictor, drawn with
  the seed. No LM call.
- :class:`Bootstrap` (``bootstrap``): ``dspy.BootstrapFewShot``; the program runs on train
  questions and the traces whose SQL matches the gold result (EX) become demos.
- :class:`RandomSearch` (``random_search``): ``dspy.BootstrapFewShotWithRandomSearch``, one
  candidate at a time (zero-shot, labeled, bootstrap, then ``candidates`` shuffled bootstraps),
  scored on the validation set; the best one wins.
- :class:`KNNDemos` (``knn``): per question, the ``max_demos`` nearest train questions
  (all-MiniLM-L6-v2 through a ``dspy.Embedder`` and DSPy's ``KNN`` retriever) become the demos.
  No LM call.
- :class:`MIPRO` (``mipro``): ``dspy.MIPROv2(auto="light")``; instructions are proposed by
  ``proposer_lm``.
- :class:`GEPA` (``gepa``): ``dspy.GEPA`` with a feedback metric (the execution error or the row
  mismatch); reflection by ``proposer_lm``.

Every one first completes the train examples from the student's own trace
(:mod:`sqlweave.optimizers.demos`), so a demo holds what the predictor reads at inference time.

**Budget.** Under a :class:`~sqlweave.optimizers.budget.CallBudget` each stops at the call the
budget refuses and keeps the best result so far: the traces bootstrapped so far (bootstrap), the
best finished candidate (random search), or, for MIPROv2 and GEPA, which keep their search state
private, the program unchanged (GEPA's own ``max_metric_calls`` is also set to what is left of
the budget, so that it normally stops by itself first).

**Resume.** Under a :class:`~sqlweave.optimizers.checkpoint.Checkpoint` each bootstrapped train
example (its traces, or that it failed) and each scored random-search candidate (its score and
state) is recorded as it finishes; a rerun replays them without an LM call. MIPROv2 and GEPA
record nothing: a rerun starts them again.
"""

from __future__ import annotations

import inspect
import logging
import random
from collections.abc import Callable
from typing import Any

import dspy
from tqdm.auto import tqdm

from sqlweave.optimizers.base import SQLTeleprompter
from sqlweave.optimizers.budget import BudgetExhausted
from sqlweave.optimizers.checkpoint import Checkpoint, example_key
from sqlweave.optimizers.demos import complete_examples, demo_to_dict
from sqlweave.optimizers.knn import attach_knn
from sqlweave.programs import SQLProgram

logger = logging.getLogger(__name__)


def _count(name: str, value: int) -> int:
    """``value``, a count setting of an optimizer (``max_demos``, ``candidates``): 0 or more, or
    a ``ValueError`` that names it, raised when the optimizer is made rather than mid-compile."""
    if value < 0:
        raise ValueError(f"{name} must be 0 or more, not {value}")
    return value


class _DemoOptimizer(SQLTeleprompter):
    """An optimizer of demos: ``max_demos`` per predictor."""

    def __init__(self, *, max_demos: int = 4, **common: Any) -> None:
        super().__init__(**common)
        self.max_demos = _count("max_demos", max_demos)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "max_demos": self.max_demos}


class Labeled(_DemoOptimizer):
    """``max_demos`` complete gold demos per SQL predictor, the same sampled examples for all."""

    name = "labeled"
    replays = True  # no LM call at all

    def compile(
        self,
        student: SQLProgram,
        *,
        trainset: list[dspy.Example],
        valset: list[dspy.Example] | None = None,
        **kwargs: Any,
    ) -> SQLProgram:
        """Demos from ``max_demos`` seeded train examples."""
        completed = complete_examples(student, trainset, progress=self.progress)
        program = student.reset_copy()
        n = len(completed.examples)
        chosen = sorted(random.Random(self.seed).sample(range(n), min(self.max_demos, n)))
        for name, predictor in program.named_predictors():
            predictor.demos = [
                completed.demos[i][name] for i in chosen if name in completed.demos[i]
            ]
        return program


class KNNDemos(_DemoOptimizer):
    """Per question, the demos of the ``max_demos`` nearest train questions, those on the
    question's own database first (:func:`~sqlweave.optimizers.knn.attach_knn`)."""

    name = "knn"
    replays = True  # no LM call at all

    def compile(
        self,
        student: SQLProgram,
        *,
        trainset: list[dspy.Example],
        valset: list[dspy.Example] | None = None,
        **kwargs: Any,
    ) -> SQLProgram:
        """A copy that picks its demos per call from the completed train set."""
        completed = complete_examples(student, trainset, progress=self.progress)
        pool = [
            {
                "question": ex.question,
                "db_id": ex.get("db_id"),
                "demos": {n: demo_to_dict(d) for n, d in demos.items()},
            }
            for ex, demos in zip(completed.examples, completed.demos, strict=True)
            if demos
        ]
        return attach_knn(student.reset_copy(), pool, self.max_demos)


class _ResumableBootstrap(dspy.BootstrapFewShot):
    """BootstrapFewShot whose bootstrap loop checkpoints each example, shows progress and stops
    cleanly at the budget, keeping the traces gathered so far."""

    def __init__(
        self, *, checkpoint: Checkpoint | None, progress: bool, tag: str, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.checkpoint = checkpoint
        self.progress = progress
        self.tag = tag
        self.budget_stopped = False

    def _bootstrap(self, *, max_bootstraps: int | None = None) -> None:
        wanted = max_bootstraps or self.max_bootstrapped_demos
        self.name2traces = {name: [] for name in self.name2predictor}
        bootstrapped: set[int] = set()
        bar = tqdm(total=len(self.trainset), desc="bootstrap", disable=not self.progress)
        try:
            for idx, example in enumerate(self.trainset):
                if len(bootstrapped) >= wanted:
                    break
                key = f"{self.tag}:{example_key(example)}"
                saved = self.checkpoint.get(key) if self.checkpoint is not None else None
                if saved is not None:
                    success = bool(saved["success"])
                    for name, demos in saved["demos"].items():
                        self.name2traces.setdefault(name, []).extend(
                            dspy.Example(**demo) for demo in demos
                        )
                else:
                    before = {name: len(traces) for name, traces in self.name2traces.items()}
                    success = any(
                        self._bootstrap_one_example(example, round_idx)
                        for round_idx in range(self.max_rounds)
                    )
                    if self.checkpoint is not None:
                        added = {
                            name: [demo_to_dict(d) for d in traces[before[name] :]]
                            for name, traces in self.name2traces.items()
                        }
                        self.checkpoint.put(key, {"success": success, "demos": added})
                if success:
                    bootstrapped.add(idx)
                bar.update(1)
                bar.set_postfix(demos=len(bootstrapped))
        except BudgetExhausted:
            self.budget_stopped = True
        finally:
            bar.close()
        logger.info("bootstrapped %d traces", len(bootstrapped))
        self.validation = [x for i, x in enumerate(self.trainset) if i not in bootstrapped]
        random.Random(0).shuffle(self.validation)


class Bootstrap(_DemoOptimizer):
    """Traces of the program on train questions whose SQL matches the gold result."""

    name = "bootstrap"
    replays = True  # each train example is a checkpointed unit

    def compile(
        self,
        student: SQLProgram,
        *,
        trainset: list[dspy.Example],
        valset: list[dspy.Example] | None = None,
        **kwargs: Any,
    ) -> SQLProgram:
        """Bootstrap up to ``max_demos`` traces (and as many labeled demos) per predictor."""
        completed = complete_examples(student, trainset, progress=self.progress)
        teleprompter = _ResumableBootstrap(
            checkpoint=self.checkpoint,
            progress=self.progress,
            tag=self.name,
            metric=self.metric,
            max_bootstrapped_demos=self.max_demos,
            max_labeled_demos=self.max_demos,
            max_rounds=1,
        )
        compiled = teleprompter.compile(student, trainset=completed.examples)
        self.budget_stopped = teleprompter.budget_stopped
        return compiled


class RandomSearch(_DemoOptimizer):
    """Demo sets scored on the validation set, one candidate at a time; the best wins."""

    name = "random_search"
    replays = True  # each candidate is a checkpointed unit

    def __init__(self, *, candidates: int = 2, **options: Any) -> None:
        super().__init__(**options)
        self.candidates = _count("candidates", candidates)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "candidates": self.candidates}

    def compile(
        self,
        student: SQLProgram,
        *,
        trainset: list[dspy.Example],
        valset: list[dspy.Example] | None = None,
        **kwargs: Any,
    ) -> SQLProgram:
        """Score candidates one at a time (``restrict=[seed]``) so each can be checkpointed, and
        a budget stop still returns the best finished one."""
        completed = complete_examples(student, trainset, progress=self.progress)
        val_done = complete_examples(student, valset if valset is not None else trainset).examples
        search = dspy.BootstrapFewShotWithRandomSearch(
            metric=self.metric,
            max_bootstrapped_demos=self.max_demos,
            max_labeled_demos=self.max_demos,
            num_candidate_programs=self.candidates,
            num_threads=1,
        )
        best: SQLProgram | None = None
        best_score = float("-inf")
        scores: dict[int, float] = {}
        ckpt = self.checkpoint
        for seed in tqdm(range(-3, self.candidates), desc="candidates", disable=not self.progress):
            key = f"random_search:{seed}"
            saved = ckpt.get(key) if ckpt is not None else None
            if saved is not None:
                program = student.reset_copy()
                program.load_state(saved["state"])
                score = float(saved["score"])
            else:
                try:
                    program = search.compile(
                        student, trainset=completed.examples, valset=val_done, restrict=[seed]
                    )
                except BudgetExhausted:
                    self.budget_stopped = True
                    break
                score = float(program.candidate_programs[0]["score"])
                del program.candidate_programs
                if ckpt is not None:
                    ckpt.put(key, {"score": score, "state": program.dump_state()})
            scores[seed] = score
            if score > best_score:
                best, best_score = program, score
        self.details = {"candidate_scores": scores, "best_score": best_score}
        return best if best is not None else student.reset_copy()


def _resolve_lm(lm: Any) -> Any:
    if lm is None or not isinstance(lm, str):
        return lm or dspy.settings.lm
    from sqlweave.lm import build_lm

    return build_lm(lm)


class _Proposing(_DemoOptimizer):
    """An optimizer with a proposer LM (an LM object, an LM spec, or None: the task LM), whose
    search (:meth:`_propose`) keeps its state private: at the budget it has no best result so
    far to give, so it returns the program unchanged, whether the budget was spent before it
    started or while it searched."""

    def __init__(self, *, proposer_lm: Any = None, **options: Any) -> None:
        super().__init__(**options)
        self.proposer_lm = proposer_lm

    def config(self) -> dict[str, Any]:
        proposer = getattr(self.proposer_lm, "model", self.proposer_lm)
        return {**super().config(), "proposer": proposer}

    def compile(
        self,
        student: SQLProgram,
        *,
        trainset: list[dspy.Example],
        valset: list[dspy.Example] | None = None,
        **kwargs: Any,
    ) -> SQLProgram:
        """:meth:`_propose` on the completed train set; the program unchanged at the budget."""
        if not self.budget_spent():
            completed = complete_examples(student, trainset, progress=self.progress).examples
            try:
                return self._propose(student, completed, valset if valset is not None else trainset)
            except BudgetExhausted:
                pass
        self.budget_stopped = True
        return student.reset_copy()

    def _propose(
        self, student: SQLProgram, trainset: list[dspy.Example], valset: list[dspy.Example]
    ) -> SQLProgram:
        """The search on ``trainset`` (completed) and ``valset`` (as given, else the train set)."""
        raise NotImplementedError


class MIPRO(_Proposing):
    """``dspy.MIPROv2(auto="light")``: instructions and demos; the program unchanged at the
    budget (its search state is private)."""

    name = "mipro"

    def _propose(
        self, student: SQLProgram, trainset: list[dspy.Example], valset: list[dspy.Example]
    ) -> SQLProgram:
        """MIPROv2 on the completed train and validation sets."""
        val_done = complete_examples(student, valset).examples
        teleprompter = dspy.MIPROv2(
            metric=self.metric,
            prompt_model=_resolve_lm(self.proposer_lm),
            auto="light",
            max_bootstrapped_demos=self.max_demos,
            max_labeled_demos=self.max_demos,
            num_threads=1,
            seed=self.seed,
            verbose=False,
        )
        return teleprompter.compile(student, trainset=trainset, valset=val_done, seed=self.seed)


# --- GEPA


def ex_feedback_metric(
    gold: Any, pred: Any, trace: Any = None, pred_name: Any = None, pred_trace: Any = None
) -> dspy.Prediction:
    """EX with a sentence of feedback for GEPA's reflection: the error, or how the rows differ."""
    from sqlweave.data import open_database
    from sqlweave.metrics import check_execution, pred_sql_of, semantics_for

    sql = pred_sql_of(pred)
    match = check_execution(sql, gold.gold_sql, open_database(gold), semantics_for(gold))
    if match.correct:
        feedback = "Correct: the query returns the expected rows."
    elif match.error is not None:
        feedback = (
            f"The query failed ({match.error.feedback()}). A correct query is: {gold.gold_sql}"
        )
    else:
        got = match.pred_result.rows[:3] if match.pred_result is not None else ()
        want = match.gold_result.rows[:3] if match.gold_result is not None else ()
        feedback = (
            f"The query ran but returned other rows (first rows {list(got)!r}, expected "
            f"{list(want)!r}). A correct query is: {gold.gold_sql}"
        )
    return dspy.Prediction(score=float(match.correct), feedback=feedback)


def as_feedback_metric(metric: Callable[..., Any]) -> Callable[..., Any]:
    """``metric`` in GEPA's five-argument form (EX becomes :func:`ex_feedback_metric`)."""
    from sqlweave.metrics import ex_metric

    if metric is ex_metric:
        return ex_feedback_metric
    try:
        inspect.signature(metric).bind(None, None, None, None, None)
        return metric
    except TypeError:

        def wrapped(
            gold: Any, pred: Any, trace: Any = None, pred_name: Any = None, pred_trace: Any = None
        ) -> Any:
            return metric(gold, pred, trace)

        return wrapped


class GEPA(_Proposing):
    """``dspy.GEPA`` with execution feedback; stops by itself at what is left of the budget."""

    name = "gepa"

    def _propose(
        self, student: SQLProgram, trainset: list[dspy.Example], valset: list[dspy.Example]
    ) -> SQLProgram:
        """GEPA on the completed train set, scored on ``valset``."""
        remaining = self.budget.remaining if self.budget is not None else None
        teleprompter = dspy.GEPA(
            metric=as_feedback_metric(self.metric),
            reflection_lm=_resolve_lm(self.proposer_lm),
            **({"max_metric_calls": remaining} if remaining is not None else {"auto": "light"}),
            num_threads=1,
            seed=self.seed,
            track_stats=False,
        )
        return teleprompter.compile(student, trainset=trainset, valset=valset)
