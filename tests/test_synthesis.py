"""Synthesized pairs: template SQL checked by execution, questions by the LM, the round trip."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import dspy
import pytest
from conftest import DEMO_CONCERT_DB, NumberedQuestions, pg_schema
from dspy.utils import DummyLM

from sqlweave.data import load_questions
from sqlweave.db import Database
from sqlweave.synthesis.pairs import (
    TEMPLATES,
    Draft,
    SynthesisError,
    check_draft,
    draft_queries,
    synthesize,
)

QUESTION = "How many singers are there?"
ANSWER = "SELECT count(*) FROM singer"


def _lm() -> DummyLM:
    # the describer gets QUESTION for every query; direct answers ANSWER to every question
    answers = {"Answer with the question only": {"question": QUESTION}, "": {"sql": ANSWER}}
    return DummyLM(NumberedQuestions(answers))


def test_drafts_run_return_rows_and_cover_the_levels():
    db = Database.open(DEMO_CONCERT_DB)
    drafts = [d for d in draft_queries(db, 30) if isinstance(d, Draft)]
    assert len(drafts) == 30
    assert len({d.sql.lower() for d in drafts}) == 30
    assert {d.difficulty for d in drafts} >= {"easy", "medium", "hard"}
    for d in drafts:
        rows = db.execute(d.sql).rows
        assert 0 < len(rows) <= 50 and d.n_rows == len(rows)
    # the same seed draws the same queries; another seed others
    again = [d.sql for d in draft_queries(db, 30) if isinstance(d, Draft)]
    other = [d.sql for d in draft_queries(db, 30, seed=1) if isinstance(d, Draft)]
    assert again == [d.sql for d in drafts] and other != again


def test_check_draft_rejects_bad_labels():
    db = Database.open(DEMO_CONCERT_DB)
    assert check_draft(db, "t", "SELECT nope FROM singer").startswith("does not run")
    assert check_draft(db, "t", "SELECT Name FROM singer WHERE Age > 1000") == "returns no rows"
    tie = "SELECT Country FROM singer ORDER BY Is_male DESC LIMIT 1"
    assert "tie" in check_draft(db, "t", tie)
    one = "SELECT Name, count(*) FROM singer GROUP BY Singer_ID"
    assert "one row" in check_draft(db, "group_count", one)
    assert isinstance(
        check_draft(db, "t", "SELECT Name FROM singer ORDER BY Age DESC LIMIT 1"), Draft
    )


def test_every_template_fills_on_a_schema_with_keys():
    db = Database.open(DEMO_CONCERT_DB)
    made = {d.template for d in draft_queries(db, 200) if isinstance(d, Draft)}
    assert made == {name for name, _level, _fill in TEMPLATES}


def test_no_tables_and_empty_tables_are_clear_errors(tmp_path: Path):
    empty = tmp_path / "empty.sqlite"
    conn = sqlite3.connect(empty)
    conn.execute("PRAGMA user_version = 1")  # a valid file with no tables
    conn.commit()
    conn.close()
    with pytest.raises(SynthesisError, match="no tables"):
        list(draft_queries(Database.open(empty), 5))
    hollow = tmp_path / "hollow.sqlite"
    conn = sqlite3.connect(hollow)
    conn.execute("CREATE TABLE t (a INTEGER, b TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(SynthesisError, match="empty"):
        list(draft_queries(Database.open(hollow), 5))
    with pytest.raises(SynthesisError, match="positive"):
        synthesize(DEMO_CONCERT_DB, 0)


def test_round_trip_keeps_only_pairs_whose_answer_matches(tmp_path: Path):
    db = Database.open(DEMO_CONCERT_DB)
    drafts = [d for d in draft_queries(db, 6) if isinstance(d, Draft)]
    # direct answers the third draft's SQL to every question: the first two fail the round trip
    third = drafts[2].sql
    assert all(db.execute(d.sql).rows != db.execute(third).rows for d in drafts[:2])
    lm = DummyLM({"Answer with the question only": {"question": QUESTION}, "": {"sql": third}})
    out = tmp_path / "pairs.jsonl"
    with dspy.context(lm=lm):
        pairs = synthesize(DEMO_CONCERT_DB, 1, out=out, progress=False)
    assert [p["gold_sql"] for p in pairs] == [third]
    tried = [
        json.loads(x) for x in out.with_name("pairs.jsonl.tried.jsonl").read_text().splitlines()
    ]
    checked = [t for t in tried if "question" in t]
    assert [t["kept"] for t in checked] == [False, False, True]
    assert checked[0]["why"].startswith("round trip")
    # the file is a questions file
    [ex] = load_questions(out)
    assert ex.question == QUESTION and ex.gold_sql == third
    assert Path(ex.db_path) == DEMO_CONCERT_DB


def _distinct_questions(n: int = 40) -> DummyLM:
    """A describer that writes a new question each call (a pair is kept once per question)."""
    return DummyLM([{"question": f"How many singers are there, case {i}?"} for i in range(n)])


def test_without_the_round_trip_every_question_is_kept_and_a_rerun_resumes(tmp_path: Path):
    out = tmp_path / "pairs.jsonl"
    with dspy.context(lm=_distinct_questions()):
        first = synthesize(DEMO_CONCERT_DB, 3, out=out, check=False, progress=False)
        assert len(first) == 3
        more = synthesize(DEMO_CONCERT_DB, 5, out=out, check=False, progress=False)
    assert more[:3] == first and len(more) == 5
    assert len({p["gold_sql"] for p in more}) == 5  # nothing tried before is drawn again
    lines = out.read_text().splitlines()
    assert len(lines) == 5


def test_a_pairs_file_resumes_only_under_its_own_settings(tmp_path: Path, caplog):
    """Found by review: pairs made without the round trip, resumed with it, were recorded as
    checked. The settings stand beside the file; other ones are refused, an older file (no
    settings kept) resumes with a warning."""
    from sqlweave.synthesis.pairs import settings_path

    out = tmp_path / "pairs.jsonl"
    with dspy.context(lm=_distinct_questions()):
        synthesize(DEMO_CONCERT_DB, 2, out=out, check=False, seed=3, progress=False)
        assert json.loads(settings_path(out).read_text())["check"] is False
        with pytest.raises(SynthesisError, match=r"made with \{'check': False, 'seed': 3\}"):
            synthesize(DEMO_CONCERT_DB, 4, out=out, check=True, progress=False)
        assert len(out.read_text().splitlines()) == 2  # nothing added
        settings_path(out).unlink()
        more = synthesize(DEMO_CONCERT_DB, 3, out=out, check=False, seed=3, progress=False)
    assert len(more) == 3 and "keeps no settings" in caplog.text


def test_a_pairs_file_of_another_database_is_refused_by_synthesize_too(tmp_path: Path):
    """Found by review: only the compile's path checked it; `sqlweave synthesize` counted six
    pairs of another database as this one's."""
    out = tmp_path / "pairs.jsonl"
    out.write_text(json.dumps({"question": "q?", "gold_sql": "SELECT 1", "db_id": "shop"}) + "\n")
    with (
        dspy.context(lm=_distinct_questions()),
        pytest.raises(SynthesisError, match="holds pairs of shop"),
    ):
        synthesize(DEMO_CONCERT_DB, 2, out=out, check=False, progress=False)


