"""Compiling on your own database with synthesized pairs: the split, the record, bad input."""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

import dspy
import pytest
from conftest import DEMO_CONCERT_DB, DEMO_ROOT, NumberedQuestions, duckdb_url, pg_schema
from dspy.utils import DummyLM
from typer.testing import CliRunner

import sqlweave
from sqlweave import cli
from sqlweave.examples import as_examples
from sqlweave.optimizers import load_program
from sqlweave.synthesis.pairs import SynthesisError
from sqlweave.synthesis.sets import pairs_files, pairs_hash, redact, split_pairs

PETS_DB = DEMO_ROOT / "spider" / "database" / "pets_1" / "pets_1.sqlite"
QUESTION = "How many singers are there?"


def _lm(sql: str = "SELECT count(*) FROM singer") -> DummyLM:
    """The describer writes QUESTION for every query; every program answer is ``sql``."""
    answers = {"Answer with the question only": {"question": QUESTION}, "": {"sql": sql}}
    return DummyLM(NumberedQuestions(answers))


def _sqlite(path: Path, *statements: str) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 1")  # a valid file even with no table
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return path


def _pairs(db: str, n: int) -> list[dict]:
    return [{"question_id": f"{db}{i}", "db_id": db, "question": f"q{i}"} for i in range(n)]


def _stand_in(monkeypatch: pytest.MonkeyPatch, lm: DummyLM) -> None:
    """The CLI's model is the stand-in (no weights needed): configuring it configures ``lm``."""
    monkeypatch.setattr("sqlweave.lm.configure", lambda *a, **k: dspy.configure(lm=lm))


# --- the split, the hash, the record ------------------------------------------------------------


def test_split_is_seeded_per_database_and_handles_tiny_sets():
    a, b, c = _pairs("a", 10), _pairs("b", 2), _pairs("c", 1)
    train, val = split_pairs([a, b, c], seed=0)
    assert len(val) == 2 + 1 + 0 and len(train) == 8 + 1 + 1
    assert {p["db_id"] for p in val} == {"a", "b"}  # every database with 2+ pairs validates
    assert c[0] in train  # one pair: it trains
    assert split_pairs([a, b, c], seed=0) == (train, val)
    assert split_pairs([a, b, c], seed=1) != (train, val)
    # a cap takes validation pairs in turn from each database; the rest go back to train
    train2, val2 = split_pairs([_pairs("a", 20), _pairs("b", 20)], seed=0, n_val=3)
    assert [p["db_id"] for p in val2] == ["a", "b", "a"] and len(train2) == 37
    assert split_pairs([], seed=0) == ([], [])


def test_a_larger_validation_share_still_leaves_every_database_a_pair_to_train():
    a, b, c = _pairs("a", 10), _pairs("b", 2), _pairs("c", 1)
    train, val = split_pairs([a, b, c], seed=0, val_fraction=0.9)
    assert len(val) == 9 + 1 + 0 and len(train) == 1 + 1 + 1
    assert {p["db_id"] for p in train} == {"a", "b", "c"}
    # the default share is a fifth; the share changes which pairs validate, not the shuffle
    assert split_pairs([a], seed=0)[1] == split_pairs([a], seed=0, val_fraction=0.9)[1][:2]
    for bad in (0, 1, 1.5, -0.1, True, "0.5"):
        with pytest.raises(SynthesisError, match="validation share"):
            split_pairs([a], seed=0, val_fraction=bad)


def test_pairs_hash_is_the_canonical_content():
    pairs = [{"b": 2, "a": "é"}, {"a": 1}]
    reordered = [{"a": 1}, {"a": "é", "b": 2}]
    assert pairs_hash(pairs) == pairs_hash(reordered)
    assert pairs_hash(pairs) != pairs_hash([{"b": 2, "a": "e"}, {"a": 1}])
    canonical = '{"a":"é","b":2}\n{"a":1}'  # sorted lines, sorted keys, no spaces
    assert pairs_hash(pairs) == hashlib.sha256(canonical.encode()).hexdigest()


