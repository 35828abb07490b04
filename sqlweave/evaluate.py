"""Execution accuracy of a program over a set of examples, written as it goes and resumable.

Long runs on a small CPU take hours and get interrupted, so each finished question is appended to
a JSONL file at once (flushed and fsynced), and a rerun with the same file skips what is done. A
prediction can fail in any way (the program raises, returns no SQL, the SQL errors or times out)
and is then recorded as a miss with its error text; only a gold query that cannot run stops the
run (:class:`~sqlweave.metrics.GoldQueryError`), since every later score would be meaningless.

Questions are visited grouped by database (:func:`visit_order`): a local model keeps the KV cache
of the longest prompt prefix it shares with the previous call, and prompts start with the schema,
so consecutive questions on one database evaluate only their own tail. The file is put back in
example order when the run completes; until then it holds records in the order they finished,
which resuming does not mind.

The records file itself (reading, the run's identity, the rewrite) is :mod:`sqlweave.records`;
what records add up to (EX, intervals, oracle EX, paired comparison) is :mod:`sqlweave.summary`.
Their functions stay importable from here, where callers have always found them.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import logging
import numbers
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import dspy
from tqdm.auto import tqdm

from sqlweave.data import open_database
from sqlweave.db import ExecutionError
from sqlweave.failures import endpoint_guard, is_run_failure_record, raise_if_run_failure
from sqlweave.metrics import GoldQueryError, check_execution, pred_sql_of, semantics_for
from sqlweave.records import (
    check_identity,
    compressed,
    json_line,
    lock_records,
    read_records,
    read_run_identity,
    recorded_run_matches,
    rewrite_records,
    run_identity_path,
    write_identity,
)
from sqlweave.summary import (
    compare,
    failed_outside_sql,
    has_candidates,
    oracle_ex,
    oracle_hit,
    summarize,
)

__all__ = [
    "Judge",
    "UsageTracker",
    "candidates_of",
    "compare",
    "default_usage_tracker",
    "evaluate",
    "failed_outside_sql",
    "has_candidates",
    "oracle_ex",
    "oracle_hit",
    "read_records",
    "read_run_identity",
    "recorded_run_matches",
    "run_identity_path",
    "summarize",
    "visit_order",
]

logger = logging.getLogger(__name__)
#: ``judge(question, candidate_sqls, sql, db) -> confidence`` (:func:`evaluate`).
Judge = Callable[[str, list[str], str, Any], float]

UsageTracker = Callable[[], contextlib.AbstractContextManager[Any]]
_AUTO = "auto"
#: The name tests/test_protocol_table.py imports (the function lives in :mod:`sqlweave.records`).
_write_identity = write_identity


def default_usage_tracker() -> UsageTracker | None:
    """``sqlweave.lm.track_usage`` when that module provides it, else None (seconds only)."""
    try:
        from sqlweave.lm import track_usage
    except ImportError:
        return None
    return track_usage


def visit_order(examples: Sequence[Any]) -> list[int]:
    """Indices of ``examples`` grouped by database: databases in the order of their first
    question, each database's questions in their own order.

    A database is its ``db_path`` when the example has one (two benchmarks may reuse a
    ``db_id``), else its ``db_id``.
    """
    groups: dict[str, list[int]] = {}
    for i, example in enumerate(examples):
        key = getattr(example, "db_path", None) or getattr(example, "db_id", None) or ""
        groups.setdefault(str(key), []).append(i)
    return [i for members in groups.values() for i in members]


def _call_kwargs(program: Any, example: Any) -> dict[str, Any]:
    """The example's inputs (plus ``db_path``), narrowed to what ``program`` accepts."""
    kwargs = example.inputs().toDict() if hasattr(example, "inputs") else dict(example)
    if "db_path" not in kwargs and getattr(example, "db_path", None):
        kwargs["db_path"] = example.db_path
    # type(program).forward: reading ``.forward`` off a module instance makes DSPy warn.
    target = type(program).forward if isinstance(program, dspy.Module) else program
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return kwargs
    names = {p.name for p in params}
    return {k: v for k, v in kwargs.items() if k in names}


