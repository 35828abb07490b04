"""Bad input to the commands: a one-line error and exit 2, nothing of the user's overwritten
(each case found by a review of the CLI, each failing before its fix)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DEMO_CONCERT_DB
from typer.testing import CliRunner

from sqlweave.cli import app

runner = CliRunner()
DEAD = ["--model", "openai/x", "--api-base", "http://127.0.0.1:9/v1"]


def _records(path: Path, usage: object = None) -> Path:
    record = {
        "question_id": "1",
        "db_id": "concert_singer",
        "question": "How many singers?",
        "gold_sql": "SELECT count(*) FROM singer",
        "pred_sql": "SELECT count(*) FROM singer",
        "correct": True,
        "usage": usage,
    }
    path.write_text(json.dumps(record) + "\n")
    return path


def _clean(result) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


def test_report_refuses_to_write_over_one_of_its_runs(tmp_path: Path) -> None:
    run = _records(tmp_path / "r1.jsonl")
    before = run.read_text()
    _clean(runner.invoke(app, ["report", str(run), "--out", str(run)]))
    assert run.read_text() == before


@pytest.mark.parametrize("usage", ["x", [1], {"calls": "many"}])
def test_report_reads_records_whose_usage_is_no_object(tmp_path: Path, usage: object) -> None:
    pytest.importorskip("matplotlib")
    run = _records(tmp_path / "r1.jsonl", usage)
    result = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output


def test_a_checkpoint_path_holding_another_file_is_refused_and_kept(tmp_path: Path) -> None:
    from sqlweave.optimizers.checkpoint import Checkpoint

    precious = tmp_path / "questions.jsonl"
    precious.write_text('{"question": "How many?"}\n')
    with pytest.raises(ValueError, match="not a compile checkpoint"):
        Checkpoint(precious, {"a": 1})
    assert precious.read_text() == '{"question": "How many?"}\n'
    with pytest.raises(ValueError, match="is a folder"):
        Checkpoint(tmp_path, {"a": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["questions.jsonl"]  # no .tmp left


def test_synthesize_with_a_dead_endpoint_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "pairs.jsonl"
    args = ["synthesize", "--db", str(DEMO_CONCERT_DB), "--n", "2", "--out", str(out), *DEAD]
    result = runner.invoke(app, args)
    assert result.exit_code in (1, 2), result.output
    assert "Traceback" not in result.output and "127.0.0.1:9" in result.output


def test_synthesize_refuses_an_out_file_that_holds_no_pairs(tmp_path: Path) -> None:
    out = tmp_path / "arr.jsonl"
    out.write_text('[1, 2]\n"x"\n')
    args = ["synthesize", "--db", str(DEMO_CONCERT_DB), "--n", "2", "--out", str(out), *DEAD]
    _clean(runner.invoke(app, args))
    assert out.read_text() == '[1, 2]\n"x"\n'


def test_demo_checks_its_options_before_it_compiles(tmp_path: Path) -> None:
    _clean(runner.invoke(app, ["demo", "--n-dev", "0", "--workdir", str(tmp_path), *DEAD]))
    afile = tmp_path / "afile"
    afile.write_text("")
    _clean(runner.invoke(app, ["demo", "--workdir", str(afile), *DEAD]))


def test_models_fetch_into_a_file_is_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    args = ["models", "fetch", "qwen2.5-coder-0.5b", "--cache-dir", str(afile / "x")]
    _clean(runner.invoke(app, args))


def test_a_missing_baseline_is_refused_before_the_run(tmp_path: Path) -> None:
    args = ["evaluate", "-p", "direct", "--n", "1", "--baseline", str(tmp_path / "nope.jsonl")]
    result = runner.invoke(app, [*args, *DEAD])
    _clean(result)
    assert "--baseline" in result.output and "not found" in result.output


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_ensemble_refuses_a_temperature_that_is_no_temperature(value: str) -> None:
    from sqlweave.programs import get

    with pytest.raises(ValueError, match="temperature"):
        get("ensemble", temperature=float(value))


def test_a_questions_file_with_a_bom_reads(tmp_path: Path) -> None:
    from sqlweave.benchmarks import load_questions

    item = {"question": "How many singers?", "db_path": str(DEMO_CONCERT_DB)}
    for name, text in (("q.json", json.dumps([item])), ("q.jsonl", json.dumps(item) + "\n")):
        path = tmp_path / name
        path.write_bytes(b"\xef\xbb\xbf" + text.encode())
        assert load_questions(path)[0].question == "How many singers?"
    bad = tmp_path / "latin.jsonl"
    bad.write_bytes(b'{"question": "caf\xe9"}\n')
    with pytest.raises(Exception, match="latin.jsonl.*not UTF-8"):
        load_questions(bad)


@pytest.mark.parametrize("program", ["direct", "ensemble"])
def test_a_number_of_samples_that_never_finishes_is_refused(program: str) -> None:
    from sqlweave.programs import get

    with pytest.raises(ValueError, match="samples must be at most"):
        get(program, samples=10**20)
    args = ["ask", "How many singers?", "--db", str(DEMO_CONCERT_DB), "-p", program]
    _clean(runner.invoke(app, [*args, "--set", "samples=100000000", *DEAD]))


def test_evaluate_refuses_a_questions_file_whose_database_does_not_open(tmp_path: Path) -> None:
    """Each question would otherwise be a flagged miss and the run exit 0 with EX 0.0, which
    reads as a score; the model is not loaded (the endpoint here is dead)."""
    broken = tmp_path / "shop.sqlite"
    broken.write_bytes(b"this is no database" * 100)
    item = {"question": "How many?", "query": "SELECT 1", "db_path": str(broken)}
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps(item) + "\n")
    out = tmp_path / "run.jsonl"
    result = runner.invoke(app, ["evaluate", "-d", str(questions), "--out", str(out), *DEAD])
    _clean(result)
    assert "does not open" in result.output and "shop.sqlite" in result.output
    assert not out.exists() or not out.read_text()


def test_a_questions_file_says_which_line_repeats_an_id_or_is_no_list(tmp_path: Path) -> None:
    """Found by review: a repeated id surfaced after the model loaded, naming no file; a
    pretty-printed JSON object read as 'line 1 is not valid JSON'; JSON Lines errors named
    0-based items instead of lines; deep nesting raised RecursionError."""
    from sqlweave.benchmarks import load_questions
    from sqlweave.data import DataError

    def item(**extra: object) -> str:
        return json.dumps({"question": "How many?", "db_path": str(DEMO_CONCERT_DB), **extra})

    cases = {
        "dup.jsonl": (
            f"{item(question_id='a')}\n\n{item(question_id='a')}\n",
            "line 3: .*'a' repeats line 1",
        ),
        "mixed.jsonl": (f"{item(question_id=1)}\n{item(question_id='1')}\n", "'1' repeats line 1"),
        "object.json": (json.dumps({"questions": []}, indent=1), "got one JSON dict over several"),
        "field.jsonl": (f"{item()}\n\n\n" + json.dumps({"question": "x"}) + "\n", "line 4 needs"),
        "deep.jsonl": ('{"q": ' + "[" * 100_000, "line 1 .*nested too deeply"),
        "deep.json": ("[" * 100_000, "nested too deeply"),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(DataError, match=message):
            load_questions(path)
    listed = tmp_path / "listed.json"
    listed.write_text(json.dumps([json.loads(item()), {"question": "x"}]))
    with pytest.raises(DataError, match="item 1 needs"):
        load_questions(listed)


def test_ctrl_c_in_compile_says_how_to_resume(tmp_path: Path, monkeypatch) -> None:
    """Found by review: it exited 130 with no word; evaluate already said how to resume."""
    from conftest import DEMO_ROOT

    from sqlweave.compile_plan import Compile

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(Compile, "run", interrupted)
    out, ckpt = tmp_path / "c.json", tmp_path / "c.ckpt.json"
    args = ["compile", "--n-train", "4", "--out", str(out), "--checkpoint", str(ckpt)]
    args += ["--data-root", str(DEMO_ROOT), *DEAD, "--no-progress"]
    result = runner.invoke(app, args)
    assert result.exit_code == 130, result.output
    assert "interrupted" in result.output and str(ckpt) in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["evaluate", "-d", "{dir}", *DEAD], "is a folder, not a questions file"),
        (["ask", "How many?", "--db", "{dir}", *DEAD], "is a folder, not a SQLite database file"),
        (["inspect", "{dir}"], "is a folder, not a compiled program file"),
    ],
)
def test_a_folder_given_for_a_file_is_named_as_one(tmp_path: Path, args, message) -> None:
    """Found by review: each said "not found" (or Errno 21) of a path that exists."""
    result = runner.invoke(app, [a.format(dir=tmp_path) for a in args])
    _clean(result)
    assert message in result.output


def test_a_run_stopped_before_its_first_question_leaves_no_records_file(tmp_path: Path) -> None:
    """Found by review: --out was made empty when checked, and stayed so after a later error."""
    item = {"question": "How many?", "db_path": str(DEMO_CONCERT_DB)}
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps(item) + "\n")
    out = tmp_path / "runs" / "e.jsonl"
    args = ["evaluate", "-d", str(questions), "--out", str(out), "--model", "nosuchprovider/x"]
    _clean(runner.invoke(app, args))
    assert not out.exists()


def test_synthesize_quiet_draws_no_progress_bar(tmp_path: Path, monkeypatch) -> None:
    """Found by review: -q ("no progress bars") still drew synthesis's bar."""
    from sqlweave.synthesis import pairs

    seen = {}

    def fake(database, n, **options):
        seen.update(options)
        return []

    monkeypatch.setattr(pairs, "synthesize", fake)
    out = tmp_path / "p.jsonl"
    args = ["synthesize", "--db", str(DEMO_CONCERT_DB), "--n", "2", "--out", str(out), *DEAD]
    runner.invoke(app, [*args, "-q"])
    assert seen["progress"] is False


def test_ask_refuses_an_empty_question() -> None:
    """Found by review: the blank question went to the model and came back answered."""
    result = runner.invoke(app, ["ask", "  ", "--db", str(DEMO_CONCERT_DB), *DEAD])
    _clean(result)
    assert "the question is empty" in result.output