def test_garbage_questions_are_rejected(tmp_path: Path):
    lm = DummyLM(
        {"Answer with the question only": {"question": "SELECT * FROM singer"}, "": {"sql": ANSWER}}
    )
    with dspy.context(lm=lm):
        pairs = synthesize(DEMO_CONCERT_DB, 2, check=False, progress=False)
    assert pairs == []


def test_cli_synthesize_writes_a_questions_file(tmp_path: Path, monkeypatch):
    from typer.testing import CliRunner

    from sqlweave import cli

    # the CLI's model is the stand-in (no weights needed): configure makes it DSPy's LM
    def stand_in(model, **options):
        dspy.configure(lm=_lm())

    monkeypatch.setattr("sqlweave.lm.configure", stand_in)
    out = tmp_path / "syn.jsonl"
    args = ["synthesize", "--db", str(DEMO_CONCERT_DB), "--n", "2", "--out", str(out), "--no-check"]
    result = CliRunner().invoke(cli.app, [*args, "--sample-rows", "2"])
    assert result.exit_code == 0, result.output
    assert "2 pairs for concert_singer" in result.output
    assert len(load_questions(out)) == 2
    result = CliRunner().invoke(cli.app, [*args, "--sample-rows", "-1"])
    assert result.exit_code == 2 and "--sample-rows must be 0 or more" in result.output


def test_cli_synthesize_on_a_database_with_no_tables_is_one_error_line(tmp_path: Path):
    from typer.testing import CliRunner

    from sqlweave import cli

    empty = tmp_path / "empty.sqlite"
    conn = sqlite3.connect(empty)
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    result = CliRunner().invoke(cli.app, ["synthesize", "--db", str(empty), "--n", "3"])
    assert result.exit_code == 2
    assert "no tables" in result.output


