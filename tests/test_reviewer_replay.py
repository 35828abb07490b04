"""experiments/reviewer_replay.py: the Coder-Reviewer selection over scored classes (no LM), run as
its ``select`` step; its class representatives are sqlweave.programs.stages.replay's."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_experiment

from sqlweave.programs.stages.replay import representatives


def _text(sql, group, correct, origins, reviewer, coder=-1.0):
    return {
        "sql": sql,
        "group": group,
        "correct": correct,
        "origins": origins,
        "reviewer": reviewer,
        "coder": coder,
        "coder_tokens": 1,
    }


def _select(scores: Path, *options: str) -> dict[str, float]:
    """``reviewer_replay.py select``'s printed table: EX by selection."""
    done = run_experiment("reviewer_replay", "select", scores, *options)
    assert done.returncode == 0, done.stderr
    rows = [line.strip("|").split("|") for line in done.stdout.splitlines()]
    return {name.strip(): float(ex) for name, ex in (r for r in rows if len(r) == 2)}


def test_representatives_are_the_most_written_text_of_each_class() -> None:
    texts = [
        {"sql": "a", "group": 0, "origins": ["x:greedy"]},
        {"sql": "b", "group": 0, "origins": ["x:sampled", "y:sampled"]},
        {"sql": "c", "group": None, "origins": ["y:greedy"]},
    ]
    assert [t["sql"] for t in representatives(texts)] == ["b"]


def test_the_reviewer_overturns_the_vote_only_when_it_weighs_enough(tmp_path: Path) -> None:
    texts = [
        _text("wrong", 0, False, ["direct:greedy", "direct:sampled"], reviewer=-30.0),
        _text("right", 1, True, ["direct:sampled"], reviewer=-10.0),
    ]
    scores = tmp_path / "run.reviewer.jsonl"
    scores.write_text(json.dumps({"question_id": "q", "texts": texts}) + "\n")
    # vote: wrong holds 3 (greedy 2 + 1) against 1; log 3 - log 1 = 1.1 < lam * 20 once lam > 0.055
    result = _select(scores, "--lam", "0.05,0.1")
    assert result["vote"] == 0.0 and result["reviewer lam=0.05"] == 0.0
    assert result["reviewer lam=0.1"] == 100.0 and result["oracle"] == 100.0
    # a subset without the right class's generator cannot pick it: no class is left at all
    only = _select(scores, "--lam", "0.05,0.1", "--generators", "nonesuch")
    assert only["oracle"] == 0.0 and set(only.values()) == {0.0}
