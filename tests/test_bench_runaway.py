"""experiments/bench_runaway.py: its plumbing on the quick control case (figures are not asserted;
they live in the benchmark's output and docs/security.md)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_experiment


def test_bench_runaway_measures_a_case_in_a_fresh_process(tmp_path: Path) -> None:
    out = tmp_path / "runaway.json"
    options = ["--cases", "sqlite_instr_short_needle", "--out", out, "--timeout", "5"]
    done = run_experiment("bench_runaway", *options)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    (case,) = result["cases"]
    assert case["case"] == "sqlite_instr_short_needle" and case["ended"] == "finished"
    assert case["seconds"] >= 0 and case["rss_growth_mb"] >= 0 and case["timeout_s"] == 5
    assert "sqlite_instr_short_needle" in done.stdout
