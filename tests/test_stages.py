"""The stage registry, its role protocols and the process-wide cache (issue 14), on real SQLite.

Every registered linker, selector and corrector is built by name and called with its role's
protocol on the bundled concert_singer database; LM-backed stages get a ``DummyLM``.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import dspy
import pytest
from conftest import spy_rollouts
from dspy.utils import DummyLM

from sqlweave.caches import CACHE, ProcessCache, open_database
from sqlweave.db import Database
from sqlweave.programs import stages
from sqlweave.programs.base import Generator
from sqlweave.programs.stages.demos import DemoSource
from sqlweave.programs.stages.linking import LinkedSchema
from sqlweave.programs.stages.sampling import Sampler
from sqlweave.schema import introspect, render_ddl


@pytest.fixture()
def db(tmp_path: Path, demo_concert_db: Path) -> Database:
    copy_ = tmp_path / "concert_singer.sqlite"
    shutil.copy(demo_concert_db, copy_)
    return Database.open(copy_)


DRAFT = (
    "SELECT T1.Name FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.Singer_ID = T2.Singer_ID"
)


# --- registry -------------------------------------------------------------------------------------


def test_every_registered_stage_builds() -> None:
    names = stages.available()
    assert set(names) == {"linker", "selector", "corrector"} and "mage" in names["corrector"]
    for role, impls in names.items():
        for name in impls:
            module = stages.build(role, name)
            assert isinstance(module, dspy.Module)
            assert stages.name_of(role, module) == name


def test_settings_configure_only_the_named_implementation() -> None:
    settings = {"execution": {"max_rounds": 2, "retry_on_empty": True}}
    loop = stages.build("corrector", "execution", settings=settings)
    assert (loop.max_rounds, loop.retry_on_empty) == (2, True)
    # Another name takes its place without being handed options it does not accept.
    assert stages.name_of("corrector", stages.build("corrector", "rules", settings=settings)) == (
        "rules"
    )


def test_unknown_names_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown linker 'magic'; choose one of"):
        stages.build("linker", "magic")
    with pytest.raises(ValueError, match="unknown stage role 'ranker'"):
        stages.available("ranker")
    with pytest.raises(ValueError, match="pass it again"):
        stages.build("linker", None)  # a saved switch of an unregistered instance
    with pytest.raises(TypeError, match="registry name or a dspy.Module"):
        stages.build("selector", 3)  # type: ignore[arg-type]


def test_an_instance_is_used_as_given_and_has_no_name_unless_registered() -> None:
    class MyLinker(dspy.Module):
        def forward(self, **_: object) -> dspy.Prediction:
            return dspy.Prediction(linked=LinkedSchema())

    mine = MyLinker()
    assert stages.build("linker", mine) is mine
    assert stages.name_of("linker", mine) is None
    assert stages.name_of("linker", "tables") == "tables"


# --- linkers --------------------------------------------------------------------------------------


def _link(name: str, db: Database, **kw: object) -> LinkedSchema:
    schema = introspect(db)
    out = stages.build("linker", name)(
        question="Names of singers in concerts from France",
        schema=schema,
        sql=DRAFT,
        db_schema=render_ddl(schema),
        evidence="",
        dialect=db.dialect,
        db=db,
        **kw,
    )
    assert isinstance(out.linked, LinkedSchema)
    return out.linked


def test_none_links_nothing_so_the_whole_schema_stays(db: Database) -> None:
    assert not _link("none", db)


def test_tables_linker_keeps_the_tables_the_draft_reads(db: Database) -> None:
    assert _link("tables", db).tables == {"singer", "singer_in_concert"}


def test_columns_linker_finds_columns_named_in_the_draft(db: Database) -> None:
    linked = _link("columns", db)
    assert ("singer", "Name") in linked.columns and not linked.tables


def test_values_linker_adds_columns_whose_values_the_question_names(db: Database) -> None:
    linked = _link("values", db)
    assert ("singer", "Country") in linked.columns  # "France" is a stored value
    assert {"singer", "singer_in_concert"} <= linked.tables


@pytest.mark.parametrize("name", ["forward", "bidirectional"])
def test_lm_linkers_match_the_lm_list_to_the_schema(db: Database, name: str) -> None:
    with dspy.context(lm=DummyLM([{"columns": '["singer.Name", "singer.Country"]'}])):
        linked = _link(name, db)
    assert {("singer", "Name"), ("singer", "Country")} <= linked.columns


# --- selectors ------------------------------------------------------------------------------------

CANDIDATES = [
    "SELECT Name FROM singer WHERE Age > 100",  # runs, empty
    "SELECT count(*) FROM singer",
    "SELECT COUNT(*) FROM singer AS s",
    "SELECT nonsense FROM nowhere",
]


def test_first_selector_takes_the_first_nonempty_text() -> None:
    out = stages.build("selector", "first")(candidates=["", "SELECT 1"])
    assert (out.sql, out.choice, out.lm_called) == ("SELECT 1", 2, False)


def test_vote_selector_takes_the_execution_majority(db: Database) -> None:
    out = stages.build("selector", "vote")(candidates=CANDIDATES, db=db, question="q")
    assert out.sql == CANDIDATES[1] and out.choice == 2 and not out.lm_called


def test_lm_selector_asks_only_between_distinct_answers(db: Database) -> None:
    with dspy.context(lm=DummyLM([{"choice": "2"}])):
        out = stages.build("selector", "lm")(candidates=CANDIDATES, db=db, question="q")
    assert out.lm_called and out.sql in CANDIDATES[:3]


# --- correctors -----------------------------------------------------------------------------------


def test_none_corrector_returns_the_sql_unchanged() -> None:
    out = stages.build("corrector", "none")(sql="SELECT broken", db=None, question="q")
    assert (out.sql, out.rounds, out.history) == ("SELECT broken", 0, [])


def test_execution_corrector_fixes_failing_sql(db: Database) -> None:
    lm = DummyLM([{"corrected_sql": "SELECT count(*) FROM singer"}])
    with dspy.context(lm=lm):
        out = stages.build("corrector", "execution", max_rounds=1)(
            sql="SELECT count(*) FROM singers", db=db, question="How many singers?"
        )
    assert out.sql == "SELECT count(*) FROM singer" and out.rounds == 1
    assert out.history[0]["sql"] == "SELECT count(*) FROM singers"


def test_rules_corrector_needs_no_lm_and_says_what_fired(db: Database) -> None:
    out = stages.build("corrector", "rules")(
        sql="SELECT Name FROM singer WHERE Country = 'france'", db=db, question="q"
    )
    assert "'France'" in out.sql and out.fired and out.history
    same = stages.build("corrector", "rules")(sql="SELECT 1", db=db, question="q")
    assert same.sql == "SELECT 1" and same.history == []


# --- shared stages --------------------------------------------------------------------------------


def test_generator_keeps_garbage_as_text_and_merges_demos(db: Database) -> None:
    gen = Generator()
    demo = dspy.Example(
        dialect="sqlite", db_schema="", question="How many cars?", evidence="", sql="SELECT 1"
    ).with_inputs("dialect", "db_schema", "question", "evidence")
    lm = DummyLM([{"sql": "SELECT count(*) FROM singer"}])
    with dspy.context(lm=lm):
        out = gen(
            demos=[demo],
            dialect="sqlite",
            db_schema="CREATE TABLE singer(x)",
            question="n?",
            evidence="",
        )
    assert out.sql == "SELECT count(*) FROM singer"
    sent = lm.history[-1]["messages"]
    assert any("How many cars?" in m["content"] for m in sent)  # the per-call demo was shown


def test_sampler_draws_distinct_rollouts_with_the_greedy_one_first(db: Database) -> None:
    lm = DummyLM([{"sql": f"SELECT {i}"} for i in range(3)])
    seen = spy_rollouts(lm)
    with dspy.context(lm=lm):
        cands = Sampler(Generator(), n=3, temperature=0.9)(
            db=db, dialect="sqlite", db_schema="", question="q", evidence=""
        )
    assert cands == ["SELECT 0", "SELECT 1", "SELECT 2"]
    assert seen == [(1, 0.9), (2, 0.9)]  # the first call used the LM as is


def test_demo_source_shares_its_pool_with_copies() -> None:
    pool = [
        dspy.Example(
            question=f"How many things number {i}?",
            gold_sql="SELECT 1",
            db_id=f"d{i}",
            split="train",
            evidence="",
        )
        for i in range(5)
    ]
    source = DemoSource("jaccard", k=2, pool=pool)
    twin = copy.deepcopy(source)
    assert twin.pool() is source.pool()  # the token is copied, not the pool
    assert twin.retriever() is source.retriever()

    class _Db:
        name = "other"
        path = None

    found = source.retrieve("How many things number 3?", _Db())
    assert len(found) == 2 and found[0].question == "How many things number 3?"
    assert DemoSource("none", k=4).retrieve("q", _Db()) == []
    # Two programs given one pool list share it, and so its retriever (built once).
    other = DemoSource("jaccard", k=1, pool=pool)
    assert other.pool() is source.pool() and other.retriever() is source.retriever()
    with pytest.raises(ValueError, match=">= 0"):
        DemoSource(k=-1)


# --- the cache and the output contract ------------------------------------------------------------


def test_process_cache_builds_once_and_clears() -> None:
    cache = ProcessCache()
    calls: list[int] = []
    cleared: list[bool] = []
    cache.register(lambda: cleared.append(True))
    for _ in range(3):
        assert cache.memo("ns", 1, lambda: calls.append(1) or "v") == "v"
    assert calls == [1] and len(cache) == 1
    token = cache.put(calls)
    assert cache.put(calls) == token and cache.get(token) is calls
    cache.clear()
    assert len(cache) == 0 and cleared == [True]
    assert cache.get(token) is calls  # put objects survive: programs still hold their tokens
    with pytest.raises(KeyError, match="no longer cached"):
        cache.get("obj999")


def test_one_handle_per_database_file(demo_concert_db: Path) -> None:
    from sqlweave.data import open_database as data_open
    from sqlweave.programs.base import resolve_database

    a = open_database(demo_concert_db)
    assert resolve_database(db_path=str(demo_concert_db)) is a
    assert data_open(str(demo_concert_db)) is a
    CACHE.clear()
    assert open_database(demo_concert_db) is not a


def test_result_fills_the_contract() -> None:
    out = stages.result(
        "SELECT 1",
        stages=["generate"],
        linked=LinkedSchema(tables={"singer"}),
        demos=[dspy.Example(question="q1"), "q2"],
        extra_field=3,
    )
    assert {k: out[k] for k in stages.CONTRACT} == {
        "sql": "SELECT 1",
        "stages": ["generate"],
        "candidates": ["SELECT 1"],
        "linked": ["singer.*"],
        "demos": ["q1", "q2"],
        "history": [],
    }
    assert out.extra_field == 3


def test_one_clear_forgets_every_process_cache(db: Database) -> None:
    from sqlweave import schema as schema_module
    from sqlweave.sqlstruct import skeleton
    from sqlweave.values import ValueIndex

    introspect(db)
    ValueIndex.build(db)
    skeleton("SELECT 1")
    assert schema_module._CACHE and skeleton.cache_info().currsize
    CACHE.clear()
    assert not schema_module._CACHE and not skeleton.cache_info().currsize
    from sqlweave import values as values_module

    assert not CACHE.cached(values_module.MEMO_NAMESPACE)