def test_the_question_writer_can_see_stored_rows(tmp_path: Path):
    """``sample_rows`` puts rows of the tables the query reads into the writer's prompt."""
    prompts = {}
    for rows in (0, 3):
        lm = _lm()
        with dspy.context(lm=lm):
            synthesize(DEMO_CONCERT_DB, 1, check=False, progress=False, sample_rows=rows)
        prompts[rows] = " ".join(str(m["content"]) for m in lm.history[0]["messages"])
    assert "CREATE TABLE" in prompts[0] and "CREATE TABLE" in prompts[3]
    assert "example rows from table" not in prompts[0]
    assert "3 example rows from table" in prompts[3]


def test_accept_any_keeps_a_pair_when_some_candidate_matches(tmp_path: Path):
    db = Database.open(DEMO_CONCERT_DB)
    target = next(d for d in draft_queries(db, 1) if isinstance(d, Draft)).sql
    wrong = "SELECT 'no draft returns this'"

    def checker(question: str, db: Database) -> dspy.Prediction:
        # answers wrongly, but weighed the label's query among its candidates
        return dspy.Prediction(sql=wrong, candidates=[wrong, target])

    lm = DummyLM({"Answer with the question only": {"question": QUESTION}})
    with dspy.context(lm=lm):
        strict = synthesize(DEMO_CONCERT_DB, 1, program=checker, progress=False)
        loose = synthesize(DEMO_CONCERT_DB, 1, program=checker, accept="any", progress=False)
        with pytest.raises(SynthesisError, match="accept must be one of answer, any"):
            synthesize(DEMO_CONCERT_DB, 1, program=checker, accept="some", progress=False)
    assert strict == []  # the answer alone never matches
    assert [p["gold_sql"] for p in loose] == [target]


def test_cli_synthesize_checks_accept_and_the_checking_programs_switches(tmp_path: Path):
    from typer.testing import CliRunner

    from sqlweave import cli

    base = ["synthesize", "--db", str(DEMO_CONCERT_DB), "--out", str(tmp_path / "s.jsonl")]
    result = CliRunner().invoke(cli.app, [*base, "--accept", "some"])
    assert result.exit_code == 2 and "--accept must be one of answer, any" in result.output
    result = CliRunner().invoke(cli.app, [*base, "--set", "samples=many"])
    assert result.exit_code == 2 and "samples" in result.output
    result = CliRunner().invoke(cli.app, [*base, "--set", "nonsense=1"])
    assert result.exit_code == 2 and "unknown switch 'nonsense'" in result.output


def test_every_template_says_what_its_sql_returns():
    """Each draft carries a meaning in plain words, built from the parts its SQL was filled with:
    the selected column's words, and the values the SQL compares with."""
    import re

    from sqlweave.synthesis.templates import _words

    db = Database.open(DEMO_CONCERT_DB)
    drafts = [d for d in draft_queries(db, 200) if isinstance(d, Draft)]
    assert {d.template for d in drafts} == {name for name, _level, _fill in TEMPLATES}
    for d in drafts:
        assert d.meaning, d.template
        shown = re.match(r"SELECT (?:T\d\.)?\"?(\w+)\"?", d.sql)
        if shown and not re.match(r"SELECT (count|avg|max|min|sum)\(", d.sql):
            assert _words(shown.group(1)) in d.meaning, (d.sql, d.meaning)
        for literal in re.findall(r"'(?:[^']|'')*'", d.sql):
            assert literal in d.meaning, (d.sql, d.meaning)
    having = next(d for d in drafts if d.template == "having")
    assert "not a count" in having.meaning
    join_top = next(d for d in drafts if d.template == "join_top")
    assert "counting" in join_top.meaning


def test_words_of_names():
    from sqlweave.synthesis.templates import _words

    assert _words("Total_Horses") == "total horses"
    assert _words("ShopId") == "shop id"
    assert _words("hero-power.name") == "hero power name"


def test_the_question_writer_reads_the_meaning():
    lm = _lm()
    with dspy.context(lm=lm):
        [pair] = synthesize(DEMO_CONCERT_DB, 1, check=False, progress=False)
    prompt = " ".join(str(m["content"]) for m in lm.history[0]["messages"])
    db = Database.open(DEMO_CONCERT_DB)
    first = next(d for d in draft_queries(db, 1) if isinstance(d, Draft))
    assert first.sql == pair["gold_sql"] and first.meaning in prompt
    assert pair["meaning"] == first.meaning  # kept beside the question, for reading the set


