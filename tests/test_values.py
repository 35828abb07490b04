"""Value retrieval (BM25 + bridging), value repair lookups, and the on-disk index cache."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from conftest import DEMO_CONCERT_DB

from sqlweave import values as values_mod
from sqlweave.db import Database
from sqlweave.values import ValueIndex, clear_memory_cache, default_cache_dir

FIXTURE_SQL = Path(__file__).resolve().parent / "fixtures" / "schema" / "fixture.sql"


@pytest.fixture
def fixture_db(tmp_path: Path):
    path = tmp_path / "concert_fixture.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(FIXTURE_SQL.read_text(encoding="utf-8"))
    conn.close()
    clear_memory_cache()
    db = Database.open(path)
    yield db
    db.close()
    clear_memory_cache()


@pytest.fixture
def index(fixture_db: Database, tmp_path: Path) -> ValueIndex:
    return ValueIndex.build(fixture_db, cache_dir=tmp_path / "cache")


def test_only_text_columns_are_indexed(index: ValueIndex) -> None:
    assert ("singer", "Name") in index.columns
    assert ("singer", "Home Town") in index.columns
    assert ("singer", "Age") not in index.columns
    assert ("singer", "Net Worth") not in index.columns
    assert "Timbaland" in index.values("SINGER", "name")
    assert index.values("singer", "Age") == []


def test_verbatim_value_is_ranked_first(index: ValueIndex) -> None:
    # BM25 alone ranks "Sharpie Joe Sharp Jr" first (it holds the rare "sharpie" too); only
    # "Joe" occurs verbatim, so bridging moves it to rank 1.
    question = "What did Joe say to Sharpie?"
    assert index.retrieve(question, keep=2)[("singer", "Name")] == ["Joe", "Sharpie Joe Sharp Jr"]
    found = index.retrieve("Which concerts did joe sharp perform in?")  # case-insensitive
    assert found[("singer", "Name")][0] == "Joe Sharp"
    found = index.retrieve("List the singers who performed at Home Visits.")
    assert found[("concert", "concert_name")][0] == "Home Visits"


def test_bridging_needs_a_whole_phrase(index: ValueIndex) -> None:
    found = index.retrieve("Who is Joey?", keep=5)
    assert ("singer", "Name") not in found  # "Joe" is inside "Joey", but not as a word


def test_keep_is_respected(index: ValueIndex) -> None:
    question = "Which singer from the United States or France named Joe Sharp sang in 2014?"
    for keep in (1, 2, 3):
        found = index.retrieve(question, keep=keep)
        assert found
        assert all(len(v) <= keep for v in found.values())
    assert max(len(v) for v in index.retrieve(question, keep=3).values()) == 3
    assert index.retrieve(question, keep=0) == {}


def test_unrelated_columns_are_left_out_unless_filled(index: ValueIndex) -> None:
    found = index.retrieve("Joe Sharp")
    assert ("concert", "theme") not in found
    filled = index.retrieve("Joe Sharp", fill=True)
    assert filled[("concert", "theme")] == ["Free choice", "Happy Tonight"]
    assert index.retrieve("???") == {}


def test_match_prefers_exact_then_case_then_similar(index: ValueIndex) -> None:
    exact = index.match("Joe Sharp", "singer", "Name")
    assert [(m.value, m.kind) for m in exact] == [("Joe Sharp", "exact")]
    case = index.match("joe sharp", "singer", "name")
    assert [(m.value, m.kind) for m in case] == [("Joe Sharp", "case")]
    substring = index.match("paris", "singer", "Home Town")
    assert substring[0].value == "Paris, France" and substring[0].kind == "substring"
    fuzzy = index.match("Timberland")
    assert fuzzy[0].value == "Timbaland" and fuzzy[0].kind == "fuzzy"
    assert (fuzzy[0].table, fuzzy[0].column) == ("singer", "Name")
    assert index.match("zzzzzz") == []
    assert index.match("Joe", "no_table") == []


def test_cache_is_reused_from_memory_and_disk(
    fixture_db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    scans = []
    real_scan = ValueIndex._scan.__func__

    def counting_scan(cls, *args, **kwargs):
        scans.append(args)
        return real_scan(cls, *args, **kwargs)

    monkeypatch.setattr(ValueIndex, "_scan", classmethod(counting_scan))
    first = ValueIndex.build(fixture_db, cache_dir=cache)
    assert first.source == "built" and len(scans) == 1
    meta = next(cache.glob("*/meta.json"))
    mtime = meta.stat().st_mtime_ns

    assert ValueIndex.build(fixture_db, cache_dir=cache) is first  # memory

    clear_memory_cache()
    time.sleep(0.01)
    second = ValueIndex.build(fixture_db, cache_dir=cache)
    assert second.source == "disk" and len(scans) == 1
    assert meta.stat().st_mtime_ns == mtime
    question = "Which concerts did Joe Sharp perform in?"
    assert second.retrieve(question) == first.retrieve(question)
    assert second.values("singer", "Name") == first.values("singer", "Name")

    # Other arguments do not reuse the cache.
    clear_memory_cache()
    assert ValueIndex.build(fixture_db, cache_dir=cache, max_value_chars=10).source == "built"
    assert len(scans) == 2


@pytest.mark.parametrize("damage", ["version", "garbage", "missing_bm25"])
def test_stale_or_broken_cache_is_rebuilt(
    fixture_db: Database, tmp_path: Path, damage: str
) -> None:
    cache = tmp_path / "cache"
    ValueIndex.build(fixture_db, cache_dir=cache)
    meta = next(cache.glob("*/meta.json"))
    if damage == "version":
        data = json.loads(meta.read_text(encoding="utf-8"))
        data["format_version"] = values_mod.FORMAT_VERSION + 1
        meta.write_text(json.dumps(data), encoding="utf-8")
    elif damage == "garbage":
        meta.write_bytes(b"\x80not json")
    else:
        for f in (meta.parent / "bm25").iterdir():
            f.unlink()
    clear_memory_cache()
    rebuilt = ValueIndex.build(fixture_db, cache_dir=cache)
    assert rebuilt.source == "built"
    assert rebuilt.retrieve("Joe Sharp")[("singer", "Name")][0] == "Joe Sharp"
    clear_memory_cache()
    assert ValueIndex.build(fixture_db, cache_dir=cache).source == "disk"


def test_cache_dir_from_environment(
    fixture_db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SQLWEAVE_CACHE", str(tmp_path / "env-cache"))
    assert default_cache_dir() == tmp_path / "env-cache" / "values"
    ValueIndex.build(fixture_db)
    assert list((tmp_path / "env-cache" / "values").glob("concert_fixture-*/meta.json"))


def test_no_persist_writes_nothing(fixture_db: Database, tmp_path: Path) -> None:
    index = ValueIndex.build(fixture_db, cache_dir=tmp_path / "never", persist=False)
    assert index.source == "built"
    assert not (tmp_path / "never").exists()


def test_superhero_values(data_root: Path, tmp_path: Path) -> None:
    path = data_root / "bird" / "dev_databases" / "superhero" / "superhero.sqlite"
    if not path.is_file():
        pytest.skip("BIRD superhero database not available")
    clear_memory_cache()
    with Database.open(path) as db:
        index = ValueIndex.build(db, cache_dir=tmp_path)
        found = index.retrieve("Please list all the superpowers of 3-D Man.")
        assert found[("superhero", "superhero_name")][0] == "3-D Man"
        assert index.retrieve("How many female superheroes are there?")[("gender", "gender")] == [
            "Female"
        ]
        assert index.match("male", "gender", "gender")[0].value == "Male"
        assert index.match("marvel", "publisher", "publisher_name")[0].value == "Marvel Comics"
    clear_memory_cache()


def test_threads_asking_at_once_build_one_index(tmp_path: Path, monkeypatch) -> None:
    """Found by review: four threads scanned the database four times (and left half-written
    copies in the cache folder when they lost the race to save)."""
    import threading

    from sqlweave.values import ValueIndex

    scans = []
    real = ValueIndex._scan.__func__

    def counted(cls, *args, **kwargs):
        scans.append(1)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(ValueIndex, "_scan", classmethod(counted))
    db = Database.open(DEMO_CONCERT_DB)
    built = []
    threads = [
        threading.Thread(target=lambda: built.append(ValueIndex.build(db, cache_dir=tmp_path)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(scans) == 1 and len({id(index) for index in built}) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
