"""Hostile input to the CLI (issue 19): each bad input is one line on stderr and exit code 2.

A DummyLM stands in for the model (no weights are loaded); each case is one invocation whose
whole output must be a single ``error: ...`` line, never a traceback.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM
from typer.testing import CliRunner

from sqlweave.cli import app
from sqlweave.optimizers import ArtifactMeta, save_program
from sqlweave.programs import get

runner = CliRunner()


class RaisingLM(DummyLM):
    """An LM whose every call fails, as an unreachable server does."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("connection refused by the model server\nwith a second line")


@pytest.fixture()
def lm(monkeypatch: pytest.MonkeyPatch):
    """``--model`` resolves to ``lm["lm"]`` (a DummyLM answering a count by default)."""
    holder: dict[str, Any] = {"lm": DummyLM({"": {"sql": "SELECT count(*) FROM singer"}})}

    def fake_configure(model: str, **options: object) -> Any:
        dspy.configure(lm=holder["lm"])
        return holder["lm"]

    monkeypatch.setattr("sqlweave.lm.configure", fake_configure)
    yield holder
    dspy.configure(lm=None)


def one_line_error(args: list[str], expected: str) -> str:
    result = runner.invoke(app, args)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert expected in lines[0], lines[0]
    return lines[0]


# --- databases -----------------------------------------------------------------------------


def test_corrupted_sqlite_file(lm: dict, demo_concert_db: Path, tmp_path: Path) -> None:
    bad = tmp_path / "corrupt.sqlite"
    bad.write_bytes(demo_concert_db.read_bytes()[:4096] + os.urandom(3000))
    one_line_error(["ask", "How many?", "--db", str(bad)], "corrupt")
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_text("not a database at all")
    one_line_error(["ask", "How many?", "--db", str(garbage)], "not a SQLite database")


@pytest.mark.parametrize("url", ["notaurl://x::", "postgresql://u@h:notaport/db"])
def test_malformed_db_url(lm: dict, url: str) -> None:
    one_line_error(["ask", "How many?", "--db", url], "error: ")


