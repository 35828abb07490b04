"""Failures of the run, not of the question (issue 35): a dead model endpoint stops evaluate,
compile and ask with one error naming it, records nothing as finished, and a resumed run asks
again; other program failures are counted and named in the summary.

The dead endpoint is real: an OpenAI-compatible client pointed at a loopback port where nothing
listens (connection refused), with DSPy's retries off so each test takes well under a second.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM
from dspy.utils.exceptions import (
    AdapterParseError,
    ContextWindowExceededError,
    LMAuthError,
    LMInvalidRequestError,
    LMTransportError,
    LMUnexpectedError,
)
from typer.testing import CliRunner

import sqlweave
from sqlweave import data
from sqlweave.cli import app
from sqlweave.errors import SqlweaveError
from sqlweave.evaluate import evaluate, read_records
from sqlweave.failures import (
    EndpointDown,
    LMUnavailableError,
    ProgramError,
    as_program_error,
    endpoint_guard,
    endpoint_of,
    is_run_failure_record,
    run_failure_kind,
)
from sqlweave.optimizers.budget import CallBudget, enforce
from sqlweave.optimizers.compile import run_optimizer
from sqlweave.programs import get

runner = CliRunner()


def _closed_port() -> int:
    """A loopback port where nothing listens (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def dead_lm() -> dspy.LM:
    """A real client whose endpoint refuses every connection; no retries, no cache."""
    base = f"http://127.0.0.1:{_closed_port()}"
    return dspy.LM("openai/none", api_base=base, api_key="sk-none", num_retries=0, cache=False)


class DyingLM(DummyLM):
    """Answers ``alive`` calls, then fails every later one as a server that went away does."""

    def __init__(self, answers: Any, alive: int) -> None:
        super().__init__(answers)
        self.alive = alive
        self.num_retries = 0

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.alive <= 0:
            raise LMTransportError("connection reset by peer", model=self.model)
        self.alive -= 1
        return super().forward(*args, **kwargs)


@pytest.fixture(scope="module")
def examples(demo_root: Path) -> list[dspy.Example]:
    return data.load_spider("dev", root=demo_root)[:4]


@pytest.fixture(scope="module")
def demo_root() -> Path:
    from conftest import DEMO_ROOT

    return DEMO_ROOT


# --- classification ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (LMTransportError("refused"), "is unreachable"),
        (LMTransportError("read timed out"), "timed out"),
        (LMAuthError("bad key", status=401), "refused the credentials"),
        (LMInvalidRequestError("no such model", status=404), "does not serve the model"),
        (ContextWindowExceededError(model="m"), None),
        (LMInvalidRequestError("bad request", status=400), None),
        (ValueError("a bug in the program"), None),
        (RuntimeError("connection refused, says a message"), None),  # text is not evidence
    ],
)
def test_run_failures_are_told_from_question_failures(error: Exception, kind: str | None) -> None:
    assert run_failure_kind(error) == kind


def test_a_wrapped_socket_error_is_a_run_failure() -> None:
    wrapped = LMUnexpectedError("engine failed")
    wrapped.__cause__ = ConnectionRefusedError(111, "Connection refused")
    assert run_failure_kind(wrapped) == "is unreachable"
    parse = AdapterParseError("ChatAdapter", dspy.Signature("q -> sql"), "garbage")
    assert run_failure_kind(parse) is None
    # A database the program reads went away: the question's failure, not the endpoint's.
    from sqlweave.db import ExecutionError

    down = ExecutionError("connection", "cannot connect to PostgreSQL")
    down.__cause__ = ConnectionRefusedError(111, "Connection refused")
    assert run_failure_kind(down) is None
    assert run_failure_kind(ConnectionRefusedError(111, "Connection refused")) is None


def test_endpoint_names_the_server_and_the_model(dead_lm: dspy.LM) -> None:
    assert endpoint_of(dead_lm).startswith("http://127.0.0.1:")
    assert endpoint_of(dead_lm).endswith("(openai/none)")
    assert endpoint_of(DummyLM([])) == "dummy"


