"""The evaluation loop: scoring, per-question JSONL, resume, failures, threads and usage."""

from __future__ import annotations

import contextlib
import json
import threading

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave import data
from sqlweave.evaluate import evaluate, read_records
from sqlweave.metrics import GoldQueryError


@pytest.fixture(scope="module")
def examples(data_root):
    dev = data.load_spider("dev", root=data_root)
    return data.eval_slice(dev, n=12, seed=0)


def gold_program(**kwargs):
    """Answers with the gold query: a perfect program, found by looking the question up."""
    return dspy.Prediction(sql=gold_program.lookup[kwargs["question"]])


class Counting:
    """Returns the gold SQL as a plain string and counts calls (thread-safe)."""

    def __init__(self, lookup, fail_on=()):
        self.lookup, self.fail_on, self.calls = lookup, set(fail_on), 0
        self.lock = threading.Lock()

    def __call__(self, question, db_id, evidence, db_path):
        with self.lock:
            self.calls += 1
        if question in self.fail_on:
            raise RuntimeError("model exploded")
        return self.lookup[question]


@pytest.fixture
def lookup(examples):
    table = {e.question: e.gold_sql for e in examples}
    gold_program.lookup = table
    return table


def test_perfect_program_scores_one_and_writes_records(examples, lookup, tmp_path, capsys):
    out = tmp_path / "run.jsonl"
    summary = evaluate(gold_program, examples, out_path=out, progress=False, usage_tracker=None)
    assert summary["ex"] == 1.0 and summary["n"] == len(examples) and summary["errors"] == 0
    assert sum(v["n"] for v in summary["by_difficulty"].values()) == len(examples)
    assert list(summary["by_difficulty"]) == [
        lvl for lvl in ("easy", "medium", "hard", "extra") if lvl in summary["by_difficulty"]
    ]
    lines = out.read_text().splitlines()
    assert len(lines) == len(examples)
    record = json.loads(lines[0])
    for key in (
        "question_id",
        "db_id",
        "question",
        "difficulty",
        "gold_sql",
        "pred_sql",
        "correct",
        "error",
        "seconds",
    ):
        assert key in record
    assert [r["question_id"] for r in summary["records"]] == [e.question_id for e in examples]
    assert capsys.readouterr().out == ""


def test_bad_predictions_are_recorded_not_raised(examples, lookup, tmp_path):
    failing = {examples[0].question}
    wrong = {examples[1].question: "SELECT nonsense FROM nowhere", examples[2].question: "SELECT 1"}

    def program(question, **_):
        if question in failing:
            raise RuntimeError("model exploded")
        if question == examples[3].question:
            return dspy.Prediction(answer="no sql field")
        return wrong.get(question, lookup[question])

    summary = evaluate(
        program, examples, out_path=tmp_path / "r.jsonl", progress=False, usage_tracker=None
    )
    by_id = {r["question_id"]: r for r in summary["records"]}
    assert by_id[examples[0].question_id]["error"] == "RuntimeError: model exploded"
    assert by_id[examples[0].question_id]["error_kind"] == "program"
    assert by_id[examples[1].question_id]["error_kind"] == "unknown_table"
    assert by_id[examples[2].question_id]["error"] is None
    assert by_id[examples[3].question_id]["error_kind"] == "no_sql"
    assert summary["errors"] == 3
    assert summary["ex"] == pytest.approx((len(examples) - 4) / len(examples))


def test_resume_skips_done_questions_and_survives_a_torn_line(examples, lookup, tmp_path):
    out = tmp_path / "r.jsonl"
    evaluate(Counting(lookup), examples[:5], out_path=out, progress=False, usage_tracker=None)
    with open(out, "a") as fh:
        fh.write('{"question_id": "spider_dev_9999", "corr')  # interrupted mid-write
    program = Counting(lookup)
    summary = evaluate(program, examples, out_path=out, progress=False, usage_tracker=None)
    assert program.calls == len(examples) - 5
    assert summary["n"] == len(examples) and summary["ex"] == 1.0
    records = read_records(out)
    assert len(records) == len(examples)  # the torn line was cut, every line parses
    assert all(json.loads(line) for line in out.read_text().splitlines())
    again = Counting(lookup)
    evaluate(again, examples, out_path=out, progress=False, usage_tracker=None)
    assert again.calls == 0
    fresh = Counting(lookup)
    evaluate(fresh, examples, out_path=out, resume=False, progress=False, usage_tracker=None)
    assert fresh.calls == len(examples) and len(read_records(out)) == len(examples)


