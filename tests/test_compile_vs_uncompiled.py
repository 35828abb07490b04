"""experiments/compile_vs_uncompiled.py: the commands it runs (the user's CLI, validation on
spider-train-val, the artefact loaded by protocol.py) and the summary and table it writes from the
artefact and the protocol summaries, so an hour-long run does not die on its plumbing."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


@pytest.fixture()
def cvu(monkeypatch):
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    import compile_vs_uncompiled

    return compile_vs_uncompiled


def _args(**kw) -> argparse.Namespace:
    base = dict(
        program="pet",
        optimizer="search",
        budget=300,
        n_train=24,
        n_val=40,
        search_val=0,
        trials=8,
        space=["samples=2,8"],
        max_demos=2,
        proposer_model=None,
        slices=["spider-dev-200"],
        model="local:qwen2.5-coder-1.5b",
        n_threads=1,
    )
    base.update(kw)
    return argparse.Namespace(**base)


def test_compile_command_validates_on_unseen_databases(cvu, tmp_path):
    cmd = cvu.compile_command(_args(), tmp_path / "a.json")
    assert cmd[:4] == [sys.executable, "-m", "sqlweave", "compile"]
    joined = " ".join(cmd)
    assert "--val spider-train-val" in joined and "--n-val 40" in joined
    assert "--budget 300" in joined and "--space samples=2,8" in joined
    assert "--out " + str(tmp_path / "a.json") in joined


def test_protocol_commands_uncompiled_and_artefact(cvu, tmp_path):
    plain = cvu.protocol_command(_args(), "bird-52", None)
    assert plain[plain.index("--program") + 1] == "pet" and "--artifact" not in plain
    loaded = cvu.protocol_command(_args(), "bird-52", tmp_path / "a.json")
    assert loaded[loaded.index("--artifact") + 1] == str(tmp_path / "a.json")
    assert loaded[loaded.index("--n-threads") + 1] == "1"


def test_a_tagged_compile_keeps_its_files_apart(cvu, tmp_path):
    args = _args(program="direct", tag="rules")
    assert cvu._stem(args) == "direct__search-rules__1.5b"
    assert cvu._stem(_args(program="direct")) == "direct__search__1.5b"
    loaded = cvu.protocol_command(args, "bird-52", tmp_path / "a.json")
    assert loaded[loaded.index("--config") + 1] == "compiled-search-rules"
    assert "--config" not in cvu.protocol_command(_args(), "bird-52", tmp_path / "a.json")
    assert "--config" not in cvu.protocol_command(args, "bird-52", None)  # the uncompiled run


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


def test_summary_and_table_from_artefact_and_protocol(cvu, tmp_path, monkeypatch):
    monkeypatch.setattr(cvu, "RESULTS", tmp_path / "compile")
    monkeypatch.setattr(cvu, "PROTOCOL_RESULTS", tmp_path / "protocol")
    (tmp_path / "compile").mkdir()
    (tmp_path / "protocol").mkdir()
    artefact = tmp_path / "compile" / "pet__search__1.5b.artefact.json"
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
    artefact.write_text(json.dumps({"meta": meta}))
    cmp = {"delta": 0.06, "delta_interval": [0.02, 0.1], "p": 0.01}
    protocol = tmp_path / "protocol"
    (protocol / "pet__spider-dev-200__1.5b.json").write_text(json.dumps(_summary("pet", "", 0.55)))
    (protocol / "pet__compiled-search__spider-dev-200__1.5b.json").write_text(
        json.dumps(_summary("pet", "compiled-search", 0.61, vs_uncompiled=cmp))
    )
    summary = cvu.summarize(_args(), artefact, None)
    assert summary["chosen"] == {"samples": 8}
    assert summary["compile"]["lm_calls"] == 250 and summary["budget"] == 300
    dev = summary["slices"]["spider-dev-200"]
    assert dev["uncompiled"]["ex"] == 0.55 and dev["compiled"]["ex"] == 0.61
    (tmp_path / "compile" / "pet__search__1.5b.json").write_text(json.dumps(summary))
    # an older, pre-protocol summary is not a protocol row
    (tmp_path / "compile" / "mage__bootstrap__1.5b.json").write_text(json.dumps({"program": "m"}))
    rows = cvu.protocol_rows()
    assert len(rows) == 1
    assert "| pet | search | spider-dev-200 | 200 | 55.0 | 61.0" in rows[0]
    assert "+6.0 [+2.0, +10.0] | 0.01 | 250 of 300" in rows[0] and "samples=8" in rows[0]


def test_summary_skips_a_slice_not_run_yet(cvu, tmp_path, monkeypatch):
    monkeypatch.setattr(cvu, "PROTOCOL_RESULTS", tmp_path)
    artefact = tmp_path / "a.artefact.json"
    artefact.write_text(json.dumps({"meta": {"optimizer": "search"}}))
    assert cvu.summarize(_args(), artefact, None)["slices"] == {}


def test_a_reused_artefact_keeps_the_compile_wall_time(cvu, tmp_path):
    summary = tmp_path / "pet__search__1.5b.json"
    assert cvu.previous_compile_wall(summary) is None
    summary.write_text(json.dumps({"compile": {"wall_seconds_this_invocation": 727.8}}))
    assert cvu.previous_compile_wall(summary) == 727.8
    summary.write_text("{not json")
    assert cvu.previous_compile_wall(summary) is None


def test_python_m_sqlweave_runs_the_cli():
    out = subprocess.run(
        [sys.executable, "-m", "sqlweave", "--help"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and "compile" in out.stdout
