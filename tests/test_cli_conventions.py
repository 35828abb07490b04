"""CLI conventions (issue 39): -h, --version, quiet logging, --json, one spelling per option,
switch types read with typing.get_type_hints, and help text without RST markup."""

from __future__ import annotations

import json
import logging
import re
import typing
from pathlib import Path

import dspy
import pytest
import typer
from dspy.utils import DummyLM
from typer.testing import CliRunner

from sqlweave import logs
from sqlweave.cli import PROGRAM_CARDS, _scalar_of, app, switch_types, typed_switches

runner = CliRunner()


@pytest.fixture(autouse=True)
def _restore_logging():
    """Each test's logging set-up is undone: other tests read the default configuration."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {n: logging.getLogger(n).level for n in (*logs.THIRD_PARTY, *logs.DETAIL_LOGGERS)}
    yield
    logs._hub_progress_bars(True)
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, lv in levels.items():
        logging.getLogger(name).setLevel(lv)


def test_version_and_short_help() -> None:
    from sqlweave import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"sqlweave {__version__}"
    for args in (
        ["-h"],
        ["evaluate", "-h"],
        ["models", "-h"],
        ["gnn", "-h"],
        ["gnn", "train", "-h"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 0 and "Usage:" in result.output, args


def test_help_has_no_rst_markup_and_names_gnn_commands() -> None:
    from sqlweave.gnn.cli import app as gnn_app

    root = runner.invoke(app, ["-h"]).output
    gnn_commands = [c.name or c.callback.__name__ for c in gnn_app.registered_commands]
    assert gnn_commands and all(name in root for name in gnn_commands)
    assert "embed" not in root
    for command in ("ask", "evaluate", "compile", "inspect", "report", "programs", "demo"):
        text = runner.invoke(app, [command, "-h"]).output
        assert "``" not in text and ":func:" not in text, command


def test_one_spelling_per_option() -> None:
    text = runner.invoke(app, ["evaluate", "-h"]).output
    assert "--lm-threads" in text and "--n-threads" not in text  # the old name is hidden
    compile_help = runner.invoke(app, ["compile", "-h"], terminal_width=200).output
    # defaults that say what they are, and the same as the Python API's
    from sqlweave.api import DEFAULT_MAX_DEMOS, DEFAULT_N_VAL, compile

    # --n-val's default depends on the optimizer (a search alone on synthesized pairs: all)
    assert re.search(rf"--n-val\s.*\(default {DEFAULT_N_VAL};", compile_help)
    assert re.search(rf"--max-demos\s.*\[default: {DEFAULT_MAX_DEMOS}\]", compile_help)
    import inspect

    assert inspect.signature(compile).parameters["max_demos"].default == DEFAULT_MAX_DEMOS


def test_old_n_threads_still_reaches_the_engine(
    dummy_model: dict, spider_root: Path, tmp_path: Path
) -> None:
    dummy_model["lm"] = DummyLM({"": {"sql": "SELECT 1"}})
    args = ["evaluate", "--data-root", str(spider_root), "--n", "1", "--no-progress"]
    args += ["--model", "local:qwen2.5-coder-0.5b", "--out", str(tmp_path / "r.jsonl")]
    result = runner.invoke(app, [*args, "--n-threads", "1"])
    assert result.exit_code == 0, result.output
    assert dummy_model["options"] == {"n_threads": 1}
    result = runner.invoke(app, [*args, "--lm-threads", "0"])
    assert result.exit_code == 2 and "--lm-threads must be at least 1" in result.output


def test_ask_json(dummy_model: dict, demo_concert_db: Path) -> None:
    dummy_model["lm"] = DummyLM([{"sql": "SELECT count(*) AS n FROM singer"}])
    result = runner.invoke(
        app, ["ask", "How many singers?", "--db", str(demo_concert_db), "--json"]
    )
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    from sqlweave.confidence import packaged_threshold

    confidence = answer.pop("confidence")
    assert 0.0 <= confidence <= 1.0  # the pool's calibrated confidence (tests/test_confidence.py)
    assert answer == {
        "sql": "SELECT count(*) AS n FROM singer",
        "columns": ["n"],
        "rows": [[6]],
        "truncated": False,
        "error": None,
        "low_confidence": confidence < packaged_threshold(),
        "alternatives": [],
        "caveats": [],
    }
    dummy_model["lm"] = DummyLM([{"sql": "SELECT zzzq FROM nowhere_table"}])
    result = runner.invoke(app, ["ask", "Names?", "--db", str(demo_concert_db), "--json"])
    assert result.exit_code == 1
    failed = json.loads(result.output)
    assert failed["rows"] == [] and failed["error"]["kind"] and failed["error"]["message"]


def test_evaluate_json_in_percent(dummy_model: dict, spider_root: Path, tmp_path: Path) -> None:
    dummy_model["lm"] = DummyLM({"": {"sql": "SELECT 1"}})
    out = tmp_path / "r.jsonl"
    result = runner.invoke(
        app,
        ["evaluate", "--data-root", str(spider_root), "--n", "2", "--out", str(out), "--json"],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)  # nothing but the object: no progress bar, no log line
    assert summary["n"] == 2 and summary["records"] == str(out)
    assert 0 <= summary["ex_pct"] <= 100 and len(summary["ci95_pct"]) == 2
    # what the text prints too (found by review: --json had left both out)
    assert summary["failed"] == {"n": 0, "reasons": {}}
    assert {"auroc", "ece"} <= set(summary["confidence"])
    # The commit that made the records sits beside the run identity, for the report.
    from sqlweave import __version__
    from sqlweave.report import read_provenance

    sidecar = json.loads(out.with_name(out.name + ".run.json").read_text())
    assert sidecar["provenance"]["sqlweave"] == __version__
    commit = sidecar["provenance"]["commit"]
    assert commit is None or re.fullmatch(r"[0-9a-f]{40}", commit)
    from sqlweave.programs.presets import DEFAULT_PRESET, get_preset

    assert read_provenance(out)["program"] == get_preset(DEFAULT_PRESET).program
    records = [json.loads(line) for line in out.read_text().splitlines()]
    expected = 100 * sum(r["correct"] for r in records) / len(records)
    assert summary["ex_pct"] == pytest.approx(expected)


def test_quiet_logging_hides_third_party_debug_and_cuts_long_lines(
    capfd: pytest.CaptureFixture[str],
) -> None:
    logs.setup(logs.NORMAL)
    bm25s = logging.getLogger("bm25s")
    bm25s.setLevel(logging.DEBUG)  # what bm25s does on import
    bm25s.debug("Building index from tokens")
    logging.getLogger("dspy.teleprompt.bootstrap").error("Failed to run example %s", "x" * 2000)
    logging.getLogger("sqlweave.somewhere").warning("first line\nCREATE TABLE a (b);" + "y" * 500)
    err = capfd.readouterr().err
    assert "Building index" not in err and "Failed to run example" not in err
    lines = [line for line in err.splitlines() if line]
    assert len(lines) == 1 and lines[0].endswith("first line")

    logs.setup(logs.VERBOSE)
    logging.getLogger("bm25s").info("Building index from tokens")
    logging.getLogger("dspy.teleprompt.bootstrap").error("Failed to run example %s", "x" * 2000)
    err = capfd.readouterr().err
    assert "Building index" in err and "x" * 2000 in err

    hub = pytest.importorskip("huggingface_hub.utils")
    assert not hub.are_progress_bars_disabled()  # verbose: the encoder's own bars show
    logs.setup(logs.QUIET)
    assert hub.are_progress_bars_disabled()  # "Loading weights" no longer between our bars
    logging.getLogger("sqlweave.somewhere").warning("a warning")
    logging.getLogger("dspy").info("dspy info")
    assert capfd.readouterr().err == ""


def test_switch_types_come_from_type_hints() -> None:
    from sqlweave.programs import available, program_class

    assert _scalar_of(int, Parameter_empty()) == (int, False)
    assert _scalar_of(int | None, None) == (int, True)
    assert _scalar_of(typing.Optional[str], Parameter_empty()) == (str, True)  # noqa: UP045
    assert _scalar_of(typing.Literal["a", "b"], "a") == (str, False)
    assert _scalar_of(dspy.Module, Parameter_empty()) == (None, False)
    assert _scalar_of(str | dspy.Module, "none") == (str, False)  # a stage set by name
    weave = switch_types(program_class("weave"))
    assert weave["samples"] == (int, False) and weave["num_demos"][0] is int
    assert typed_switches("weave", ["samples=3", "value_hints=no"]) == {
        "samples": 3,
        "value_hints": False,
    }
    with pytest.raises(typer.Exit):
        typed_switches("weave", ["samples=many"])
    for name in available():  # every program's switches resolve
        assert switch_types(program_class(name)) is not None
    # a switch annotated float | str (ensemble's temperature): a number where it reads as one
    assert typed_switches("ensemble", ["temperature=0.9"]) == {"temperature": 0.9}
    per = typed_switches("ensemble", ["temperature=direct=1.0,dubo_v1=0.7"])
    assert per == {"temperature": "direct=1.0,dubo_v1=0.7"}
    # int | str (ensemble's samples): an integer where it reads as one, else the per-generator text
    assert typed_switches("ensemble", ["samples=3"]) == {"samples": 3}
    per = typed_switches("ensemble", ["samples=direct=3,sea=2"])
    assert per == {"samples": "direct=3,sea=2"}
    with pytest.raises(typer.Exit):  # text that is no name=count list is a one-line error
        typed_switches("ensemble", ["samples=many"])


def Parameter_empty():  # noqa: N802 - names inspect.Parameter.empty
    from inspect import Parameter

    return Parameter.empty


def test_every_program_has_a_card() -> None:
    from sqlweave.programs import available

    assert set(available()) <= set(PROGRAM_CARDS)
    lines = runner.invoke(app, ["programs"]).output.split("\n\n")[0].splitlines()
    assert [line.split()[0] for line in lines] == available()


def test_compile_on_a_questions_file_says_when_it_kept_the_defaults(
    dummy_model: dict, tmp_path: Path, demo_concert_db: Path
) -> None:
    """The README's `compile --train my_questions.jsonl`: one database, so a seeded fifth of
    the questions validates; a compile that changes nothing (no demo allowed, every trace
    wrong) says so in one line instead of saving a silent no-op."""
    rows = [
        ("How many singers?", "SELECT count(*) FROM singer"),
        ("How many concerts?", "SELECT count(*) FROM concert"),
        ("How many stadiums?", "SELECT count(*) FROM stadium"),
        ("Singer names?", "SELECT name FROM singer"),
        ("Stadium names?", "SELECT name FROM stadium"),
    ]
    questions = tmp_path / "mine.jsonl"
    questions.write_text(
        "\n".join(
            json.dumps({"question": q, "sql": s, "db_path": str(demo_concert_db)}) for q, s in rows
        )
        + "\n"
    )
    dummy_model["lm"] = DummyLM({"": {"sql": "SELECT 1"}})  # wrong on every question
    out = tmp_path / "mine.json"
    result = runner.invoke(
        app,
        ["compile", "--train", str(questions), "--optimizer", "bootstrap", "--max-demos", "0",
         "--out", str(out), "--no-progress"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    from sqlweave.programs.presets import DEFAULT_PRESET, get_preset

    program = get_preset(DEFAULT_PRESET).program
    assert f"compiled {program} with bootstrap on 4 train examples" in result.output
    assert "validation EX 0.0% (n=1) on a seeded 20% of the train questions" in result.output
    assert "the compile kept the program as it was: no demonstration added" in result.output
    inspected = runner.invoke(app, ["inspect", str(out)]).output
    assert "nothing: the compile kept the uncompiled program" in inspected


def test_a_search_that_kept_the_defaults_says_why() -> None:
    from sqlweave import programs
    from sqlweave.cli import _kept_defaults_line
    from sqlweave.optimizers.artifact import ArtifactMeta

    search = {
        "n_val": 10,
        "trials": [
            {"switches": {"samples": 1}, "score": 0.6, "status": "done"},
            {"switches": {"samples": 3}, "score": 0.5, "status": "done"},
        ],
    }
    meta = ArtifactMeta(program="direct", extra={"details": {"search": search}})  # fmt: skip
    line = _kept_defaults_line(meta, programs.get("direct"))
    assert line is not None and line.startswith("the compile kept the program's own switches")
    assert "10 validation questions they scored 60.0%, the best other choice 50.0%" in line
    # A switch set before compiling is not the compile's change; one the search moved is.
    kept = ArtifactMeta(
        program="direct",
        switches={"samples": 1},
        extra={"details": {"search": {**search, "chosen": {"samples": 1}}}},
    )
    assert _kept_defaults_line(kept, programs.get("direct", samples=1)) is not None
    moved = ArtifactMeta(
        program="direct",
        switches={"samples": 3},
        extra={"details": {"search": {**search, "chosen": {"samples": 3}}}},
    )
    assert _kept_defaults_line(moved, programs.get("direct", samples=3)) is None
    # Found by review: where the program's own switches lay outside the space, the grid's first
    # trial is no baseline; what the program started from is recorded and read instead.
    from sqlweave.cli.describe import search_moved

    outside = {
        **search,
        "chosen": {"samples": 1},
        "started_from": {"samples": 8},
        "trials": [*search["trials"], {"switches": {"samples": 8}, "score": 0.4}],
    }
    wandered = ArtifactMeta(
        program="direct", switches={"samples": 1}, extra={"details": {"search": outside}}
    )
    assert search_moved(wandered) == {"samples": 1}
    assert _kept_defaults_line(wandered, programs.get("direct", samples=1)) is None


def test_evaluate_json_with_a_baseline(
    dummy_model: dict, spider_root: Path, tmp_path: Path
) -> None:
    dummy_model["lm"] = DummyLM({"": {"sql": "SELECT 1"}})
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    base = ["evaluate", "--data-root", str(spider_root), "--n", "2", "--json"]
    assert runner.invoke(app, [*base, "--out", str(first)]).exit_code == 0
    result = runner.invoke(app, [*base, "--out", str(second), "--baseline", str(first)])
    assert result.exit_code == 0, result.output
    cmp = json.loads(result.output)["baseline"]
    assert cmp["path"] == str(first) and cmp["n_shared"] == 2
    assert cmp["delta_points"] == 0.0 and cmp["only_run"] == cmp["only_baseline"] == 0


def test_a_knn_compile_is_not_reported_as_changing_nothing():
    from sqlweave import programs
    from sqlweave.cli import _kept_defaults_line
    from sqlweave.optimizers import ArtifactMeta
    from sqlweave.optimizers.knn import attach_knn

    meta = ArtifactMeta(program="direct", optimizer="knn")
    program = programs.get("direct")
    assert _kept_defaults_line(meta, program) is not None  # nothing attached: nothing changed
    assert _kept_defaults_line(meta, attach_knn(program.deepcopy(), [], k=4)) is not None
    # its demos are the pool, picked per question at call time, not demos on a predictor
    demo = {"question": "How many singers?", "sql": "SELECT count(*) FROM singer"}
    pool = [{"question": demo["question"], "db_id": "concert_singer", "demos": {"generate": demo}}]
    assert _kept_defaults_line(meta, attach_knn(program, pool, k=4)) is None


def test_ask_with_the_readme_best_configuration(dummy_model: dict, demo_concert_db: Path) -> None:
    """The README's best configuration, as typed there: eight candidates; five guess a country
    the table does not store and agree on an empty count, three look it up right. The plain
    vote would pick the guess; ``selector=grounded`` drops it."""
    holland = "SELECT count(*) AS n FROM singer WHERE Country = 'Holland'"
    netherlands = "SELECT count(*) AS n FROM singer WHERE Country = 'Netherlands'"
    dummy_model["lm"] = DummyLM([{"sql": holland}] * 5 + [{"sql": netherlands}] * 3)
    best = [
        *("--set", "samples=8", "--set", "temperature=1.0", "--set", "repair=joins"),
        *("--set", "repair_scope=all", "--set", "corrector=rules_intersect"),
        *("--set", "selector=grounded"),
    ]
    question = "How many singers are from the Netherlands?"
    args = ["ask", question, "--db", str(demo_concert_db), "--json", *best]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert answer["sql"] == netherlands and answer["rows"] == [[1]]


def test_inspect_says_who_set_each_switch() -> None:
    """A grid's first trial is not the program as given: a switch the space offered a choice
    for was chosen by the search even where the first trial already had it."""
    from sqlweave.cli import _switch_changes
    from sqlweave.optimizers.artifact import ArtifactMeta

    first = {"corrector": "rules_intersect", "selector": "grounded", "temperature": 1.0}
    search = {
        "space": {
            "corrector": ["rules", "rules_intersect"],
            "selector": ["grounded"],
            "temperature": [0.7, 1.0],
        },
        "trials": [{"switches": first, "score": 0.5, "status": "done"}],
        "chosen": {**first, "temperature": 0.7},
    }
    meta = ArtifactMeta(
        program="direct",
        switches={**first, "temperature": 0.7, "samples": 8},
        extra={"details": {"search": search}},
    )
    assert sorted(_switch_changes(meta)) == [
        "corrector: rules -> rules_intersect (chosen by the search)",
        "samples: 1 -> 8 (set before compiling)",
        "selector: vote -> grounded (fixed in the search's space)",
    ]
