"""experiments/bench_rows.py on the real small model: a few rows, a few reps, its table and JSON.

Figures are not asserted (speed lives in the benchmark's output, not in tests); what must hold
is the plumbing: every row count measured, one row against itself exact, and the JSON written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import need_llama_cpp, run_experiment

from sqlweave import lm as sqlweave_lm


@pytest.mark.lm
def test_bench_rows_measures_every_row_count(tmp_path: Path) -> None:
    need_llama_cpp()
    out = tmp_path / "rows.json"
    options = ["--model", sqlweave_lm.SMALL_MODEL, "--max-rows", "3"]
    options += ["--reps", "2", "--prompt-tokens", "80", "--out", out]
    done = run_experiment("bench_rows", *options, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert [c["rows"] for c in result["step_costs"]] == [1, 2, 3]
    assert all(c["ms"] > 0 for c in result["step_costs"])
    noise = result["row_noise"]
    assert [n["rows"] for n in noise] == [1, 2, 3]
    assert noise[0]["max_diff_vs_alone"] == 0 and not noise[0]["best_token_changed"]
    assert noise[0]["top2_gap_alone"] >= 0
    assert result["settings"]["prompt_tokens"] == 80
    assert "wrote" in done.stdout
