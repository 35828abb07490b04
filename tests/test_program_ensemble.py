"""Generators as a stage role, the ensemble's pooled candidates and the runoff selector, on a real
Spider database. DummyLM drives the wiring only: what the pool scores is measured in experiments."""

from __future__ import annotations

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave.evaluate import evaluate, read_records
from sqlweave.programs import get
from sqlweave.programs.dubo import DuboV1, DuboV2
from sqlweave.programs.ensemble import (
    EnsembleSQL,
    parse_names,
    parse_samples,
    parse_temperatures,
    parse_weights,
)
from sqlweave.programs.pet import PETSQL
from sqlweave.programs.sea import SEASQL
from sqlweave.programs.stages import generators
from sqlweave.programs.stages.selection import RunoffSelector
from sqlweave.schema import prompt_schema

QUESTION = "How many singers are from France?"
RIGHT = "SELECT count(*) FROM singer WHERE country = 'France'"
#: The plain, unweighted execution vote (the default is ``across`` with greedy weight 2).
VOTE = {"selector": "vote", "greedy_weight": 1.0}
OTHER = "SELECT count(*) FROM singer"
BROKEN = "SELECT nme FROM singer"


@pytest.fixture()
def db(spider_db):
    return spider_db("concert_singer")


def test_each_generator_shows_its_papers_schema_view(db) -> None:
    texts = {
        name: generators.build(name).prompt(question=QUESTION, db=db).schema
        for name in generators.available()
    }
    assert set(texts) == {"direct", "dubo_v1", "dubo_v2", "sea", "pet"}
    assert len(set(texts.values())) == len(texts)  # five different prompts
    # The same text as the seed program's own generation step (shared renderers).
    assert texts["direct"] == prompt_schema(db, "native")
    assert texts["dubo_v1"] == DuboV1().schema_text(db)[0]
    assert texts["dubo_v2"] == DuboV2().schema_text(db)
    assert texts["sea"] == SEASQL().enhanced_schema(QUESTION, db)[0]
    assert texts["pet"] == PETSQL().schema_text(db)
    assert "France" in texts["sea"]  # the value the question names


def test_a_generator_is_callable_on_its_own(db) -> None:
    lm = DummyLM([{"sql": RIGHT}])
    with dspy.context(lm=lm):
        out = generators.build("dubo_v1")(question=QUESTION, db=db)
    assert out.sql == RIGHT and out.schema.startswith("CREATE TABLE")


def test_generator_registry_refuses_what_is_not_a_generator() -> None:
    with pytest.raises(TypeError):
        generators.register("bad", dict)
    with pytest.raises(ValueError, match="direct"):
        generators.build("nonesuch")


def test_switch_parsing() -> None:
    assert parse_names("direct, sea") == ("direct", "sea")
    for bad in ("", "direct,direct", "direct,nonesuch"):
        with pytest.raises(ValueError):
            parse_names(bad)
    assert parse_weights("sea=2", ("direct", "sea")) == {"direct": 1.0, "sea": 2.0}
    for bad in ("pet=2", "sea", "sea=-1"):
        with pytest.raises(ValueError):
            parse_weights(bad, ("direct", "sea"))


def test_temperature_is_one_number_or_one_per_generator() -> None:
    """Rule 19: one pool at two temperatures; a plain number stays one for all."""
    names = ("direct", "dubo_v1")
    assert parse_temperatures(1.0, names) == {"direct": 1.0, "dubo_v1": 1.0}
    assert parse_temperatures("0.5", names) == {"direct": 0.5, "dubo_v1": 0.5}
    mixed = parse_temperatures("direct=1.0", names)
    assert mixed == {"direct": 1.0, "dubo_v1": 0.7}  # unnamed: the default
    for bad in ("pet=1.0", "direct=-1", "direct=1.0,dubo_v1"):
        with pytest.raises(ValueError):
            parse_temperatures(bad, names)
    program = EnsembleSQL(generators="direct,dubo_v1", temperature="direct=1.0,dubo_v1=0.7")
    assert program.sample_direct.temperature == 1.0
    assert program.sample_dubo_v1.temperature == 0.7
    assert program.switches["temperature"] == "direct=1.0,dubo_v1=0.7"  # what artefacts keep
    assert EnsembleSQL(generators="direct,sea", temperature=0.3).sample_sea.temperature == 0.3


