"""experiments/bench_lm.py end to end on a stand-in model, so a real run (tens of minutes on the
1.5B model) does not die on its plumbing: every mode, the summaries, the checks, the JSON.

The script runs in its own process through ``tests/stand_in_bench.py`` (the stand-in model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_on_stand_in

pytest.importorskip("llama_cpp")  # patched by the stand-in; no model is loaded


@pytest.mark.timeout(300)
def test_bench_runs_every_mode_on_a_stand_in_model(data_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    args = ["--limit", "3", "--samples", "3", "--n-threads", "1", "--out", str(out)]
    done, seen = run_on_stand_in(tmp_path, "bench_lm", 3, *args)

    results = json.loads(out.read_text())
    assert list(results["modes"]) == ["plain", "naive", "direct", "direct_lookup", "sc8"]
    for name, mode in results["modes"].items():
        summary = mode["summary"]
        assert summary["n"] == 3 and summary["ex"] == 1.0, (name, mode["rows"])
        assert summary["s_per_question"] > 0 and "decode_tok_per_s" in summary
    # The oracle's answers agree: after two of three the vote is settled (the third is not drawn).
    assert results["modes"]["sc8"]["summary"]["calls_per_question"] == 2
    assert results["modes"]["direct"]["summary"]["prompt_tokens_evaluated_per_question"] == 5
    checks = results["checks"]
    for name in ("lookup_identical_completions", "sc_greedy_is_direct", "naive_sql_is_plain_sql"):
        assert checks[name]["identical"] == 3 and checks[name]["differ"] == [], name
    assert {"direct_over_plain", "sc_over_direct", "lookup_speedup"} <= set(checks)
    assert results["settings"]["n_threads"] == 1 and results["settings"]["questions"] == 3
    assert seen["resets"] == 4  # every sqlweave mode starts with an empty KV cache
    printed = done.stdout
    assert "sc_greedy_is_direct: 3/3 identical" in printed and f"wrote {out}" in printed


@pytest.mark.timeout(300)
def test_rounds_alternate_the_order_and_pool_each_mode(data_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    args = ["--limit", "2", "--modes", "direct", "sc8", "--rounds", "3", "--n-threads", "1"]
    _, seen = run_on_stand_in(tmp_path, "bench_lm", 2, *args, "--out", str(out))
    # each mode's program, in the order the rounds built them: sc8 is direct with samples
    ran = ["sc8" if switches.get("samples") else name for name, switches in seen["programs"]]

    results = json.loads(out.read_text())
    assert ran == ["direct", "sc8", "sc8", "direct", "direct", "sc8"]
    assert results["settings"]["order"] == [["direct", "sc8"], ["sc8", "direct"], ["direct", "sc8"]]
    for mode in ("direct", "sc8"):
        entry = results["modes"][mode]
        assert entry["summary"]["n"] == 6 and len(entry["rows"]) == 2
        assert [r["n"] for r in entry["rounds"]] == [2, 2, 2]
        pooled = sum(r["s_per_question"] for r in entry["rounds"]) / 3
        assert entry["summary"]["s_per_question"] == pytest.approx(pooled)
