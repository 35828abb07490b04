"""CLI error paths that need no model: clear messages, exit code 2, no traceback."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from sqlweave.cli import app

runner = CliRunner()


def test_ask_with_missing_database_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["ask", "How many?", "--db", str(tmp_path / "nope.sqlite")])
    assert result.exit_code == 2
    assert "SQLite database not found" in result.output
    assert "Traceback" not in result.output


def test_inspect_corrupted_artifact_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "compiled.json"
    bad.write_text('{"format": "sqlweave-program", "format_ver')
    result = runner.invoke(app, ["inspect", str(bad)])
    assert result.exit_code == 2
    assert "is not a sqlweave program file" in result.output


def test_inspect_of_hand_edited_provenance_is_a_clear_error(tmp_path: Path) -> None:
    import json

    from sqlweave.api import CompiledProgram
    from sqlweave.programs import get

    path = CompiledProgram(get("direct")).save(tmp_path / "direct.json")
    payload = json.loads(path.read_text())
    payload["meta"]["extra"]["details"] = {"search": {"space": {"samples": 5}, "trials": [1]}}
    path.write_text(json.dumps(payload))
    result = runner.invoke(app, ["inspect", str(path)])
    assert result.exit_code == 2, result.output
    assert "provenance is malformed" in result.output and "Traceback" not in result.output


def test_unknown_program_is_a_clear_error(tmp_path: Path) -> None:
    db = (
        Path(__file__).resolve().parents[1]
        / "sqlweave"
        / "demo"
        / "spider"
        / "database"
        / "pets_1"
        / "pets_1.sqlite"
    )
    result = runner.invoke(app, ["ask", "How many pets?", "--db", str(db), "--program", "nope"])
    assert result.exit_code == 2
    assert "unknown program 'nope'" in result.output


# --- commands with a DummyLM in place of the real model ------------------------------------

import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402

import pytest  # noqa: E402
import typer  # noqa: E402
from conftest import DEMO_ROOT  # noqa: E402
from dspy.utils import DummyLM  # noqa: E402

from sqlweave.cli import parse_switches  # noqa: E402


def test_set_values_are_typed() -> None:
    assert parse_switches(["a=true", "b=False", "c=3", "d=-2", "e=0.5", "f=ddl", "g=1e3"]) == {
        "a": True,
        "b": False,
        "c": 3,
        "d": -2,
        "e": 0.5,
        "f": "ddl",
        "g": 1000.0,
    }


def test_unknown_switch_is_a_clear_error(dummy_model: dict, demo_concert_db: Path) -> None:
    dummy_model["lm"] = DummyLM([])
    result = runner.invoke(
        app, ["ask", "How many?", "--db", str(demo_concert_db), "--set", "bogus=1"]
    )
    assert result.exit_code == 2 and "bogus" in result.output and "Traceback" not in result.output


def test_compile_inspect_ask_evaluate(
    dummy_model: dict, spider_root: Path, tmp_path: Path, demo_concert_db: Path
) -> None:
    dummy_model["lm"] = DummyLM({"": {"sql": "SELECT count(*) FROM singer"}})
    out = tmp_path / "direct.json"
    result = runner.invoke(
        app,
        [
            "compile",
            "--program",
            "direct",
            "--optimizer",
            "labeled",
            "--train",
            "spider",
            "--data-root",
            str(spider_root),
            "--n-train",
            "6",
            "--max-demos",
            "2",
            "--out",
            str(out),
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    # Validation defaults to spider-train-val (unseen databases), so all 6 stay for training.
    assert "compiled direct with labeled on 6 train examples" in result.output
    assert "validation EX" in result.output and "(n=20)" in result.output and out.is_file()

    result = runner.invoke(app, ["inspect", str(out)])
    assert result.exit_code == 0, result.output
    # The summary leads: provenance, then what compiling changed; no raw JSON without --json.
    lines = result.output.splitlines()
    assert lines[0].startswith("direct compiled with labeled on 6 train examples")
    assert lines[1].startswith("validation EX 0.0% (n=20) on spider-train-val")
    assert lines[3] == "what compile changed:"
    assert "  [generate] instructions unchanged" in lines[4:8]
    assert "  [generate] demos: 0 -> 2 (+2)" in lines[4:8]
    assert '"optimizer"' not in result.output
    result = runner.invoke(app, ["inspect", str(out), "--json"])
    assert result.exit_code == 0, result.output
    raw = json.loads(result.output)
    assert raw["optimizer"] == "labeled" and raw["versions"]["dspy"] and raw["val_ex_pct"] == 0.0

    result = runner.invoke(
        app,
        ["ask", "How many singers are there?", "--db", str(demo_concert_db), "--program", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:3] == ["SELECT count(*) FROM singer", "count(*)", "6"]

    records = tmp_path / "eval.jsonl"
    result = runner.invoke(
        app,
        [
            "evaluate",
            "--program",
            str(out),
            "--dataset",
            "spider",
            "--data-root",
            str(spider_root),
            "--n",
            "3",
            "--out",
            str(records),
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "on 3 questions" in result.output and len(records.read_text().splitlines()) == 3


def test_compile_stops_at_the_budget(dummy_model: dict, spider_root: Path, tmp_path: Path) -> None:
    dummy_model["lm"] = DummyLM({"": {"sql": "SELECT 1"}})
    result = runner.invoke(
        app,
        [
            "compile",
            "--optimizer",
            "bootstrap",
            "--budget",
            "2",
            "--data-root",
            str(spider_root),
            "--n-train",
            "8",
            "--out",
            str(tmp_path / "b.json"),
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "2 of 2 LM calls (budget reached: best so far kept)" in result.output


def test_compile_rejects_unknown_optimizer(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["compile", "--optimizer", "nope", "--out", str(tmp_path / "x.json")]
    )
    assert result.exit_code == 2 and "unknown optimizer 'nope'" in result.output


def test_gnn_unavailable_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sqlweave.gnn.cli", None)  # import fails
    result = runner.invoke(app, ["gnn", "train"])
    assert result.exit_code == 2
    assert "the gnn commands are not available" in result.output
    assert "Traceback" not in result.output
    assert runner.invoke(app, ["--help"]).exit_code == 0  # the rest of the CLI still works


def test_gnn_delegates_to_the_sub_app(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("sqlweave.gnn.cli")
    fake.app = typer.Typer()

    @fake.app.command()
    def hello(name: str = "x") -> None:
        typer.echo(f"hello {name}")

    @fake.app.command()
    def other() -> None:
        typer.echo("other")

    monkeypatch.setitem(sys.modules, "sqlweave.gnn.cli", fake)
    result = runner.invoke(app, ["gnn", "hello", "--name", "graph"])
    assert result.exit_code == 0 and "hello graph" in result.output


SLOW_CLI = """
import sys, time
import dspy
from dspy.utils import DummyLM
import sqlweave.lm