def test_database_references_are_recorded_without_passwords():
    assert (
        redact("postgresql://reader:s3cret@db:5432/shop") == "postgresql://reader:***@db:5432/shop"
    )
    assert redact("/data/shop.sqlite") == "/data/shop.sqlite"
    assert "s3cret" not in redact("postgresql://reader:s3cret@[bad")


def test_one_pairs_file_per_database(tmp_path: Path):
    dbs = [sqlweave.Database.open(DEMO_CONCERT_DB), sqlweave.Database.open(PETS_DB)]
    out = tmp_path / "shop.jsonl"
    assert pairs_files(dbs[:1], out) == [out]
    assert pairs_files(dbs, out) == [
        tmp_path / "shop.concert_singer.jsonl",
        tmp_path / "shop.pets_1.jsonl",
    ]
    cached = pairs_files(dbs, None)
    assert len(set(cached)) == 2 and all(p.parent.name == "synthetic" for p in cached)
    assert pairs_files(dbs, None, seed=1) != cached  # other settings, another file


def test_compile_on_synthesized_pairs_records_the_set_and_resumes(tmp_path: Path):
    out = tmp_path / "pairs.jsonl"
    with dspy.context(lm=_lm()):
        compiled = sqlweave.compile(
            "direct",
            db=DEMO_CONCERT_DB,
            synthesize=6,
            synthetic_out=out,
            synthesis_check=False,
            optimizer="labeled",
            progress=False,
        )
    record = compiled.meta.extra["synthetic"]
    pairs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(pairs) == 6 and record["n_pairs"] == 6
    assert record["sha256"] == pairs_hash(pairs)
    assert [d["db"] for d in record["databases"]] == [str(DEMO_CONCERT_DB)]
    assert record["lm_calls"] == 6  # one question per kept pair (no round trip)
    assert (
        (compiled.meta.n_train, compiled.meta.n_val)
        == (5, 1)
        == (
            record["n_train"],
            record["n_val"],
        )
    )
    assert "synthesized" in compiled.meta.extra["validation"]
    # the artefact keeps the record; inspect shows it
    path = compiled.save(tmp_path / "c.json")
    assert load_program(path)[1].extra["synthetic"] == record
    shown = CliRunner().invoke(cli.app, ["inspect", str(path)])
    assert shown.exit_code == 0
    assert f"synthetic set: 6 pairs (5 train, 1 validation), sha256 {record['sha256']}" in (
        shown.output
    )
    assert f"database {DEMO_CONCERT_DB}: 6 pairs in {out}" in shown.output
    # a rerun reads the file: no synthesis call, the same set
    with dspy.context(lm=_lm()):
        again = sqlweave.compile(
            "direct",
            db=DEMO_CONCERT_DB,
            synthesize=6,
            synthetic_out=out,
            synthesis_check=False,
            optimizer="labeled",
            progress=False,
        )
    assert again.meta.extra["synthetic"]["lm_calls"] == 0
    assert again.meta.extra["synthetic"]["sha256"] == record["sha256"]
    # the same file for another database is refused, not mixed
    with dspy.context(lm=_lm()), pytest.raises(SynthesisError, match="holds pairs of concert"):
        sqlweave.compile("direct", db=PETS_DB, synthesize=6, synthetic_out=out, progress=False)


