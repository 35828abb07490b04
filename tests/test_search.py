"""The switch search (``--optimizer search``): it picks the configuration that scores better, resumes
after a crash losing at most the question in flight, stops at the budget, composes with
bootstrap, and its artefact loads in a fresh process without training data.

The LM is a DummyLM whose answer depends on a switch: it writes the right query only when the
prompt shows the schema in ``direct``'s ``compact`` layout, so a search that kept the student's
``native`` layout (set explicitly: compact is ``direct``'s default) scores 0 and fails these tests. Data: the Spider demo bundle in the package
(concert_singer's "how many singers" questions, gold ``SELECT count(*) FROM singer``).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import dspy
import pytest
from conftest import DEMO_ROOT as DEMO
from dspy.utils import DummyLM
from typer.testing import CliRunner

import sqlweave
from sqlweave import programs
from sqlweave.cli import app
from sqlweave.data import demo_pool_exclusions, eval_slice, load_slice, load_spider
from sqlweave.optimizers import (
    DEFAULT_SPACES,
    SwitchSearch,
    read_artifact,
    run_optimizer,
    trainset_hash,
)
from sqlweave.optimizers.search import check_space, default_space
from sqlweave.programs.presets import DEFAULT_PRESET, PRESETS

pytest.importorskip("optuna")

RIGHT = "SELECT count(*) FROM singer"
WRONG = "SELECT 1"
#: In concert_singer's schema as the compact layout renders it, in neither native nor pretty.
COMPACT = '"Singer_ID" INTEGER, "Name" TEXT'
LAYOUTS = {"schema_layout": ["native", "compact", "pretty"]}
#: What a compile with no program option builds (the default preset's program).
DEFAULT_PROGRAM = PRESETS[DEFAULT_PRESET].program


def native_direct() -> Any:
    """``direct`` with the native layout (its default is compact): the student these tests
    start from, so the right layout (compact) is one the search must find."""
    return programs.get("direct", schema_layout="native")


class Crash(BaseException):
    """Stands in for kill -9: nothing after it runs (BaseException: no handler catches it)."""


class SwitchLM(DummyLM):
    """Answers RIGHT when any message of the prompt contains ``marker``, WRONG otherwise;
    raises :class:`Crash` on call number ``crash_at``."""

    def __init__(self, marker: str = COMPACT, crash_at: int | None = None) -> None:
        # follow_examples: DummyLM hands every message of the prompt to _use_example.
        super().__init__([], follow_examples=True)
        self.marker = marker
        self.crash_at = crash_at
        self.calls = 0

    def _use_example(self, messages: list[dict[str, Any]]) -> str:
        self.calls += 1
        if self.calls == self.crash_at:
            raise Crash
        text = "\n".join(str(m.get("content")) for m in messages)
        return self._format_answer_fields({"sql": RIGHT if self.marker in text else WRONG})


@pytest.fixture(scope="module")
def singers() -> list[dspy.Example]:
    examples = [ex for ex in load_spider("dev", root=DEMO) if ex.gold_sql == RIGHT]
    assert len(examples) == 4
    return examples


@pytest.fixture(scope="module")
def train() -> list[dspy.Example]:
    return load_spider("train", root=DEMO)[:3]


def test_the_marker_tells_the_layouts_apart(singers: list[dspy.Example]) -> None:
    """The test LM's premise: only the compact layout's prompt carries the marker."""
    for layout in LAYOUTS["schema_layout"]:
        text = programs.get("direct", schema_layout=layout).schema_text(
            programs.resolve_database(singers[0].db_path)
        )
        assert (COMPACT in text) == (layout == "compact")


def test_search_picks_the_better_configuration(
    singers: list[dspy.Example], train: list[dspy.Example]
) -> None:
    student = native_direct()
    lm = SwitchLM()
    with dspy.context(lm=lm):
        out = run_optimizer(student, train, singers, optimizer="search", space=LAYOUTS)
    assert out.program.switches["schema_layout"] == "compact"
    assert student.switches["schema_layout"] == "native"  # the student is never changed
    search = out.report.details["search"]
    assert search["sampler"] == "grid" and search["n_val"] == 4
    assert search["chosen"] == {"schema_layout": "compact"} and search["best_score"] == 1.0
    trials = search["trials"]
    # The program's own configuration is the first trial: the search never does worse than it.
    assert trials[0]["switches"] == {"schema_layout": "native"} and trials[0]["score"] == 0.0
    assert search["baseline_score"] == 0.0
    assert search["started_from"] == {"schema_layout": "native"}
    assert sorted(t["switches"]["schema_layout"] for t in trials) == sorted(
        LAYOUTS["schema_layout"]
    )
    assert all(t["status"] == "done" and t["calls"] == 4 for t in trials)
    assert out.report.lm_calls == 12 == len(lm.history)


def test_tpe_counts_distinct_configurations_and_is_seeded(singers: list[dspy.Example]) -> None:
    space = {**LAYOUTS, "samples": [1, 2, 3]}  # 9 configurations, 4 trials: TPE, not grid
    runs = []
    for _ in range(2):
        with dspy.context(lm=SwitchLM()):
            out = run_optimizer(
                native_direct(), singers, singers[:2], optimizer="search", space=space,
                n_trials=4, seed=3,
            )  # fmt: skip
        runs.append(out.report.details["search"])
    first, second = runs
    assert first["sampler"] == "tpe"
    done = [t for t in first["trials"] if t["status"] == "done"]
    assert len(done) == 4 and len({json.dumps(t["switches"]) for t in done}) == 4
    assert first["trials"][0]["switches"] == {"schema_layout": "native", "samples": 1}
    assert [t["switches"] for t in first["trials"]] == [t["switches"] for t in second["trials"]]


def test_val_size_scores_trials_on_the_first_examples(singers: list[dspy.Example]) -> None:
    lm = SwitchLM()
    with dspy.context(lm=lm):
        out = run_optimizer(
            native_direct(), singers, singers, optimizer="search", space=LAYOUTS,
            val_size=2,
        )  # fmt: skip
    assert out.report.details["search"]["n_val"] == 2 and len(lm.history) == 6


def test_spaces_are_checked_before_any_call(singers: list[dspy.Example]) -> None:
    lm = DummyLM([])  # any call would fail
    cases = [
        ({"bogus": [1, 2]}, "program direct has no switch 'bogus'"),
        ({"schema_layout": ["native", "diagonal"]}, "cannot take schema_layout='diagonal'"),
        ({"schema_layout": []}, "schema_layout has no choices"),
        ({"schema_layout": "native"}, "needs a list of choices"),
        ({"samples": [[1]]}, "is not a number, string, bool or None"),
        ({}, "empty: nothing to search"),
    ]
    with dspy.context(lm=lm):
        for space, message in cases:
            with pytest.raises(ValueError, match=message):
                SwitchSearch(space=space).compile(native_direct(), trainset=singers)
        with pytest.raises(ValueError, match="'naive' has no default search space"):
            SwitchSearch().compile(programs.get("naive"), trainset=singers)
    assert not lm.history
    for kwargs, message in [
        ({"n_trials": 0}, "n_trials must be 1 or more"),
        ({"val_size": 0}, "val_size must be 1 or more"),
        ({"sampler": "anneal"}, "unknown sampler 'anneal'"),
    ]:
        with pytest.raises(ValueError, match=message):
            SwitchSearch(**kwargs)


def test_combinations_the_program_refuses_are_skipped_without_calls(
    singers: list[dspy.Example], tmp_path: Path
) -> None:
    """dubo_v1 refuses samples > 1 with the ``first`` selector: the search records that
    combination as invalid (no LM call, no trial slot) and runs the other three; a resumed
    search replays the invalid record instead of building it again."""
    space = {"samples": [1, 3], "selector": ["first", "vote"]}
    lm = SwitchLM(marker="")  # always the right query
    with dspy.context(lm=lm):
        out = run_optimizer(
            programs.get("dubo_v1"), singers, singers[:2], optimizer="search", space=space,
            n_trials=8,
        )  # fmt: skip
    trials = out.report.details["search"]["trials"]
    invalid = [t for t in trials if t["status"] == "invalid"]
    assert [t["switches"] for t in invalid] == [{"samples": 3, "selector": "first"}]
    assert invalid[0]["calls"] == 0 and "needs a selector" in invalid[0]["reason"]
    done = [t for t in trials if t["status"] == "done"]
    assert len(done) == 3 and all(t["score"] == 1.0 for t in done)
    # 2 questions x (1 + 1 + 3 calls): samples=3 is the only configuration with more than one
    assert sum(t["calls"] for t in done) == 10
    with pytest.raises(ValueError, match="cannot take samples=0"):
        check_space(
            programs.get("dubo_v1"),
            {"samples": [0], "selector": ["vote"]},
            lambda **s: programs.get("dubo_v1", **s),
        )


@pytest.mark.parametrize("name", sorted(DEFAULT_SPACES))
def test_every_default_space_builds_and_holds_the_defaults(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A program whose switches drift from its default space shows up here, not mid-compile."""
    program = programs.get(name)
    with caplog.at_level(logging.WARNING, logger="sqlweave.optimizers.search"):
        space = check_space(program, default_space(program), lambda **s: programs.get(name, **s))
    assert not caplog.records, caplog.text
    assert set(space) == set(DEFAULT_SPACES[name])
    for switch, choices in space.items():
        assert program.switches[switch] in choices  # the first trial is the program as it is