def test_resume_refuses_a_file_from_another_dataset(examples, lookup, tmp_path):
    out = tmp_path / "r.jsonl"
    evaluate(Counting(lookup), examples[:2], out_path=out, progress=False, usage_tracker=None)
    changed = [examples[0].copy(gold_sql="SELECT 1"), *examples[1:]]
    with pytest.raises(ValueError, match="different dataset"):
        evaluate(Counting(lookup), changed, out_path=out, progress=False, usage_tracker=None)


def test_resume_refuses_records_scored_under_other_semantics(examples, lookup, tmp_path):
    out = tmp_path / "r.jsonl"
    kw = {"out_path": out, "progress": False, "usage_tracker": None}
    evaluate(Counting(lookup), examples[:2], semantics="official-bird", **kw)
    with pytest.raises(ValueError, match="scored under official-bird"):
        evaluate(Counting(lookup), examples[:4], semantics="official-spider", **kw)


def test_a_second_run_on_the_same_records_file_is_refused(examples, lookup, tmp_path):
    import fcntl

    out = tmp_path / "r.jsonl"
    kw = {"out_path": out, "progress": False, "usage_tracker": None}
    with open(out, "a") as held:  # another run, writing this file now
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(ValueError, match="being written by another run"):
            evaluate(Counting(lookup), examples[:2], **kw)
    assert evaluate(Counting(lookup), examples[:2], **kw)["n"] == 2  # free again


def test_records_that_json_or_utf8_cannot_hold_are_written_not_fatal(examples, lookup, tmp_path):
    """A lone surrogate (valid in a JSON questions file) and values JSON has no type for
    would stop the run at that question on every resume."""
    odd = [examples[0].copy(question="caf\udce9 count"), *examples[1:3]]
    lookup = {**lookup, "caf\udce9 count": examples[0].gold_sql}

    import numpy as np

    def program(**kwargs):
        sql = lookup[kwargs["question"]]
        return dspy.Prediction(sql=sql, candidates=[sql], candidate_groups=[{1, 2}])

    out = tmp_path / "r.jsonl"
    kw = {"out_path": out, "progress": False, "usage_tracker": None}
    summary = evaluate(program, odd, judge=lambda *a: np.float32(0.5), **kw)
    assert summary["n"] == 3 and len(read_records(out)) == 3
    assert read_records(out)[0]["question"] == "caf\udce9 count"  # the escape reads back
    assert all(r["confidence"] == 0.5 for r in read_records(out))


def test_a_judge_that_returns_no_number_leaves_the_confidence_empty(examples, lookup, tmp_path):
    for value in (None, "0.5", True, float("nan")):
        summary = evaluate(
            Counting(lookup),
            examples[:1],
            out_path=None,
            progress=False,
            usage_tracker=None,
            judge=lambda *a, v=value: v,
        )
        assert summary["records"][0].get("confidence") is None, value


def test_list_and_struct_results_are_compared_not_fatal(tmp_path):
    pytest.importorskip("duckdb_engine")
    from conftest import duckdb_url

    from sqlweave.db import Database
    from sqlweave.metrics import check_execution

    url = duckdb_url(tmp_path / "l.duckdb", "CREATE TABLE t AS SELECT 1 AS id, [1, 2] AS a")
    with Database.open(url) as db:
        for semantics in ("official-spider", "official-bird", "strict-spider", "strict-bird"):
            same = check_execution("SELECT [1, 2]", "SELECT a FROM t", db, semantics)
            other = check_execution("SELECT {'x': 1}", "SELECT a FROM t", db, semantics)
            assert same.correct and not other.correct, semantics


