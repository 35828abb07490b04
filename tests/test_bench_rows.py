"""experiments/bench_rows.py on the real small model: a few rows, a few reps, its table and JSON.

Figures are not asserted (speed lives in the benchmark's output, not in tests); what must hold
is the plumbing: every row count measured, one row against itself exact, and the JSON written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import load_experiment, need_llama_cpp

from sqlweave import lm as sqlweave_lm


def _bench() -> Any:
    return load_experiment("bench_rows")


@pytest.mark.lm
def test_bench_rows_measures_every_row_count(tmp_path: Path, monkeypatch, capsys) -> None:
    need_llama_cpp()
    bench = _bench()
    out = tmp_path / "rows.json"
    argv = ["bench_rows.py", "--model", sqlweave_lm.SMALL_MODEL, "--max-rows", "3"]
    argv += ["--reps", "2", "--prompt-tokens", "80", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    result = json.loads(out.read_text())
    assert [c["rows"] for c in result["step_costs"]] == [1, 2, 3]
    assert all(c["ms"] > 0 for c in result["step_costs"])
    noise = result["row_noise"]
    assert [n["rows"] for n in noise] == [1, 2, 3]
    assert noise[0]["max_diff_vs_alone"] == 0 and not noise[0]["best_token_changed"]
    assert noise[0]["top2_gap_alone"] >= 0
    assert result["settings"]["prompt_tokens"] == 80
    assert "wrote" in capsys.readouterr().out
