"""The ``ranked`` selector: execution classes as features, a linear score, the vote's order on ties.

Runs on the bundled concert_singer database (real SQLite, no LM)."""

from __future__ import annotations

import json

import pytest
from conftest import DEMO_CONCERT_DB, run_experiment

from sqlweave.db import Database
from sqlweave.programs import stages
from sqlweave.programs.stages import reranker
from sqlweave.programs.stages.voting import execution_groups, vote

COUNT = "SELECT count(*) FROM singer"
NAMES = "SELECT Name FROM singer"
COUNTRIES = "SELECT Country, count(*) FROM singer GROUP BY Country"
BROKEN = "SELECT nope FROM singer"


@pytest.fixture(scope="module")
def concert():
    db = Database.open(DEMO_CONCERT_DB)
    yield db
    db.close()


def test_question_cues_read_what_is_asked() -> None:
    cues = reranker.question_cues("How many singers are there for each country?")
    assert cues["count"] and cues["each"] and not cues["both"]
    assert reranker.question_cues("Which stadiums have not held a concert?")["negation"]
    assert reranker.question_cues("Name the oldest singer.")["superlative"]


def test_sql_shape_counts_joins_and_keywords() -> None:
    shape = reranker.sql_shape(
        "SELECT DISTINCT T1.Name FROM singer AS T1 JOIN singer_in_concert AS T2 "
        "ON T1.Singer_ID = T2.Singer_ID JOIN concert AS T3 ON T2.concert_ID = T3.concert_ID "
        "WHERE T1.Singer_ID NOT IN (SELECT Singer_ID FROM singer WHERE Age > 40)"
    )
    assert shape["joins"] == 2 and shape["distinct"] == 1 and shape["except"] == 1
    assert shape["in_subquery"] == 1 and shape["count"] == 0 and shape["group_by"] == 0


def test_class_features_describe_each_result_class(concert: Database) -> None:
    cands = [NAMES, COUNT, NAMES, COUNTRIES, BROKEN]
    groups, _ = execution_groups(cands, concert)
    assert [g.members for g in groups] == [[0, 2], [1], [3]]  # the broken one never votes
    feats = reranker.class_features("How many singers are there in each country?", cands, groups)
    names, count, countries = feats
    assert names["is_top"] == 1 and names["share"] == pytest.approx(0.5)
    assert names["greedy"] == 1 and count["greedy"] == 0
    assert count["one_row"] == 1 and count["count_x_count"] == 1
    assert names["count_x_count"] == 0 and countries["each_x_group_by"] == 1
    assert countries["most_cols"] == 1 and countries["cols"] == 2
    # the cue is absent: a COUNT answers a question that did not ask for one, a negative sign
    other = reranker.class_features("List the singers.", cands, groups)
    assert other[1]["count_x_count"] == -1


def test_rank_follows_the_weights_and_the_vote_breaks_ties(concert: Database) -> None:
    cands = [NAMES, NAMES, NAMES, COUNTRIES]
    groups, _ = execution_groups(cands, concert)
    question = "How many singers are there in each country?"
    assert reranker.rank(question, cands, groups, {}).members == [0, 1, 2]  # all 0: the vote
    chosen = reranker.rank(question, cands, groups, {"each_x_group_by": 5.0, "share": 1.0})
    assert chosen.members == [3]  # the minority that groups, as the question asks
    assert reranker.rank(question, cands, [], {"share": 1.0}) is None


def test_the_selector_returns_the_chosen_class_and_no_lm_call(concert: Database) -> None:
    selector = reranker.RankSelector(weights={"each_x_group_by": 5.0})
    pred = selector(
        candidates=[NAMES, NAMES, COUNTRIES],
        db=concert,
        question="How many singers are there in each country?",
    )
    assert (pred.sql, pred.choice, pred.lm_called) == (COUNTRIES, 3, False)
    assert pred.vote.winner_index == 2 and len(pred.vote.groups) == 2
    # every candidate failing: the first one, as the vote does
    failed = selector(candidates=[BROKEN, "SELECT"], db=concert, question="x")
    assert (failed.sql, failed.choice) == (BROKEN, 1)
    with pytest.raises(ValueError, match="at least one candidate"):
        selector(candidates=[], db=concert)


def test_a_gate_keeps_a_vote_whose_top_class_holds_more_than_its_share(concert: Database) -> None:
    """``max_share``: the weights overturn only a close vote (here the top class holds 2 of 3)."""
    cands = [NAMES, NAMES, COUNTRIES]
    question = "How many singers are there in each country?"
    weights = {"each_x_group_by": 5.0}
    kept = reranker.RankSelector(weights=weights, max_share=0.5)(
        candidates=cands, db=concert, question=question
    )
    assert kept.sql == NAMES
    overturned = reranker.RankSelector(weights=weights, max_share=0.7)(
        candidates=cands, db=concert, question=question
    )
    assert overturned.sql == COUNTRIES
    assert reranker.gated(0.5, 0.5) and not reranker.gated(0.51, 0.5)
    assert 0 < reranker.default_max_share() <= 1


