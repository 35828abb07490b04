"""experiments/compile_vs_uncompiled.py: the commands it runs (the user's CLI, validation on
spider-train-val, the artefact loaded by protocol.py) and the summary and table it writes from the
artefact and the protocol summaries, so an hour-long run does not die on its plumbing.

The script runs as its users run it, with ``--no-run`` (it prints each step's command, runs none
and summarises what is there), from a copy of the lab under ``tmp_path`` whose ``results/`` are
the test's own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import lab_copy, run_experiment

MODEL = "local:qwen2.5-coder-1.5b"


@pytest.fixture()
def lab(tmp_path: Path) -> Path:
    """A copy of the script and the two it imports; its results beside it."""
    return lab_copy(tmp_path, "compile_vs_uncompiled", "protocol", "run_programs")


def _run(lab: Path, *options: str, program: str = "pet") -> list[list[str]]:
    """The script with ``--no-run`` (and the options of the test's compile); the commands it
    printed, each split into words (without the interpreter)."""
    base = ["--program", program, "--budget", "300", "--n-val", "40", "--space", "samples=2,8"]
    base += ["--model", MODEL, "--n-threads", "1", "--no-run", *options]
    done = run_experiment("compile_vs_uncompiled", *base, folder=lab, cwd=lab.parent)
    assert done.returncode == 0, done.stderr
    return [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("$ ")]


def _results(lab: Path, name: str) -> Path:
    folder = lab / "results" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_compile_command_validates_on_unseen_databases(lab: Path) -> None:
    commands = _run(lab, "--slices", "bird-52")
    compile_cmd = next(c for c in commands if c[:3] == ["-m", "sqlweave", "compile"])
    joined = " ".join(compile_cmd)
    assert "--val spider-train-val" in joined and "--n-val 40" in joined
    assert "--budget 300" in joined and "--space samples=2,8" in joined
    artefact = lab / "results" / "compile" / "pet__search__1.5b.artefact.json"
    assert "--out " + str(artefact) in joined


def test_protocol_commands_uncompiled_and_artefact(lab: Path) -> None:
    commands = _run(lab, "--slices", "bird-52")
    plain, loaded = [c for c in commands if c[0].endswith("protocol.py")]
    assert plain[plain.index("--program") + 1] == "pet" and "--artifact" not in plain
    artefact = lab / "results" / "compile" / "pet__search__1.5b.artefact.json"
    assert loaded[loaded.index("--artifact") + 1] == str(artefact)
    assert loaded[loaded.index("--n-threads") + 1] == "1"
    assert plain[plain.index("--slice") + 1] == "bird-52" == loaded[loaded.index("--slice") + 1]


def test_a_tagged_compile_keeps_its_files_apart(lab: Path) -> None:
    tagged = _run(lab, "--slices", "bird-52", "--tag", "rules", program="direct")
    compile_cmd, plain, loaded = tagged
    out = compile_cmd[compile_cmd.index("--out") + 1]
    assert Path(out).name == "direct__search-rules__1.5b.artefact.json"
    assert loaded[loaded.index("--config") + 1] == "compiled-search-rules"
    assert "--config" not in plain  # the uncompiled run
    untagged = _run(lab, "--slices", "bird-52", program="direct")
    out = untagged[0][untagged[0].index("--out") + 1]
    assert Path(out).name == "direct__search__1.5b.artefact.json"
    assert "--config" not in untagged[-1]


def _summary(program, config, ex, **extra):
    return {
        "program": program,
        "config": config,
        "n": 200,
        "ex": ex,
        "interval": [ex - 0.07, ex + 0.07],
        "usage": {"calls": 2.0, "wall_seconds": 5.0},
        "records": f"{program}.jsonl",
        **extra,
    }


def _artefact(lab: Path) -> Path:
    search = {
        "chosen": {"samples": 8},
        "trials": [
            {
                "switches": {"samples": 2},
                "score": 0.6,
                "calls": 90,
                "seconds": 50.0,
                "status": "done",
            }
        ],
    }
    meta = {
        "optimizer": "search",
        "lm_calls": 250,
        "budget": 300,
        "compile_seconds": 900.0,
        "n_train": 24,
        "n_val": 40,
        "val_ex": 0.75,
        "extra": {"details": {"search": search}},
    }
    artefact = _results(lab, "compile") / "pet__search__1.5b.artefact.json"
    artefact.write_text(json.dumps({"meta": meta}))
    return artefact


def test_summary_and_table_from_artefact_and_protocol(lab: Path) -> None:
    _artefact(lab)
    cmp = {"delta": 0.06, "delta_interval": [0.02, 0.1], "p": 0.01}
    protocol = _results(lab, "protocol")
    (protocol / "pet__spider-dev-200__1.5b.json").write_text(json.dumps(_summary("pet", "", 0.55)))
    (protocol / "pet__compiled-search__spider-dev-200__1.5b.json").write_text(
        json.dumps(_summary("pet", "compiled-search", 0.61, vs_uncompiled=cmp))
    )
    [loaded] = _run(lab, "--slices", "spider-dev-200")  # compiled, uncompiled run: only this
    artefact = lab / "results" / "compile" / "pet__search__1.5b.artefact.json"
    assert loaded[loaded.index("--artifact") + 1] == str(artefact)
    summary = json.loads((lab / "results" / "compile" / "pet__search__1.5b.json").read_text())
    assert summary["chosen"] == {"samples": 8}
    assert summary["compile"]["lm_calls"] == 250 and summary["budget"] == 300
    assert summary["compile"]["wall_seconds_this_invocation"] is None  # nothing compiled
    dev = summary["slices"]["spider-dev-200"]
    assert dev["uncompiled"]["ex"] == 0.55 and dev["compiled"]["ex"] == 0.61
    # an older, pre-protocol summary is not a protocol row
    (lab / "results" / "compile" / "mage__bootstrap__1.5b.json").write_text(
        json.dumps({"program": "m"})
    )
    done = run_experiment("compile_vs_uncompiled", "--table", folder=lab, cwd=lab.parent)
    assert done.returncode == 0, done.stderr
    readme = (lab / "results" / "compile" / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| pet ")]
    assert len(rows) == 1 and not any(line.startswith("| m ") for line in readme.splitlines())
    assert "| pet | search | spider-dev-200 | 200 | 55.0 | 61.0" in rows[0]
    assert "+6.0 [+2.0, +10.0] | 0.01 | 250 of 300" in rows[0] and "samples=8" in rows[0]


def test_summary_skips_a_slice_not_run_yet(lab: Path) -> None:
    _artefact(lab)
    _run(lab, "--slices", "spider-dev-200")
    summary = json.loads((lab / "results" / "compile" / "pet__search__1.5b.json").read_text())
    assert summary["slices"] == {}


def test_no_summary_before_the_compile(lab: Path) -> None:
    _run(lab, "--slices", "spider-dev-200")
    assert not list((lab / "results" / "compile").glob("*.json"))


def test_a_reused_artefact_keeps_the_compile_wall_time(lab: Path) -> None:
    _artefact(lab)
    summary = lab / "results" / "compile" / "pet__search__1.5b.json"
    summary.write_text(json.dumps({"compile": {"wall_seconds_this_invocation": 727.8}}))
    _run(lab, "--slices", "spider-dev-200")
    assert json.loads(summary.read_text())["compile"]["wall_seconds_this_invocation"] == 727.8
    summary.write_text("{not json")
    _run(lab, "--slices", "spider-dev-200")
    assert json.loads(summary.read_text())["compile"]["wall_seconds_this_invocation"] is None


def test_python_m_sqlweave_runs_the_cli():
    out = subprocess.run(
        [sys.executable, "-m", "sqlweave", "--help"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and "compile" in out.stdout