def test_corrupt_middle_line_is_an_error(tmp_path):
    out = tmp_path / "r.jsonl"
    out.write_text('{"question_id": "a"}\ngarbage\n{"question_id": "b"}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_records(out)


def test_threads_give_the_same_records_and_see_the_dspy_context(examples, lookup, tmp_path):
    seen = []

    def program(question, **_):
        seen.append(dspy.settings.lm)
        return lookup[question]

    lm = DummyLM([{"sql": "SELECT 1"}])
    with dspy.context(lm=lm):
        threaded = evaluate(
            program, examples, out_path=None, num_threads=4, progress=False, usage_tracker=None
        )
    serial = evaluate(Counting(lookup), examples, out_path=None, progress=False, usage_tracker=None)
    assert threaded["ex"] == serial["ex"] == 1.0
    assert [r["question_id"] for r in threaded["records"]] == [
        r["question_id"] for r in serial["records"]
    ]
    assert len(seen) == len(examples) and all(s is lm for s in seen)


def test_failing_gold_is_a_flagged_miss_unless_strict(examples, lookup, tmp_path):
    broken = [examples[0].copy(gold_sql="SELECT * FROM no_such_table"), *examples[1:3]]
    result = evaluate(
        Counting(lookup), broken, out_path=tmp_path / "ok.jsonl", progress=False, usage_tracker=None
    )
    first = result["records"][0]
    assert first["correct"] is False and first["gold_error"]
    assert "no_such_table" in first["gold_error"]
    assert all(not r.get("gold_error") for r in result["records"][1:])
    with pytest.raises(GoldQueryError):
        evaluate(
            Counting(lookup),
            broken,
            out_path=tmp_path / "r.jsonl",
            progress=False,
            usage_tracker=None,
            strict_gold=True,
        )
    with pytest.raises(GoldQueryError):
        evaluate(
            Counting(lookup),
            broken,
            out_path=None,
            num_threads=2,
            progress=False,
            usage_tracker=None,
            strict_gold=True,
        )


def test_custom_usage_tracker_is_recorded_and_summarized(examples, lookup):
    class Acc:
        def as_dict(self):
            return {"calls": 2, "prompt_tokens": 10}

    @contextlib.contextmanager
    def tracker():
        yield Acc()

    summary = evaluate(
        Counting(lookup), examples[:3], out_path=None, progress=False, usage_tracker=tracker
    )
    assert all(r["usage"] == {"calls": 2, "prompt_tokens": 10} for r in summary["records"])
    assert summary["usage"]["calls"] == 2 and summary["usage_total"]["prompt_tokens"] == 30
    assert "wall_seconds" in summary["usage"]


def test_dspy_module_with_dummy_lm_and_default_tracker(examples):
    ex = next(e for e in examples)

    class Direct(dspy.Module):
        def __init__(self):
            super().__init__()
            self.gen = dspy.Predict("question, db_id -> sql")

        def forward(self, question, db_id, **_):
            return self.gen(question=question, db_id=db_id)

    lm = DummyLM([{"sql": ex.gold_sql}])
    with dspy.context(lm=lm):
        summary = evaluate(Direct(), [ex], out_path=None, progress=False)
    (record,) = summary["records"]
    assert record["pred_sql"] == ex.gold_sql and record["correct"] is True
    # with sqlweave.lm present the default tracker counts the LM call
    if record["usage"] is not None:
        assert record["usage"]["calls"] == 1


def test_duplicate_question_ids_are_refused(examples, lookup):
    with pytest.raises(ValueError, match="duplicate"):
        evaluate(Counting(lookup), [examples[0], examples[0]], out_path=None, progress=False)


# --- threads: no hang, Ctrl-C heard (issue 19) ---------------------------------------------

import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402


def _fresh_copies(examples, folder: Path):
    """The examples over fresh copies of their databases: new handles, schemas not yet read."""
    folder.mkdir(parents=True)
    out = []
    for ex in examples:
        src = Path(ex.db_path)
        dst = folder / src.name
        if not dst.exists():
            shutil.copyfile(src, dst)
        out.append(ex.copy(db_path=str(dst)))
    return out


@pytest.mark.timeout(300)
def test_eight_threads_twenty_times_never_hang(examples, lookup, tmp_path):
    """`evaluate --threads 8` hung in 2 of 2 runs: 8 threads introspecting fresh databases."""
    from sqlweave.data import open_database
    from sqlweave.schema import clear_cache, introspect

    def program(question, db_path):
        db = open_database(db_path)
        schema = introspect(db)  # the step that deadlocked, on a database nobody read yet
        assert schema.tables
        db.execute("SELECT 1")
        return lookup[question]

    for run in range(20):
        clear_cache()
        fresh = _fresh_copies(examples, tmp_path / str(run))
        summary = evaluate(
            program,
            fresh,
            out_path=tmp_path / str(run) / "r.jsonl",
            num_threads=8,
            progress=False,
            usage_tracker=None,
        )
        assert summary["n"] == len(examples) and summary["ex"] == 1.0, run
        for ex in fresh:
            open_database(ex).close()  # keep the open files of 20 runs bounded


# The CLI in a child process: ``direct`` with a DummyLM (real schema rendering, no weights),
# evaluated with --threads 8 over a questions file; DELAY seconds per LM call.
THREADED_CLI = """
import os, sys, time
import dspy
from dspy.utils import DummyLM
import sqlweave.lm

class SlowLM(DummyLM):
    def _format_answer_fields(self, fields):
        time.sleep(float(os.environ.get("DELAY", "0")))
        return super()._format_answer_fields(fields)

LM = SlowLM({"": {"sql": "SELECT 1"}})

def configure(model, **options):
    dspy.configure(lm=LM)
    return LM

sqlweave.lm.configure = configure
from sqlweave.cli import app
for run in range(int(os.environ.get("RUNS", "1"))):
    args = [a.replace("{run}", str(run)) for a in sys.argv[1:]]
    code = app(args, standalone_mode=False)  # typer returns the exit code (130 for Ctrl-C)
    sys.stdout.flush()
    if code:
        sys.exit(code)
"""


def _questions_file(examples, folder: Path, copies: int) -> Path:
    """``copies`` questions files (q0.json ...) over their own database copies each."""
    for i in range(copies):
        fresh = _fresh_copies(examples, folder / f"db{i}")
        (folder / f"q{i}.json").write_text(
            json.dumps(
                [
                    {
                        "question_id": f"{ex.question_id}",
                        "question": ex.question,
                        "query": ex.gold_sql,
                        "db_path": ex.db_path,
                    }
                    for ex in fresh
                ]
            )
        )
    return folder


@pytest.mark.timeout(400)
def test_cli_evaluate_with_eight_threads_twenty_times(examples, tmp_path):
    _questions_file(examples, tmp_path, 20)
    cmd = [sys.executable, "-c", THREADED_CLI, "evaluate", "-p", "direct", "--threads", "8"]
    cmd += ["--no-progress"]  # one call a question (not the default preset's eight)
    cmd += ["--dataset", str(tmp_path / "q{run}.json"), "--n", "0"]
    cmd += ["--out", str(tmp_path / "r{run}.jsonl")]
    done = subprocess.run(
        cmd, env={**os.environ, "RUNS": "20"}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count(f"on {len(examples)} questions") == 20
    for run in range(20):
        assert len(read_records(tmp_path / f"r{run}.jsonl")) == len(examples)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.timeout(200)
def test_ctrl_c_stops_a_threaded_evaluation(examples, tmp_path):
    """It ignored Ctrl-C: the interrupt waited for every queued question. Now the queue is
    dropped and only the questions in flight (8 here) finish their current call."""
    many = [ex.copy(question_id=f"{ex.question_id}-{i}") for i in range(4) for ex in examples]
    _questions_file(many, tmp_path, 1)
    out = tmp_path / "r.jsonl"
    cmd = [sys.executable, "-c", THREADED_CLI, "evaluate", "-p", "direct", "--threads", "8"]
    cmd += ["--no-progress"]  # one call a question (not the default preset's eight)
    cmd += ["--dataset", str(tmp_path / "q0.json"), "--n", "0", "--out", str(out)]
    proc = subprocess.Popen(
        cmd,
        env={**os.environ, "DELAY": "1.5"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        # Ctrl-C's default action in the child, whatever pytest inherited: a suite started in
        # the background by a non-interactive shell ignores SIGINT, the child inherited that,
        # ran to the end and exited 0 (the "full-suite flake" of earlier stops).
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 120
        while not (out.exists() and out.read_text().count("\n") >= 1):
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no question finished"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGINT)
        interrupted = time.monotonic()
        proc.wait(timeout=30)
        waited = time.monotonic() - interrupted
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, proc.stderr.read().decode()[-3000:]
    assert "interrupted" in proc.stderr.read().decode()
    # The in-flight calls (1.5 s each) finish; the ~40 queued questions (~8 s more) do not run.
    assert waited < 6, waited
    assert len(read_records(out)) < len(many) - 8


# --------------------------------------------------------------------------- visit order (issue 15)


class Visiting(Counting):
    """Counting that logs the questions in the order it is asked them, and can be stopped."""

    def __init__(self, lookup, stop_after=None):
        super().__init__(lookup)
        self.seen, self.stop_after = [], stop_after

    def __call__(self, question, db_id, evidence, db_path):
        if self.stop_after is not None and len(self.seen) == self.stop_after:
            raise KeyboardInterrupt  # Ctrl-C between two questions
        self.seen.append(question)
        return super().__call__(question, db_id, evidence, db_path)


def _file_ids(path):
    return [json.loads(line)["question_id"] for line in path.read_text().splitlines()]


@pytest.fixture
def mixed(examples):
    """The slice twice over (new ids): every database comes back after the others."""
    return [ex.copy(question_id=f"{ex.question_id}-{k}") for k in range(2) for ex in examples]


def test_visit_order_groups_questions_by_database():
    from types import SimpleNamespace

    from sqlweave.evaluate import visit_order

    exs = [SimpleNamespace(db_id=db, db_path=f"/d/{db}.sqlite") for db in "abacbd"]
    assert visit_order(exs) == [0, 2, 1, 4, 3, 5]
    # Two benchmarks may share a db_id: the path tells their schemas apart.
    twins = [SimpleNamespace(db_id="x", db_path=p) for p in ("/s/x", "/b/x", "/s/x")]
    assert visit_order(twins) == [0, 2, 1]
    assert visit_order([SimpleNamespace(db_id=d) for d in "zyz"]) == [0, 2, 1]
    assert visit_order([]) == []


def test_questions_are_visited_by_database_and_written_in_example_order(mixed, lookup, tmp_path):
    from sqlweave.evaluate import visit_order

    order = visit_order(mixed)
    assert order != list(range(len(mixed)))  # the slice interleaves databases
    out = tmp_path / "r.jsonl"
    program = Visiting(lookup)
    summary = evaluate(program, mixed, out_path=out, progress=False, usage_tracker=None)
    assert program.seen == [mixed[i].question for i in order]
    visited_dbs = [mixed[i].db_id for i in order]
    runs = [db for i, db in enumerate(visited_dbs) if i == 0 or db != visited_dbs[i - 1]]
    assert len(runs) == len(set(runs))  # each database once, its questions together
    ids = [str(ex.question_id) for ex in mixed]
    assert _file_ids(out) == ids
    assert [r["question_id"] for r in summary["records"]] == ids
    assert summary["ex"] == 1.0
    assert not out.with_name(out.name + ".tmp").exists()


def test_an_interrupted_grouped_run_resumes_and_ends_in_example_order(mixed, lookup, tmp_path):
    from sqlweave.evaluate import visit_order

    out = tmp_path / "r.jsonl"
    ids = [str(ex.question_id) for ex in mixed]
    order = visit_order(mixed)
    with pytest.raises(KeyboardInterrupt):
        evaluate(Visiting(lookup, stop_after=5), mixed, out_path=out, progress=False)
    # Stopped mid-run the file holds what finished, in the order it finished.
    assert _file_ids(out) == [ids[i] for i in order[:5]]
    rest = Visiting(lookup)
    summary = evaluate(rest, mixed, out_path=out, progress=False, usage_tracker=None)
    assert rest.seen == [mixed[i].question for i in order[5:]]
    assert _file_ids(out) == ids and summary["n"] == len(mixed)
    again = Visiting(lookup)
    evaluate(again, mixed, out_path=out, progress=False, usage_tracker=None)
    assert again.seen == [] and _file_ids(out) == ids


def test_records_of_other_questions_stay_in_the_file(examples, lookup, tmp_path):
    out = tmp_path / "r.jsonl"
    ids = [str(ex.question_id) for ex in examples]
    evaluate(Counting(lookup), examples[:3], out_path=out, progress=False, usage_tracker=None)
    summary = evaluate(
        Counting(lookup), examples[3:], out_path=out, progress=False, usage_tracker=None
    )
    assert summary["n"] == len(examples) - 3
    assert _file_ids(out) == ids[3:] + ids[:3]


def test_visit_order_can_be_the_example_order(mixed, lookup, tmp_path):
    program = Visiting(lookup)
    evaluate(
        program,
        mixed,
        out_path=tmp_path / "r.jsonl",
        progress=False,
        usage_tracker=None,
        group_by_db=False,
    )
    assert program.seen == [ex.question for ex in mixed]


def test_threads_visit_by_database_and_write_in_example_order(mixed, lookup, tmp_path):
    out = tmp_path / "r.jsonl"
    evaluate(
        Counting(lookup), mixed, out_path=out, num_threads=4, progress=False, usage_tracker=None
    )
    assert _file_ids(out) == [str(ex.question_id) for ex in mixed]


def test_a_questions_file_given_as_the_records_file_is_refused_and_kept(examples, lookup, tmp_path):
    out = tmp_path / "mine.jsonl"
    text = "".join(json.dumps({"question_id": str(i), "question": "q"}) + "\n" for i in range(2))
    out.write_text(text)
    with pytest.raises(ValueError, match="not evaluation records"):
        evaluate(Counting(lookup), examples[:2], out_path=out, progress=False, usage_tracker=None)
    assert out.read_text() == text


def test_a_complete_last_line_that_is_no_record_is_an_error_not_a_truncation(tmp_path):
    out = tmp_path / "r.jsonl"
    out.write_text('{"not": "records"}\n')
    with pytest.raises(ValueError, match="line 1 is not a valid record"):
        read_records(out, repair=True)
    assert out.read_text() == '{"not": "records"}\n'


def test_a_resume_refuses_records_of_another_question_or_database(tmp_path) -> None:
    """Found by review: an edited question (same id) or the same id on another database took
    the old record as its answer (EX 100 % from another file's run)."""
    import dspy

    from sqlweave.evaluate import evaluate

    def example(question: str, db_id: str) -> dspy.Example:
        return dspy.Example(
            question_id="q1",
            question=question,
            db_id=db_id,
            db_path="",
            gold_sql="SELECT 1",
            evidence="",
            difficulty="easy",
            source="spider",
        ).with_inputs("question", "db_id", "db_path", "evidence")

    out = tmp_path / "r.jsonl"
    out.write_text(json.dumps({
        "question_id": "q1", "db_id": "shop", "question": "How many?", "gold_sql": "SELECT 1",
        "pred_sql": "SELECT 1", "correct": True, "semantics": "official-spider",
    }) + "\n")  # fmt: skip
    for question, db_id, field in (
        ("How many now?", "shop", "question"),
        ("How many?", "hr", "db id"),
    ):
        with pytest.raises(ValueError, match=f"another {field} than the example"):
            evaluate(
                lambda **_: "SELECT 1", [example(question, db_id)], out_path=out, progress=False
            )