def _evaluate_one(
    program: Any,
    example: Any,
    semantics: str | None,
    timeout_s: float,
    tracker: UsageTracker | None,
    strict_gold: bool = False,
    judge: Judge | None = None,
) -> dict[str, Any]:
    """One question's record: the program's answer scored by execution against the gold, with
    its candidates' verdicts and its confidence when it has them. A failing program or SQL is
    a recorded miss; only a dead endpoint, or a gold that cannot run under ``strict_gold``,
    raises, since every later record would be as meaningless."""
    sem = semantics or semantics_for(example)
    pred, seconds, usage, error, error_kind = _run_program(program, example, tracker)
    pred_sql = pred_sql_of(pred)
    if error is None and not pred_sql.strip():
        error, error_kind = "program returned no SQL", "no_sql"

    start = time.perf_counter()
    # What the program answered is fixed now; a record differs only by its verdict.
    verdict = functools.partial(_record, example, sem, pred_sql, seconds, usage, start)
    try:
        database = open_database(example)
    except ExecutionError as err:
        # A corrupted or missing database file: the gold cannot run either, so it is the same
        # flagged miss as a failing gold query (or a stop under strict_gold).
        if strict_gold:
            raise GoldQueryError(example.gold_sql, str(example.db_id), err) from err
        why = err.feedback()
        return verdict(error or why, error_kind or err.kind, why, correct=False)
    try:
        match = check_execution(
            pred_sql,
            example.gold_sql,
            database,
            sem,
            timeout_s=timeout_s,
            strict_gold=strict_gold,
        )
    except GoldQueryError:
        raise
    except Exception as err:  # noqa: BLE001 - results that cannot be compared: a recorded miss
        logger.warning("could not score %s: %s", example.question_id, err, exc_info=True)
        why = f"the results could not be compared: {type(err).__name__}: {err}"
        return verdict(error or why, error_kind or "scoring", None, correct=False)
    if error is None and match.error is not None:
        error, error_kind = match.error.feedback(), match.error.kind
    # A gold that fails (or is too large to compare) is a scored miss, flagged so it can be found.
    gold_error = match.gold_error.feedback() if match.gold_error is not None else None
    if match.gold_truncated:
        gold_error = "gold result exceeds the row cap; not compared"
    record = verdict(error, error_kind, gold_error, correct=bool(match.correct))
    pool = candidates_of(pred)
    if pool and gold_error is None:
        _score_candidates(
            record, pool, pred_sql, bool(match.correct), example, database, sem, timeout_s
        )
        record["eval_seconds"] = round(time.perf_counter() - start, 4)
    if judge is not None and pred_sql.strip() and gold_error is None:
        record["confidence"] = _confidence(judge, example, pool, pred_sql, database)
    return record


def _run_program(
    program: Any, example: Any, tracker: UsageTracker | None
) -> tuple[Any, float, dict[str, Any] | None, str | None, str | None]:
    """``(prediction, seconds, usage, error, error_kind)`` of ``program`` on ``example``: any
    failure of the program is a recorded miss (its text and kind ``program``), not a crash,
    unless the endpoint is down (:func:`~sqlweave.failures.raise_if_run_failure`)."""
    error: str | None = None
    error_kind: str | None = None
    pred: Any = None
    usage = None
    start = time.perf_counter()
    scope = tracker() if tracker is not None else contextlib.nullcontext()
    with scope as acc:
        try:
            pred = program(**_call_kwargs(program, example))
        except Exception as err:  # any failure of the program is a recorded miss, not a crash
            raise_if_run_failure(err)  # ... unless the endpoint is down: then the run stops
            error, error_kind = f"{type(err).__name__}: {err}", "program"
            logger.debug("program failed on %s", example.question_id, exc_info=True)
    seconds = time.perf_counter() - start
    if acc is not None and hasattr(acc, "as_dict"):
        usage = acc.as_dict()
    return pred, seconds, usage, error, error_kind


def _score_candidates(
    record: dict[str, Any],
    pool: list[dict[str, Any]],
    pred_sql: str,
    correct: bool,
    example: Any,
    database: Any,
    sem: str,
    timeout_s: float,
) -> None:
    """Mark each candidate of ``pool`` right or wrong (each distinct SQL run once; the answer's
    verdict is known) and set the record's ``candidates`` and ``oracle``: what a perfect
    selector over the same candidates would have scored."""
    verdicts = {pred_sql: correct}
    for cand in pool:
        sql = cand["sql"]
        if sql not in verdicts:
            verdicts[sql] = bool(
                sql.strip()
                and check_execution(
                    sql, example.gold_sql, database, sem, timeout_s=timeout_s
                ).correct
            )
        cand["correct"] = verdicts[sql]
    record["candidates"] = pool
    record["oracle"] = correct or any(c["correct"] for c in pool)