def test_the_packaged_weights_name_only_features_the_selector_computes(concert: Database) -> None:
    weights = reranker.default_weights()
    cands = [NAMES, COUNT, COUNTRIES]
    groups, _ = execution_groups(cands, concert)
    computed = set(reranker.class_features("How many?", cands, groups)[0])
    assert weights and set(weights) <= computed
    # and the registry builds it with them
    built = stages.build("selector", "ranked")
    assert isinstance(built, reranker.RankSelector)
    pred = built(candidates=cands, db=concert, question="How many singers are there?")
    assert pred.sql in cands


def test_with_the_packaged_weights_a_unanimous_vote_stands(concert: Database) -> None:
    """A class every candidate holds is the only class: no weight can overturn it."""
    cands = [COUNT] * 4
    pred = reranker.RankSelector()(candidates=cands, db=concert, question="List singers.")
    assert pred.sql == COUNT and pred.sql == vote(cands, concert).sql


def test_fit_learns_a_feature_that_marks_the_right_class() -> None:
    """reranker.fit_weights (experiments/fit_reranker.py's fit): the conditional logit puts weight
    on what separates."""
    rows = []
    for i in range(30):
        right = i % 3  # the right class is never always the vote's first
        classes = [
            {
                "features": {"signal": float(k == right), "share": [0.5, 0.3, 0.2][k]},
                "correct": k == right,
                "vote_rank": k,
            }
            for k in range(3)
        ]
        rows.append({"question_id": str(i), "classes": classes, "fallback_correct": False})
    weights = reranker.fit_weights(rows, l2=0.1)
    assert weights["signal"] > 1.0
    assert all(reranker.replay_choices(rows, weights).values())
    assert sum(reranker.replay_choices(rows, None).values()) == 10  # the vote: right a third
    # a gate below every top share (0.5) leaves each vote standing
    gated = reranker.replay_choices(rows, weights, max_share=0.4)
    assert gated == reranker.replay_choices(rows, None)
    json.dumps(weights)  # what `fit` writes
    with pytest.raises(ValueError, match="right and a wrong class"):
        reranker.fit_weights([{"question_id": "0", "classes": rows[0]["classes"][:1]}], l2=0.1)


def test_cv_refuses_feature_groups_it_does_not_know() -> None:
    """``experiments/fit_reranker.py cv --features`` names a set of groups (any order); a typo is
    an error, not an empty table (the script stops before it reads a class file)."""
    for features in ("vote,algn", "result,align"):  # unknown; without the vote
        done = run_experiment("fit_reranker", "cv", "unread.jsonl", "--features", features)
        assert done.returncode == 1, done.stderr
        assert done.stderr.strip().splitlines()[-1].startswith("--features:"), done.stderr


def test_a_sampler_feeding_it_draws_every_candidate() -> None:
    """A settled vote stops sampling; the ranked selector may pick a class the vote counted out,
    so ``direct`` with it never stops early (the plain vote still does)."""
    from sqlweave import programs

    ranked = programs.get("direct", samples=4, selector="ranked")
    assert isinstance(ranked.selector, reranker.RankSelector)
    assert ranked.sampler.settle is False
    assert programs.get("direct", samples=4, selector="vote").sampler.settle is True


def test_alignment_reads_values_tables_and_columns_against_the_question() -> None:
    question = "How many female singers are from France, older than 30?"
    verbatim = reranker.alignment(
        question, "SELECT count(*) FROM singer WHERE Country = 'France' AND Age > 30"
    )
    assert verbatim["align_literal_exact"] == 1 and verbatim["align_literal_absent"] == 0
    assert verbatim["align_number_absent"] == 0 and verbatim["align_tables_unnamed"] == 0
    # a value the question spells otherwise, a number and a table it never wrote
    other = reranker.alignment(
        question,
        "SELECT count(*) FROM singer JOIN concert ON singer.Singer_ID = concert.concert_ID "
        "WHERE Country = 'FRANCE' AND Is_male = 'F' AND Age > 40",
    )
    assert other["align_literal_case"] == pytest.approx(0.5)
    assert other["align_literal_absent"] == pytest.approx(0.5)
    assert other["align_number_absent"] == 1 and other["align_tables_unnamed"] == 1
    assert other["align_tables"] == 2
    # Spider's double-quoted values are values; LIMIT 3 is not a number the question must write
    quoted = reranker.alignment(
        "Name the three youngest singers from France.",
        'SELECT Name FROM singer WHERE Country = "France" ORDER BY Age LIMIT 3',
    )
    assert quoted["align_literal_exact"] == 1 and quoted["align_number_absent"] == 0
    assert quoted["align_projected_unnamed"] == 0 and quoted["align_question_covered"] > 0.5
    assert reranker.alignment("Anything?", "SELEC nothing FROM")["align_unparsed"] == 1


def test_class_features_average_alignment_over_a_class(concert: Database) -> None:
    cands = ["SELECT Name FROM singer WHERE Country = 'France'"] * 2 + [NAMES]
    groups, _ = execution_groups(cands, concert)
    feats = reranker.class_features("Which singers are from France?", cands, groups)
    by_size = {len(g.members): f for g, f in zip(groups, feats, strict=True)}
    assert by_size[2]["align_literal_exact"] == 1 and by_size[1]["align_has_literal"] == 0
