"""Compiling a program against execution accuracy on train data with DSPy's optimizers.

Six optimizers, by name (:data:`OPTIMIZERS`):

- ``labeled``: ``max_demos`` train pairs per SQL-writing predictor, drawn with the seed.
- ``bootstrap``: ``dspy.BootstrapFewShot``; the program runs on train questions and the traces
  whose SQL matches the gold result (EX) become demos.
- ``random_search``: ``dspy.BootstrapFewShotWithRandomSearch``, one candidate at a time
  (zero-shot, labeled, bootstrap, then ``candidates`` shuffled bootstraps), scored on the
  validation set; the best one wins.
- ``knn``: per question, the ``max_demos`` nearest train questions (all-MiniLM-L6-v2 through a
  ``dspy.Embedder`` and DSPy's ``KNN`` retriever) become the demos.
- ``mipro``: ``dspy.MIPROv2(auto="light")``; instructions are proposed by ``proposer_lm``.
- ``gepa``: ``dspy.GEPA`` with a feedback metric (the execution error or the row mismatch);
  reflection by ``proposer_lm``.

**Complete demos.** Benchmark examples carry ``question, db_id, evidence, db_path, gold_sql``,
but a predictor such as ``GenerateSQL`` reads ``dialect`` and ``db_schema`` too. Before any
optimizer sees the train set, :func:`gold_demos` runs the program itself on each example with a
stub LM that answers every call with the gold SQL, under a DSPy trace: the trace holds exactly the
inputs each predictor receives (the schema rendered the way that program renders it), and the
gold SQL becomes the ``sql`` output. Labeled and KNN demos are those traces, per predictor; only
predictors whose sole output is ``sql`` get them (the stub cannot label other outputs). Bootstrap
and random search receive examples completed with the final SQL predictor's inputs.

**Budget.** ``budget`` caps the LM calls of the optimization (the validation run afterwards is
reported separately): a :class:`~sqlweave.optimizers.budget.CallBudget` callback refuses the call
that would exceed it, and the loop keeps the best result so far: the traces bootstrapped so far
(bootstrap), the best finished candidate (random search), or, for MIPROv2 and GEPA, which keep
their search state private, the program unchanged (GEPA's own ``max_metric_calls`` is also set
to the budget so that it normally stops by itself first).

**Resume.** With ``checkpoint=PATH`` every finished unit of work is written there at once:
each bootstrapped train example (its traces, or that it failed) and each scored random-search
candidate (its score and state). A rerun with the same file, program, data and settings skips
them without an LM call; the unit in flight when the run died is redone, and DSPy's on-disk
response cache (``~/.dspy_cache``, keyed by a sha256 of the full request; on in
:func:`sqlweave.lm.build_lm`) replays its finished calls for deterministic LMs. The checkpoint
also keeps the running total of LM calls, saved before each call is sent, so ``budget`` caps the
whole compile however often it is killed and resumed (a rerun of a compile that spent its budget
makes no call and rebuilds the same program from its finished units), and ``lm_calls`` in the
report and the artefact is that total.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.dummies import DummyLM
from tqdm.auto import tqdm

from sqlweave.optimizers.budget import BudgetExhausted, CallBudget, enforce
from sqlweave.optimizers.knn import attach_knn
from sqlweave.programs import SQLProgram

logger = logging.getLogger(__name__)

OPTIMIZERS = ("labeled", "bootstrap", "random_search", "knn", "mipro", "gepa")
"""Optimizer names accepted by :func:`compile_program`."""

CHECKPOINT_FORMAT = "sqlweave-compile-checkpoint"


def split_train_val(
    examples: list[dspy.Example], val_fraction: float = 0.2, seed: int = 0
) -> tuple[list[dspy.Example], list[dspy.Example]]:
    """A fixed, seeded train/validation split, so compiles are comparable across runs."""
    shuffled = list(examples)
    random.Random(seed).shuffle(shuffled)
    n_val = max(1, int(len(shuffled) * val_fraction)) if len(shuffled) > 1 else 0
    return shuffled[n_val:], shuffled[:n_val]


def example_key(example: Any) -> str:
    """A stable identity for a train example (its db, question and gold SQL), for checkpoints."""
    raw = json.dumps([example.get("db_id"), example.get("question"), example.get("gold_sql")])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# complete demos from the program's own trace


class _GoldLM(DummyLM):
    """Answers every call with the gold SQL in an ``sql`` field (and nothing else)."""

    def __init__(self, gold_sql: str) -> None:
        # Dict mode keyed by "": the empty string is in every prompt, so every call matches.
        super().__init__({"": {"sql": gold_sql}})


def _sql_only(predictor: Any) -> bool:
    return set(predictor.signature.output_fields) == {"sql"}


def gold_demos(program: SQLProgram, example: dspy.Example) -> dict[str, dspy.Example]:
    """Per predictor name, a complete demo for ``example``: the inputs the program gives that
    predictor, and the gold SQL as its ``sql`` output.

    The program runs for real (schema introspection and rendering included) with a stub LM that
    returns the gold SQL, so the demo holds what the predictor would see at inference time. A
    program that fails on stub outputs part-way keeps the demos traced before the failure.
    """
    trace: list[Any] = []
    names = {id(p): n for n, p in program.named_predictors()}
    with dspy.context(lm=_GoldLM(example.gold_sql), trace=trace):
        try:
            program(**example.inputs())
        except Exception as err:  # a stub answer may not suit a later stage; keep what we have
            logger.debug("gold trace stopped early on %r: %s", example.get("question"), err)
    demos: dict[str, dspy.Example] = {}
    for predictor, inputs, _outputs in trace:
        name = names.get(id(predictor))
        if name is None or not _sql_only(predictor):
            continue
        demos[name] = dspy.Example(**inputs, sql=example.gold_sql)
    return demos


@dataclass
class _Completed:
    examples: list[dspy.Example]
    demos: list[dict[str, dspy.Example]]


def complete_examples(
    program: SQLProgram, examples: Sequence[dspy.Example], *, progress: bool = False
) -> _Completed:
    """Train examples with the fields of the program's final SQL predictor filled in.

    Each returned example keeps its original inputs (so the program can still be called on it and
    the metric still finds ``gold_sql`` and ``db_path``) and gains that predictor's other inputs
    (``dialect``, ``db_schema``, ...) plus ``sql`` = the gold SQL, so it is a complete demo.
    """
    out: list[dspy.Example] = []
    per_example: list[dict[str, dspy.Example]] = []
    for ex in tqdm(examples, desc="demos", disable=not progress, leave=False):
        demos = gold_demos(program, ex)
        fields = dict(ex.toDict())
        if demos:
            fields.update(list(demos.values())[-1].toDict())
        fields.setdefault("sql", ex.gold_sql)
        out.append(dspy.Example(**fields).with_inputs(*ex.inputs().keys()))
        per_example.append(demos)
    return _Completed(out, per_example)


# ---------------------------------------------------------------------------------------------
# checkpoint


class Checkpoint:
    """Finished units of an optimization, in a JSON file rewritten atomically after each one.

    ``config`` identifies the compile (optimizer, settings, data); a file written for another
    configuration is ignored (and replaced), never half-reused. ``calls`` is the number of LM
    calls all runs of this compile have made, saved before each call goes out
    (:meth:`record_calls`), so a budget holds across resumes.
    """

    def __init__(self, path: str | Path, config: dict[str, Any]) -> None:
        self.path = Path(path)
        self.key = hashlib.sha256(
            json.dumps(config, sort_keys=True, default=str).encode()
        ).hexdigest()
        self.entries: dict[str, Any] = {}
        self.calls = 0
        self.reused = 0
        if self.path.is_file():
            try:
                payload = json.loads(self.path.read_text())
            except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
                logger.warning("ignoring unreadable checkpoint %s: %s", self.path, err)
                return
            if (
                isinstance(payload, dict)
                and payload.get("format") == CHECKPOINT_FORMAT
                and payload.get("key") == self.key
                and isinstance(payload.get("entries"), dict)
            ):
                self.entries = payload["entries"]
                calls = payload.get("lm_calls", 0)
                self.calls = calls if isinstance(calls, int) and calls >= 0 else 0
                logger.info(
                    "resuming from %s: %d finished units, %d LM calls made so far",
                    self.path,
                    len(self.entries),
                    self.calls,
                )
            else:
                logger.warning(
                    "checkpoint %s belongs to another compile; starting afresh", self.path
                )

    def get(self, key: str) -> Any:
        """The saved value for ``key`` (counted as reused), or None."""
        value = self.entries.get(key)
        if value is not None:
            self.reused += 1
        return value

    def put(self, key: str, value: Any) -> None:
        """Record ``key`` and write the file at once, atomically."""
        self.entries[key] = value
        self._write()

    def record_calls(self, calls: int) -> None:
        """Save the running total of LM calls (before the call is sent: a kill loses none)."""
        self.calls = calls
        self._write()

    def _write(self) -> None:
        payload = {
            "format": CHECKPOINT_FORMAT,
            "key": self.key,
            "lm_calls": self.calls,
            "entries": self.entries,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(payload, fh, default=str)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)


def _demo_to_dict(demo: dspy.Example) -> dict[str, Any]:
    return {k: v for k, v in demo.toDict().items()}


# ---------------------------------------------------------------------------------------------
# optimizers


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
                            name: [_demo_to_dict(d) for d in traces[before[name] :]]
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


def _trim_demos(program: SQLProgram) -> None:
    """Keep only the fields each predictor's signature reads (and DSPy's ``augmented`` flag):
    labeled demos come from whole benchmark examples, whose paths and ids do not belong in a
    prompt or an artefact."""
    for _, predictor in program.named_predictors():
        keep = {*predictor.signature.input_fields, *predictor.signature.output_fields, "augmented"}
        predictor.demos = [
            dspy.Example(**{k: v for k, v in demo.items() if k in keep})
            if isinstance(demo, dspy.Example)
            else demo
            for demo in predictor.demos
        ]


def _labeled(student: SQLProgram, completed: _Completed, max_demos: int, seed: int) -> SQLProgram:
    """``max_demos`` complete gold demos per SQL predictor, the same sampled examples for all."""
    program = student.reset_copy()
    n = len(completed.examples)
    chosen = sorted(random.Random(seed).sample(range(n), min(max_demos, n)))
    for name, predictor in program.named_predictors():
        predictor.demos = [completed.demos[i][name] for i in chosen if name in completed.demos[i]]
    return program


# --- knn


def _knn(student: SQLProgram, completed: _Completed, max_demos: int) -> SQLProgram:
    pool = [
        {"question": ex.question, "demos": {n: _demo_to_dict(d) for n, d in demos.items()}}
        for ex, demos in zip(completed.examples, completed.demos, strict=True)
        if demos
    ]
    return attach_knn(student.reset_copy(), pool, max_demos)


# --- random search


def _random_search(
    student: SQLProgram,
    trainset: list[dspy.Example],
    valset: list[dspy.Example],
    *,
    metric: Callable[..., Any],
    max_demos: int,
    candidates: int,
    checkpoint: Checkpoint | None,
    progress: bool,
) -> tuple[SQLProgram, dict[str, Any], bool]:
    """Score candidates one at a time (``restrict=[seed]``) so each can be checkpointed, and a
    budget stop still returns the best finished one."""
    search = dspy.BootstrapFewShotWithRandomSearch(
        metric=metric,
        max_bootstrapped_demos=max_demos,
        max_labeled_demos=max_demos,
        num_candidate_programs=candidates,
        num_threads=1,
    )
    best: SQLProgram | None = None
    best_score = float("-inf")
    scores: dict[int, float] = {}
    stopped = False
    seeds = list(range(-3, candidates))
    for seed in tqdm(seeds, desc="candidates", disable=not progress):
        key = f"random_search:{seed}"
        saved = checkpoint.get(key) if checkpoint is not None else None
        if saved is not None:
            program = student.reset_copy()
            program.load_state(saved["state"])
            score = float(saved["score"])
        else:
            try:
                program = search.compile(student, trainset=trainset, valset=valset, restrict=[seed])
            except BudgetExhausted:
                stopped = True
                break
            score = float(program.candidate_programs[0]["score"])
            del program.candidate_programs
            if checkpoint is not None:
                checkpoint.put(key, {"score": score, "state": program.dump_state()})
        scores[seed] = score
        if score > best_score:
            best, best_score = program, score
    if best is None:
        best = student.reset_copy()
    return best, {"candidate_scores": scores, "best_score": best_score}, stopped


# --- metrics for GEPA


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


def _as_feedback_metric(metric: Callable[..., Any]) -> Callable[..., Any]:
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


def _resolve_lm(lm: Any) -> Any:
    if lm is None or not isinstance(lm, str):
        return lm or dspy.settings.lm
    from sqlweave.lm import build_lm

    return build_lm(lm)


# ---------------------------------------------------------------------------------------------
# entry point


@dataclass
class CompileReport:
    """What a compile did: calls used against the budget, time, resumed work, optimizer details.

    ``lm_calls`` is the total over every run of a resumed compile (earlier runs' share:
    ``resumed_calls``); ``seconds`` and ``cached_calls`` are this run's.
    """

    optimizer: str
    budget: int | None
    lm_calls: int = 0
    resumed_calls: int = 0
    cached_calls: int = 0
    budget_exhausted: bool = False
    seconds: float = 0.0
    n_train: int = 0
    n_val: int = 0
    resumed_units: int = 0
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for an artefact or a log."""
        return asdict(self)


