"""experiments/bench_busy.py: its competing load is real and goes away, and a whole run on a
stand-in model writes the table and JSON (a real run takes minutes of the 1.5B model)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import load_experiment
from test_bench_lm import Oracle, load_stand_in  # bench_lm's own test's stand-in model

llama_cpp = pytest.importorskip("llama_cpp")  # patched below; no model is loaded


def _bench() -> Any:
    return load_experiment("bench_busy")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def test_busy_processes_spin_and_are_killed() -> None:
    bench = _bench()
    with bench.busy_processes(2) as pids:
        assert len(pids) == 2 and all(_alive(pid) for pid in pids)
    assert not any(_alive(pid) for pid in pids)
    with bench.busy_processes(0) as none:
        assert none == []


@pytest.mark.timeout(300)
def test_bench_busy_end_to_end_on_a_stand_in_model(
    data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from sqlweave.data import load_slice

    examples = load_slice("spider-dev-200")[:2]
    oracle = Oracle({ex.question: ex.gold_sql for ex in examples})
    load_stand_in(monkeypatch, oracle)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    out = tmp_path / "busy.json"
    argv = ["bench_busy.py", "--model", f"gguf:{gguf}", "--limit", "2", "--threads", "1", "2"]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out)])
    _bench().main()

    results = json.loads(out.read_text())
    assert [run["n_threads"] for run in results["runs"]] == [1, 2]
    for run in results["runs"]:
        for condition in ("idle", "busy"):
            assert run[condition]["ex"] == 1.0 and run[condition]["s_per_question"] > 0
        assert run["same_sql"] == 1.0 and run["throughput_vs_idle"] > 0
    assert results["settings"]["busy_processes"] == 1 and results["settings"]["questions"] == 2
    printed = capsys.readouterr().out
    assert "| n_threads | idle s/q |" in printed and f"wrote {out}" in printed