def _confidence(
    judge: Judge, example: Any, pool: list[dict[str, Any]], sql: str, database: Any
) -> float | None:
    """``judge``'s confidence in the answer, or None when it could not judge; judging never
    fails a record."""
    try:
        value = judge(str(example.question), [c["sql"] for c in pool] or [sql], sql, database)
    except Exception:  # noqa: BLE001 - advice about the answer; the record stands without it
        logger.debug("could not judge %s's confidence", example.question_id, exc_info=True)
        return None
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)  # numpy's too
    return float(value) if number and 0.0 <= value <= 1.0 else None  # NaN fails both


def candidates_of(pred: Any) -> list[dict[str, Any]]:
    """The candidates a prediction chose among, as records: ``{"sql", "origin", "group"}``.

    Read from the output contract's ``candidates`` (:mod:`sqlweave.programs.stages`), with the
    parallel ``candidate_origins`` (which generator wrote each, greedy or sampled, e.g.
    ``"dubo_v1:sampled"``) and ``candidate_groups`` (the execution class the selector put it in)
    when the program gives them. Duplicates are kept, so a vote can be replayed from the record.
    A prediction without candidates (a string, a user's own module) gives ``[]``.
    """
    if pred is None or isinstance(pred, str):
        return []
    get = pred.get if isinstance(pred, dict) else lambda key: getattr(pred, key, None)
    sqls = get("candidates")
    if not isinstance(sqls, Sequence) or isinstance(sqls, str):
        return []
    origins = get("candidate_origins")
    groups = get("candidate_groups")
    out = []
    for i, sql in enumerate(sqls):
        cand: dict[str, Any] = {"sql": sql if isinstance(sql, str) else str(sql or "")}
        if isinstance(origins, Sequence) and i < len(origins):
            cand["origin"] = origins[i]
        if isinstance(groups, Sequence) and i < len(groups):
            cand["group"] = groups[i]
        out.append(cand)
    return out


def _record(
    example: Any,
    sem: str,
    pred_sql: str,
    seconds: float,
    usage: dict[str, Any] | None,
    eval_start: float,
    error: str | None,
    error_kind: str | None,
    gold_error: str | None,
    *,
    correct: bool,
) -> dict[str, Any]:
    return {
        "question_id": str(example.question_id),
        "db_id": example.db_id,
        "question": example.question,
        "difficulty": getattr(example, "difficulty", ""),
        "source": getattr(example, "source", ""),
        "semantics": sem,
        "gold_sql": example.gold_sql,
        "pred_sql": pred_sql,
        "correct": correct,
        "error": error,
        "error_kind": error_kind,
        "gold_error": gold_error,
        "seconds": round(seconds, 4),
        "eval_seconds": round(time.perf_counter() - eval_start, 4),
        "usage": usage,
    }