def test_meanings_survive_awkward_names(tmp_path: Path):
    """Spaces, quotes, unicode and symbol-only names: every draft runs and says what it returns."""
    path = tmp_path / "awkward.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE "Order Sets" ("Set ID" INTEGER PRIMARY KEY, "Nom Côté" TEXT, "%%" REAL);
        CREATE TABLE "it""ems" (
            "Item Id" INTEGER PRIMARY KEY, "qu""ote" TEXT, "Unit-Price" REAL,
            "Set ID" INTEGER REFERENCES "Order Sets"("Set ID"));
        """
    )
    conn.executemany(
        'INSERT INTO "Order Sets" VALUES (?, ?, ?)',
        [(1, "l'été", 1.5), (2, "hiver", 2.5), (3, "hiver", 3.5)],
    )
    conn.executemany(
        'INSERT INTO "it""ems" VALUES (?, ?, ?, ?)',
        [(i, f"O'Brien {i % 3}", 1.0 + i, 1 + i % 2) for i in range(1, 9)],
    )
    conn.commit()
    conn.close()
    db = Database.open(path)
    drafts = [d for d in draft_queries(db, 30) if isinstance(d, Draft)]
    assert len(drafts) >= 10
    for d in drafts:
        assert d.meaning.strip() and db.execute(d.sql).rows


def test_bridge_walks_a_link_table_and_returns_what_the_links_say(tmp_path: Path):
    """The three-table template: rows of one table reached from another table's value through
    the link table that refers to both, once per link (Spider's gold style, no DISTINCT). Keys
    and the columns referring to them are named apart, so a join written the wrong way round
    fails to run or returns other rows; each drawn query's rows are checked against the links
    computed in Python."""
    import re

    path = tmp_path / "clubs.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE person (pid INTEGER PRIMARY KEY, name TEXT, town TEXT);
        CREATE TABLE club (cid INTEGER PRIMARY KEY, title TEXT, sport TEXT);
        CREATE TABLE membership (
            mid INTEGER PRIMARY KEY,
            person_ref INTEGER REFERENCES person(pid),
            club_ref INTEGER REFERENCES club(cid));
        """
    )
    people = [(1, "Ann", "Ely"), (2, "Bob", "Ely"), (3, "Cy", "Hove"), (4, "Di", "Rye")]
    clubs = [(10, "Reds", "chess"), (20, "Blues", "go"), (30, "Greens", "chess")]
    links = [(1, 1, 10), (2, 1, 20), (3, 2, 10), (4, 3, 30), (5, 4, 20), (6, 2, 30)]
    conn.executemany("INSERT INTO person VALUES (?, ?, ?)", people)
    conn.executemany("INSERT INTO club VALUES (?, ?, ?)", clubs)
    conn.executemany("INSERT INTO membership VALUES (?, ?, ?)", links)
    conn.commit()
    conn.close()
    db = Database.open(path)
    rows = {
        "person": {p[0]: dict(zip(("pid", "name", "town"), p, strict=True)) for p in people},
        "club": {c[0]: dict(zip(("cid", "title", "sport"), c, strict=True)) for c in clubs},
    }
    bridges = [d for d in draft_queries(db, 200) if isinstance(d, Draft) and d.template == "bridge"]
    assert bridges
    for d in bridges:
        assert "membership AS T2" in d.sql and d.sql.count(" JOIN ") == 2
        assert "membership row links" in d.meaning
        a, shown, b, where, value = re.match(
            r"SELECT T1\.(?:\"?)(\w+)\"? FROM (\w+) AS T1 .* JOIN (\w+) AS T3 .* "
            r"WHERE T3\.(\w+) = '(.*)'$",
            d.sql,
        ).group(2, 1, 3, 4, 5)
        ref = {"person": 1, "club": 2}
        expected = sorted(
            rows[a][link[ref[a]]][shown]
            for link in links
            if str(rows[b][link[ref[b]]][where]) == value
        )
        assert sorted(r[0] for r in db.execute(d.sql).rows) == expected, d.sql


def test_join_project_shows_columns_of_both_tables(tmp_path: Path):
    db = Database.open(DEMO_CONCERT_DB)
    drafts = [d for d in draft_queries(db, 200) if isinstance(d, Draft)]
    projects = [d for d in drafts if d.template == "join_project"]
    assert projects
    for d in projects:
        assert d.sql.startswith("SELECT T1.") and ", T2." in d.sql.split(" FROM ")[0]
        assert "each with the" in d.meaning and "row it refers to" in d.meaning
    # a schema with no foreign keys offers neither template; the others still fill
    plain = tmp_path / "plain.sqlite"
    conn = sqlite3.connect(plain)
    conn.execute("CREATE TABLE pet (name TEXT, kind TEXT, age INTEGER)")
    conn.executemany(
        "INSERT INTO pet VALUES (?, ?, ?)", [("Rex", "dog", 3), ("Tom", "cat", 5), ("Bo", "dog", 1)]
    )
    conn.commit()
    conn.close()
    made = {d.template for d in draft_queries(Database.open(plain), 30) if isinstance(d, Draft)}
    assert made and not made & {"bridge", "join_project", "join_filter"}