@pytest.mark.parametrize("sampler", ["grid", "tpe"])
def test_resume_after_a_crash_loses_at_most_one_trial(
    sampler: str, singers: list[dspy.Example], tmp_path: Path
) -> None:
    # No sampling switch: sampled calls go to copies of the LM, which keep their own counts.
    space = {**LAYOUTS, "corrector": ["none", "execution"]}
    args: dict[str, Any] = dict(optimizer="search", space=space, n_trials=4, sampler=sampler)
    full_lm = SwitchLM()
    with dspy.context(lm=full_lm):
        full = run_optimizer(native_direct(), singers, singers, **args)
    trials = full.report.details["search"]["trials"]
    ckpt = tmp_path / "search.ckpt.json"
    crash_at = trials[0]["calls"] + trials[1]["calls"] // 2 + 1  # mid second trial
    first_lm = SwitchLM(crash_at=crash_at)
    with pytest.raises(Crash), dspy.context(lm=first_lm):
        run_optimizer(native_direct(), singers, singers, checkpoint=ckpt, **args)
    assert json.loads(ckpt.read_text())["lm_calls"] == crash_at  # saved before it went out
    second_lm = SwitchLM()
    with dspy.context(lm=second_lm):
        second = run_optimizer(native_direct(), singers, singers, checkpoint=ckpt, **args)
    resumed = second.report.details["search"]
    assert [(t["switches"], t["score"], t["calls"]) for t in resumed["trials"]] == [
        (t["switches"], t["score"], t["calls"]) for t in trials
    ]
    assert second.program.switches == full.program.switches
    # Made across both runs: the full search, plus at most the trial in flight (here: only its
    # question in flight, one call).
    made = (first_lm.calls - 1) + len(second_lm.history)  # the crashed call was never answered
    assert made <= len(full_lm.history) + max(t["calls"] for t in trials)
    assert made == len(full_lm.history)
    # Counted over both runs: the uninterrupted count plus the call in flight, counted twice.
    assert second.report.resumed_calls == crash_at
    assert second.report.lm_calls == full.report.lm_calls + 1
    assert second.report.resumed_units >= 1