def evaluate(
    program: Callable[..., Any],
    examples: Sequence[Any],
    *,
    out_path: str | Path | None,
    semantics: str | None = None,
    num_threads: int = 1,
    timeout_s: float = 30.0,
    resume: bool = True,
    progress: bool = True,
    usage_tracker: UsageTracker | None | str = _AUTO,
    strict_gold: bool = False,
    identity: dict[str, Any] | None = None,
    group_by_db: bool = True,
    judge: Judge | None = None,
) -> dict[str, Any]:
    """Run ``program`` on every example and score it by execution match.

    ``judge(question, candidate_sqls, sql, db)`` gives each answer's confidence in [0, 1]
    (:func:`sqlweave.programs.stages.confidence.record_confidence`; the facade passes it), which each
    record keeps and the summary scores (:func:`sqlweave.confidence.confidence_figures`).

    ``program`` is a DSPy module or any callable taking the example's inputs as keywords and
    returning a ``dspy.Prediction`` with ``.sql`` (or a string). ``semantics=None`` scores each
    example by its own benchmark's rules. With ``out_path`` each record is appended to that JSONL
    file as soon as it is done; with ``resume`` a rerun skips questions already recorded there
    (``resume=False`` starts the file afresh). ``usage_tracker`` is a context-manager factory whose
    value has ``.as_dict()``; by default :func:`sqlweave.lm.track_usage`, if available. A gold
    query that fails is recorded as a miss with ``gold_error`` set; ``strict_gold=True`` raises
    :class:`~sqlweave.metrics.GoldQueryError` instead (a benchmark whose gold cannot run).

    ``identity`` names the run (program, switches, model, semantics: any JSON object); it is
    written beside ``out_path`` as ``<out_path>.run.json`` (:func:`run_identity_path`), and a
    resume under another identity raises ``ValueError`` instead of mixing two runs' records. A
    file written without identity resumes as before, with a warning.

    With ``group_by_db`` the questions are visited database by database (:func:`visit_order`),
    so a local model keeps each schema in its KV cache; the records reach ``out_path`` in the
    order they finish, and the file is rewritten in example order (records of other questions
    it held kept after them) once every question is done.

    Returns ``{"ex", "interval", "n", "errors", "by_difficulty": {level: {"ex", "n", "interval"}},
    "usage",
    "usage_total", "records"}`` with records in example order. Prints nothing.
    """
    tracker = default_usage_tracker() if usage_tracker == _AUTO else usage_tracker
    if isinstance(tracker, str):
        raise ValueError(f"usage_tracker must be a callable or None, not {tracker!r}")
    examples = list(examples)
    ids = _question_ids(examples)
    done: dict[str, dict[str, Any]] = {}
    in_file: list[str] = []  # question ids in the order their records stand in the file
    stale = False  # the file holds lines that are no record of ours to keep
    out = Path(out_path) if out_path is not None else None
    with lock_records(out):
        if out is not None:
            done, in_file, stale = _open_out(
                out, examples, ids, resume=resume, identity=identity, semantics=semantics
            )
        order = visit_order(examples) if group_by_db else range(len(examples))
        todo = [examples[i] for i in order if ids[i] not in done]

        def one(ex: Any) -> dict[str, Any]:
            return _evaluate_one(program, ex, semantics, timeout_s, tracker, strict_gold, judge)

        _answer(
            one, todo, len(examples), out, done, in_file, num_threads=num_threads, progress=progress
        )
        if out is not None:
            wanted_ids = set(ids)
            ordered = [*ids, *(qid for qid in in_file if qid not in wanted_ids)]
            if in_file != ordered or stale:
                rewrite_records(out, (done[qid] for qid in ordered))
    return summarize([done[qid] for qid in ids])


def _question_ids(examples: Sequence[Any]) -> list[str]:
    """The examples' question ids; records are keyed by them, so they must be unique."""
    if not examples:
        raise ValueError("nothing to evaluate: the list of examples is empty")
    ids = [str(ex.question_id) for ex in examples]
    if len(set(ids)) != len(ids):
        raise ValueError(
            "examples have duplicate question_id values; records could not be told apart"
        )
    return ids


