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
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import dspy
from tqdm.auto import tqdm

from sqlweave.data import BIRD_LEVELS, SPIDER_LEVELS, open_database
from sqlweave.db import ExecutionError
from sqlweave.failures import endpoint_guard, is_run_failure_record, raise_if_run_failure
from sqlweave.metrics import GoldQueryError, check_execution, pred_sql_of, semantics_for
from sqlweave.stats import bootstrap_ci, outcomes_by_id, paired

logger = logging.getLogger(__name__)
#: ``judge(question, candidate_sqls, sql, db) -> confidence`` (:func:`evaluate`).
Judge = Callable[[str, list[str], str, Any], float]

UsageTracker = Callable[[], contextlib.AbstractContextManager[Any]]
_AUTO = "auto"


def default_usage_tracker() -> UsageTracker | None:
    """``sqlweave.lm.track_usage`` when that module provides it, else None (seconds only)."""
    try:
        from sqlweave.lm import track_usage
    except ImportError:
        return None
    return track_usage


def read_records(path: str | Path, *, repair: bool = False) -> list[dict[str, Any]]:
    """Records of an evaluation JSONL file.

    A last line cut short by an interrupted write is dropped (and, with ``repair=True``, cut from
    the file so later appends start on a clean line); a malformed line anywhere else is an error,
    because it means the file is not ours or was edited.
    """
    path = Path(path)
    if not path.exists():
        return []
    if not path.is_file():  # a folder, or a device such as /dev/zero that never ends
        raise ValueError(f"{path} is not a regular file")
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    records: list[dict[str, Any]] = []
    good_end = 0
    offset = 0
    for i, line in enumerate(lines):
        end = offset + len(line) + 1
        is_last = i == len(lines) - 1 or (i == len(lines) - 2 and not lines[-1])
        if line.strip():
            try:
                record = json.loads(line)
                if not isinstance(record, dict) or "question_id" not in record:
                    raise ValueError("not an evaluation record")
                complete = end <= len(raw)  # the line ended with a newline
            except ValueError as err:
                if not is_last:
                    raise ValueError(f"{path}: line {i + 1} is not a valid record ({err})") from err
                complete = False
            if not complete:
                logger.warning("%s: dropping a truncated last line", path)
                break
            records.append(record)
        good_end = min(end, len(raw))
        offset = end
    if repair and good_end < len(raw):
        with open(path, "r+b") as fh:
            fh.truncate(good_end)
    return records


def run_identity_path(out_path: str | Path) -> Path:
    """Where the identity of the run writing ``out_path`` is kept: ``<out_path>.run.json``."""
    out = Path(out_path)
    return out.with_name(out.name + ".run.json")


def read_run_identity(out_path: str | Path) -> dict[str, Any] | None:
    """The identity recorded for the run that wrote ``out_path``, or None (none recorded)."""
    path = run_identity_path(out_path)
    if not path.is_file():
        return None
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: unreadable run identity ({err}); delete it to go on") from err
    if not isinstance(payload, dict) or not isinstance(payload.get("_run"), dict):
        raise ValueError(f"{path} is not a sqlweave run identity; delete it to go on")
    return payload["_run"]


def recorded_run_matches(
    run: str | Path, identity: Mapping[str, Any], question_ids: Iterable[str]
) -> bool:
    """Whether the recorded run ``run`` stands for a run of ``identity`` on ``question_ids``.

    Its identity (:func:`read_run_identity`) must hold every item of ``identity`` with the same
    value (e.g. ``program``, ``slice``, ``model`` and the full ``switches``: one switch apart is
    another program), and its records must answer exactly ``question_ids`` (a ``--limit`` run
    does not); ``question_ids`` is read only when the identity matches. Raises
    FileNotFoundError when ``run`` or its identity file is missing.
    """
    meta = read_run_identity(run) if Path(run).is_file() else None
    if meta is None:
        raise FileNotFoundError(
            f"{run}: a recorded run needs its records and its {run_identity_path(run).name} "
            "beside them"
        )
    if any(meta.get(key) != value for key, value in identity.items()):
        return False
    return {r.get("question_id") for r in read_records(run)} == set(question_ids)


