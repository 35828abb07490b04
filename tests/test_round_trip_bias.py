"""experiments/round_trip_bias.py: the written questions are the kept pairs plus the round trip's
rejects, and the score splits a run by them."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import load_experiment

from sqlweave.optimizers.synthesis import ROUND_TRIP_REJECTED

round_trip_bias = load_experiment("round_trip_bias")


def _folder(tmp_path: Path) -> Path:
    kept = {"question_id": "syn_shop_0", "db_id": "shop", "question": "How many?", "gold_sql": "S1"}
    (tmp_path / "shop.jsonl").write_text(json.dumps(kept) + "\n")
    verdicts = [
        {"template": "count", "sql": "S1", "question": "How many?", "kept": True, "why": "kept"},
        {"template": "top", "sql": "S2", "why": "returns no rows", "kept": False},
        {
            "template": "both",
            "sql": "S3",
            "question": "Which?",
            "kept": False,
            "why": ROUND_TRIP_REJECTED,
        },
    ]
    (tmp_path / "shop.jsonl.tried.jsonl").write_text(
        "".join(json.dumps(v) + "\n" for v in verdicts)
    )
    return tmp_path


def test_written_questions_are_the_kept_pairs_and_the_round_trips_rejects(tmp_path: Path):
    rows = round_trip_bias.written(_folder(tmp_path))
    assert [(r["question_id"], r["gold_sql"], r["kept"]) for r in rows] == [
        ("syn_shop_0", "S1", True),
        ("rej_shop_000", "S3", False),  # a draft whose label never ran is not a question
    ]
    assert rows[1]["question"] == "Which?" and rows[1]["db_id"] == "shop"


def test_the_score_splits_a_run_by_what_the_round_trip_kept():
    def record(qid: str, correct: bool, greedy: bool) -> dict:
        candidates = [{"origin": "direct:greedy", "correct": greedy}]
        candidates.append({"origin": "direct:sampled", "correct": correct})
        return {
            "question_id": qid,
            "correct": correct,
            "oracle": correct or greedy,
            "candidates": candidates,
        }

    records = [record("a", True, False), record("b", False, True), record("c", True, False)]
    table = round_trip_bias.score(records, {"a", "b"})
    assert table["kept"] == {
        "n": 2,
        "round_trip_program": 100.0,
        "greedy": 50.0,
        "answer": 50.0,
        "oracle": 100.0,
    }
    assert table["rejected"]["answer"] == 100.0 and table["rejected"]["round_trip_program"] == 0
    assert table["all"]["n"] == 3 and round(table["all"]["answer"], 1) == 66.7