def test_guard_turns_a_dead_endpoint_into_one_public_error(dead_lm: dspy.LM) -> None:
    with pytest.raises(LMUnavailableError) as caught, endpoint_guard():
        try:
            dead_lm("hello")
        except Exception:  # what DSPy's optimizers do around every example
            pytest.fail("the run failure was caught as an ordinary exception")
    err = caught.value
    assert isinstance(err, SqlweaveError) and err.kind == "is unreachable"
    assert err.endpoint == endpoint_of(dead_lm) and "LMTransportError" in str(err)
    assert isinstance(err.error, LMTransportError)


def test_nested_guards_raise_the_signal_inside_and_the_error_outside(dead_lm: dspy.LM) -> None:
    with pytest.raises(LMUnavailableError), endpoint_guard():
        with pytest.raises(EndpointDown), endpoint_guard():
            dead_lm("hello")
        raise EndpointDown(LMUnavailableError("x", "is unreachable", None))


def test_tries_are_counted_with_retries() -> None:
    lm = DyingLM({"": {"sql": "SELECT 1"}}, alive=0)
    lm.num_retries = 2
    with pytest.raises(LMUnavailableError) as caught, endpoint_guard():
        lm("hello")
    # DSPy retried the transport error with backoff before the guard saw it.
    assert "after 3 tries" in str(caught.value)


# --- evaluate ---------------------------------------------------------------------------------


@pytest.mark.parametrize("threads", [1, 2])
def test_evaluate_with_a_dead_endpoint_records_nothing_and_resumes(
    dead_lm: dspy.LM, examples: list[dspy.Example], tmp_path: Path, threads: int
) -> None:
    out = tmp_path / "run.jsonl"
    program = get("direct")
    with dspy.context(lm=dead_lm), pytest.raises(LMUnavailableError) as caught:
        evaluate(program, examples, out_path=out, progress=False, num_threads=threads)
    assert dead_lm.kwargs["api_base"] in str(caught.value)
    assert read_records(out) == []
    # The server is back (a stand-in that answers): the resumed run answers every question.
    with dspy.context(lm=DummyLM({"": {"sql": "SELECT count(*) FROM singer"}})):
        summary = evaluate(program, examples, out_path=out, progress=False, num_threads=threads)
    assert summary["n"] == len(examples) and summary["failed"]["n"] == 0
    assert len(read_records(out)) == len(examples)
    assert all(r["error_kind"] != "program" for r in read_records(out))


def test_endpoint_dying_midway_keeps_the_answers_before_it(
    examples: list[dspy.Example], tmp_path: Path
) -> None:
    out = tmp_path / "run.jsonl"
    lm = DyingLM({"": {"sql": "SELECT count(*) FROM singer"}}, alive=2)
    with dspy.context(lm=lm), pytest.raises(LMUnavailableError):
        evaluate(get("direct"), examples, out_path=out, progress=False)
    kept = read_records(out)
    assert len(kept) == 2 and all(r["error"] is None for r in kept)
    lm.alive = 100
    with dspy.context(lm=lm):
        summary = evaluate(get("direct"), examples, out_path=out, progress=False)
    assert summary["n"] == len(examples) and len(read_records(out)) == len(examples)


def test_records_of_an_older_run_that_scored_a_dead_endpoint_are_asked_again(
    examples: list[dspy.Example], tmp_path: Path
) -> None:
    out = tmp_path / "old.jsonl"
    first = examples[0]
    old = {
        "question_id": str(first.question_id),
        "gold_sql": first.gold_sql,
        "pred_sql": "",
        "correct": False,
        "error": "LMTransportError: [openai/none] failed to connect to 127.0.0.1:9",
        "error_kind": "program",
    }
    assert is_run_failure_record(old)
    assert not is_run_failure_record({**old, "error": "RuntimeError: model exploded"})
    out.write_text(json.dumps(old) + "\n")
    asked: list[str] = []

    def program(question: str, **_: Any) -> str:
        asked.append(question)
        return "SELECT count(*) FROM singer"

    summary = evaluate(program, examples, out_path=out, progress=False, usage_tracker=None)
    assert first.question in asked and len(asked) == len(examples)
    assert summary["failed"]["n"] == 0
    assert [r["question_id"] for r in read_records(out)] == [str(e.question_id) for e in examples]