@pytest.mark.postgres
def test_drafts_on_a_mixed_case_postgres_schema_run():
    """Tables an ORM made on PostgreSQL ("Shop"."ShopName"): a bare ShopName means shopname
    there, so every draft must quote such names or none of them runs."""
    shops = ", ".join(f"({i}, 'Shop {chr(64 + i)}', {3 * i + i % 2})" for i in range(1, 7))
    sales = ", ".join(f"({i}, {1 + i % 6}, {10 * i + i % 4}, 'item {i % 5}')" for i in range(1, 19))
    with (
        pg_schema(
            "orm_case",
            'CREATE TABLE "Shop" ("ShopId" int PRIMARY KEY, "ShopName" text, "Staff" int)',
            'CREATE TABLE "Sale" ("SaleId" int PRIMARY KEY, "ShopId" int REFERENCES "Shop", '
            '"Amount" int, "Item" text)',
            f'INSERT INTO "Shop" VALUES {shops}',
            f'INSERT INTO "Sale" VALUES {sales}',
        ) as url,
        Database.open(url) as db,
    ):
        drawn = list(draft_queries(db, 12))
    drafts = [d for d in drawn if isinstance(d, Draft)]
    failed = [d for d in drawn if not isinstance(d, Draft) and "does not run" in d[2]]
    assert len(drafts) == 12 and failed == []
    assert any('"ShopName"' in d.sql for d in drafts)
    assert any("JOIN" in d.sql for d in drafts)


def test_a_question_utf8_cannot_hold_is_written_not_fatal(tmp_path: Path):
    out = tmp_path / "pairs.jsonl"
    lm = DummyLM({"Answer with the question only": {"question": "How many singers \udcff?"}})
    with dspy.context(lm=lm):
        pairs = synthesize(DEMO_CONCERT_DB, 1, out=out, check=False, progress=False)
    assert len(pairs) == 1 and out.read_text().count("\\udcff") == 1


def test_drafts_stop_when_the_schema_has_no_new_query(tmp_path: Path):
    import time

    path = tmp_path / "one.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (a INTEGER)")
        conn.execute("INSERT INTO t VALUES (1)")
    start = time.monotonic()
    with Database.open(path) as db:
        drafts = list(draft_queries(db, 10_000_000, seed=0))
    assert len(drafts) < 1000 and time.monotonic() - start < 60


def test_a_question_already_kept_is_not_kept_again(tmp_path: Path):
    """Two pairs with one question could land in train and in validation both."""
    out = tmp_path / "pairs.jsonl"
    lm = DummyLM({"Answer with the question only": {"question": QUESTION}})  # one for all
    with dspy.context(lm=lm):
        pairs = synthesize(DEMO_CONCERT_DB, 3, out=out, check=False, progress=False)
        again = synthesize(DEMO_CONCERT_DB, 4, out=out, check=False, progress=False)
    assert [p["question"] for p in pairs] == [QUESTION] and len(again) == 1  # also on resume
    tried = [json.loads(line) for line in (tmp_path / "pairs.jsonl.tried.jsonl").open()]
    assert any(t["why"] == "a kept pair already asks this question" for t in tried)


def test_a_shortfall_names_the_reason_the_verdicts_give(tmp_path: Path):
    """Found by review: 76 round-trip rejections were reported as a schema offering too few
    queries."""
    from sqlweave.synthesis.pairs import shortfall_reason

    tried = tmp_path / "pairs.jsonl.tried.jsonl"
    verdicts = (
        [{"kept": True, "why": "kept"}]
        + [{"kept": False, "why": "round trip: the question leads to another answer"}] * 3
        + [{"kept": False, "why": "the query returns no rows"}]
    )
    tried.write_text("".join(json.dumps(v) + "\n" for v in verdicts))
    assert shortfall_reason(tried) == (
        "4 of 5 drafts turned down, 3 of them: round trip: the question leads to another answer"
    )
    assert "too few usable queries" in shortfall_reason(tmp_path / "none.jsonl")