@pytest.mark.postgres
def test_superuser_url_is_refused_unless_allowed(lm: dict) -> None:
    url = os.environ.get("SQLWEAVE_PG_SUPER_URL")
    if not url:
        pytest.skip('SQLWEAVE_PG_SUPER_URL is not set (run: eval "$(.ci/postgres.sh)")')
    one_line_error(["ask", "How many?", "--db", url], "pass --allow-superuser")
    lm["lm"] = DummyLM({"": {"sql": "SELECT 1 AS one"}})
    result = runner.invoke(app, ["ask", "How many?", "--db", url, "--allow-superuser"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:3] == ["SELECT 1 AS one", "one", "1"]


def test_unopenable_database_in_a_questions_file_is_refused_by_the_command(
    lm: dict, tmp_path: Path
) -> None:
    """The command refuses the file before the model loads (a run of flagged misses that
    exits 0 reads as a score); the library's ``evaluate`` records each as a flagged miss."""
    from sqlweave.benchmarks import load_questions
    from sqlweave.evaluate import evaluate

    bad = tmp_path / "corrupt.sqlite"
    bad.write_bytes(b"SQLite format 3\x00" + os.urandom(5000))
    questions = tmp_path / "q.json"
    questions.write_text(
        json.dumps([{"question": "How many?", "query": "SELECT 1", "db_path": str(bad)}])
    )
    out = tmp_path / "r.jsonl"
    args = ["evaluate", "--dataset", str(questions), "--n", "0", "--out", str(out), "--no-progress"]
    one_line_error(args, "names a database that does not open")
    summary = evaluate(lambda **_: "SELECT 1", load_questions(questions), out_path=None)
    (record,) = summary["records"]
    assert record["correct"] is False and "SQLite" in record["gold_error"]


# --- questions and evaluation options ------------------------------------------------------


def test_failing_gold_is_a_flagged_miss_by_default(
    lm: dict, demo_concert_db: Path, tmp_path: Path
) -> None:
    questions = tmp_path / "q.json"
    questions.write_text(
        json.dumps(
            [
                {"question": "How many singers?", "query": "SELECT count(*) FROM singer"},
                {"question": "Broken gold?", "query": "SELECT nope FROM nowhere"},
            ]
        ).replace("}", f', "db_path": "{demo_concert_db}"}}')
    )
    out = tmp_path / "r.jsonl"
    args = ["evaluate", "--dataset", str(questions), "--n", "0", "--out", str(out), "--no-progress"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "EX 50.0" in result.output and "1 gold query could not be compared" in result.output
    one_line_error([*args, "--strict-gold", "--no-resume"], "gold query failed")


def test_negative_n(lm: dict, spider_root: Path) -> None:
    one_line_error(
        ["evaluate", "--data-root", str(spider_root), "--n", "-5", "--no-progress"],
        "--n must be a positive number",
    )


def test_negative_max_rows(lm: dict, demo_concert_db: Path) -> None:
    one_line_error(
        ["ask", "How many?", "--db", str(demo_concert_db), "--max-rows", "-5"],
        "--max-rows must be at least 1",
    )


def test_zero_threads(lm: dict, spider_root: Path) -> None:
    one_line_error(
        ["evaluate", "--data-root", str(spider_root), "--threads", "0", "--no-progress"],
        "--threads must be at least 1",
    )


@pytest.mark.parametrize("kind", ["directory", "under_a_file", "device"])
def test_out_that_cannot_be_written(lm: dict, spider_root: Path, tmp_path: Path, kind: str) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = {"directory": tmp_path, "under_a_file": blocker / "x.jsonl", "device": Path("/dev/null")}
    message = {"directory": "is a directory", "under_a_file": "cannot write", "device": "regular"}
    args = ["--data-root", str(spider_root), "--n", "2", "--no-progress", "--out", str(out[kind])]
    one_line_error(["evaluate", *args], message[kind])


@pytest.mark.parametrize("baseline", ["/dev/zero", "folder"])
def test_baseline_that_is_not_a_file(
    lm: dict, spider_root: Path, tmp_path: Path, baseline: str
) -> None:
    path = tmp_path if baseline == "folder" else Path(baseline)
    one_line_error(
        ["evaluate", "--data-root", str(spider_root), "--n", "2", "--no-progress"]
        + ["--baseline", str(path), "--out", str(tmp_path / "r.jsonl")],
        "is not a regular file",
    )


def test_out_on_a_full_disk_after_start(
    lm: dict, spider_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("sqlweave.evaluate.os.fsync", no_space)
    one_line_error(
        ["evaluate", "--data-root", str(spider_root), "--n", "2", "--no-progress"]
        + ["--out", str(tmp_path / "r.jsonl")],
        "No space left on device",
    )


# --- switches ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("switch", "expected"),
    [
        ("samples=many", "switch samples expects an integer, got 'many'"),
        ("samples=2.5", "switch samples expects an integer, got '2.5'"),
        ("temperature=hot", "switch temperature expects a number, got 'hot'"),
        ("temperature=nan", "switch temperature expects a number, got 'nan'"),
        ("cell_values=maybe", "switch cell_values expects true or false, got 'maybe'"),
        ("pool=x", "switch pool of pet takes a Python object"),
        ("bogus=1", "unknown switch 'bogus' for program pet"),
        ("novalue", "--set needs key=value"),
    ],
)
def test_typed_switches(lm: dict, demo_concert_db: Path, switch: str, expected: str) -> None:
    one_line_error(
        ["ask", "How many?", "--db", str(demo_concert_db), "-p", "pet", "--set", switch], expected
    )


def test_naive_takes_no_switches(lm: dict, demo_concert_db: Path) -> None:
    """The reference prompt has none: a typo'd switch is refused, not stored and ignored."""
    from sqlweave import programs

    one_line_error(
        ["ask", "How many?", "--db", str(demo_concert_db), "-p", "naive", "--set", "sampels=4"],
        "unknown switch 'sampels' for program naive; its switches: none",
    )
    with pytest.raises(TypeError, match="sampels"):
        programs.get("naive", sampels=4)
    assert programs.get("naive").switches == {}


def test_switches_are_converted_to_their_declared_type(monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlweave.cli import typed_switches

    assert typed_switches("pet", ["samples=3", "temperature=1", "cell_values=false"]) == {
        "samples": 3,
        "temperature": 1.0,
        "cell_values": False,
    }
    # A string switch keeps the text as given, even when it reads as a number.
    assert typed_switches("direct", ["schema_layout=123"]) == {"schema_layout": "123"}
    # A program that takes **switches (a user's own, registered) gets the generic reading.
    from sqlweave import programs
    from sqlweave.programs.base import SQLProgram

    class Loose(SQLProgram):
        name = "loose"

    monkeypatch.setattr(programs, "PROGRAMS", programs.PROGRAMS.copy())
    programs.register("loose", Loose)
    assert typed_switches("loose", ["x=2"]) == {"x": 2}


# --- compile -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [("--max-demos", "-2"), ("--n-train", "-3"), ("--budget", "-1"), ("--candidates", "-1")],
)
def test_negative_compile_numbers(lm: dict, tmp_path: Path, option: str, value: str) -> None:
    one_line_error(
        ["compile", option, value, "--out", str(tmp_path / "c.json"), "--no-progress"],
        f"{option} must be 0 or more, not {value}",
    )


def test_compile_out_is_a_directory(lm: dict, tmp_path: Path) -> None:
    one_line_error(["compile", "--out", str(tmp_path), "--no-progress"], "is a directory")


# --- artefacts -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("knn", "expected"),
    [
        ({"k": 2, "pool": [1, 2]}, "'knn.pool' item 0 is not an object"),
        ({"k": 2, "pool": [{"demos": {}}]}, "has no string 'question'"),
        ({"k": 2, "pool": [{"question": "q", "demos": "x"}]}, "'demos' must be an object"),
        ({"k": 2, "pool": [{"question": "q", "demos": {"generate": 5}}]}, "is not an object"),
        ({"k": 2, "pool": [{"question": "q", "demos": {"nope": {}}}]}, "demos for ['nope']"),
        ({"k": -1, "pool": []}, "'knn.k' must be a number of demos"),
        ({"k": True, "pool": []}, "'knn.k' must be a number of demos"),
        ({"k": 2, "pool": "abc"}, "'knn' needs an int k and a pool"),
    ],
)
def test_artifact_with_a_malformed_pool(
    lm: dict, demo_concert_db: Path, tmp_path: Path, knn: dict, expected: str
) -> None:
    path = save_program(get("direct"), tmp_path / "p.json", ArtifactMeta(program="direct"))
    payload = json.loads(path.read_text())
    payload["knn"] = knn
    path.write_text(json.dumps(payload))
    line = one_line_error(
        ["ask", "How many?", "--db", str(demo_concert_db), "-p", str(path)], expected
    )
    assert "corrupted or incompatible" in line


# --- the model -----------------------------------------------------------------------------


def test_lm_that_raises_during_ask(lm: dict, demo_concert_db: Path) -> None:
    lm["lm"] = RaisingLM([])
    line = one_line_error(
        ["ask", "How many?", "--db", str(demo_concert_db)], "the program failed: RuntimeError"
    )
    assert "connection refused by the model server" in line and "second line" not in line


def test_lm_that_raises_during_evaluate_is_recorded(
    lm: dict, spider_root: Path, tmp_path: Path
) -> None:
    lm["lm"] = RaisingLM([])
    out = tmp_path / "r.jsonl"
    result = runner.invoke(
        app,
        [
            "evaluate",
            "--data-root",
            str(spider_root),
            "--n",
            "2",
            "--out",
            str(out),
            "--no-progress",
        ],
    )
    # A failure of the program (not a dead endpoint: a RuntimeError says nothing of one) is
    # each question's miss; the run says how many and exits non-zero (issue 35).
    assert result.exit_code == 1, result.output
    assert "EX 0.0" in result.output
    assert "2 of 2 questions failed outside their SQL (RuntimeError x2)" in result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["error_kind"] == "program" and "connection refused" in r["error"] for r in records)


@pytest.mark.parametrize(
    ("name", "message"), [("graph", "needs a draft SQL"), ("bogus", "unknown retriever")]
)
def test_pet_refuses_a_retriever_it_cannot_use_when_built(name: str, message: str) -> None:
    """Found by review: it built, then failed at every question."""
    from sqlweave.programs import get

    with pytest.raises(ValueError, match=message):
        get("pet", retriever=name)