def _normal(identity: dict[str, Any]) -> dict[str, Any]:
    """The identity as it reads back from JSON (tuples become lists, keys strings)."""
    return json.loads(json.dumps(identity, sort_keys=True, default=str))


def _check_identity(out: Path, identity: dict[str, Any] | None) -> None:
    """Refuse to resume ``out`` when it holds records of a run with another identity."""
    if not out.is_file() or not out.stat().st_size:
        return  # nothing to mix with
    recorded = read_run_identity(out)
    if identity is None or recorded is None:
        if identity is not None:
            logger.warning(
                "%s records no run identity (written by an older sqlweave or without one); "
                "resuming it as the same run",
                out,
            )
        return
    wanted = _normal(identity)
    if recorded == wanted:
        return
    differ = [
        f"{key} {recorded.get(key)!r} vs {wanted.get(key)!r}"
        for key in sorted(set(recorded) | set(wanted))
        if recorded.get(key) != wanted.get(key)
    ]
    raise ValueError(
        f"{out} holds records of another run ({'; '.join(differ)}, recorded vs this run); "
        "resuming would mix them: use another out_path (--out) or start afresh (--no-resume)"
    )


def _write_identity(out: Path, identity: dict[str, Any] | None) -> None:
    """Record ``identity`` beside ``out`` (atomically); without one, drop a stale record when
    the file was started afresh (its records are no longer that run's)."""
    path = run_identity_path(out)
    if identity is None:
        if path.exists() and (not out.exists() or not out.stat().st_size):
            path.unlink()
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"_run": _normal(identity)}, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


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