def test_compile_over_two_databases_shows_each_question_its_own_databases_demos(tmp_path: Path):
    answers = {"Answer with the question only": {"question": QUESTION}, "": {"sql": "SELECT 1"}}
    lm = DummyLM(NumberedQuestions(answers))
    with dspy.context(lm=lm):
        compiled = sqlweave.compile(
            "direct",
            db=[DEMO_CONCERT_DB, PETS_DB],
            synthesize=5,
            synthetic_out=tmp_path / "syn.jsonl",
            synthesis_check=False,
            optimizer="knn",
            max_demos=2,
            progress=False,
        )
    record = compiled.meta.extra["synthetic"]
    assert [d["db_id"] for d in record["databases"]] == ["concert_singer", "pets_1"]
    assert record["n_pairs"] == 10 and (record["n_train"], record["n_val"]) == (8, 2)
    assert (tmp_path / "syn.concert_singer.jsonl").is_file()
    assert (tmp_path / "syn.pets_1.jsonl").is_file()
    # every pair asks the same question: only the database decides which demos a question gets
    pool = compiled.program.knn_pool["pool"]
    assert {item["db_id"] for item in pool} == {"concert_singer", "pets_1"}
    for db, name in ((PETS_DB, "pets_1"), (DEMO_CONCERT_DB, "concert_singer")):
        answer = DummyLM([{"sql": "SELECT 1"}])
        with dspy.context(lm=answer):
            compiled.program(question=QUESTION, db=str(db))
        prompt = json.dumps(answer.history[-1]["messages"])
        shown = [i for i in pool if json.dumps(i["demos"]["generate"]["sql"])[1:-1] in prompt]
        assert len(shown) == 2 and {i["db_id"] for i in shown} == {name}


def test_compile_arguments_that_do_not_go_together(tmp_path: Path):
    train = [{"question": QUESTION, "sql": "SELECT 1", "db": str(DEMO_CONCERT_DB)}]
    with dspy.context(lm=_lm()):
        with pytest.raises(ValueError, match="not both"):
            sqlweave.compile("direct", train, db=DEMO_CONCERT_DB, synthesize=3)
        with pytest.raises(ValueError, match="go together"):
            sqlweave.compile("direct", db=DEMO_CONCERT_DB)
        with pytest.raises(ValueError, match="go together"):
            sqlweave.compile("direct", synthesize=3)
        with pytest.raises(ValueError, match="needs a trainset"):
            sqlweave.compile("direct")
        with pytest.raises(SynthesisError, match="positive"):
            sqlweave.compile("direct", db=DEMO_CONCERT_DB, synthesize=0)
        with pytest.raises(SynthesisError, match="named 'concert_singer'"):
            sqlweave.compile("direct", db=[DEMO_CONCERT_DB, DEMO_CONCERT_DB], synthesize=2)
    with dspy.context(lm=None), pytest.raises(ValueError, match="configure"):
        sqlweave.compile("direct", db=DEMO_CONCERT_DB, synthesize=2)


# --- bad input: clear errors or an honest small set ---------------------------------------------


def test_no_tables_empty_tables_and_failed_drafts_are_clear_errors(tmp_path: Path):
    empty = _sqlite(tmp_path / "empty.sqlite")
    hollow = _sqlite(tmp_path / "hollow.sqlite", "CREATE TABLE t (a INTEGER, b TEXT)")
    lm = _lm()
    with dspy.context(lm=lm):
        with pytest.raises(SynthesisError, match="no tables"):
            sqlweave.compile("direct", db=empty, synthesize=3, synthetic_out=tmp_path / "e")
        with pytest.raises(SynthesisError, match="empty"):
            sqlweave.compile("direct", db=hollow, synthesize=3, synthetic_out=tmp_path / "h")
    assert lm.history == []  # refused before any LM call
    # every round trip fails: the model's answer never returns the template's rows
    out = tmp_path / "fail.jsonl"
    with dspy.context(lm=_lm("SELECT 'nothing like it'")):
        with pytest.raises(SynthesisError, match="no pair survived") as err:
            sqlweave.compile("direct", db=DEMO_CONCERT_DB, synthesize=2, synthetic_out=out)
    assert f"{out}.tried.jsonl" in str(err.value)
    tried = [json.loads(x) for x in Path(f"{out}.tried.jsonl").read_text().splitlines()]
    assert tried and not any(t["kept"] for t in tried)


