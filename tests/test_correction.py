"""The correction loop on a real Spider database, with DummyLM standing in for the model."""

from __future__ import annotations

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave.programs.stages.correction import CorrectionLoop
from sqlweave.programs.stages.feedback import describe_execution, is_empty

BAD = "SELECT nme FROM singer"
WORSE = "SELECT nmae FROM singer"
GOOD = "SELECT name FROM singer WHERE age > 40"
EMPTY = "SELECT name FROM singer WHERE age > 1000"
QUESTION = "Names of singers older than 40?"


@pytest.fixture()
def db(spider_db):
    return spider_db("concert_singer")


def prompts(lm: DummyLM) -> list[str]:
    return [entry["messages"][-1]["content"] for entry in lm.history]


def test_describe_execution_rows_errors_and_empty(db) -> None:
    result, text = describe_execution(db, "SELECT name, age FROM singer ORDER BY age")
    assert result is not None and len(result) == 6
    assert text.startswith("6 rows") and "Name | Age" in text and "(6 rows in total)" in text
    result, text = describe_execution(db, BAD)
    assert result is None and text.startswith("Unknown column") and "nme" in text
    result, text = describe_execution(db, EMPTY)
    assert result is not None and is_empty(result) and text.startswith("Empty result")
    result, text = describe_execution(db, "SELECT max(age) FROM singer WHERE age > 1000")
    assert is_empty(result) and "only NULL" in text
    assert describe_execution(db, "")[0] is None


def test_no_lm_call_when_the_sql_runs(db) -> None:
    lm = DummyLM([])
    with dspy.context(lm=lm):
        pred = CorrectionLoop(max_rounds=3)(sql=GOOD, db=db, question=QUESTION)
    assert pred.sql == GOOD and pred.rounds == 0 and len(lm.history) == 0
    assert pred.result is not None and len(pred.result) > 0
    assert len(pred.history) == 1


def test_stops_after_max_rounds_and_keeps_the_original(db) -> None:
    lm = DummyLM([{"corrected_sql": WORSE}] * 5)
    with dspy.context(lm=lm):
        pred = CorrectionLoop(max_rounds=2)(sql=BAD, db=db, question=QUESTION)
    assert pred.rounds == 2 and len(lm.history) == 2
    assert pred.sql == BAD and pred.result is None  # nothing ran: the original comes back
    assert [h["sql"] for h in pred.history] == [BAD, WORSE, WORSE]
    assert all(h["feedback"].startswith("Unknown column") for h in pred.history)


def test_stops_as_soon_as_a_correction_runs(db) -> None:
    lm = DummyLM([{"corrected_sql": WORSE}, {"corrected_sql": f"```sql\n{GOOD};\n```"}])
    with dspy.context(lm=lm):
        pred = CorrectionLoop(max_rounds=5)(sql=BAD, db=db, question=QUESTION)
    assert pred.sql == GOOD and pred.rounds == 2 and len(lm.history) == 2
    assert pred.result is not None and len(pred.result) > 0


def test_retry_on_empty(db) -> None:
    lm = DummyLM([{"corrected_sql": GOOD}])
    with dspy.context(lm=lm):
        plain = CorrectionLoop(max_rounds=2)(sql=EMPTY, db=db, question=QUESTION)
        assert plain.sql == EMPTY and len(lm.history) == 0  # empty is fine without the switch
        pred = CorrectionLoop(max_rounds=2, retry_on_empty=True)(
            sql=EMPTY, db=db, question=QUESTION
        )
    assert pred.sql == GOOD and pred.rounds == 1
    assert "Empty result" in prompts(lm)[0]


def test_returns_last_attempt_that_ran_when_all_fail(db) -> None:
    lm = DummyLM([{"corrected_sql": EMPTY}, {"corrected_sql": WORSE}])
    with dspy.context(lm=lm):
        pred = CorrectionLoop(max_rounds=2, retry_on_empty=True)(sql=BAD, db=db, question=QUESTION)
    assert pred.rounds == 2 and pred.sql == EMPTY and pred.result is not None


def test_multi_turn_carries_the_history(db) -> None:
    answers = [{"corrected_sql": WORSE}, {"corrected_sql": "SELECT nam FROM singer"}]
    lm = DummyLM(answers * 2)
    with dspy.context(lm=lm):
        CorrectionLoop(max_rounds=2, multi_turn=True)(sql=BAD, db=db, question=QUESTION)
        second_multi = prompts(lm)[1]
        CorrectionLoop(max_rounds=2, multi_turn=False)(sql=BAD, db=db, question=QUESTION)
        second_single = prompts(lm)[3]
    assert "Earlier attempts" in second_multi and BAD in second_multi and "nme" in second_multi
    assert WORSE in second_multi  # the query being fixed now
    assert "Earlier attempts" not in second_single and "nme" not in second_single


def test_reflect_makes_two_calls_per_round(db) -> None:
    lm = DummyLM(
        [
            {"reason": "the column is spelt nmae but is called name"},
            {"corrected_sql": WORSE},
            {"reason": "still misspelt"},
            {"corrected_sql": GOOD},
        ]
    )
    with dspy.context(lm=lm):
        pred = CorrectionLoop(max_rounds=3, reflect=True)(sql=BAD, db=db, question=QUESTION)
    assert pred.sql == GOOD and pred.rounds == 2 and len(lm.history) == 4
    assert pred.history[0]["reason"].startswith("the column is spelt")
    assert "reason" not in pred.history[-1]  # the final query ran; nothing to reflect on
    assert "Likely cause: the column is spelt" in prompts(lm)[1]  # the corrector saw the reason
    assert "[[ ## reason ## ]]" in lm.history[0]["messages"][0]["content"]


def test_garbage_correction_output_is_tolerated(db) -> None:
    lm = DummyLM({QUESTION: {"corrected_sql": "Sorry, I cannot do that."}})
    with dspy.context(lm=lm):
        pred = CorrectionLoop(max_rounds=2)(sql=BAD, db=db, question=QUESTION)
    assert pred.sql == BAD and pred.rounds == 2
    assert pred.history[1]["sql"] == "" and "empty query" in pred.history[1]["feedback"]
