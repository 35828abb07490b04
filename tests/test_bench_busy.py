"""experiments/bench_busy.py: its competing load is real and goes away, and a whole run on a
stand-in model writes the table and JSON (a real run takes minutes of the 1.5B model).

The script runs in its own process through ``tests/stand_in_bench.py`` (the stand-in model),
which notes, at each model call, the busy processes the benchmark had running."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import run_on_stand_in

pytest.importorskip("llama_cpp")  # patched by the stand-in; no model is loaded


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


@pytest.fixture(scope="module")
def busy_run(data_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run on the first two questions, 1 and 2 threads: its JSON, stdout and stand-in report."""
    tmp_path = tmp_path_factory.mktemp("busy")
    out = tmp_path / "busy.json"
    args = ["--limit", "2", "--threads", "1", "2", "--out", str(out)]
    done, seen = run_on_stand_in(tmp_path, "bench_busy", 2, *args)
    return {"results": json.loads(out.read_text()), "stdout": done.stdout, "seen": seen, "out": out}


@pytest.mark.timeout(300)
def test_busy_processes_spin_and_are_killed(busy_run: dict[str, Any]) -> None:
    calls = busy_run["seen"]["calls"]  # per model call: the spinning children at that moment
    busy = [pids for pids in calls if pids]
    # idle, no competing process; busy, one (--busy 1), a fresh one for each thread count
    assert any(not pids for pids in calls) and busy and all(len(pids) == 1 for pids in busy)
    spun = {pid for pids in busy for pid in pids}
    assert len(spun) == 2
    assert not any(_alive(pid) for pid in spun)  # killed, not left spinning after the run


@pytest.mark.timeout(300)
def test_bench_busy_end_to_end_on_a_stand_in_model(busy_run: dict[str, Any]) -> None:
    results, out = busy_run["results"], busy_run["out"]
    assert [run["n_threads"] for run in results["runs"]] == [1, 2]
    for run in results["runs"]:
        for condition in ("idle", "busy"):
            assert run[condition]["ex"] == 1.0 and run[condition]["s_per_question"] > 0
        assert run["same_sql"] == 1.0 and run["throughput_vs_idle"] > 0
    assert results["settings"]["busy_processes"] == 1 and results["settings"]["questions"] == 2
    printed = busy_run["stdout"]
    assert "| n_threads | idle s/q |" in printed and f"wrote {out}" in printed
