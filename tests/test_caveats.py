"""Caveats: the numbers a query uses that its question never states (``sqlweave.caveats``), on
the Result, in ``sqlweave ask`` (text and ``--json``) and in ``serve``'s answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from conftest import DEMO_CONCERT_DB
from dspy.utils import DummyLM
from typer.testing import CliRunner

import sqlweave
from sqlweave.caveats import caveats, stated_numbers, unstated_numbers
from sqlweave.cli import app

WORLD = DEMO_CONCERT_DB.parents[1] / "world_1" / "world_1.sqlite"
QUESTION = "Which countries in Europe have a population over 50 million?"
WRONG = "SELECT Name FROM country WHERE Continent = 'Europe' AND Population > 5000000"
RIGHT = "SELECT Name FROM country WHERE Continent = 'Europe' AND Population > 50000000"
runner = CliRunner()


@pytest.mark.parametrize(
    ("question", "number"),
    [
        ("a population over 50 million", 50_000_000),
        ("a population over 50 million", 50),
        ("more than 2.5 billion", 2.5e9),
        ("at least 1,000 seats", 1000),
        ("a 50% share", 0.5),
        ("30 percent or more", 0.3),
        ("at least two albums", 2),
        ("its second author", 2),
        ("a dozen eggs", 12),
        ("paid over 50k", 50_000),
    ],
)
def test_stated_numbers_read_scales_percentages_and_words(question: str, number: float) -> None:
    assert number in stated_numbers(question)


def test_a_number_the_question_does_not_state_is_named() -> None:
    assert unstated_numbers(QUESTION, WRONG) == ["5000000"]
    assert unstated_numbers(QUESTION, RIGHT) == []
    assert caveats(QUESTION, WRONG) == [
        "the query uses 5000000, a number the question does not state"
    ]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT name FROM singer ORDER BY age DESC LIMIT 3",  # a LIMIT count
        "SELECT name FROM singer LIMIT 5 OFFSET 10",
        "SELECT count(*) FROM singer WHERE age > 0",  # 0 and 1
        "SELECT name FROM singer WHERE song_release_year = '2014'",  # a number inside a string
        "SELECT name FROM singer WHERE age > 30 AND age < 40",  # both stated
        "SELECT (((",  # unparsable: nothing to say
    ],
)
def test_what_is_not_a_caveat(sql: str) -> None:
    assert unstated_numbers("Which singers are older than 30 and younger than 40?", sql) == []


def test_each_number_is_named_once() -> None:
    sql = "SELECT name FROM singer WHERE age > 35 OR age = 35 OR age < 20"
    assert unstated_numbers("Who is older than 30?", sql) == ["35", "20"]


def _ask(sql: str) -> Any:
    with dspy.context(lm=DummyLM({"": {"sql": sql}})):
        return sqlweave.ask(QUESTION, WORLD, program="direct")


def test_the_result_carries_its_caveats() -> None:
    wrong, right = _ask(WRONG), _ask(RIGHT)
    assert wrong.caveats == ["the query uses 5000000, a number the question does not state"]
    assert right.caveats == []
    assert wrong.rows and right.rows and len(wrong.rows) > len(right.rows)


@pytest.fixture
def lm(monkeypatch: pytest.MonkeyPatch) -> Any:
    holder: dict[str, Any] = {"lm": DummyLM({"": {"sql": WRONG}})}
    monkeypatch.setattr("sqlweave.lm.configure", lambda *a, **k: dspy.configure(lm=holder["lm"]))
    yield holder
    dspy.configure(lm=None)


def test_ask_prints_the_caveat_and_its_json_carries_it(lm: Any) -> None:
    args = ["ask", QUESTION, "--db", str(WORLD), "--program", "direct"]
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    assert "check: the query uses 5000000, a number the question does not state" in text.output
    answer = json.loads(runner.invoke(app, [*args, "--json"]).output)
    assert answer["caveats"] == ["the query uses 5000000, a number the question does not state"]
    lm["lm"] = DummyLM({"": {"sql": RIGHT}})
    assert "check:" not in runner.invoke(app, args).output


def test_serve_answers_with_the_caveats(tmp_path: Path) -> None:
    pytest.importorskip("starlette", reason="the serve extra")
    pytest.importorskip("httpx", reason="starlette's TestClient")
    from starlette.testclient import TestClient

    from sqlweave.serve import create_app

    app_ = create_app("direct", {"world_1": WORLD}, lm=DummyLM({"": {"sql": WRONG}}))
    with TestClient(app_, base_url="http://127.0.0.1") as client:
        body = client.post("/ask", json={"question": QUESTION}).json()
    assert body["caveats"] == ["the query uses 5000000, a number the question does not state"]


def test_a_caveat_shows_the_other_readings_even_when_sure(
    lm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sure answer with something to check prints the other readings too: the right one is
    often among them (the smoke that prompted caveats had it second)."""
    from sqlweave.programs.stages import confidence

    real = confidence.assess

    def sure(*args: Any, **kwargs: Any) -> Any:
        judged = real(*args, **kwargs)
        alt = confidence.Reading(RIGHT, ("Name",), (("Germany",),), 0.25)
        return confidence.Assessment(0.95, False, judged.features, (alt,))

    monkeypatch.setattr(confidence, "assess", sure)
    out = runner.invoke(app, ["ask", QUESTION, "--db", str(WORLD), "--program", "direct"]).output
    assert "confidence: 95%" in out and "not sure" not in out
    assert f"other reading 1 (25% of the candidates): {RIGHT}" in out
    lm["lm"] = DummyLM({"": {"sql": RIGHT}})
    assert (
        "other reading"
        not in runner.invoke(
            app, ["ask", QUESTION, "--db", str(WORLD), "--program", "direct"]
        ).output
    )


def test_ask_json_and_the_served_answer_are_one_body(lm: Any) -> None:
    """``sqlweave ask --json`` and ``POST /ask`` print one JSON shape (the server adds its timing
    and the database's name): a client reads either the same way."""
    pytest.importorskip("starlette", reason="the serve extra")
    pytest.importorskip("httpx", reason="starlette's TestClient")
    from starlette.testclient import TestClient

    from sqlweave.serve import create_app

    args = ["ask", QUESTION, "--db", str(WORLD), "--program", "direct", "--json"]
    printed = json.loads(runner.invoke(app, args).output)
    app_ = create_app("direct", {"world_1": WORLD}, lm=DummyLM({"": {"sql": WRONG}}))
    with TestClient(app_, base_url="http://127.0.0.1") as client:
        served = client.post("/ask", json={"question": QUESTION}).json()
    assert served.pop("db") == "world_1" and set(served.pop("timing")) == {"seconds"}
    assert printed.keys() == served.keys()
    assert printed["sql"] == served["sql"] == WRONG
    assert printed["rows"] == served["rows"][: len(printed["rows"])]  # each cuts at its own cap
    assert printed["caveats"] == served["caveats"]
