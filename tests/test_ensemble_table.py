"""The per-generator table and the vote replay (sqlweave.programs.stages.replay) that
experiments/ensemble_table.py prints."""

from __future__ import annotations

import pytest

from sqlweave.programs.stages.replay import (
    generator_table,
    generator_table_markdown,
    merge_runs,
    replay_vote,
)


def cand(origin, group, correct):
    return {"sql": "x", "origin": origin, "group": group, "correct": correct}


RECORDS = [
    # a: direct's vote is wrong (2 vs 1), sea alone has it right
    {
        "correct": False,
        "oracle": True,
        "candidates": [
            cand("direct:greedy", 0, False),
            cand("direct:sampled", 0, False),
            cand("sea:greedy", 1, True),
        ],
    },
    # b: both right; a failed candidate joins no class
    {
        "correct": True,
        "oracle": True,
        "candidates": [
            cand("direct:greedy", 0, True),
            cand("direct:sampled", None, False),
            cand("sea:greedy", 0, True),
        ],
    },
]


def test_replay_vote_weighs_by_generator_and_breaks_ties_by_order() -> None:
    cands = RECORDS[0]["candidates"]
    assert replay_vote(cands) is False
    assert replay_vote(cands, {"sea": 3.0}) is True
    assert replay_vote([cand("a:greedy", 1, True), cand("b:greedy", 0, False)])
    assert replay_vote([cand("a:greedy", None, False)]) is False


def test_table_counts_what_only_one_generator_gets_right() -> None:
    result = generator_table(RECORDS)
    assert result["ex"] == 50.0 and result["oracle"] == 100.0
    direct, sea = result["generators"]["direct"], result["generators"]["sea"]
    assert direct["greedy_ex"] == 50.0 and direct["oracle"] == 50.0 and direct["only_it"] == 0
    assert sea["greedy_ex"] == 100.0 and sea["only_it"] == 1
    assert result["subsets"]["direct,sea"]["oracle"] == 100.0
    assert result["subsets"]["direct"]["vote_ex"] == 50.0
    assert "| sea | 100.0 |" in generator_table_markdown(result)


def test_a_record_without_candidates_counts_as_nothing_right() -> None:
    result = generator_table([{"correct": True}, RECORDS[0]])
    assert result["generators"]["sea"]["oracle"] == pytest.approx(50.0)


def test_runs_asking_different_generators_merge_into_one_table() -> None:
    first = [{**r, "question_id": str(i)} for i, r in enumerate(RECORDS)]
    # a second run asked sea again (dropped: the first run's sea is kept) and pet
    second = [
        {
            "question_id": "0",
            "candidates": [cand("sea:greedy", 0, False), cand("pet:greedy", 0, True)],
        },
        {"question_id": "1", "candidates": [cand("pet:greedy", 0, False)]},
    ]
    merged = merge_runs([first, second])
    assert [c["origin"] for c in merged[0]["candidates"]] == [
        "direct:greedy",
        "direct:sampled",
        "sea:greedy",
        "pet:greedy",
    ]
    assert merged[0]["candidates"][2]["correct"] is True  # the first run's sea
    assert merged[0]["candidates"][3]["group"] == "1:0" != merged[0]["candidates"][0]["group"]
    result = generator_table(merged, subsets=False)
    assert result["subsets"] == {} and result["oracle"] == 100.0
    assert result["generators"]["pet"]["greedy_ex"] == 50.0
    assert result["generators"]["sea"]["only_it"] == 0  # pet is right on question 0 too
    assert "vote replay" not in generator_table_markdown(result)
    with pytest.raises(KeyError):
        merge_runs([first, second[:1]])