def test_samples_is_one_count_or_one_per_generator(db) -> None:
    """Rule 21: three prompts at the same budget draw 3 + 3 + 2."""
    names = ("direct", "dubo_v1", "sea")
    assert parse_samples(4, names) == dict.fromkeys(names, 4)
    assert parse_samples("2", names) == dict.fromkeys(names, 2)
    assert parse_samples("direct=3,dubo_v1=3,sea=2", names) == {"direct": 3, "dubo_v1": 3, "sea": 2}
    assert parse_samples("sea=1", names) == {"direct": 4, "dubo_v1": 4, "sea": 1}
    for bad in (0, "pet=2", "sea=0", "sea=1.5", "sea=two", True):
        with pytest.raises(ValueError):
            parse_samples(bad, names)
    program = EnsembleSQL(
        generators="direct,sea", samples="direct=1,sea=2", corrector="none", early_stop=False
    )
    assert program.switches["samples"] == "direct=1,sea=2"  # what artefacts keep
    lm = DummyLM([{"sql": RIGHT}, {"sql": OTHER}, {"sql": RIGHT}])
    with dspy.context(lm=lm):
        pred = program(question=QUESTION, db=db)
    assert pred.candidate_origins == ["direct:greedy", "sea:greedy", "sea:sampled"]


def test_sample_rows_reaches_only_the_generators_that_show_rows(db) -> None:
    """Pilot A: ``dubo_v1`` with 10 sample rows; the pool passes the switch to it alone."""
    program = EnsembleSQL(generators="direct,dubo_v1", sample_rows=10, corrector="none")
    assert program.generator("dubo_v1").sample_rows == 10
    assert program.switches["sample_rows"] == 10  # what artefacts keep
    assert program.generator("direct").schema_text(QUESTION, db) == prompt_schema(db, "native")
    ten = program.generator("dubo_v1").schema_text(QUESTION, db)
    five = EnsembleSQL(generators="dubo_v1").generator("dubo_v1").schema_text(QUESTION, db)
    assert five == DuboV1().schema_text(db)[0]  # the default prompt is unchanged
    assert ten == DuboV1(sample_rows=10).schema_text(db)[0] and len(ten) > len(five)
    with pytest.raises(ValueError, match="sample_rows"):
        EnsembleSQL(generators="dubo_v1", sample_rows=-1)


EMPTY = "SELECT name FROM singer WHERE country = 'Atlantis'"


def test_greedy_agree_needs_every_greedy_candidate_run_non_empty_and_one_class(db) -> None:
    """Rule 27's test, the same in the replay and in the program."""
    from sqlweave.programs.stages.cascade import greedy_agree
    from sqlweave.programs.stages.grounding import ValueLookup

    def agree(*sqls: str) -> bool:
        return greedy_agree(sqls, [db.try_execute(s) for s in sqls], db.dialect)

    same = 'SELECT count(*) FROM singer WHERE country = "France"'
    assert agree(RIGHT, same)  # different text, one execution class
    assert not agree(RIGHT, OTHER)  # two classes
    assert not agree(RIGHT, BROKEN) and not agree(BROKEN, BROKEN)  # one did not run
    assert not agree(EMPTY, EMPTY)  # agreeing on nothing is not agreement
    assert not agree(RIGHT)  # one prompt has nothing to agree with
    guess = "SELECT count(*) FROM singer WHERE country = 'Atlantis'"  # one row: 0
    assert agree(guess, guess)
    lookup = ValueLookup(db)  # rule 29: a text the column never stores is not agreement
    assert not greedy_agree([guess, guess], [db.try_execute(guess)] * 2, db.dialect, lookup)
    assert greedy_agree([RIGHT, RIGHT], [db.try_execute(RIGHT)] * 2, db.dialect, lookup)


def test_the_cascade_stops_at_the_greedy_candidates_when_they_agree(db) -> None:
    program = EnsembleSQL(generators="direct,sea", samples=3, cascade=True, corrector="none")
    lm = DummyLM([{"sql": RIGHT}, {"sql": RIGHT}])
    with dspy.context(lm=lm):
        pred = program(question=QUESTION, db=db)
    assert pred.candidates == [RIGHT, RIGHT]  # two calls: no sample was drawn
    assert pred.candidate_origins == ["direct:greedy", "sea:greedy"]
    assert pred.drawn == ["direct", "sea"] and pred.sql == RIGHT
    assert program.switches["cascade"] is True  # what artefacts keep


