"""LM selection among executed candidates, on a real Spider database with DummyLM."""

from __future__ import annotations

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave.programs.stages.selection import CandidateSelector, parse_choice, render_candidates

OLDEST = "SELECT max(age) FROM singer"  # 52
YOUNGEST = "SELECT min(age) FROM singer"  # 25
OLDEST_2 = "SELECT age FROM singer ORDER BY age DESC LIMIT 1"  # 52 again
BROKEN = "SELECT nme FROM singer"
QUESTION = "How old is the oldest singer?"


@pytest.fixture()
def db(spider_db):
    return spider_db("concert_singer")


def last_prompt(lm: DummyLM) -> str:
    return lm.history[-1]["messages"][-1]["content"]


def test_prompt_shows_each_distinct_candidate_with_its_result(db) -> None:
    lm = DummyLM([{"choice": "2"}])
    with dspy.context(lm=lm):
        pred = CandidateSelector()(
            candidates=[YOUNGEST, BROKEN, OLDEST, OLDEST_2], db=db, question=QUESTION
        )
    prompt = last_prompt(lm)
    assert "Candidate 1:\nSQL: " + YOUNGEST in prompt and "25" in prompt
    assert "Candidate 2:\nSQL: " + OLDEST in prompt and "52" in prompt
    # The failed candidate and the duplicate answer are not shown.
    assert BROKEN not in prompt and OLDEST_2 not in prompt and "Candidate 3" not in prompt
    assert pred.lm_called and pred.sql == OLDEST and pred.choice == 3
    assert pred.shown == [0, 2]
    assert pred.results[1] is None and pred.feedback[1].startswith("Unknown column")
    assert pred.results[2].rows == ((52,),)


def test_no_call_when_the_results_agree(db) -> None:
    lm = DummyLM([])
    with dspy.context(lm=lm):
        pred = CandidateSelector()(candidates=[BROKEN, OLDEST, OLDEST_2], db=db, question=QUESTION)
        alone = CandidateSelector()(candidates=[BROKEN, YOUNGEST], db=db, question=QUESTION)
        none_ran = CandidateSelector()(candidates=[BROKEN, "SELECT x"], db=db, question=QUESTION)
    assert len(lm.history) == 0
    assert not pred.lm_called and pred.sql == OLDEST and pred.choice == 2
    assert alone.sql == YOUNGEST
    assert none_ran.sql == BROKEN and none_ran.choice == 1 and none_ran.shown == []


@pytest.mark.parametrize("answer", ["the second one", "7", "none of them", "0"])
def test_garbage_choice_falls_back_to_the_first_that_ran(db, answer: str) -> None:
    lm = DummyLM({QUESTION: {"choice": answer}})
    with dspy.context(lm=lm):
        pred = CandidateSelector()(candidates=[BROKEN, YOUNGEST, OLDEST], db=db, question=QUESTION)
    assert pred.lm_called and pred.sql == YOUNGEST and pred.choice == 2


def test_parse_choice_and_render() -> None:
    assert parse_choice(2, 3) == 2
    assert parse_choice("Candidate 3 is right", 3) == 3
    assert parse_choice("I pick 9, no, 1", 3) == 1
    assert parse_choice(True, 3) is None and parse_choice(None, 2) is None
    assert parse_choice(4, 3) is None
    text = render_candidates(["SELECT 1", "SELECT 2"], ["1 row", "Syntax error"])
    assert (
        text
        == "Candidate 1:\nSQL: SELECT 1\nResult: 1 row\n\nCandidate 2:\nSQL: SELECT 2\nResult: Syntax error"
    )
