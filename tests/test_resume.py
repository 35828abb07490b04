"""Resuming safely (issue 19): an evaluation file is never resumed by another run, and a compile
budget is a cap on the whole compile however often it is killed and resumed."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dspy
import pytest
from conftest import DEMO_ROOT
from dspy.utils import DummyLM
from typer.testing import CliRunner

from sqlweave import data, programs
from sqlweave.cli import app
from sqlweave.evaluate import evaluate, read_records, read_run_identity, run_identity_path
from sqlweave.optimizers import read_artifact, run_optimizer

runner = CliRunner()

# --- evaluation identity -------------------------------------------------------------------


@pytest.fixture(scope="module")
def examples(spider_root: Path) -> list[dspy.Example]:
    return data.eval_slice(data.load_spider("dev", root=spider_root), n=4, seed=0)


def gold(examples: list[dspy.Example]):
    table = {ex.question: ex.gold_sql for ex in examples}
    return lambda question, db_path: table[question]


def wrong(question: str, db_path: str) -> str:
    return "SELECT 1"


RUN_A = {"program": "direct", "switches": {}, "model": "local:a", "semantics": "per-example"}
RUN_B = {**RUN_A, "model": "openai/b"}


def test_a_run_of_another_model_is_refused(examples: list, tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    first = evaluate(gold(examples), examples[:2], out_path=out, progress=False, identity=RUN_A)
    assert first["ex"] == 1.0
    assert read_run_identity(out) == RUN_A
    assert run_identity_path(out) == tmp_path / "run.jsonl.run.json"
    with pytest.raises(ValueError, match=r"model 'local:a' vs 'openai/b'.*--no-resume"):
        evaluate(wrong, examples, out_path=out, progress=False, identity=RUN_B)
    assert len(read_records(out)) == 2  # nothing was written by the refused run


def test_the_same_run_resumes(examples: list, tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    evaluate(gold(examples), examples[:2], out_path=out, progress=False, identity=RUN_A)
    calls: list[str] = []

    def program(question: str, db_path: str) -> str:
        calls.append(question)
        return gold(examples)(question, db_path)

    # Tuples and lists read back alike: JSON is the comparison.
    same = {**RUN_A, "switches": {"k": (1, 2)}}
    out2 = tmp_path / "run2.jsonl"
    evaluate(program, examples[:1], out_path=out2, progress=False, identity=same)
    summary = evaluate(program, examples, out_path=out2, progress=False, identity=same)
    assert summary["n"] == 4 and len(calls) == 4  # the first question was not asked again


def test_restart_with_another_identity_replaces_it(examples: list, tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    evaluate(gold(examples), examples, out_path=out, progress=False, identity=RUN_A)
    summary = evaluate(wrong, examples, out_path=out, progress=False, identity=RUN_B, resume=False)
    assert summary["ex"] == 0.0 and read_run_identity(out) == RUN_B


def test_an_old_file_without_identity_resumes_with_a_warning(
    examples: list, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "old.jsonl"
    evaluate(gold(examples), examples[:2], out_path=out, progress=False)  # no identity
    assert not run_identity_path(out).exists()
    with caplog.at_level(logging.WARNING, logger="sqlweave.evaluate"):
        summary = evaluate(gold(examples), examples, out_path=out, progress=False, identity=RUN_A)
    assert summary["n"] == 4 and "records no run identity" in caplog.text
    assert read_run_identity(out) == RUN_A  # from now on the file is this run's


def test_callers_without_identity_work_as_before(examples: list, tmp_path: Path) -> None:
    """experiments/protocol.py calls evaluate(prog, examples, out_path=..., resume=True)."""
    out = tmp_path / "run.jsonl"
    evaluate(gold(examples), examples[:2], out_path=out, progress=False, identity=RUN_A)
    summary = evaluate(gold(examples), examples, out_path=out, resume=True, num_threads=1)
    assert summary["n"] == 4 and read_run_identity(out) == RUN_A
    # Started afresh without identity: the old identity no longer describes the records.
    evaluate(gold(examples), examples, out_path=out, resume=False, progress=False)
    assert not run_identity_path(out).exists()


def test_a_broken_identity_file_is_a_clear_error(examples: list, tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    evaluate(gold(examples), examples[:1], out_path=out, progress=False, identity=RUN_A)
    run_identity_path(out).write_text("{")
    with pytest.raises(ValueError, match="unreadable run identity"):
        evaluate(gold(examples), examples, out_path=out, progress=False, identity=RUN_A)


@pytest.fixture()
def dummy(monkeypatch: pytest.MonkeyPatch):
    lm = DummyLM({"": {"sql": "SELECT count(*) FROM singer"}})

    def fake_configure(model: str, **options: object) -> DummyLM:
        dspy.configure(lm=lm)
        return lm

    monkeypatch.setattr("sqlweave.lm.configure", fake_configure)
    yield lm
    dspy.configure(lm=None)


def test_cli_refuses_to_mix_models_and_names_outputs_after_them(
    dummy: DummyLM, spider_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # direct's own defaults (no preset): the switches compared below are the --set ones
    base = ["evaluate", "-p", "direct", "--data-root", str(spider_root), "--n", "2"]
    base += ["--no-progress"]
    out = tmp_path / "run.jsonl"
    result = runner.invoke(app, [*base, "--out", str(out), "-m", "local:qwen2.5-coder-0.5b"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, [*base, "--out", str(out), "-m", "openai/gpt-4o-mini"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "holds records of another run" in result.output
    assert "'local:qwen2.5-coder-0.5b' vs 'openai/gpt-4o-mini'" in result.output
    result = runner.invoke(app, [*base, "--out", str(out), "--set", "schema_layout=compact"])
    assert result.exit_code == 2 and "switches {} vs {'schema_layout': 'compact'}" in result.output
    # Default names carry the model (and a hash of the switches): runs of two models never meet.
    for model in ("local:qwen2.5-coder-0.5b", "openai/gpt-4o-mini"):
        assert runner.invoke(app, [*base, "-m", model]).exit_code == 0
    assert runner.invoke(app, [*base, "--set", "schema_layout=compact"]).exit_code == 0
    names = sorted(p.name for p in (tmp_path / "runs").glob("*.jsonl"))
    assert names[0].startswith("direct-set") and names[0].endswith("-qwen2.5-coder-1.5b.jsonl")
    assert names[1:] == [
        "direct-spider-dev-n2-openai-gpt-4o-mini.jsonl",
        "direct-spider-dev-n2-qwen2.5-coder-0.5b.jsonl",
    ]
    identity = read_run_identity(tmp_path / "runs" / names[2])
    assert identity == {
        "program": "direct",
        "switches": {},
        "model": "local:qwen2.5-coder-0.5b",
        "semantics": "per-example",
    }


def test_cli_identity_of_an_artifact_includes_its_content(
    dummy: DummyLM, spider_root: Path, tmp_path: Path
) -> None:
    from sqlweave.optimizers import ArtifactMeta, save_program

    artefact = tmp_path / "p.json"
    save_program(programs.get("direct"), artefact, ArtifactMeta(program="direct"))
    out = tmp_path / "run.jsonl"
    args = ["evaluate", "--data-root", str(spider_root), "--n", "2", "--no-progress"]
    args += ["--out", str(out), "-p", str(artefact)]
    assert runner.invoke(app, args).exit_code == 0
    assert len(read_run_identity(out)["artifact"]) == 16
    # Saved again with other provenance (timings, lm note) but the same program: the same run.
    save_program(programs.get("direct"), artefact, ArtifactMeta(program="direct", lm="other"))
    assert runner.invoke(app, args).exit_code == 0
    # Recompiled into another program (new instructions): another run.
    changed = programs.get("direct")
    changed.generate.signature = changed.generate.signature.with_instructions("Write SQLite.")
    save_program(changed, artefact, ArtifactMeta(program="direct"))
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "artifact" in result.output


# --- the compile budget across resumes -----------------------------------------------------

WRONG = "SELECT 1"


@pytest.fixture(scope="module")
def train(spider_root: Path) -> list[dspy.Example]:
    return data.load_spider("train", root=spider_root)[:8]


def scripted(examples: list[dspy.Example], right: set[int]) -> DummyLM:
    answers = {
        ex.question: {"sql": ex.gold_sql if i in right else WRONG} for i, ex in enumerate(examples)
    }
    return DummyLM({**answers, "": {"sql": WRONG}})


def test_budget_is_a_cap_across_reruns(train: list[dspy.Example], tmp_path: Path) -> None:
    """`compile --budget 5` run three times used to make 5 + 5 + 1 calls and three programs."""
    ckpt = tmp_path / "ckpt.json"
    states, calls = [], []
    for _ in range(3):
        lm = scripted(train, right={2, 5})
        with dspy.context(lm=lm):
            out = run_optimizer(
                programs.get("direct"), train, train[:1], max_demos=4, budget=5, checkpoint=ckpt
            )
        calls.append(len(lm.history))
        states.append(out.program.dump_state())
        assert out.report.lm_calls == 5 and out.report.budget_exhausted
    assert calls == [5, 0, 0]
    assert states[0] == states[1] == states[2]
    assert json.loads(ckpt.read_text())["lm_calls"] == 5
    # A larger budget on the same checkpoint goes on from there: the cap is on the total.
    lm = scripted(train, right={2, 5})
    with dspy.context(lm=lm):
        out = run_optimizer(
            programs.get("direct"), train, train[:1], max_demos=4, budget=7, checkpoint=ckpt
        )
    assert len(lm.history) == 2 and out.report.lm_calls == 7 and out.report.resumed_calls == 5


@pytest.mark.parametrize("optimizer", ["mipro", "gepa"])
def test_spent_budget_makes_no_call_for_optimizers_without_units(
    optimizer: str, train: list[dspy.Example], tmp_path: Path
) -> None:
    if optimizer == "mipro":
        pytest.importorskip("optuna")
    ckpt = tmp_path / "ckpt.json"
    first = scripted(train, right=set())
    with dspy.context(lm=first):
        run_optimizer(
            programs.get("direct"), train[:6], train[6:], optimizer=optimizer, max_demos=1,
            budget=3, checkpoint=ckpt, proposer_lm=first,
        )  # fmt: skip
    lm = scripted(train, right=set())
    with dspy.context(lm=lm):
        out = run_optimizer(
            programs.get("direct"), train[:6], train[6:], optimizer=optimizer, max_demos=1,
            budget=3, checkpoint=ckpt, proposer_lm=lm,
        )  # fmt: skip
    assert not lm.history and out.report.budget_exhausted and out.report.lm_calls <= 3


# A compile in a child process with a deterministic, slow DummyLM that logs every call it
# answers to CALL_LOG (one line each, appended and flushed before the answer), so the calls made
# by a process killed with SIGKILL are still known.
KILLABLE_COMPILE = """
import os, sys, time
import dspy
from dspy.utils import DummyLM
import sqlweave.lm

