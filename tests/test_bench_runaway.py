"""experiments/bench_runaway.py: its plumbing on the quick control case (figures are not asserted;
they live in the benchmark's output and docs/security.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import load_experiment


def test_bench_runaway_measures_a_case_in_a_fresh_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_experiment("bench_runaway")
    out = tmp_path / "runaway.json"
    argv = ["bench_runaway.py", "--cases", "sqlite_instr_short_needle", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", [*argv, "--timeout", "5"])
    bench.main()
    result = json.loads(out.read_text())
    (case,) = result["cases"]
    assert case["case"] == "sqlite_instr_short_needle" and case["ended"] == "finished"
    assert case["seconds"] >= 0 and case["rss_growth_mb"] >= 0 and case["timeout_s"] == 5
    assert "sqlite_instr_short_needle" in capsys.readouterr().out
