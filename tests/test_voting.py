"""Execution-based voting on a real Spider database: classes, weights, the tie rules, fallbacks,
and self-consistency sampling with DummyLM."""

from __future__ import annotations

import dspy
import pytest
from conftest import spy_rollouts
from dspy.utils import DummyLM

from sqlweave.programs.direct import DirectSQL
from sqlweave.programs.voting import SelfConsistency, execution_groups, vote

N_SINGERS = "SELECT count(*) FROM singer"  # 6
N_SINGERS_2 = "SELECT count(singer_id) FROM singer"  # 6, written differently
N_STADIUMS = "SELECT count(*) FROM stadium"  # 9
OLDEST = "SELECT max(age) FROM singer"  # 52
NOBODY = "SELECT name FROM singer WHERE age > 1000"  # empty
NOBODY_2 = "SELECT name FROM singer WHERE age < 0"  # empty
BROKEN = "SELECT nme FROM singer"
BY_AGE = "SELECT name FROM singer ORDER BY age"
BY_AGE_DESC = "SELECT name FROM singer ORDER BY age DESC"
ANY_ORDER = "SELECT name FROM singer"


@pytest.fixture()
def db(spider_db):
    return spider_db("concert_singer")


def test_groups_execution_equivalent_candidates(db) -> None:
    groups, outcomes = execution_groups([N_SINGERS, BROKEN, N_STADIUMS, N_SINGERS_2], db)
    assert [g.members for g in groups] == [[0, 3], [2]]
    assert [g.weight for g in groups] == [2.0, 1.0]
    assert len(outcomes) == 4 and outcomes[1].kind == "unknown_column"


def test_order_matters_only_when_both_sort(db) -> None:
    groups, _ = execution_groups([BY_AGE, BY_AGE_DESC, ANY_ORDER], db)
    # The two sorted queries differ; the unsorted one matches the first as a multiset.
    assert [g.members for g in groups] == [[0, 2], [1]]


def test_largest_class_wins(db) -> None:
    result = vote([N_STADIUMS, N_SINGERS, BROKEN, N_SINGERS_2], db)
    assert result.sql == N_SINGERS and result.winner_index == 1
    assert result.support == 2.0 and result.total == 4.0 and result.share == 0.5


def test_tie_goes_to_the_earliest_candidate(db) -> None:
    assert vote([OLDEST, N_STADIUMS], db).sql == OLDEST
    assert vote([N_STADIUMS, OLDEST], db).sql == N_STADIUMS
    # A failed first candidate does not count; the earliest that ran wins the tie.
    assert vote([BROKEN, N_STADIUMS, OLDEST], db).winner_index == 1


def test_empty_results_vote_but_lose_ties(db) -> None:
    assert vote([NOBODY, OLDEST], db).sql == OLDEST
    # Empty results agree with each other and can outvote a lone non-empty answer.
    result = vote([OLDEST, NOBODY, NOBODY_2], db)
    assert result.sql == NOBODY and result.support == 2.0


def test_all_fail_returns_the_first(db) -> None:
    result = vote([BROKEN, "SELECT * FROM nowhere", ""], db)
    assert result.sql == BROKEN and result.winner_index == 0
    assert result.groups == [] and result.support == 0.0


def test_weights(db) -> None:
    cands = [N_SINGERS, N_SINGERS_2, N_STADIUMS]
    assert vote(cands, db).sql == N_SINGERS
    heavy = vote(cands, db, weights=[1.0, 1.0, 2.5])
    assert heavy.sql == N_STADIUMS and heavy.support == 2.5
    # Float weights that sum to equal totals tie, and the tie rule applies.
    assert vote([N_SINGERS, N_SINGERS_2, N_STADIUMS], db, weights=[0.1, 0.2, 0.3]).winner_index == 0
    with pytest.raises(ValueError):
        vote(cands, db, weights=[1.0])
    with pytest.raises(ValueError):
        vote([], db)


def test_self_consistency_samples_distinct_rollouts_and_votes(db) -> None:
    lm = DummyLM(
        [
            {"sql": N_STADIUMS},
            {"sql": N_SINGERS},
            {"sql": BROKEN},
            {"sql": f"```sql\n{N_SINGERS_2}\n```"},
        ]
    )
    seen = spy_rollouts(lm)
    with dspy.context(lm=lm):
        # corrector="none": each candidate is the generator's own SQL, unrepaired
        pred = SelfConsistency(DirectSQL(corrector="none"), n=4, temperature=0.8)(
            db=db, question="How many singers are there?"
        )
    assert pred.candidates == [N_STADIUMS, N_SINGERS, BROKEN, N_SINGERS_2]
    assert pred.sql == N_SINGERS and pred.vote.support == 2.0
    # The first (greedy) call used the LM as is; the other three distinct rollouts at T=0.8.
    assert seen == [(1, 0.8), (2, 0.8), (3, 0.8)]


def test_self_consistency_with_a_plain_predictor(db) -> None:
    from sqlweave.signatures import GenerateSQL

    lm = DummyLM([{"sql": OLDEST}, {"sql": N_STADIUMS}, {"sql": N_STADIUMS}])
    with dspy.context(lm=lm):
        pred = SelfConsistency(dspy.Predict(GenerateSQL), n=3)(
            db=db, dialect="sqlite", db_schema="...", question="q", evidence=""
        )
    assert pred.sql == N_STADIUMS
