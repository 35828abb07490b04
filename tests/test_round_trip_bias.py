"""experiments/round_trip_bias.py, run as its users run it: the written questions are the kept
pairs plus the round trip's rejects, and the score splits a run by them."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_experiment

from sqlweave.synthesis.pairs import ROUND_TRIP_REJECTED


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


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_written_questions_are_the_kept_pairs_and_the_round_trips_rejects(tmp_path: Path):
    (tmp_path / "pairs").mkdir()
    pairs = _folder(tmp_path / "pairs")
    out = tmp_path / "round-trip" / "written.jsonl"
    done = run_experiment("round_trip_bias", "build", pairs, out)
    assert done.returncode == 0, done.stderr
    rows = _lines(out)
    assert [(r["question_id"], r["gold_sql"], r["kept"]) for r in rows] == [
        ("syn_shop_0", "S1", True),
        ("rej_shop_000", "S3", False),  # a draft whose label never ran is not a question
    ]
    assert rows[1]["question"] == "Which?" and rows[1]["db_id"] == "shop"
    assert f"2 written questions, 1 kept -> {out}" in done.stdout


def test_the_score_splits_a_run_by_what_the_round_trip_kept(tmp_path: Path):
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
    run = tmp_path / "written__direct.jsonl"
    run.write_text("".join(json.dumps(r) + "\n" for r in records))
    questions = [{"question_id": q, "kept": q in {"a", "b"}} for q in "abc"]
    (tmp_path / "written.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    done = run_experiment("round_trip_bias", "score", run)  # the questions beside the run
    assert done.returncode == 0, done.stderr
    table = json.loads(run.with_suffix(".summary.json").read_text())
    assert table["kept"] == {
        "n": 2,
        "round_trip_program": 100.0,
        "greedy": 50.0,
        "answer": 50.0,
        "oracle": 100.0,
    }
    assert table["rejected"]["answer"] == 100.0 and table["rejected"]["round_trip_program"] == 0
    assert table["all"]["n"] == 3 and round(table["all"]["answer"], 1) == 66.7
