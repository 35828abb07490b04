"""Bootstrap intervals and McNemar's exact test, checked against hand-computed values."""

from __future__ import annotations

import math

import pytest

from sqlweave.stats import bootstrap_ci, mcnemar_exact, outcomes_by_id, paired


def test_mcnemar_exact_matches_the_binomial_tail() -> None:
    # 10 discordant pairs split 9 / 1: p = 2 * (C(10,0) + C(10,1)) / 2^10 = 22 / 1024.
    assert mcnemar_exact(9, 1) == pytest.approx(22 / 1024)
    assert mcnemar_exact(1, 9) == mcnemar_exact(9, 1)
    assert mcnemar_exact(5, 5) == 1.0
    assert mcnemar_exact(0, 0) == 1.0
    # 20 vs 5 is significant, 12 vs 8 is not.
    assert mcnemar_exact(20, 5) < 0.01
    assert mcnemar_exact(12, 8) > 0.3


def test_mcnemar_rejects_negative_counts() -> None:
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 3)


def test_bootstrap_interval_brackets_the_mean_and_shrinks_with_n() -> None:
    small = bootstrap_ci([True, False] * 25)
    large = bootstrap_ci([True, False] * 500)
    for ci in (small, large):
        assert ci.low <= ci.estimate == 0.5 <= ci.high
    assert (large.high - large.low) < (small.high - small.low)
    # Normal approximation for n = 1000, p = 0.5: half-width ~ 1.96 * sqrt(.25 / 1000) = 0.031.
    assert large.high - large.low == pytest.approx(2 * 1.96 * math.sqrt(0.25 / 1000), abs=0.012)


def test_bootstrap_is_deterministic_and_handles_edge_cases() -> None:
    data = [True] * 30 + [False] * 10
    assert bootstrap_ci(data, seed=3) == bootstrap_ci(data, seed=3)
    assert bootstrap_ci([]).n == 0
    all_right = bootstrap_ci([True] * 10)
    assert (all_right.low, all_right.high) == (1.0, 1.0)
    with pytest.raises(ValueError):
        bootstrap_ci(data, level=1.5)


def test_paired_uses_only_shared_questions() -> None:
    a = {"q1": True, "q2": True, "q3": False, "q4": True, "extra": True}
    b = {"q1": True, "q2": False, "q3": False, "q4": False}
    cmp = paired(a, b)
    assert cmp.n == 4
    assert (cmp.only_a, cmp.only_b) == (2, 0)
    assert cmp.delta == pytest.approx(0.5)
    assert cmp.p_value == pytest.approx(mcnemar_exact(2, 0))
    assert cmp.diff.low <= cmp.delta <= cmp.diff.high
    with pytest.raises(ValueError, match="share no question"):
        paired({"x": True}, {"y": True})


def test_outcomes_by_id_reads_evaluation_records() -> None:
    records = [{"question_id": 7, "correct": True}, {"question_id": "8", "correct": False}]
    assert outcomes_by_id(records) == {"7": True, "8": False}