def test_other_program_failures_are_counted_by_reason(
    examples: list[dspy.Example], tmp_path: Path
) -> None:
    def program(question: str, **_: Any) -> str:
        if question == examples[0].question:
            raise ContextWindowExceededError(model="m")
        if question == examples[1].question:
            raise KeyError("bug")
        return "SELECT 1"

    summary = evaluate(program, examples, out_path=None, progress=False, usage_tracker=None)
    assert summary["failed"] == {
        "n": 2,
        "reasons": {"ContextWindowExceededError": 1, "KeyError": 1},
    }


def test_evaluate_on_no_examples_is_an_error() -> None:
    with pytest.raises(ValueError, match="empty"):
        evaluate(lambda **_: "SELECT 1", [], out_path=None, progress=False)


# --- compile ----------------------------------------------------------------------------------


def test_compile_with_a_dead_endpoint_writes_no_finished_work(
    dead_lm: dspy.LM, spider_root: Path, tmp_path: Path
) -> None:
    train = data.load_spider("train", root=spider_root)[:6]
    ckpt = tmp_path / "c.ckpt.json"
    with dspy.context(lm=dead_lm), pytest.raises(LMUnavailableError):
        run_optimizer(
            get("direct"), train, train[:2], optimizer="bootstrap", budget=10, checkpoint=ckpt
        )
    saved = json.loads(ckpt.read_text())
    assert saved["entries"] == {} and saved["lm_calls"] == 0
    # Back up: the resumed compile bootstraps as a clean one does.
    lm = DummyLM({"": {"sql": "SELECT 1"}})
    with dspy.context(lm=lm):
        outcome = run_optimizer(
            get("direct"), train, train[:2], optimizer="bootstrap", budget=10, checkpoint=ckpt
        )
    assert outcome.report.resumed_calls == 0 and outcome.report.lm_calls > 0


def test_budget_gives_back_a_call_the_endpoint_failed(dead_lm: dspy.LM) -> None:
    counts: list[int] = []
    cap = CallBudget(5, on_count=counts.append)
    with enforce(cap), pytest.raises(LMUnavailableError), endpoint_guard():
        dead_lm("hello")
    assert cap.calls == 0 and counts == [1, 0]
    with enforce(cap), pytest.raises(Exception, match="bad request"):
        # A question's own failure is a call made: it stays counted.
        DyingLMBad()("hello")
    assert cap.calls == 1


class DyingLMBad(DummyLM):
    def __init__(self) -> None:
        super().__init__([])
        self.num_retries = 0

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise LMInvalidRequestError("bad request", status=400)


# --- ask --------------------------------------------------------------------------------------


