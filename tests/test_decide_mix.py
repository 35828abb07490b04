"""``experiments/decide.py mix``: a pool replayed from two runs' recorded candidates (rules 19
and 21 build their pools with it), cut where the rule says."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(EXPERIMENTS))  # the script imports its sibling scripts, as when it runs
spec = importlib.util.spec_from_file_location("decide", EXPERIMENTS / "decide.py")
decide = importlib.util.module_from_spec(spec)
spec.loader.exec_module(decide)


def record(qid, origins):
    return {"question_id": qid, "candidates": [{"sql": o, "origin": o} for o in origins]}


A = [record("1", ["direct:greedy", "direct:sampled1", "direct:sampled2", "direct:sampled3"])]
B = [record("1", ["direct:greedy", "dubo_v1:greedy", "dubo_v1:sampled1", "dubo_v1:sampled2"])]


def test_mix_takes_the_first_of_each_run_and_only_the_named_generator() -> None:
    (row,) = decide.mix_records(A, B, first=2, generator="dubo_v1", take=2)
    assert [c["origin"] for c in row["candidates"]] == [
        "direct:greedy",
        "direct:sampled1",
        "dubo_v1:greedy",
        "dubo_v1:sampled1",
    ]


def test_mix_defaults_are_the_union_and_skip_a_question_one_run_lacks() -> None:
    (row,) = decide.mix_records(A, B + [record("2", ["sea:greedy"])])
    assert len(row["candidates"]) == 8
    assert decide.mix_records(A, [record("2", ["sea:greedy"])]) == []


def test_a_gzipped_run_is_tabled_under_the_plain_runs_name() -> None:
    """Rule 24 tabled the committed ``.jsonl.gz``; its table was first written as
    ``….table.jsonl.gz.gz``, a name no ``read`` command of docs/decisions.md would find."""
    plain = decide.table_path(Path("runs/x__spider-train-select__1.5b.jsonl"))
    packed = decide.table_path(Path("protocol/x__spider-train-select__1.5b.jsonl.gz"))
    assert packed == plain
    assert plain.name == "x__spider-train-select__1.5b.table.jsonl"