class SlowLM(DummyLM):
    def _format_answer_fields(self, fields):
        time.sleep(0.5)
        return super()._format_answer_fields(fields)

LM = SlowLM({"": {"sql": "SELECT count(*) FROM singer"}})

def configure(model, **options):
    dspy.configure(lm=LM)
    return LM

sqlweave.lm.configure = configure
from sqlweave.cli import app
try:
    app(sys.argv[1:])
finally:
    print(f"LM_CALLS={len(LM.history)}", file=sys.stderr)
"""


def test_evaluate_killed_mid_run_resumes_without_gaps_or_repeats(
    spider_root: Path, tmp_path: Path
) -> None:
    records = tmp_path / "run.jsonl"
    n = 10
    cmd = [
        sys.executable,
        "-c",
        SLOW_CLI,
        "evaluate",
        "--dataset",
        "spider",
        "--data-root",
        str(spider_root),
        "--n",
        str(n),
        "--out",
        str(records),
        "--no-progress",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if records.exists() and len(records.read_bytes().splitlines()) >= 3:
                break
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    before = [
        json.loads(line)["question_id"] for line in records.read_text().splitlines() if line.strip()
    ]
    assert 3 <= len(before) < n

    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    ids = [json.loads(line)["question_id"] for line in records.read_text().splitlines()]
    assert len(ids) == n and len(set(ids)) == n  # every question exactly once
    assert ids[: len(before)] == before  # finished records were kept, not redone
    calls = int(done.stderr.rsplit("LM_CALLS=", 1)[1].split()[0])
    from sqlweave.programs.presets import DEFAULT_PRESET, get_preset

    # one batched call per prompt of the default preset, for each unfinished question only
    # (the cascade's probe is a sample: drawn on a copy of the model, not in its history)
    prompts = get_preset(DEFAULT_PRESET).prompts
    assert calls == prompts * (n - len(before))  # only the unfinished ones (in flight included)


def test_demo_compiles_by_switch_search_evaluates_beside_naive_and_asks(
    dummy_model: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # demo pools from the bundle, as on a fresh install
    monkeypatch.setenv("SQLWEAVE_DATA", str(DEMO_ROOT))
    dummy_model["lm"] = DummyLM({"": {"sql": "SELECT count(*) FROM singer"}})
    work = tmp_path / "demo"
    args = ["demo", "--workdir", str(work), "--data-root", str(DEMO_ROOT)]
    result = runner.invoke(app, [*args, "--n-dev", "3", "--n-val", "2"])
    assert result.exit_code == 0, result.output
    from sqlweave.programs.presets import DEFAULT_PRESET, get_preset

    preset = get_preset(DEFAULT_PRESET)
    assert f"compiled {preset.program} with search" in result.output
    assert "chose samples=" in result.output  # the switch search ran and said what it chose
    # one table: the compiled program beside naive on the same questions, paired
    assert "| naive | 3 |" in result.output and "paired on 3 questions" in result.output
    assert "McNemar p" in result.output and "4/4 ask the saved program" in result.output
    meta = json.loads((work / f"{DEFAULT_PRESET}.json").read_text())["meta"]
    assert meta["optimizer"] == "search" and meta["switches"]["samples"] in (
        1,
        preset.switches["samples"],
    )
    assert meta["extra"]["preset"] == DEFAULT_PRESET  # the preset travels with the artefact
    assert (work / "naive-dev-n3-x.jsonl").exists() or list(work.glob("naive-dev-n3-*.jsonl"))


def test_programs_lists_programs_switches_and_stages() -> None:
    result = runner.invoke(app, ["programs"])
    assert result.exit_code == 0, result.output
    # one line per program: name, paper, what it does
    assert any(line.split()[:2] == ["pet", "PET-SQL"] for line in result.output.splitlines())
    assert "linker=" not in result.output
    result = runner.invoke(app, ["programs", "--switches"])
    assert result.exit_code == 0, result.output
    assert "linker=tables" in result.output
    assert "linker: bidirectional, columns, forward, none, tables, values" in result.output
    assert "corrector:" in result.output and "mage" in result.output