def test_a_database_with_few_usable_queries_compiles_on_an_honest_small_set(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    tiny = _sqlite(
        tmp_path / "tiny.sqlite", "CREATE TABLE t (name TEXT)", "INSERT INTO t VALUES ('x')"
    )
    with dspy.context(lm=_lm()), caplog.at_level(logging.WARNING):
        compiled = sqlweave.compile(
            "direct",
            db=tiny,
            synthesize=8,
            synthetic_out=tmp_path / "tiny.jsonl",
            synthesis_check=False,
            optimizer="labeled",
            progress=False,
        )
    record = compiled.meta.extra["synthetic"]
    assert 1 <= record["n_pairs"] < 8 and record["n_asked"] == 8
    # said once, by the synthesis, not again by the compile
    short = [r.getMessage() for r in caplog.records if "pairs" in r.getMessage()]
    assert len(short) == 1 and "of 8 pairs (" in short[0] and "drafts turned down" in short[0], (
        short
    )


def test_a_search_on_round_trip_kept_pairs_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """The round trip keeps what the program as it is answers: a search validated on those pairs
    cannot rank; said when it would (round trip on, no valset given), not otherwise."""
    warning = "no other configuration can beat it"
    val = [{"question": QUESTION, "sql": "SELECT count(*) FROM singer", "db": str(DEMO_CONCERT_DB)}]
    search = {"optimizer": "search", "options": {"space": {"samples": [1]}}, "progress": False}
    for check, valset, warned in ((True, None, True), (False, None, False), (True, val, False)):
        caplog.clear()
        with dspy.context(lm=_lm()), caplog.at_level(logging.WARNING):
            try:
                sqlweave.compile(
                    "direct",
                    valset=valset,
                    db=DEMO_CONCERT_DB,
                    synthesize=3,
                    synthetic_out=tmp_path / f"s{check}{valset is None}.jsonl",
                    synthesis_check=check,
                    **search,
                )
            except ValueError as err:  # the stand-in's round trip keeps one pair: none validates
                assert check and "validation examples" in str(err)
        assert (warning in caplog.text) is warned, (check, valset)


def test_cli_bad_input_is_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    _stand_in(monkeypatch, _lm("SELECT 'nothing like it'"))
    empty = _sqlite(tmp_path / "empty.sqlite")
    hollow = _sqlite(tmp_path / "hollow.sqlite", "CREATE TABLE t (a INTEGER, b TEXT)")
    out = str(tmp_path / "c.json")
    cases = [
        (["--db", str(empty), "--synthesize", "3"], "no tables"),
        (["--db", str(hollow), "--synthesize", "3"], "every table is empty"),
        (["--db", str(tmp_path / "missing.sqlite"), "--synthesize", "3"], "not found"),
        (["--db", str(DEMO_CONCERT_DB), "--synthesize", "2"], "no pair survived"),
        (["--db", str(DEMO_CONCERT_DB), "--synthesize", "0"], "at least 1"),
        (["--synthesize", "3"], "needs --db"),
        (["--db", str(DEMO_CONCERT_DB)], "--synthesize N"),
        (["--db", str(DEMO_CONCERT_DB), "--synthesize", "3", "--train", "spider"], "not combine"),
        (["--db", str(DEMO_CONCERT_DB), "--synthesize", "3", "--n-train", "4"], "--n-train"),
        (
            ["--db", str(DEMO_CONCERT_DB), "--synthesize", "3", "--synthetic-val-fraction", "1"],
            "--synthetic-val-fraction: the validation share must be above 0 and below 1",
        ),
    ]
    for args, message in cases:
        result = CliRunner().invoke(cli.app, ["compile", *args, "--out", out, "--no-progress"])
        assert result.exit_code == 2, (args, result.output)
        assert "error:" in result.output and message in result.output, (args, result.output)
        assert "Traceback" not in result.output


def test_cli_compile_on_synthesized_pairs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    _stand_in(monkeypatch, _lm())
    out = tmp_path / "shop.json"
    args = ["compile", "--db", str(DEMO_CONCERT_DB), "--synthesize", "5", "--no-synthesis-check"]
    args += ["--optimizer", "labeled", "--out", str(out), "--no-progress"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    pairs_file = tmp_path / "shop.synthetic.jsonl"  # beside the artefact by default
    assert "synthetic set: 5 pairs (4 train, 1 validation)" in result.output
    assert f"5 pairs in {pairs_file}" in result.output
    meta = load_program(out)[1]
    assert meta.extra["synthetic"]["sha256"] == pairs_hash(
        [json.loads(x) for x in pairs_file.read_text().splitlines()]
    )
    # the LM that compiled, as sqlweave.compile records it (the stand-in, not --model's name)
    assert meta.lm == "dummy" and meta.n_train == 4
    # several --db: one pairs file per database beside the artefact
    args = ["compile", "--db", str(DEMO_CONCERT_DB), "--db", str(PETS_DB), "--synthesize", "2"]
    args += ["--no-synthesis-check", "--optimizer", "labeled", "--out", str(out), "--no-progress"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    assert "synthetic set: 4 pairs (2 train, 2 validation)" in result.output
    for name in ("concert_singer", "pets_1"):
        assert f"2 pairs in {tmp_path / f'shop.synthetic.{name}.jsonl'}" in result.output
    # a switch search validates on most of the pairs: the share is the user's
    args = ["compile", "--db", str(DEMO_CONCERT_DB), "--synthesize", "5", "--no-synthesis-check"]
    args += ["--synthetic-val-fraction", "0.8", "--optimizer", "labeled", "--out", str(out)]
    result = CliRunner().invoke(cli.app, [*args, "--n-val", "0", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "synthetic set: 5 pairs (1 train, 4 validation)" in result.output
    meta = load_program(out)[1]
    assert meta.extra["synthetic"]["val_fraction"] == 0.8
    assert meta.extra["validation"] == (
        "a seeded 80 % of each database's synthesized pairs (no round trip)"
    )


def _compiled_on_pairs(url: str, out: Path, n: int, answer: str) -> tuple[Any, list[dict]]:
    """``direct`` compiled (labelled demos) on ``n`` pairs synthesized for ``url`` without the
    round trip, the model answering ``answer``; the artefact and the pairs file's records."""
    with dspy.context(lm=_lm(answer)):
        compiled = sqlweave.compile(
            "direct",
            db=url,
            synthesize=n,
            synthetic_out=out,
            synthesis_check=False,
            optimizer="labeled",
            progress=False,
        )
    return compiled, [json.loads(x) for x in out.read_text().splitlines()]


def test_pairs_of_a_duckdb_database_name_it_by_url(tmp_path: Path):
    url = duckdb_url(
        tmp_path / "shop.duckdb",
        "CREATE TABLE shop (shop_id INTEGER PRIMARY KEY, name TEXT, employees INTEGER)",
        "INSERT INTO shop VALUES (1, 'Alpha', 10), (2, 'Beta', 20), (3, 'Gamma', 5)",
        engine=False,
    )
    compiled, pairs = _compiled_on_pairs(url, tmp_path / "d.jsonl", 3, "SELECT count(*) FROM shop")
    [entry] = compiled.meta.extra["synthetic"]["databases"]
    assert entry["db"] == url and entry["db_id"] == "shop"
    assert {p["db_path"] for p in pairs} == {url}
    [ex] = as_examples(pairs[:1])
    assert ex.db_path == url and ex.db_id == "shop"
    # What scores a pair opens the URL too (not a file path that lost its "//").
    from sqlweave.data import open_database

    assert open_database(ex).dialect == "duckdb"
    with dspy.context(lm=_lm("SELECT count(*) FROM shop")):
        answer = compiled(QUESTION, db=ex.db_path)
    assert answer.ok and list(answer.rows) == [(3,)]


def test_a_search_alone_gets_the_measured_recipe_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Left unset, a switch search alone synthesizes without the round trip and validates on
    90 % of the pairs, all of them; an optimizer that learns demos keeps the round trip and a
    fifth; what the caller sets wins."""
    from sqlweave.synthesis.sets import SynthesisDefaults, synthesis_defaults

    assert synthesis_defaults("search", valset_given=False) == SynthesisDefaults(False, 0.9, 0)
    for optimizer, given in (("search+bootstrap", False), ("knn", False), ("search", True)):
        assert synthesis_defaults(optimizer, valset_given=given) == SynthesisDefaults(
            True, 0.2, None
        )
    # the CLI: 24 pairs, no flag but the optimizer: 21 validate (more than --n-val's 20), and
    # the stand-in's answer to every question (the round trip would keep almost none) is moot
    _stand_in(monkeypatch, _lm())
    out = tmp_path / "search.json"
    args = ["compile", "--db", str(DEMO_CONCERT_DB), "--synthesize", "24", "--optimizer"]
    args += ["search", "--space", "samples=1", "--out", str(out), "--no-progress"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    assert "synthetic set: 24 pairs (3 train, 21 validation)" in result.output
    meta = load_program(out)[1]
    assert meta.extra["synthetic"]["val_fraction"] == 0.9 and meta.n_val == 21
    assert meta.extra["validation"].endswith("(no round trip)")
    # what the caller sets wins: a half validating, at most 4
    with dspy.context(lm=_lm()):
        compiled = sqlweave.compile(
            "direct",
            db=DEMO_CONCERT_DB,
            synthesize=24,
            synthetic_out=tmp_path / "s.jsonl",
            synthetic_val_fraction=0.5,
            synthesis_check=False,
            n_val=4,
            optimizer="search",
            options={"space": {"samples": [1]}},
            progress=False,
        )
    assert compiled.meta.n_val == 4
    assert compiled.meta.extra["synthetic"]["val_fraction"] == 0.5


@pytest.mark.postgres
def test_a_password_protected_postgres_compiles_on_its_own_pairs(tmp_path: Path):
    """The own-database flow on a server that needs a password, with tables an ORM made: the
    pairs file names the database without its password (never "***", which nothing can open),
    the pairs reach the handle already open, and the compile validates on real verdicts."""
    import sqlalchemy as sa

    from sqlweave.data import open_database

    with pg_schema(
        "own_pairs",
        'CREATE TABLE "Shop" ("ShopId" int PRIMARY KEY, "ShopName" text, "Staff" int)',
        "INSERT INTO \"Shop\" VALUES (1, 'Alpha', 10), (2, 'Beta', 20), (3, 'Gamma', 5)",
    ) as url:
        assert sa.engine.make_url(url).password, "the test server's role has a password"
        compiled, pairs = _compiled_on_pairs(
            url, tmp_path / "p.jsonl", 4, "SELECT count(*) FROM Shop"
        )
        [ref] = {p["db_path"] for p in pairs}
        assert sa.engine.make_url(ref).password is None and "***" not in str(pairs)
        examples = as_examples(pairs)
        assert {id(open_database(ex)) for ex in examples} == {id(open_database(examples[0]))}
        assert compiled.meta.val_ex_pct is not None


def test_a_compile_whose_questions_name_a_dead_database_stops_before_any_lm_call(
    tmp_path: Path,
):
    """A database that does not open would score each of its questions as a miss: the compile
    would choose on zeros. It is an error instead, naming the question and the database."""
    from sqlweave.data import DataError

    dead = "postgresql://nobody:hunter2@127.0.0.1:9/nothing"
    train = [
        {"question": "How many singers?", "sql": "SELECT 1", "db": str(DEMO_CONCERT_DB)},
        {"question": "How many shops?", "sql": "SELECT 1", "db": dead, "question_id": "q2"},
    ]
    lm = DummyLM([])
    with dspy.context(lm=lm), pytest.raises(DataError, match="q2 names a database") as info:
        sqlweave.compile("direct", train, valset=train[:1], optimizer="labeled", progress=False)
    assert "hunter2" not in str(info.value) and not lm.history