class LoggedLM(DummyLM):
    def _format_answer_fields(self, fields):
        with open(os.environ["CALL_LOG"], "a") as fh:
            fh.write("call\\n")
            fh.flush()
            os.fsync(fh.fileno())
        time.sleep(0.3)
        return super()._format_answer_fields(fields)

LM = LoggedLM({"": {"sql": "SELECT count(*) FROM head"}})

def configure(model, **options):
    dspy.configure(lm=LM)
    return LM

sqlweave.lm.configure = configure
from sqlweave.cli import app
app(sys.argv[1:])
"""


def _calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def _kill_at(cmd: list[str], env: dict[str, str], log: Path, calls: int) -> None:
    """Run ``cmd`` until CALL_LOG holds ``calls`` lines, then SIGKILL it (mid-call)."""
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 180
    try:
        while _calls(log) < calls:
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the compile made no progress"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("optimizer", "budget", "kills"), [("random_search", 12, (4, 8)), ("bootstrap", 5, (2,))]
)
def test_killed_compile_keeps_its_budget(
    spider_root: Path, tmp_path: Path, optimizer: str, budget: int, kills: tuple[int, ...]
) -> None:
    """Random search killed twice made 25 calls under a budget of 12; now: at most 12."""
    log = tmp_path / "calls.log"
    out = tmp_path / "compiled.json"
    env = {**os.environ, "CALL_LOG": str(log)}
    cmd = [sys.executable, "-c", KILLABLE_COMPILE, "compile", "--optimizer", optimizer]
    cmd += ["--budget", str(budget), "--data-root", str(spider_root), "--n-train", "8"]
    cmd += ["--candidates", "2", "--out", str(out), "--no-progress"]
    for at in kills:
        _kill_at(cmd, env, log, at)
        saved = json.loads(out.with_suffix(".ckpt.json").read_text())["lm_calls"]
        assert saved >= at  # every call made was saved before it went out
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    meta = read_artifact(out)["meta"]
    made = _calls(log) - meta["extra"]["val_lm_calls"]  # validation runs after, uncapped
    assert meta["extra"]["budget_exhausted"] and meta["lm_calls"] == budget
    # A kill can land after a call is counted and before it is answered: counted >= made.
    assert made <= meta["lm_calls"] <= budget
    assert meta["extra"]["resumed_calls"] >= kills[-1]
    assert f"{budget} of {budget} LM calls (budget reached" in done.stdout


@pytest.mark.timeout(600)
def test_killed_switch_search_loses_at_most_one_trial(tmp_path: Path) -> None:
    """`compile --optimizer search` killed with SIGKILL twice, then run to the end: the trials
    of an uninterrupted search, and per kill at most one trial's calls made again (the
    checkpoint keeps every scored question, so in fact one question's)."""
    pytest.importorskip("optuna")
    log = tmp_path / "calls.log"
    out = tmp_path / "searched.json"
    env = {**os.environ, "CALL_LOG": str(log)}
    cmd = [sys.executable, "-c", KILLABLE_COMPILE, "compile", "--optimizer", "search"]
    cmd += ["-p", "direct"]  # direct's own defaults: the first trial is native + rules
    cmd += ["--data-root", str(DEMO_ROOT), "--n-train", "10", "--trials", "6", "--no-progress"]
    # the bundle holds spider-train-val: its first two questions score each trial
    cmd += ["--n-val", "2"]
    cmd += [
        "--space",
        "schema_layout=native,compact,pretty",
        "--space",
        "corrector=rules,execution",
    ]
    cmd += ["--out", str(out)]
    kills = (3, 7)
    for at in kills:
        _kill_at(cmd, env, log, at)
        assert json.loads(out.with_suffix(".ckpt.json").read_text())["lm_calls"] >= at
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    meta = read_artifact(out)["meta"]
    search = meta["extra"]["details"]["search"]
    trials = search["trials"]
    assert [t["status"] for t in trials] == ["done"] * 6 and search["n_val"] == 2
    assert trials[0]["switches"] == {"schema_layout": "native", "corrector": "rules"}
    uninterrupted = sum(t["calls"] for t in trials)
    made = _calls(log) - meta["extra"]["val_lm_calls"]
    assert uninterrupted <= made <= uninterrupted + len(kills) * max(t["calls"] for t in trials)
    assert meta["extra"]["resumed_units"] >= 1  # finished trials replayed, not rerun
    assert "search: 6 configurations on 2 validation examples" in done.stdout