def _open_out(
    out: Path,
    examples: Sequence[Any],
    ids: Sequence[str],
    *,
    resume: bool,
    identity: dict[str, Any] | None,
    semantics: str | None = None,
) -> tuple[dict[str, dict[str, Any]], list[str], bool]:
    """Make ``out`` ready for this run's records and the run's identity beside it.

    With ``resume``: ``(records by question id, their ids in file order, stale)`` of what the
    file already holds for this run, ``stale`` when it holds lines the final rewrite must
    drop; a file of another run or dataset raises rather than mixing two runs' records.
    Without: the file is emptied and nothing is done yet.
    """
    done: dict[str, dict[str, Any]] = {}
    in_file: list[str] = []
    stale = False
    if out.exists() and not out.is_file():
        raise ValueError(f"{out} is not a regular file; give a file path for the records")
    if compressed(out) is not None:  # appending beside it would start the run over
        raise ValueError(
            f"{out} is kept compressed ({out.name}.gz: a finished run); gunzip it to resume or "
            "re-run it, or give another path"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    if resume:
        check_identity(out, identity)
        wanted = dict(zip(ids, examples, strict=True))
        for record in read_records(out, repair=True):
            qid = str(record["question_id"])
            if "pred_sql" not in record or "correct" not in record:
                raise ValueError(
                    f"{out} holds lines that are not evaluation records (question {qid} has no "
                    "pred_sql or verdict): is it a questions file? Give another out_path"
                )
            ex = wanted.get(qid)
            if ex is not None:
                _same_question(out, qid, record, ex)
            scored = record.get("semantics")
            scoring = (semantics or semantics_for(ex)) if ex is not None else None
            if scored and scoring and scored != scoring:
                raise ValueError(
                    f"{out}: record {qid} was scored under {scored}, this run scores under "
                    f"{scoring}; one EX cannot mix the two (use another out_path, or "
                    "resume=False to start it afresh)"
                )
            if is_run_failure_record(record):
                stale = True  # an older sqlweave recorded a dead endpoint as an answer
                continue  # ask again; the final rewrite drops the line
            if qid not in done:
                in_file.append(qid)
            done[qid] = record
        if done:
            logger.info(
                "resuming %s: %d of %d already done", out, len(set(done) & set(ids)), len(ids)
            )
    elif out.exists():
        out.write_text("")
    write_identity(out, identity)
    return done, in_file, stale


def _same_question(out: Path, qid: str, record: dict[str, Any], example: Any) -> None:
    """Refuse to take ``record`` as ``example``'s answer when it asked something else: another
    gold query, another question text (an edited file keeps its ids) or another database."""
    for field, ours in (
        ("gold_sql", example.gold_sql),
        ("question", example.question),
        ("db_id", example.db_id),
    ):
        if field in record and record[field] != ours:
            raise ValueError(
                f"{out}: record {qid} has another {field.replace('_', ' ')} than the example "
                f"({record[field]!r} vs {ours!r}); this file belongs to a different dataset "
                "(use another out_path)"
            )


def _answer(
    one: Callable[[Any], dict[str, Any]],
    todo: Sequence[Any],
    total: int,
    out: Path | None,
    done: dict[str, dict[str, Any]],
    in_file: list[str],
    *,
    num_threads: int,
    progress: bool,
) -> None:
    """Run ``one`` on every example of ``todo`` (on ``num_threads`` threads). Each record goes
    to ``done`` and, flushed and fsynced, to ``out`` the moment it is finished, so an
    interrupted run loses only the questions in flight."""
    lock = threading.Lock()
    bar = tqdm(total=total, initial=total - len(todo), disable=not progress, desc="EX")
    handle = open(out, "a", encoding="utf-8") if out is not None else None

    def finish(record: dict[str, Any]) -> None:
        with lock:
            done[record["question_id"]] = record
            # After Ctrl-C the questions still in flight finish into a closed file: drop them.
            if handle is not None and not handle.closed:
                handle.write(json_line(record))
                handle.flush()
                os.fsync(handle.fileno())
                in_file.append(record["question_id"])
            bar.update(1)

    try:
        # A dead endpoint stops the run (LMUnavailableError) with nothing recorded for the
        # questions it failed: they are not answered, and a resumed run asks them again.
        with endpoint_guard():
            if num_threads <= 1:
                for ex in todo:
                    finish(one(ex))
            else:
                _run_threads(one, todo, num_threads, finish)
    finally:
        bar.close()
        if handle is not None:
            handle.close()


def _run_threads(
    one: Callable[[Any], dict[str, Any]],
    todo: Iterable[Any],
    num_threads: int,
    finish: Callable[[dict[str, Any]], None],
) -> None:
    """``finish(one(ex))`` for every example of ``todo`` on a pool of ``num_threads`` threads;
    the first failure (or Ctrl-C) drops the queued questions and is raised."""

    def task(ex: Any) -> None:
        finish(one(ex))

    pool = ThreadPoolExecutor(max_workers=num_threads, thread_name_prefix="sqlweave-eval")
    try:
        # Each task runs in a copy of the caller's context, so dspy.context(lm=...) set around
        # evaluate() holds in the workers too.
        futures = [pool.submit(contextvars.copy_context().run, task, ex) for ex in todo]
        finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for future in finished:
            if future.exception() is not None:
                raise future.exception()  # type: ignore[misc]
    except BaseException:
        # Ctrl-C (KeyboardInterrupt lands in this thread, waiting) or a failed task: drop the
        # queued questions at once instead of running them all before the interrupt is seen;
        # the few in flight finish their current question.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