def test_ask_raises_what_the_command_line_reports(
    dead_lm: dspy.LM, demo_concert_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with dspy.context(lm=dead_lm), pytest.raises(LMUnavailableError) as caught:
        sqlweave.ask("How many singers?", demo_concert_db)
    assert dead_lm.kwargs["api_base"] in str(caught.value)

    class Exploding(DummyLM):
        def forward(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("model exploded\nsecond line")

    with dspy.context(lm=Exploding([])), pytest.raises(ProgramError) as raised:
        sqlweave.ask("How many singers?", demo_concert_db)
    assert str(raised.value) == "the program failed: RuntimeError: model exploded"
    assert str(as_program_error(raised.value)) == str(raised.value)

    def fake_configure(model: str, **options: object) -> Any:
        lm = Exploding([])
        dspy.configure(lm=lm)
        return lm

    monkeypatch.setattr("sqlweave.lm.configure", fake_configure)
    try:
        result = runner.invoke(app, ["ask", "How many singers?", "--db", str(demo_concert_db)])
    finally:
        dspy.configure(lm=None)
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {raised.value}"


@pytest.mark.parametrize("bad", [None, b"How many?", 3, ""])
def test_ask_refuses_a_question_of_the_wrong_type(bad: Any, demo_concert_db: Path) -> None:
    with pytest.raises(ValueError, match="question must be"):
        sqlweave.ask(bad, demo_concert_db)


def test_ask_refuses_a_database_of_the_wrong_type() -> None:
    with pytest.raises(ValueError, match="db must be"):
        sqlweave.ask("How many?", 42)  # type: ignore[arg-type]


# --- the command line -------------------------------------------------------------------------


def _questions(tmp_path: Path, db: Path, n: int = 3) -> Path:
    path = tmp_path / "q.json"
    items = [
        {"question": f"How many singers ({i})?", "query": "SELECT count(*) FROM singer"}
        for i in range(n)
    ]
    path.write_text(json.dumps([{**item, "db_path": str(db)} for item in items]))
    return path


def test_cli_evaluate_on_a_dead_endpoint_is_one_error_line(
    demo_concert_db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "e.jsonl"
    port = _closed_port()
    args = ["evaluate", "--dataset", str(_questions(tmp_path, demo_concert_db)), "--out", str(out)]
    args += ["--model", "openai/none", "--api-base", f"http://127.0.0.1:{port}", "--no-progress"]
    result = runner.invoke(app, args)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: the model endpoint"), result.output
    assert f"127.0.0.1:{port}" in lines[0] and "unreachable" in lines[0]
    assert read_records(out) == []


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (["--model", "openai/m", "--api-base", "localhost:8000/v1"], "no http:// or https://"),
        (["--model", "foo"], "names no provider DSPy or LiteLLM knows"),
        (["--model", "nosuchprovider/x"], "names no provider DSPy or LiteLLM knows"),
        (["--model", "gguf:{bad}"], "cannot be loaded"),
        (["--model", "gguf:{dir}"], "is a folder, not a GGUF file"),
    ],
)
def test_cli_evaluate_with_a_model_no_call_can_reach_records_nothing(
    demo_concert_db: Path, tmp_path: Path, model: list[str], message: str
) -> None:
    """Found by review: each of these failed every question alike, recorded as that
    question's error (EX 0.0, and a resume skipped them); now one line before any question."""
    bad = tmp_path / "notgguf.gguf"
    bad.write_text("not a model")
    model = [m.format(bad=bad, dir=tmp_path) for m in model]
    out = tmp_path / "e.jsonl"
    args = ["evaluate", "--dataset", str(_questions(tmp_path, demo_concert_db)), "--out", str(out)]
    result = runner.invoke(app, [*args, *model, "--no-progress"])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert read_records(out) == []


def test_a_gguf_file_that_llama_cpp_cannot_load_ends_the_run(tmp_path: Path) -> None:
    """A readable header over nothing loadable: the engine's load failure is a configuration
    error, which ends the run instead of failing each question."""
    import struct

    from sqlweave.lm import build_lm

    path = tmp_path / "header-only.gguf"
    key, value = b"general.architecture", b"qwen2"
    path.write_bytes(
        b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
        + struct.pack("<IQ", 8, len(value)) + value
    )  # fmt: skip
    lm = build_lm(f"gguf:{path}")
    with pytest.raises(Exception) as info:
        lm(messages=[{"role": "user", "content": "hi"}])
    assert run_failure_kind(info.value) == "is not configured"
    assert "cannot load" in str(info.value)


def test_cli_compile_on_a_dead_endpoint_is_one_error_line(demo_root: Path, tmp_path: Path) -> None:
    # The command, with DSPy's default retries (backoff 1 s, 2 s, 4 s) before it stops.
    port = _closed_port()
    out, ckpt = tmp_path / "c.json", tmp_path / "c.ckpt.json"
    args = ["compile", "--n-train", "6", "--out", str(out), "--checkpoint", str(ckpt)]
    args += ["--data-root", str(demo_root), "--model", "openai/none"]
    args += ["--api-base", f"http://127.0.0.1:{port}", "--no-progress"]
    result = runner.invoke(app, args)
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2, result.output
    assert len(errors) == 1 and f"127.0.0.1:{port}" in errors[0], result.output
    assert "after 4 tries" in errors[0]
    assert not out.exists()
    saved = json.loads(ckpt.read_text())
    assert saved["entries"] == {} and saved["lm_calls"] == 0


def test_cli_evaluate_says_how_many_questions_failed_and_exits_non_zero(
    demo_concert_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Exploding(DummyLM):
        def forward(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("model exploded")

    def fake_configure(model: str, **options: object) -> Any:
        lm = Exploding([])
        dspy.configure(lm=lm)
        return lm

    monkeypatch.setattr("sqlweave.lm.configure", fake_configure)
    out = tmp_path / "e.jsonl"
    args = ["evaluate", "--dataset", str(_questions(tmp_path, demo_concert_db)), "--out", str(out)]
    try:
        result = runner.invoke(app, [*args, "--no-progress"])
    finally:
        dspy.configure(lm=None)
    assert result.exit_code == 1, result.output
    assert "3 of 3 questions failed outside their SQL (RuntimeError x3)" in result.output
    assert len(read_records(out)) == 3


@pytest.mark.parametrize("content", ["", "[]"])
def test_cli_evaluate_on_an_empty_file_is_one_error_line(
    content: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sqlweave.lm.configure", lambda model, **_: DummyLM([]))
    path = tmp_path / "q.json"
    path.write_text(content)
    result = runner.invoke(
        app, ["evaluate", "--dataset", str(path), "--out", str(tmp_path / "e.jsonl")]
    )
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: ") and ("no questions" in lines[0] or "empty" in lines[0])


# --- wrong types at the entry points ----------------------------------------------------------


@pytest.mark.parametrize("sql", [None, b"SELECT 1", 1, ["SELECT 1"]])
def test_execute_refuses_sql_that_is_not_text(demo_concert_db: Path, sql: Any) -> None:
    from sqlweave.db import Database, ExecutionError

    with Database.open(demo_concert_db) as db:
        with pytest.raises(ValueError, match="sql must be a string"):
            db.execute(sql)
        with pytest.raises(ValueError, match="sql must be a string"):
            db.try_execute(sql)
        assert isinstance(db.try_execute("SELEC 1"), ExecutionError)


def test_compile_and_load_refuse_arguments_of_the_wrong_type(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="trainset must be a list"):
        sqlweave.compile("direct", "spider")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="item 0: .*sql"):  # one error naming what is missing
        sqlweave.compile("direct", [{"question": "q"}])
    with pytest.raises(ValueError, match="valset must be a list"):
        sqlweave.compile("direct", [], 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="path must be a file path"):
        sqlweave.load(None)  # type: ignore[arg-type]


def test_a_served_model_that_hangs_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by review: DSPy's client waits 600 s and retries, so a hung server held each
    question ~40 minutes and nothing on the command line could say otherwise. A served model
    now waits $SQLWEAVE_LM_TIMEOUT (default 180 s) and the run ends saying it timed out."""
    import http.server
    import threading
    import time as clock

    from sqlweave.failures import LMUnavailableError, endpoint_guard
    from sqlweave.lm import build_lm
    from sqlweave.lm.build import DEFAULT_SERVED_TIMEOUT_S, LMSpecError, served_timeout

    assert served_timeout() == DEFAULT_SERVED_TIMEOUT_S
    monkeypatch.setenv("SQLWEAVE_LM_TIMEOUT", "soon")
    with pytest.raises(LMSpecError, match="SQLWEAVE_LM_TIMEOUT"):
        served_timeout()
    monkeypatch.setenv("SQLWEAVE_LM_TIMEOUT", "1")

    class Hang(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the handler's protocol
            clock.sleep(5)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hang)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/v1"
        lm = build_lm("openai/m", api_base=base, num_retries=0, cache=False)
        started = clock.monotonic()
        with pytest.raises(LMUnavailableError, match="timed out"), endpoint_guard():
            lm("hi")
        assert clock.monotonic() - started < 4
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    "model", ["openai:gpt-4o", "ollama:llama3", "claude-3-haiku-20240307", "gemini-1.5-pro"]
)
def test_a_spec_dspy_routes_itself_is_taken(model: str) -> None:
    """Found by review of the check above: DSPy resolves these without LiteLLM's list."""
    from sqlweave.lm.build import check_served

    check_served(model)


def test_a_timeout_is_no_part_of_a_cached_answer() -> None:
    """A served model's timeout would otherwise key DSPy's response cache: every cached
    answer, paid ones included, asked again when it changes."""
    from dspy.clients import execution

    import sqlweave.lm.build  # noqa: F401 - the import takes it out of the keys

    assert "timeout" in execution.IGNORED_CACHE_KEYS