def test_budget_stops_the_search(
    singers: list[dspy.Example], train: list[dspy.Example], tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt.json"
    args: dict[str, Any] = dict(optimizer="search", space=LAYOUTS, budget=6, checkpoint=ckpt)
    lm = SwitchLM()
    with dspy.context(lm=lm):
        out = run_optimizer(native_direct(), train, singers, **args)
    assert out.report.budget_exhausted and out.report.lm_calls == 6 == len(lm.history)
    search = out.report.details["search"]
    assert [t["status"] for t in search["trials"]] == ["done", "stopped"]
    assert search["budget_stopped"] and search["chosen"] == search["trials"][0]["switches"]
    # A rerun on the spent budget makes no call and rebuilds the same choice.
    again = SwitchLM()
    with dspy.context(lm=again):
        rerun = run_optimizer(native_direct(), train, singers, **args)
    assert not again.history and rerun.program.switches == out.program.switches
    # A larger budget on the same checkpoint goes on from the stopped trial's finished questions.
    more = SwitchLM()
    with dspy.context(lm=more):
        done = run_optimizer(native_direct(), train, singers, **{**args, "budget": 12})
    assert len(more.history) == 6 and done.program.switches["schema_layout"] == "compact"
    assert done.report.lm_calls == 12 and not done.report.budget_exhausted


def test_search_then_bootstrap_composes(singers: list[dspy.Example]) -> None:
    """One compile: the search chooses compact, bootstrap then finds demos for that program."""
    lm = SwitchLM()
    with dspy.context(lm=lm):
        out = run_optimizer(
            native_direct(), singers[:2], singers[2:], optimizer="search+bootstrap",
            space=LAYOUTS, max_demos=2,
        )  # fmt: skip
    assert out.program.switches["schema_layout"] == "compact"
    augmented = [d for d in out.program.generate.demos if d.get("augmented")]
    assert [d.sql for d in augmented] == [RIGHT, RIGHT]
    assert all(COMPACT in d.db_schema for d in augmented)  # traced on the chosen program
    assert out.report.optimizer == "search+bootstrap"
    assert out.report.details["search"]["chosen"] == {"schema_layout": "compact"}
    assert out.report.lm_calls == len(lm.history) == 3 * 2 + 2


# --- the artefact -------------------------------------------------------------------------

FRESH = """
import json, sys
import dspy
from dspy.utils import DummyLM
import sqlweave
from sqlweave.data import DataError, load_spider

try:  # no training data here: the artefact must not need it
    load_spider("train")
    sys.exit("training data was found")
except DataError:
    pass
p = sqlweave.load(sys.argv[1])
lm = DummyLM({"": {"sql": "SELECT count(*) FROM singer"}})
with dspy.context(lm=lm):
    r = p("How many singers are there?", db=sys.argv[2])
prompt = "\\n".join(m["content"] for m in lm.history[-1]["messages"])
print(json.dumps({"switches": p.meta.switches, "rows": [list(x) for x in r.rows],
                  "compact": sys.argv[3] in prompt,
                  "trials": len(p.meta.extra["details"]["search"]["trials"])}))
"""


@pytest.fixture(scope="module")
def artefact(
    singers: list[dspy.Example], train: list[dspy.Example], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    with dspy.context(lm=SwitchLM()):
        compiled = sqlweave.compile(
            "direct", train, singers, optimizer="search", options={"space": LAYOUTS},
            progress=False, schema_layout="native",
        )  # fmt: skip
    return compiled.save(tmp_path_factory.mktemp("search") / "direct.json")


def test_artefact_records_the_search(artefact: Path) -> None:
    meta = read_artifact(artefact)["meta"]
    assert meta["optimizer"] == "search" and meta["switches"]["schema_layout"] == "compact"
    search = meta["extra"]["details"]["search"]
    assert search["chosen"] == {"schema_layout": "compact"} and len(search["trials"]) == 3
    assert {"switches", "score", "calls", "status"} <= set(search["trials"][0])
    assert meta["val_ex_pct"] == 100.0


def test_artefact_loads_in_a_fresh_process_without_training_data(
    artefact: Path, singers: list[dspy.Example], tmp_path: Path
) -> None:
    empty = tmp_path / "no-data"
    empty.mkdir()
    env = {**os.environ, "SQLWEAVE_DATA": str(empty)}
    done = subprocess.run(
        [sys.executable, "-c", FRESH, str(artefact), singers[0].db_path, COMPACT],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["switches"]["schema_layout"] == "compact" and result["compact"]
    assert result["rows"] == [[6]] and result["trials"] == 3


# --- the command line -----------------------------------------------------------------------

runner = CliRunner()


@pytest.fixture()
def switch_model(monkeypatch: pytest.MonkeyPatch):
    lm = SwitchLM()

    def fake_configure(model: str, **options: object) -> SwitchLM:
        dspy.configure(lm=lm)
        return lm

    monkeypatch.setattr("sqlweave.lm.configure", fake_configure)
    yield lm
    dspy.configure(lm=None)


def _questions(path: Path, examples: list[dspy.Example]) -> Path:
    items = [
        {"question": ex.question, "db_path": ex.db_path, "gold_sql": ex.gold_sql} for ex in examples
    ]
    path.write_text(json.dumps(items))
    return path


def test_cli_search_and_inspect_print_the_history(
    switch_model: SwitchLM, singers: list[dspy.Example], tmp_path: Path
) -> None:
    out = tmp_path / "searched.json"
    args = ["compile", "-p", "direct", "--optimizer", "search+bootstrap", "--no-progress"]
    args += ["--out", str(out)]
    args += ["--train", str(_questions(tmp_path / "train.json", singers[:2])), "--n-train", "0"]
    args += ["--val", str(_questions(tmp_path / "val.json", singers[2:]))]
    args += ["--space", "schema_layout=native,compact", "--space", "samples=1,2"]
    args += ["--set", "schema_layout=native"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "compiled direct with search+bootstrap" in result.output
    assert "search: 4 configurations on 2 validation examples; chose schema_layout=compact" in (
        result.output
    )
    meta = read_artifact(out)["meta"]
    assert meta["switches"]["schema_layout"] == "compact"
    assert meta["extra"]["details"]["search"]["space"] == {
        "schema_layout": ["native", "compact"],
        "samples": [1, 2],  # typed like --set: ints, not strings
    }
    shown = runner.invoke(app, ["inspect", str(out)])
    assert shown.exit_code == 0, shown.output
    text = shown.output
    assert "switch search" in text and "space: schema_layout=native,compact samples=1,2" in text
    assert "chosen: schema_layout=compact" in text and "the program's own switches" in text
    lines = [
        line for line in text.splitlines() if line.strip().startswith(("0 ", "1 ", "2 ", "3 "))
    ]
    assert len(lines) == 4 and "schema_layout=native samples=1" in lines[0]
    assert all(" done " in line for line in lines)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--space", "schema_layout"], "--space needs switch=a,b,c"),
        (["--space", "bogus=1,2"], f"unknown switch 'bogus' for program {DEFAULT_PROGRAM}"),
        (["--space", "samples=one,two"], "switch samples expects an integer"),
        (["--trials", "0"], "--trials must be 1 or more"),
        (["--sampler", "anneal"], "--sampler must be one of"),
        (["--optimizer", "bootstrap", "--space", "samples=1,2"], "--space applies to the search"),
        (["--optimizer", "search+nope"], "unknown optimizer 'nope'"),
    ],
)
def test_cli_bad_search_options_are_one_line_errors(
    switch_model: SwitchLM, tmp_path: Path, extra: list[str], message: str
) -> None:
    args = ["compile", "--optimizer", "search", "--out", str(tmp_path / "x.json"), *extra]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert not switch_model.history


def test_cli_validates_on_a_named_slice_of_unseen_databases(
    switch_model: SwitchLM, spider_root: Path, tmp_path: Path
) -> None:
    """--val spider-train-val: its first --n-val questions, and no train question on its
    databases (a choice made on it is one that carries over to databases never seen)."""
    out = tmp_path / "searched.json"
    args = ["compile", "--program", "direct", "--optimizer", "search", "--no-progress"]
    args += ["--out", str(out), "--data-root", str(spider_root), "--n-train", "40"]
    args += ["--val", "spider-train-val", "--n-val", "3", "--space", "schema_layout=native,compact"]
    args += ["--set", "schema_layout=native"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    meta = read_artifact(out)["meta"]
    assert meta["n_val"] == 3 and meta["n_train"] == 40
    val = load_slice("spider-train-val", root=spider_root)[:3]
    assert meta["extra"]["details"]["search"]["n_val"] == 3
    # The train slice the compile used, rebuilt the way the CLI builds it: none on held databases.
    held = demo_pool_exclusions()
    pool = [ex for ex in load_spider("train", root=spider_root) if ex.db_id not in held]
    trainset = eval_slice(pool, n=40, seed=0, stratify=None)
    assert meta["trainset_hash"] == trainset_hash(trainset)
    assert not {ex.db_id for ex in trainset} & {ex.db_id for ex in val}


def test_a_search_from_a_preset_searches_its_database_dependent_switches(
    switch_model: SwitchLM, singers: list[dspy.Example], tmp_path: Path
) -> None:
    """Issue 59: a compile from a preset with no --space searches what depends on the database
    (the preset's ``space``: the join repair and its scope), the other switches as chosen."""
    from sqlweave.programs.presets import get_preset, search_space

    accurate = get_preset("accurate")
    assert search_space("accurate") == {
        "repair": ["joins", "none"],
        "repair_scope": ["fallback", "all"],
    }
    out = tmp_path / "searched.json"
    args = ["compile", "--preset", "accurate", "--optimizer", "search", "--no-progress"]
    args += ["--out", str(out), "--trials", "2", "--set", "samples=2"]
    args += ["--train", str(_questions(tmp_path / "train.json", singers[:2])), "--n-train", "0"]
    args += ["--val", str(_questions(tmp_path / "val.json", singers[2:]))]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    meta = read_artifact(out)["meta"]
    assert meta["extra"]["details"]["search"]["space"] == search_space("accurate")
    assert meta["extra"]["preset"] == "accurate"
    kept = {k: v for k, v in meta["switches"].items() if k not in accurate.space}
    assert kept["selector"] == "grounded" and kept["corrector"] == "rules_intersect"
    # a space given on the command line still wins over the preset's
    args[args.index(str(out))] = str(tmp_path / "own.json")
    args += ["--space", "repair=none,joins"]
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    own = read_artifact(tmp_path / "own.json")["meta"]["extra"]["details"]["search"]["space"]
    assert own == {"repair": ["none", "joins"]}
