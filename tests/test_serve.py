"""``sqlweave serve`` (issue 62): the HTTP API over a program, in-process with starlette's
TestClient and a DummyLM, so no model runs and no socket opens (but for the last test).

The last test (marked ``served`` and ``lm``) is the real one: llama.cpp's OpenAI-compatible
server with the 0.5B model on loopback (``tests/test_served.py``'s fixture), ``serve``'s app on
uvicorn on another loopback port, and 20 questions posted at once.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import dspy
import pytest
from conftest import DEMO_CONCERT_DB
from dspy.utils import DummyLM

pytest.importorskip(
    "starlette", reason="the serve extra is not installed: pip install 'sqlweave[serve]'"
)
pytest.importorskip("httpx", reason="starlette's TestClient needs httpx (the dev extra)")

from starlette.testclient import TestClient  # noqa: E402

from sqlweave.api import CompiledProgram  # noqa: E402
from sqlweave.db import Database  # noqa: E402
from sqlweave.programs import get  # noqa: E402
from sqlweave.serve import (  # noqa: E402
    ServeError,
    create_app,
    in_process,
    parse_databases,
)

COUNT = "SELECT count(*) FROM singer"
BASE = "http://127.0.0.1"  # TestClient's Host header: the app answers loopback names only


def _closed_port() -> int:
    """A loopback port where nothing listens (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _client(app: Any) -> TestClient:
    return TestClient(app, base_url=BASE, raise_server_exceptions=False)


def _app(sql: str = COUNT, program: Any = "direct", **kwargs: Any) -> Any:
    databases = kwargs.pop("databases", {"concert_singer": DEMO_CONCERT_DB})
    return create_app(program, databases, lm=DummyLM({"": {"sql": sql}}), **kwargs)


@pytest.fixture
def client() -> Iterator[TestClient]:
    with _client(_app()) as c:
        yield c


# --- POST /ask ------------------------------------------------------------------------------------


def test_ask_answers_with_sql_and_rows(client: TestClient) -> None:
    response = client.post("/ask", json={"question": "How many singers are there?"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["sql"] == COUNT
    assert body["columns"] == ["count(*)"] and body["rows"] == [[6]]
    assert body["truncated"] is False and body["error"] is None
    # The program gives no confidence and no alternatives (yet): null and [], not made up here.
    # every candidate agrees: a confident answer with no other reading to show
    assert 0.5 < body["confidence"] <= 1.0 and body["alternatives"] == []
    # the program's own verdict against the shipped threshold, as `ask` prints it
    assert isinstance(body["low_confidence"], bool)
    assert body["db"] == "concert_singer"
    assert isinstance(body["timing"]["seconds"], float) and body["timing"]["seconds"] >= 0
    assert response.headers["content-type"].startswith("application/json")


def test_ask_chooses_among_several_databases(tmp_path: Path) -> None:
    other = tmp_path / "copy.sqlite"
    shutil.copyfile(DEMO_CONCERT_DB, other)
    app = _app(databases={"first": DEMO_CONCERT_DB, "second": str(other)})
    with _client(app) as c:
        assert c.post("/ask", json={"question": "How many?"}).json()["db"] == "first"
        body = c.post("/ask", json={"question": "How many?", "db": "second"}).json()
        assert body["db"] == "second" and body["rows"] == [[6]]
        assert c.get("/health").json()["databases"] == ["first", "second"]


def test_rows_are_capped_at_max_rows() -> None:
    with _client(_app("SELECT name FROM singer", max_rows=2)) as c:
        body = c.post("/ask", json={"question": "Names?"}).json()
    assert len(body["rows"]) == 2 and body["truncated"] is True


# The program keeps no SQL from a bare write ("no SQL"); a write inside a query reaches the
# database, which refuses it. Either way: the model's answer (200), an error object, no change.
@pytest.mark.parametrize(
    ("answer", "sql", "kind", "says"),
    [
        ("DELETE FROM singer", "", "syntax", "no SQL"),
        (
            "WITH d AS (DELETE FROM singer RETURNING *) SELECT count(*) FROM d",
            "WITH d AS (DELETE FROM singer RETURNING *) SELECT count(*) FROM d",
            "not_read_only",
            "read-only",
        ),
    ],
)
def test_sql_that_writes_is_the_models_answer_refused_and_nothing_changes(
    tmp_path: Path, answer: str, sql: str, kind: str, says: str
) -> None:
    db = tmp_path / "concert.sqlite"
    shutil.copyfile(DEMO_CONCERT_DB, db)
    with _client(_app(answer, databases={"concert": db})) as c:
        response = c.post("/ask", json={"question": "Remove every singer"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["sql"] == sql and body["rows"] == [] and body["columns"] == []
    assert body["error"]["kind"] == kind and says in body["error"]["message"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM singer").fetchone() == (6,)


def test_no_endpoint_runs_sql_a_client_sends(client: TestClient) -> None:
    routes = {(r.path, tuple(sorted(r.methods or ()))) for r in client.app.routes}
    assert {path for path, _ in routes} == {"/", "/health", "/schema", "/ask"}
    # /ask takes a question; a field named sql is refused, not run.
    refused = client.post("/ask", json={"question": "x", "sql": "DELETE FROM singer"})
    assert refused.status_code == 422 and "sql" in refused.json()["error"]
    assert client.get("/schema", params={"db": "concert_singer", "sql": COUNT}).status_code == 200


@pytest.mark.parametrize(
    ("body", "status", "named"),
    [
        ('{"question": ', 400, "JSON"),
        ("not json at all", 400, "JSON"),
        ("[1, 2]", 422, "object"),
        ("{}", 422, "question"),
        ('{"question": ""}', 422, "question"),
        ('{"question": "   "}', 422, "question"),
        ('{"question": 5}', 422, "question"),
        ('{"question": "How many?", "db": 3}', 422, "db"),
        ('{"question": "How many?", "evidence": ["a"]}', 422, "evidence"),
        ('{"question": "How many?", "db": "nope"}', 404, "concert_singer"),
        ("[" * 100_000, 400, "JSON"),  # nesting too deep to parse: a RecursionError inside
        ('{"question": "x", "\\ud800": 1}', 422, "\\ud800"),  # a field no UTF-8 can hold
        ('{"question": "how many \\ud800 singers"}', 422, "question"),
        ('{"question": "How many?", "evidence": "\\udfff"}', 422, "evidence"),
    ],
)
def test_bad_requests_get_a_json_error_naming_the_field(
    client: TestClient, body: str, status: int, named: str
) -> None:
    response = client.post("/ask", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"  # never a plain-text 500
    assert named in response.json()["error"]


def test_a_question_is_measured_after_its_padding_is_cut(client: TestClient) -> None:
    padded = " " * 5000 + "How many singers are there?" + " " * 5000
    assert client.post("/ask", json={"question": padded}).status_code == 200


def test_an_oversized_body_is_refused_before_it_is_all_read(client: TestClient) -> None:
    import anyio

    from sqlweave.serve import MAX_BODY_BYTES, _BadRequest, _bounded_body

    class Streamed:  # a request whose body arrives in 1 MiB chunks, with no Content-Length
        headers: dict[str, str] = {}
        read = 0

        async def stream(self) -> Any:
            for _ in range(64):
                self.read += 1
                yield b" " * (1 << 20)

    request = Streamed()
    with pytest.raises(_BadRequest, match=str(MAX_BODY_BYTES)) as refused:
        anyio.run(_bounded_body, request)
    assert refused.value.status == 413 and request.read == 1
    declared = client.post(
        "/ask",
        content=b"{}",
        headers={"Content-Type": "application/json", "Content-Length": str(MAX_BODY_BYTES + 1)},
    )
    assert declared.status_code == 413 and str(MAX_BODY_BYTES) in declared.json()["error"]


def test_unknown_database_lists_the_known_ones(client: TestClient) -> None:
    response = client.post("/ask", json={"question": "How many?", "db": "nope"})
    assert response.status_code == 404
    assert response.json()["databases"] == ["concert_singer"]
    assert "'nope'" in response.json()["error"]


def test_only_json_is_accepted(client: TestClient) -> None:
    # A form post from another site needs no CORS preflight; the server refuses anything but JSON.
    form = client.post("/ask", data={"question": "How many?"})
    assert form.status_code == 415 and "application/json" in form.json()["error"]
    text = client.post("/ask", content='{"question": "x"}', headers={"Content-Type": "text/plain"})
    assert text.status_code == 415
    assert client.get("/ask").status_code == 405


def test_another_host_name_is_refused(client: TestClient) -> None:
    # A DNS-rebinding page reaches the loopback server under its own name.
    assert client.get("/health", headers={"Host": "evil.example"}).status_code == 400
    assert client.get("/health", headers={"Host": "localhost:8000"}).status_code == 200


def test_a_dead_model_endpoint_is_503_naming_it() -> None:
    base = f"http://127.0.0.1:{_closed_port()}/v1"
    dead = dspy.LM("openai/x", api_base=base, api_key="sk-none", num_retries=0, cache=False)
    app = create_app("direct", {"concert": DEMO_CONCERT_DB}, lm=dead)
    with _client(app) as c:
        response = c.post("/ask", json={"question": "How many singers are there?"})
        assert response.status_code == 503, response.text
        assert base in response.json()["error"] and base in response.json()["endpoint"]
        assert c.get("/health").status_code == 200  # still serving


class Failing(CompiledProgram):
    def forward(self, question: str, db: Any = None, **kwargs: Any) -> Any:
        raise RuntimeError("boom")


def test_a_program_that_raises_is_500_and_the_server_keeps_serving() -> None:
    with _client(_app(program=Failing(get("direct")))) as c:
        response = c.post("/ask", json={"question": "How many?"})
        assert response.status_code == 500
        assert response.json() == {"error": "the program failed: RuntimeError: boom"}
        assert c.get("/health").json()["status"] == "ok"


class Confident(CompiledProgram):
    """Stands in for the program that will report a confidence and alternatives (issue 62)."""

    def forward(self, question: str, db: Any = None, **kwargs: Any) -> Any:
        result = super().forward(question, db=db, **kwargs)
        result["confidence"] = 0.42
        result["low_confidence"] = True
        result["alternatives"] = [
            {
                "sql": "SELECT count(*) FROM concert",
                "columns": ["n"],
                "rows": [(6,)],
                "share": 0.25,
            },
            {"sql": "SELECT 1", "columns": ["x"], "rows": [(b"\x00\x01", float("nan"))]},
        ]
        return result


def test_confidence_and_alternatives_pass_through_as_json() -> None:
    with _client(_app(program=Confident(get("direct")))) as c:
        body = c.post("/ask", json={"question": "How many singers?"}).json()
    assert body["confidence"] == 0.42 and body["low_confidence"] is True
    first, second = body["alternatives"]
    assert first == {
        "sql": "SELECT count(*) FROM concert",
        "columns": ["n"],
        "rows": [[6]],
        "truncated": False,
        "share": 0.25,
    }
    assert second["rows"] == [["<2 bytes>", "nan"]] and second["share"] is None


# --- GET /health, /schema, / ----------------------------------------------------------------------


def test_health_names_the_program_model_and_databases(client: TestClient) -> None:
    body = client.get("/health").json()
    assert body == {
        "status": "ok",
        "program": "direct",
        "model": "dummy",
        "databases": ["concert_singer"],
        "serialized": False,
        "concurrency": 8,
    }


def test_schema_lists_tables_and_columns(client: TestClient) -> None:
    body = client.get("/schema", params={"db": "concert_singer"}).json()
    assert body["db"] == "concert_singer" and body["dialect"] == "sqlite"
    tables = {t["name"]: t for t in body["tables"]}
    assert set(tables) == {"stadium", "singer", "concert", "singer_in_concert"}
    singer = {c["name"]: c for c in tables["singer"]["columns"]}
    assert singer["Singer_ID"]["primary_key"] is True and singer["Name"]["primary_key"] is False
    assert singer["Age"]["type"]
    assert any(fk["ref_table"] == "singer" for fk in body["foreign_keys"])
    # No sampled values: the schema, not the data.
    assert "samples" not in json.dumps(body)
    assert client.get("/schema").json()["db"] == "concert_singer"  # the default database
    missing = client.get("/schema", params={"db": "nope"})
    assert missing.status_code == 404 and "concert_singer" in missing.json()["error"]


def test_the_page_is_served_self_contained(client: TestClient) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in response.headers["content-security-policy"]
    page = response.text
    assert "<title>sqlweave</title>" in page
    # Nothing from elsewhere, and no text parsed as HTML.
    assert "http://" not in page and "https://" not in page and "src=" not in page
    assert "innerHTML" not in page and "outerHTML" not in page and "insertAdjacentHTML" not in page


# --- concurrency ----------------------------------------------------------------------------------


class Counting(CompiledProgram):
    """Records how many calls run at once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0

    def forward(self, question: str, db: Any = None, **kwargs: Any) -> Any:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        try:
            time.sleep(0.3)
            return super().forward(question, db=db, **kwargs)
        finally:
            with self.lock:
                self.active -= 1


@pytest.mark.parametrize(("serialized", "bound"), [(True, 1), (False, 3)])
def test_an_in_process_model_answers_one_at_a_time(serialized: bool, bound: int) -> None:
    program = Counting(get("direct"))
    app = _app(program=program, serialized=serialized, concurrency=3)
    with _client(app) as c, ThreadPoolExecutor(6) as pool:
        answers = list(
            pool.map(lambda i: c.post("/ask", json={"question": f"How many? {i}"}), range(6))
        )
    assert [a.status_code for a in answers] == [200] * 6
    assert all(a.json()["rows"] == [[6]] for a in answers)
    if serialized:
        assert program.peak == 1
    else:
        assert 2 <= program.peak <= bound


def test_local_specs_are_in_process() -> None:
    assert in_process(None, "local:qwen2.5-coder-0.5b")
    assert in_process(None, "gguf:/models/m.gguf")
    assert not in_process(None, "openai/x")
    assert not in_process(DummyLM([]))
    app = create_app(
        "direct", {"c": DEMO_CONCERT_DB}, lm=DummyLM([]), model="local:qwen2.5-coder-0.5b"
    )
    with _client(app) as c:
        assert c.get("/health").json()["serialized"] is True


# --- construction and the command line ------------------------------------------------------------


def test_the_model_configured_after_the_app_decides_whether_questions_take_turns() -> None:
    app = create_app("direct", {"c": DEMO_CONCERT_DB})  # no lm: DSPy's, read per request
    with _client(app) as c:
        with dspy.context(lm=DummyLM([])):
            assert c.get("/health").json()["serialized"] is False
        local = DummyLM([])
        local.model = "local:qwen2.5-coder-0.5b"  # what an in-process model's spec reads
        with dspy.context(lm=local):
            health = c.get("/health").json()
    assert health["serialized"] is True and health["concurrency"] == 1


def test_an_ipv6_host_is_answered_and_printed_in_brackets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import uvicorn

    from sqlweave.serve import serve, url_of

    assert url_of("2001:db8::5", 8000) == "http://[2001:db8::5]:8000/"
    assert url_of("127.0.0.1", 8000) == "http://127.0.0.1:8000/"
    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda asgi, **kw: seen.update(kw, app=asgi))
    serve("direct", {"c": DEMO_CONCERT_DB}, lm=DummyLM([]), host="2001:db8::5")
    client = TestClient(seen["app"], base_url="http://[2001:db8::5]:8000")
    assert client.get("/health").status_code == 200


def test_database_options_are_named() -> None:
    assert parse_databases(["a.sqlite", "b=x/c.sqlite"]) == {"a": "a.sqlite", "b": "x/c.sqlite"}
    url = "postgresql://ro:pw@host/shop?sslmode=require"
    assert parse_databases([url]) == {"shop": url}
    assert parse_databases([f"s={url}"]) == {"s": url}
    with pytest.raises(ServeError, match="two databases are named 'a'"):
        parse_databases(["a.sqlite", "x/a.sqlite"])
    with pytest.raises(ServeError, match="at least one"):
        parse_databases([])


def test_create_app_checks_its_arguments() -> None:
    with pytest.raises(ServeError, match="at least one database"):
        create_app("direct", {}, lm=DummyLM([]))
    with pytest.raises(ServeError, match="concurrency"):
        create_app("direct", {"c": DEMO_CONCERT_DB}, lm=DummyLM([]), concurrency=0)
    for bad in (float("nan"), float("inf"), True, "5"):
        with pytest.raises(ServeError, match="timeout_s"):
            create_app("direct", {"c": DEMO_CONCERT_DB}, lm=DummyLM([]), timeout_s=bad)
    with pytest.raises(ServeError, match="max_rows"):
        create_app("direct", {"c": DEMO_CONCERT_DB}, lm=DummyLM([]), max_rows=True)
    with pytest.raises(ServeError, match="names"):
        create_app("direct", {"a b": DEMO_CONCERT_DB}, lm=DummyLM([]))
    db = Database.open(DEMO_CONCERT_DB, name="open")
    app = create_app(CompiledProgram(get("direct")), {"open": db}, lm=DummyLM([]))
    assert app.state.sqlweave.databases["open"] is db


def test_the_command_listens_on_loopback_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn
    from typer.testing import CliRunner

    from sqlweave.cli import app

    seen: dict[str, Any] = {}

    def fake_run(asgi: Any, **kwargs: Any) -> None:
        seen.update(kwargs, app=asgi)

    monkeypatch.setattr(uvicorn, "run", fake_run)
    args = ["serve", "--db", str(DEMO_CONCERT_DB), "--model", "openai/x"]
    args += ["--api-base", "http://127.0.0.1:9/v1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert seen["host"] == "127.0.0.1" and seen["port"] == 8000 and seen["workers"] == 1
    with _client(seen["app"]) as c:
        health = c.get("/health").json()
    assert health["model"] == "openai/x" and health["databases"] == ["concert_singer"]
    from sqlweave.programs.presets import DEFAULT_PRESET, get_preset

    assert health["serialized"] is False
    assert health["program"] == get_preset(DEFAULT_PRESET).program
    assert "--host" in CliRunner().invoke(app, ["serve", "--help"]).output
    missing = CliRunner().invoke(app, ["serve", "--db", "nope.sqlite", "--model", "openai/x"])
    assert missing.exit_code == 2 and "not found" in missing.output


# --- a real served model, 20 questions at once ----------------------------------------------------


def free_port() -> int:
    return _closed_port()


@contextlib.contextmanager
def running(app: Any) -> Iterator[str]:
    """``app`` on uvicorn on a free loopback port in a background thread; yields its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def post_json(url: str, body: dict[str, Any], timeout_s: float) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


# Questions the 0.5B answers reliably on concert_singer, with their gold SQL.
REAL_QUESTIONS = [
    ("How many singers are there?", "SELECT count(*) FROM singer"),
    ("How many concerts are there?", "SELECT count(*) FROM concert"),
    ("How many stadiums are there?", "SELECT count(*) FROM stadium"),
]

try:  # tests/test_served.py's llama.cpp server fixture, under a name of its own here
    from test_served import MODEL as SERVED_MODEL
    from test_served import server as llama_server  # noqa: F401 - a fixture
except ImportError:  # pragma: no cover
    SERVED_MODEL = "qwen2.5-coder-0.5b"


@pytest.mark.served
@pytest.mark.lm
def test_twenty_concurrent_questions_to_a_served_model(
    llama_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlweave.lm import build_lm

    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # No DSPy cache: every one of the 20 questions reaches the model server.
    lm = build_lm(f"openai/{SERVED_MODEL}", api_base=llama_server, api_key="sk-local", cache=False)
    app = create_app("direct", {"concert_singer": DEMO_CONCERT_DB}, lm=lm, concurrency=8)
    assert app.state.sqlweave.serialized is False
    gold_db = Database.open(DEMO_CONCERT_DB)
    gold = {q: sorted(gold_db.execute(sql).rows) for q, sql in REAL_QUESTIONS}
    asked = [REAL_QUESTIONS[i % len(REAL_QUESTIONS)][0] for i in range(20)]
    started = time.monotonic()
    with running(app) as base, ThreadPoolExecutor(20) as pool:
        futures = [pool.submit(post_json, f"{base}/ask", {"question": q}, 600) for q in asked]
        answers = [f.result(timeout=900) for f in futures]
    seconds = time.monotonic() - started
    assert len(answers) == 20
    wrong = []
    for question, (status, body) in zip(asked, answers, strict=True):
        rows = sorted(tuple(r) for r in body.get("rows") or [])
        if status != 200 or body.get("error") is not None or rows != gold[question]:
            wrong.append((question, status, body.get("sql"), body.get("error"), rows))
    assert not wrong, f"{len(wrong)} of 20 wrong in {seconds:.0f}s: {wrong[:3]}"


@pytest.mark.parametrize(
    ("confidence", "low", "expected"),
    [(0.42, True, True), (0.97, False, False), (None, True, None), (0.42, "yes", None)],
)
def test_low_confidence_is_the_programs_own_verdict(confidence, low, expected) -> None:
    """The page's "not sure" badge and `ask`'s mark read the same flag; the server never makes
    one up (no confidence, or a flag that is not a bool: null)."""
    from sqlweave.serve import answer_json

    result = {"sql": "SELECT 1", "confidence": confidence, "low_confidence": low}
    assert answer_json(result, "db", 0.1, 10)["low_confidence"] is expected
