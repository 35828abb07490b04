"""experiments/reviewer_replay.py: the Coder-Reviewer selection over scored classes (no LM)."""

from __future__ import annotations

from conftest import load_experiment

reviewer_replay = load_experiment("reviewer_replay")


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


def test_representatives_are_the_most_written_text_of_each_class() -> None:
    texts = [
        {"sql": "a", "group": 0, "origins": ["x:greedy"]},
        {"sql": "b", "group": 0, "origins": ["x:sampled", "y:sampled"]},
        {"sql": "c", "group": None, "origins": ["y:greedy"]},
    ]
    assert [t["sql"] for t in reviewer_replay.representatives(texts)] == ["b"]


def test_the_reviewer_overturns_the_vote_only_when_it_weighs_enough() -> None:
    texts = [
        _text("wrong", 0, False, ["direct:greedy", "direct:sampled"], reviewer=-30.0),
        _text("right", 1, True, ["direct:sampled"], reviewer=-10.0),
    ]
    # vote: wrong holds 3 (greedy 2 + 1) against 1; log 3 - log 1 = 1.1 < lam * 20 once lam > 0.055
    result = reviewer_replay.select([{"texts": texts}], None, [0.05, 0.1])
    assert result["vote"] == 0.0 and result["reviewer lam=0.05"] == 0.0
    assert result["reviewer lam=0.1"] == 100.0 and result["oracle"] == 100.0
    # a subset without the right class's generator cannot pick it
    only = reviewer_replay.classes(texts, ["nonesuch"])
    assert only == []