def _rewrite(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Replace ``path`` with ``records`` as JSONL, atomically (a crash leaves the old file)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


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
    sem = semantics or semantics_for(example)
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
    pred_sql = pred_sql_of(pred)
    if error is None and not pred_sql.strip():
        error, error_kind = "program returned no SQL", "no_sql"

    start = time.perf_counter()
    try:
        database = open_database(example)
    except ExecutionError as err:
        # A corrupted or missing database file: the gold cannot run either, so it is the same
        # flagged miss as a failing gold query (or a stop under strict_gold).
        if strict_gold:
            raise GoldQueryError(example.gold_sql, str(example.db_id), err) from err
        return _record(
            example,
            sem,
            pred_sql,
            seconds,
            usage,
            start,
            error or err.feedback(),
            error_kind or err.kind,
            err.feedback(),
            correct=False,
        )
    match = check_execution(
        pred_sql,
        example.gold_sql,
        database,
        sem,
        timeout_s=timeout_s,
        strict_gold=strict_gold,
    )
    if error is None and match.error is not None:
        error, error_kind = match.error.feedback(), match.error.kind
    # A gold that fails (or is too large to compare) is a scored miss, flagged so it can be found.
    gold_error = match.gold_error.feedback() if match.gold_error is not None else None
    if match.gold_truncated:
        gold_error = "gold result exceeds the row cap; not compared"
    record = _record(
        example,
        sem,
        pred_sql,
        seconds,
        usage,
        start,
        error,
        error_kind,
        gold_error,
        correct=bool(match.correct),
    )
    pool = candidates_of(pred)
    if pool and gold_error is None:
        verdicts = {pred_sql: bool(match.correct)}
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
        record["oracle"] = bool(match.correct) or any(c["correct"] for c in pool)
        record["eval_seconds"] = round(time.perf_counter() - start, 4)
    if judge is not None and pred_sql.strip() and gold_error is None:
        record["confidence"] = _confidence(judge, example, pool, pred_sql, database)
    return record


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
    return value if 0.0 <= value <= 1.0 else None


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
    (:func:`sqlweave.programs.confidence.record_confidence`; the facade passes it), which each
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
    if not examples:
        raise ValueError("nothing to evaluate: the list of examples is empty")
    ids = [str(ex.question_id) for ex in examples]
    if len(set(ids)) != len(ids):
        raise ValueError(
            "examples have duplicate question_id values; records could not be told apart"
        )

    done: dict[str, dict[str, Any]] = {}
    in_file: list[str] = []  # question ids in the order their records stand in the file
    stale = False  # the file holds lines that are no record of ours to keep
    out = Path(out_path) if out_path is not None else None
    if out is not None:
        if out.exists() and not out.is_file():
            raise ValueError(f"{out} is not a regular file; give a file path for the records")
        out.parent.mkdir(parents=True, exist_ok=True)
        if resume:
            _check_identity(out, identity)
            wanted = dict(zip(ids, examples, strict=True))
            for record in read_records(out, repair=True):
                qid = str(record["question_id"])
                ex = wanted.get(qid)
                if ex is not None and record.get("gold_sql") != ex.gold_sql:
                    raise ValueError(
                        f"{out}: record {qid} has another gold query than the example; "
                        "this file belongs to a different dataset (use another out_path)"
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
        _write_identity(out, identity)
    order = visit_order(examples) if group_by_db else range(len(examples))
    todo = [examples[i] for i in order if ids[i] not in done]

    lock = threading.Lock()
    bar = tqdm(
        total=len(examples), initial=len(examples) - len(todo), disable=not progress, desc="EX"
    )
    handle = open(out, "a", encoding="utf-8") if out is not None else None

    def finish(record: dict[str, Any]) -> None:
        with lock:
            done[record["question_id"]] = record
            # After Ctrl-C the questions still in flight finish into a closed file: drop them.
            if handle is not None and not handle.closed:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
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
                    finish(
                        _evaluate_one(
                            program, ex, semantics, timeout_s, tracker, strict_gold, judge
                        )
                    )
            else:
                _run_threads(
                    program,
                    todo,
                    semantics,
                    timeout_s,
                    tracker,
                    num_threads,
                    finish,
                    strict_gold,
                    judge,
                )
    finally:
        bar.close()
        if handle is not None:
            handle.close()
    if out is not None:
        wanted_ids = set(ids)
        ordered = [*ids, *(qid for qid in in_file if qid not in wanted_ids)]
        if in_file != ordered or stale:
            _rewrite(out, (done[qid] for qid in ordered))
    return summarize([done[qid] for qid in ids])


def _run_threads(
    program: Any,
    todo: Iterable[Any],
    semantics: str | None,
    timeout_s: float,
    tracker: UsageTracker | None,
    num_threads: int,
    finish: Callable[[dict[str, Any]], None],
    strict_gold: bool = False,
    judge: Judge | None = None,
) -> None:
    def task(ex: Any) -> None:
        finish(_evaluate_one(program, ex, semantics, timeout_s, tracker, strict_gold, judge))

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


def _level_order(level: str) -> tuple[int, str]:
    known = (*SPIDER_LEVELS, *BIRD_LEVELS)
    return (known.index(level), level) if level in known else (len(known), level)


def _interval(outcomes: Sequence[bool]) -> list[float]:
    ci = bootstrap_ci(outcomes)
    return [ci.low, ci.high]


def compare(
    records: Sequence[dict[str, Any]], baseline: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Paired comparison of a run against a baseline run on the questions both answered:
    ``{"n", "ex", "ex_baseline", "delta", "delta_interval", "only_run", "only_baseline", "p"}``
    (McNemar's exact p-value, paired bootstrap interval of the difference)."""
    result = paired(outcomes_by_id(records), outcomes_by_id(baseline))
    return {
        "n": result.n,
        "ex": result.ex_a,
        "ex_baseline": result.ex_b,
        "delta": result.delta,
        "delta_interval": [result.diff.low, result.diff.high],
        "only_run": result.only_a,
        "only_baseline": result.only_b,
        "p": result.p_value,
    }


def failed_outside_sql(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The questions that failed for a reason outside their SQL: the program raised (an LM error
    other than a dead endpoint, a reply it could not read, a bug). ``{"n", "reasons": {reason:
    count}}``, a reason being the exception's class name, most frequent first. A question whose
    gold query could not be compared either (its database is broken) is counted apart, by
    ``gold_error``."""
    reasons: Counter[str] = Counter(
        str(r.get("error") or "").split(":", 1)[0].strip() or "program"
        for r in records
        if r.get("error_kind") == "program" and r.get("gold_error") is None
    )
    return {"n": sum(reasons.values()), "reasons": dict(reasons.most_common())}


def oracle_hit(record: Mapping[str, Any]) -> bool:
    """Whether the record's answer or any of its candidates is right: its ``oracle`` when
    evaluation wrote one, else read from its ``candidates`` (each with ``correct``). A record
    without candidates counts its answer alone (one candidate: oracle = EX)."""
    if "oracle" in record:
        return bool(record["oracle"])
    candidates = record.get("candidates")
    return bool(record.get("correct")) or any(
        isinstance(c, Mapping) and c.get("correct")
        for c in (candidates if isinstance(candidates, list) else [])
    )


def has_candidates(records: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any record carries its candidates (so oracle EX means something)."""
    return any(isinstance(r.get("candidates"), list) for r in records)


def oracle_ex(records: Sequence[dict[str, Any]]) -> float | None:
    """The share of questions some candidate answered right (the answer itself included,
    :func:`oracle_hit`): what a perfect selector over the same candidates would score. None
    when no record has candidates."""
    if not records or not has_candidates(records):
        return None
    return sum(oracle_hit(r) for r in records) / len(records)


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """EX overall and per difficulty (each with a 95% bootstrap ``interval``), plus mean and total
    usage, from evaluation records; ``failed`` counts the questions that failed for reasons
    outside their SQL (:func:`failed_outside_sql`). When records carry candidates, ``oracle_ex``
    (:func:`oracle_ex`) and ``selection_gap`` (oracle EX minus EX: what selection loses)."""
    n = len(records)
    correct = sum(bool(r.get("correct")) for r in records)
    levels: dict[str, list[bool]] = {}
    for r in records:
        levels.setdefault(str(r.get("difficulty") or "unknown"), []).append(bool(r.get("correct")))
    by_difficulty = {
        level: {"ex": sum(v) / len(v), "n": len(v), "interval": _interval(v)}
        for level, v in sorted(levels.items(), key=lambda kv: _level_order(kv[0]))
    }
    totals: dict[str, float] = {"wall_seconds": sum(float(r.get("seconds") or 0) for r in records)}
    for r in records:
        for key, value in (r.get("usage") or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                totals[key] = totals.get(key, 0) + value
    oracle = oracle_ex(records)
    judged = [r for r in records if isinstance(r.get("confidence"), int | float)]
    if judged:
        from sqlweave.confidence import confidence_figures

        confidence = confidence_figures(
            [float(r["confidence"]) for r in judged], [bool(r.get("correct")) for r in judged]
        )
    return {
        "ex": correct / n if n else 0.0,
        "interval": _interval([bool(r.get("correct")) for r in records]),
        **(
            {"oracle_ex": oracle, "selection_gap": oracle - correct / n}
            if oracle is not None and n
            else {}
        ),
        "n": n,
        "errors": sum(r.get("error") is not None for r in records),
        "failed": failed_outside_sql(records),
        "by_difficulty": by_difficulty,
        **({"confidence": confidence} if judged else {}),
        "usage": {k: v / n for k, v in totals.items()} if n else {},
        "usage_total": totals,
        "records": list(records),
    }