@dataclass
class CompileOutcome:
    """The compiled program and its report."""

    program: SQLProgram
    report: CompileReport


def run_optimizer(
    program: SQLProgram,
    trainset: list[dspy.Example],
    valset: list[dspy.Example] | None = None,
    *,
    optimizer: str = "bootstrap",
    metric: Callable[..., Any] | None = None,
    budget: int | None = None,
    max_demos: int = 4,
    seed: int = 0,
    proposer_lm: Any = None,
    checkpoint: str | Path | None = None,
    progress: bool = False,
    candidates: int = 2,
) -> CompileOutcome:
    """Compile a copy of ``program`` (the student is never modified) and report the cost.

    ``valset=None`` splits ``trainset`` with :func:`split_train_val` (fixed, seeded). See the
    module docstring for each optimizer, the budget and resuming.
    """
    from sqlweave.lm import track_usage
    from sqlweave.metrics import ex_metric

    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if not trainset:
        raise ValueError("the train set is empty")
    if max_demos < 0:
        raise ValueError(f"max_demos must be 0 or more, not {max_demos}")
    if candidates < 0:
        raise ValueError(f"candidates must be 0 or more, not {candidates}")
    metric = metric or ex_metric
    if valset is None:
        trainset, valset = split_train_val(list(trainset), seed=seed)
    trainset, valset = list(trainset), list(valset)

    ckpt = None
    if checkpoint is not None:
        from sqlweave.optimizers.artifact import trainset_hash

        ckpt = Checkpoint(
            checkpoint,
            {
                "program": type(program).__name__,
                "switches": getattr(program, "switches", {}),
                "optimizer": optimizer,
                "max_demos": max_demos,
                "seed": seed,
                "candidates": candidates,
                "train": trainset_hash(trainset),
                "val": trainset_hash(valset),
                "metric": getattr(metric, "__qualname__", repr(metric)),
                # Traces from another model are not this model's: never reuse them.
                "lm": getattr(dspy.settings.lm, "model", None),
                "proposer": getattr(proposer_lm, "model", proposer_lm),
            },
        )

    report = CompileReport(optimizer, budget, n_train=len(trainset), n_val=len(valset))
    started = time.perf_counter()
    # The budget is a cap on the whole compile: calls made by interrupted runs count against it.
    cap = (
        CallBudget(budget, used=ckpt.calls, on_count=ckpt.record_calls)
        if ckpt is not None
        else CallBudget(budget)
    )
    if ckpt is not None and ckpt.calls:
        logger.info("%d LM calls were made by earlier runs of this compile", ckpt.calls)
    student = program.reset_copy()
    # The gold stub's calls are not real LM calls: complete the data before counting starts.
    completed = complete_examples(student, trainset, progress=progress)
    val_done = complete_examples(student, valset).examples
    with track_usage() as usage, enforce(cap):
        compiled: SQLProgram
        if optimizer == "labeled":
            compiled = _labeled(student, completed, max_demos, seed)
        elif optimizer == "knn":
            compiled = _knn(student, completed, max_demos)
        elif optimizer == "bootstrap":
            teleprompter = _ResumableBootstrap(
                checkpoint=ckpt,
                progress=progress,
                tag="bootstrap",
                metric=metric,
                max_bootstrapped_demos=max_demos,
                max_labeled_demos=max_demos,
                max_rounds=1,
            )
            compiled = teleprompter.compile(student, trainset=completed.examples)
            report.budget_exhausted = teleprompter.budget_stopped
        elif optimizer == "random_search":
            compiled, details, stopped = _random_search(
                student,
                completed.examples,
                val_done,
                metric=metric,
                max_demos=max_demos,
                candidates=candidates,
                checkpoint=ckpt,
                progress=progress,
            )
            report.details.update(details)
            report.budget_exhausted = stopped
        elif optimizer in ("mipro", "gepa") and cap.remaining == 0:
            # Earlier runs spent the budget; these optimizers keep no finished units to replay.
            compiled, report.budget_exhausted = student.reset_copy(), True
        elif optimizer == "mipro":
            teleprompter = dspy.MIPROv2(
                metric=metric,
                prompt_model=_resolve_lm(proposer_lm),
                auto="light",
                max_bootstrapped_demos=max_demos,
                max_labeled_demos=max_demos,
                num_threads=1,
                seed=seed,
                verbose=False,
            )
            try:
                compiled = teleprompter.compile(
                    student, trainset=completed.examples, valset=val_done, seed=seed
                )
            except BudgetExhausted:
                compiled, report.budget_exhausted = student.reset_copy(), True
        else:  # gepa
            teleprompter = dspy.GEPA(
                metric=_as_feedback_metric(metric),
                reflection_lm=_resolve_lm(proposer_lm),
                **(
                    {"max_metric_calls": cap.remaining}
                    if cap.remaining is not None
                    else {"auto": "light"}
                ),
                num_threads=1,
                seed=seed,
                track_stats=False,
            )
            try:
                compiled = teleprompter.compile(student, trainset=completed.examples, valset=valset)
            except BudgetExhausted:
                compiled, report.budget_exhausted = student.reset_copy(), True
    _trim_demos(compiled)
    report.lm_calls = cap.calls
    report.resumed_calls = cap.used
    report.cached_calls = usage.cached_calls
    report.budget_exhausted = report.budget_exhausted or cap.exhausted
    report.seconds = round(time.perf_counter() - started, 3)
    report.resumed_units = ckpt.reused if ckpt is not None else 0
    if report.budget_exhausted:
        logger.warning("compile stopped at the budget of %s LM calls", budget)
    return CompileOutcome(compiled, report)


def compile_program(
    program: SQLProgram,
    trainset: list[dspy.Example],
    *,
    optimizer: str = "bootstrap",
    metric: Callable[..., Any] | None = None,
    max_demos: int = 4,
    seed: int = 0,
    **options: Any,
) -> SQLProgram:
    """The compiled copy of ``program`` only; ``trainset`` is used whole as the train set.

    Kept for callers that want no report; see :func:`run_optimizer` for the options.
    """
    valset = options.pop("valset", None)
    if valset is None:
        valset = list(trainset)
    return run_optimizer(
        program,
        trainset,
        valset,
        optimizer=optimizer,
        metric=metric,
        max_demos=max_demos,
        seed=seed,
        **options,
    ).program
