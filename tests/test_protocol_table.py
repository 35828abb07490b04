"""experiments/protocol.py --table: one row per summary, naive first, and the share of calls that
DSPy's cache answered shown beside the cost, so a row whose tokens and seconds come mostly from
cache hits cannot pass for a cold run's cost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


@pytest.fixture()
def protocol(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    import protocol

    monkeypatch.setattr(protocol, "RESULTS", tmp_path)
    return protocol


def _summary(program: str, ex: float, usage: dict | None, config: str = "") -> dict:
    return {
        "program": program,
        "config": config,
        "slice": "bird-52",
        "model": "local:qwen2.5-coder-1.5b",
        "ex": ex,
        "interval": [ex - 0.1, ex + 0.1],
        "n": 52,
        "usage": usage,
    }


def test_table_shows_cached_calls_beside_cost(protocol, tmp_path):
    cold = {
        "calls": 1.0,
        "cached_calls": 0.0,
        "prompt_tokens": 500.0,
        "completion_tokens": 20.0,
        "wall_seconds": 3.1,
    }
    warm = {
        "calls": 8.0,
        "cached_calls": 8.0,
        "prompt_tokens": 0.0,
        "completion_tokens": 0.0,
        "wall_seconds": 0.02,
    }
    (tmp_path / "naive__bird-52__1.5b.json").write_text(json.dumps(_summary("naive", 0.25, cold)))
    (tmp_path / "weave__c__bird-52__1.5b.json").write_text(
        json.dumps(_summary("weave", 0.48, warm, config="compiled-search"))
    )
    (tmp_path / "old__bird-52__1.5b.json").write_text(json.dumps(_summary("old", 0.30, None)))
    lines = protocol.table().splitlines()
    header = next(line for line in lines if line.startswith("| program"))
    assert "| calls/q | cached/q | tokens/q | s/q |" in header
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| program")]
    assert rows[0].startswith("| naive |")
    assert rows[0].endswith("| 1.00 | 0.00 | 520 | 3.1 |")
    weave = next(r for r in rows if r.startswith("| weave (compiled-search)"))
    assert weave.endswith("| 8.00 | 8.00 | 0 | 0.0 |")
    assert next(r for r in rows if r.startswith("| old |")).endswith("| — | — | — | — |")
    assert all(r.count("|") == header.count("|") for r in rows)