@pytest.mark.parametrize("probe", [RIGHT, OTHER, "SELECT nonsense FROM nowhere"])
def test_the_probe_joins_a_stopped_pool_and_never_changes_the_answer(db, probe) -> None:
    """Rules 38-39: where the cascade stops, the first generator's first sample joins the pool
    (for the confidence); the two agreeing greedy candidates outvote it, whatever it returns."""
    program = EnsembleSQL(
        generators="direct,sea", samples=3, cascade=True, probe=True, corrector="none"
    )
    lm = DummyLM([{"sql": RIGHT}, {"sql": RIGHT}, {"sql": probe}])
    with dspy.context(lm=lm):
        pred = program(question=QUESTION, db=db)
    assert list(pred.candidates) == [RIGHT, probe, RIGHT]
    assert pred.candidate_origins == ["direct:greedy", "direct:sampled", "sea:greedy"]
    assert pred.sql == RIGHT
    assert program.switches["probe"] is True


def test_the_probe_is_not_drawn_where_the_cascade_draws_the_rest(db) -> None:
    program = EnsembleSQL(
        generators="direct,sea", samples=2, cascade=True, probe=True, corrector="none"
    )
    lm = DummyLM([{"sql": RIGHT}, {"sql": OTHER}, {"sql": OTHER}, {"sql": RIGHT}])
    with dspy.context(lm=lm):
        pred = program(question=QUESTION, db=db)
    assert len(pred.candidates) == 4  # the greedy pair, then one sample each: no probe


GUESS = "SELECT count(*) FROM singer WHERE country = 'Atlantis'"


@pytest.mark.parametrize(
    "greedy", [(RIGHT, OTHER), (EMPTY, EMPTY), (BROKEN, RIGHT), (GUESS, GUESS)]
)
def test_the_cascade_draws_the_rest_in_pool_order_unless_the_greedy_agree(db, greedy) -> None:
    """The samples come last generator first (its prompt is the model's live one), and the
    pool keeps each generator's candidates together, greedy first, as without the cascade."""
    sea = [f"SELECT count(*) FROM singer WHERE age > {i}" for i in (1, 2)]
    direct = [f"SELECT count(*) FROM singer WHERE age < {i}" for i in (1, 2)]
    answers = [*greedy, *sea, *direct]
    program = EnsembleSQL(generators="direct,sea", samples=3, cascade=True, corrector="none")
    lm = DummyLM([{"sql": sql} for sql in answers])
    with dspy.context(lm=lm):
        pred = program(question=QUESTION, db=db)
    assert list(pred.candidates)[:3] == [greedy[0], *direct]
    assert list(pred.candidates)[3:] == [greedy[1], *sea]
    assert (
        pred.candidate_origins
        == ["direct:greedy"] + ["direct:sampled"] * 2 + ["sea:greedy"] + ["sea:sampled"] * 2
    )


def test_the_pool_records_every_candidate_with_its_origin_and_class(db) -> None:
    # Weights turn the early stop off: every generator is asked for both of its candidates.
    program = EnsembleSQL(
        generators="direct,sea", samples=2, weights="sea=2", corrector="none", **VOTE
    )
    lm = DummyLM([{"sql": RIGHT}, {"sql": OTHER}, {"sql": RIGHT}, {"sql": BROKEN}])
    with dspy.context(lm=lm):
        pred = program(question=QUESTION, db=db)
    assert pred.candidate_origins == [
        "direct:greedy",
        "direct:sampled",
        "sea:greedy",
        "sea:sampled",
    ]
    assert sorted(pred.candidates) == sorted([RIGHT, OTHER, RIGHT, BROKEN])
    groups = dict(zip(pred.candidates, pred.candidate_groups, strict=True))
    assert groups[BROKEN] is None and groups[RIGHT] != groups[OTHER]
    assert pred.drawn == ["direct", "sea"] and pred.sql == RIGHT
    assert program.switches["generators"] == "direct,sea"


def test_the_plain_vote_stops_drawing_once_it_is_settled(db) -> None:
    program = EnsembleSQL(generators="direct,sea,pet", samples=2, corrector="none", **VOTE)
    lm = DummyLM([{"sql": RIGHT}] * 6)
    with dspy.context(lm=lm):
        pred = program(question=QUESTION, db=db)
    # 2 agreeing of 6: 4 to come could still win. 4 agreeing of 6: settled, pet is not asked.
    assert pred.drawn == ["direct", "sea"] and len(pred.candidates) == 4
    assert pred.sql == RIGHT
    everyone = EnsembleSQL(generators="direct,sea,pet", samples=2, early_stop=False, **VOTE)
    with dspy.context(lm=DummyLM([{"sql": RIGHT}] * 6)):
        pred = everyone(question=QUESTION, db=db)
    assert pred.drawn == ["direct", "sea", "pet"] and pred.sql == RIGHT


def test_candidate_rules_repair_every_candidate_before_the_vote(db) -> None:
    lower = "SELECT count(*) FROM singer WHERE country = 'france'"
    answers = [{"sql": lower}, {"sql": OTHER}, {"sql": lower}, {"sql": OTHER}]
    plain = EnsembleSQL(
        generators="direct,sea", samples=2, corrector="none", early_stop=False, **VOTE
    )
    with dspy.context(lm=DummyLM(answers)):
        pred = plain(question=QUESTION, db=db)
    assert pred.sql == lower  # the tie goes to the first candidate, unrepaired
    mended = EnsembleSQL(
        generators="direct,sea",
        samples=2,
        corrector="none",
        early_stop=False,
        candidate_rules=True,
        **VOTE,
    )
    with dspy.context(lm=DummyLM(answers)):
        pred = mended(question=QUESTION, db=db)
    assert "'France'" in pred.sql and "'france'" not in " ".join(pred.candidates)
    assert pred.candidates.count(OTHER) == 2  # right SQL is left as it was
    assert mended.switches["candidate_rules"] is True


def _repairing(repair: str, **switches) -> EnsembleSQL:
    """direct and sea, two candidates each, no corrector, ``repair`` on every failing one."""
    return EnsembleSQL(
        generators="direct,sea",
        samples=2,
        corrector="none",
        repair=repair,
        repair_scope="all",
        **switches,
    )


def test_repair_fixes_failing_candidates_before_the_vote(db) -> None:
    answers = [{"sql": BROKEN}, {"sql": OTHER}, {"sql": BROKEN}, {"sql": RIGHT}]
    plain = EnsembleSQL(
        generators="direct,sea", samples=2, corrector="none", early_stop=False, **VOTE
    )
    with dspy.context(lm=DummyLM(answers)):
        assert plain(question=QUESTION, db=db).sql == OTHER  # 1 against 1: the first
    # the plain vote, yet no early stop: a repair may revive what it counted out
    mended = _repairing("execution", **VOTE)
    lm = DummyLM([*answers, {"corrected_sql": RIGHT}])
    with dspy.context(lm=lm):
        pred = mended(question=QUESTION, db=db)
    assert pred.sql == RIGHT and pred.candidates.count(RIGHT) == 3
    assert pred.candidate_origins == [
        "direct:greedy:repaired",
        "direct:sampled",
        "sea:greedy:repaired",
        "sea:sampled",
    ]
    assert "no such column" in lm.history[-1]["messages"][-1]["content"]  # the error was shown
    assert mended.switches["repair"] == "execution" and mended.switches["repair_max"] is None


def test_repair_max_bounds_the_calls_and_a_failed_repair_changes_nothing(db) -> None:
    broken2 = "SELECT nam FROM singer"
    answers = [{"sql": BROKEN}, {"sql": BROKEN}, {"sql": broken2}, {"sql": OTHER}]
    one = _repairing("execution", repair_max=1)
    lm = DummyLM([*answers, {"corrected_sql": "SELECT still_wrong FROM singer"}])
    with dspy.context(lm=lm):  # a question of its own: DSPy's cache holds the other tests' calls
        pred = one(question="Which singers are there?", db=db)
    repairs = [h for h in lm.history if "corrected_sql" in h["outputs"][0]]
    assert len(repairs) == 1  # one repair: of the query written twice
    assert BROKEN in repairs[0]["messages"][-1]["content"]
    assert pred.candidates == [BROKEN, BROKEN, broken2, OTHER] and pred.sql == OTHER
    with pytest.raises(ValueError, match="repair_max"):
        EnsembleSQL(repair="execution", repair_max=-1)
    with pytest.raises(ValueError, match="fallback, all"):
        EnsembleSQL(repair="execution", repair_scope="sometimes")


def test_a_fallback_repair_acts_only_where_nothing_ran(db) -> None:
    question = "Which singers are from France, by name?"
    fallback = EnsembleSQL(
        generators="direct,sea", samples=2, corrector="none", repair="execution", **VOTE
    )
    assert fallback.switches["repair_scope"] == "fallback"
    lm = DummyLM([{"sql": BROKEN}] * 3 + [{"sql": OTHER}, {"corrected_sql": RIGHT}])
    with dspy.context(lm=lm):
        pred = fallback(question=question, db=db)
    assert not [h for h in lm.history if "corrected_sql" in h["outputs"][0]]  # OTHER ran
    assert pred.sql == OTHER
    lm = DummyLM([{"sql": BROKEN}] * 4 + [{"corrected_sql": RIGHT}])
    with dspy.context(lm=lm):
        pred = fallback(question=question + " ", db=db)
    assert pred.sql == RIGHT and all(o.endswith(":repaired") for o in pred.candidate_origins)


def test_across_picks_what_most_generators_agree_on(db) -> None:
    # direct's two candidates agree on OTHER; sea and pet each say RIGHT once
    answers = [{"sql": OTHER}, {"sql": OTHER}, {"sql": RIGHT}, {"sql": BROKEN}]
    answers += [{"sql": RIGHT}, {"sql": BROKEN}]
    voted = EnsembleSQL(
        generators="direct,sea,pet", samples=2, corrector="none", early_stop=False, **VOTE
    )
    with dspy.context(lm=DummyLM(answers)):
        assert voted(question=QUESTION, db=db).sql == OTHER  # 2 against 2: the first
    across = EnsembleSQL(
        generators="direct,sea,pet", samples=2, corrector="none", greedy_weight=1.0
    )  # the default selector
    with dspy.context(lm=DummyLM(answers)):
        pred = across(question=QUESTION, db=db)
    assert pred.sql == RIGHT and pred.drawn == ["direct", "sea", "pet"]  # no early stop


def test_runoff_asks_the_lm_only_when_the_vote_is_close(db) -> None:
    close = [OTHER, RIGHT, RIGHT, OTHER, RIGHT]
    lm = DummyLM([{"choice": "2"}])
    with dspy.context(lm=lm):
        pred = RunoffSelector(threshold=0.5)(candidates=close, db=db, question=QUESTION)
    assert (
        pred.lm_called and pred.runoff == [1, 0] and pred.sql == OTHER
    )  # leader RIGHT shown first
    clear = [RIGHT, RIGHT, RIGHT, OTHER]
    with dspy.context(lm=DummyLM([])):
        pred = RunoffSelector(threshold=0.5)(candidates=clear, db=db, question=QUESTION)
    assert not pred.lm_called and pred.runoff is None and pred.sql == RIGHT


def test_the_ensemble_is_a_registered_program_and_evaluation_records_its_pool(
    data_root, tmp_path
) -> None:
    from sqlweave import data

    ex = [e for e in data.load_spider("dev", root=data_root) if e.db_id == "concert_singer"][:2]
    program = get("ensemble", generators="direct,dubo_v1", samples=2, weights="direct=1.5")
    lm = DummyLM([{"sql": e.gold_sql} for e in ex for _ in range(4)])
    with dspy.context(lm=lm):
        summary = evaluate(program, ex, out_path=tmp_path / "r.jsonl", progress=False)
    records = read_records(tmp_path / "r.jsonl")
    assert all(len(r["candidates"]) == 4 and r["oracle"] for r in records)
    assert {c["origin"] for r in records for c in r["candidates"]} == {
        "direct:greedy",
        "direct:sampled",
        "dubo_v1:greedy",
        "dubo_v1:sampled",
    }
    assert summary["oracle_ex"] >= summary["ex"]


@pytest.mark.parametrize("cascade", [True, False])
def test_a_prompt_over_the_window_leaves_the_other_generator_s_answer(
    db, monkeypatch, cascade
) -> None:
    """Found by review: one generator's prompt over the model's window (dubo_v1's rows are the
    longest) failed the whole question though the other's candidates were good; only when
    every prompt is over is it the question's failure."""
    from dspy.utils.exceptions import ContextWindowExceededError

    program = EnsembleSQL(
        generators="direct,dubo_v1", samples=2, cascade=cascade, corrector="none", **VOTE
    )

    def too_long(*_args, **_kwargs):
        raise ContextWindowExceededError(model="m")

    monkeypatch.setattr(program.generator("dubo_v1"), "prompt", too_long)
    with dspy.context(lm=DummyLM([{"sql": RIGHT}, {"sql": RIGHT}])):
        pred = program(question=QUESTION, db=db)
    assert pred.sql == RIGHT and pred.drawn == ["direct"]
    assert pred.candidate_origins == ["direct:greedy", "direct:sampled"]
    monkeypatch.setattr(program.generator("direct"), "prompt", too_long)
    with dspy.context(lm=DummyLM([{"sql": RIGHT}])), pytest.raises(ContextWindowExceededError):
        program(question=QUESTION, db=db)
