"""Loaders, data-root resolution, layout discovery, malformed files and the evaluation slice."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from sqlweave import benchmarks, data
from sqlweave.data import DataError


@pytest.fixture(scope="module")
def spider_dev(data_root):
    return data.load_spider("dev", root=data_root)


def test_spider_dev_examples_have_the_common_fields(spider_dev):
    assert len(spider_dev) == 827
    ex = spider_dev[0]
    assert set(ex.inputs().keys()) == {"question", "db_id", "evidence", "db_path"}
    assert set(ex.labels().keys()) >= {"gold_sql", "difficulty", "question_id", "source", "split"}
    assert ex.evidence == "" and ex.source == "spider" and ex.split == "dev"
    assert ex.gold_sql == "SELECT count(*) FROM singer" and ex.difficulty == "easy"
    assert len({e.question_id for e in spider_dev}) == len(spider_dev)
    assert all(Path(e.db_path).is_file() for e in spider_dev)
    assert {e.difficulty for e in spider_dev} == {"easy", "medium", "hard", "extra"}


def test_spider_train_is_disjoint_from_dev(data_root, spider_dev):
    train = data.load_spider("train", root=data_root)
    assert len(train) == 6725 and {e.split for e in train} == {"train"}
    data.assert_disjoint(train, spider_dev)
    with pytest.raises(DataError, match="1 dev question"):
        data.assert_disjoint(train, [train[5]])


def test_bird_dev(data_root):
    bird = data.load_bird("dev", root=data_root)
    assert len(bird) == 52
    assert Counter(e.difficulty for e in bird) == {"simple": 14, "moderate": 26, "challenging": 12}
    assert all(e.source == "bird" and e.db_id == "superhero" for e in bird)
    assert sum(bool(e.evidence) for e in bird) > 40
    assert bird[0].question_id == "bird_dev_717"
    assert data.description_dir(bird[0]) is not None
    assert (data.description_dir(bird[0]) / "superhero.csv").is_file()


def test_root_resolution_order(data_root, monkeypatch, tmp_path):
    monkeypatch.setenv("SQLWEAVE_DATA", str(tmp_path / "missing"))
    with pytest.raises(DataError, match="SQLWEAVE_DATA"):
        data.load_spider("dev")
    assert len(data.load_spider("dev", root=data_root)) == 827  # explicit root wins
    monkeypatch.setenv("SQLWEAVE_DATA", str(data_root))
    assert len(data.load_bird("dev")) == 52  # env read at call time
    monkeypatch.delenv("SQLWEAVE_DATA")
    # the data root is resolved where the loaders live (sqlweave.benchmarks, re-exported by data)
    monkeypatch.setattr(benchmarks, "_checkout_data_root", lambda: tmp_path / "nowhere")
    # without a checkout, the Spider bundle shipped in the package stands in ...
    assert len(data.load_spider("dev")) == 827
    assert len(data.load_spider("train")) < 1000
    # ... and BIRD, which it does not hold, is a clear error
    with pytest.raises(DataError):
        data.load_bird("dev")


def test_root_may_be_the_benchmark_folder_itself(data_root):
    assert len(data.load_bird("dev", root=data_root / "bird")) == 52


def _bird_copy(bird_root: Path, dest: Path, json_rel: str, db_rel: str, items=None) -> Path:
    (dest / json_rel).parent.mkdir(parents=True, exist_ok=True)
    items = items if items is not None else json.loads((bird_root / "dev.json").read_text())[:3]
    (dest / json_rel).write_text(json.dumps(items))
    db_dir = dest / db_rel / "superhero"
    db_dir.mkdir(parents=True)
    (db_dir / "superhero.sqlite").symlink_to(bird_root / "dev_databases/superhero/superhero.sqlite")
    return dest


@pytest.mark.parametrize(
    ("json_rel", "db_rel"),
    [
        ("dev.json", "dev_databases"),
        ("dev/dev.json", "dev/dev_databases"),
        ("dev_20240627/dev.json", "dev_20240627/dev_databases"),
        ("dev/dev.json", "dev_databases"),
    ],
)
def test_bird_layouts(bird_root, tmp_path, json_rel, db_rel):
    _bird_copy(bird_root, tmp_path / "bird", json_rel, db_rel)
    examples = data.load_bird("dev", root=tmp_path)
    assert len(examples) == 3 and Path(examples[0].db_path).is_file()


def test_bird_train_without_ids_or_difficulty(bird_root, tmp_path):
    items = [
        {
            "db_id": "superhero",
            "question": "How many heroes?",
            "evidence": "",
            "SQL": "SELECT count(*) FROM superhero",
        }
    ]
    _bird_copy(bird_root, tmp_path / "bird", "train/train.json", "train/train_databases", items)
    (ex,) = data.load_bird("train", root=tmp_path)
    assert ex.question_id == "bird_train_0" and ex.difficulty == "unknown" and ex.split == "train"


def test_bird_missing_databases_folder_is_explained(bird_root, tmp_path):
    (tmp_path / "bird").mkdir()
    shutil.copy(bird_root / "dev.json", tmp_path / "bird" / "dev.json")
    with pytest.raises(DataError, match="dev_databases"):
        data.load_bird("dev", root=tmp_path)
    with pytest.raises(DataError, match="no BIRD train questions"):
        data.load_bird("train", root=tmp_path)


def _spider_copy(spider_root: Path, dest: Path, text: str) -> Path:
    (dest / "spider").mkdir(parents=True)
    (dest / "spider" / "dev.json").write_text(text)
    (dest / "spider" / "database").symlink_to(spider_root / "database")
    return dest


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[{"db_id": "concert_singer", ', "invalid JSON at line 1"),
        ('{"questions": []}', "expected a JSON list"),
        ('[{"db_id": "concert_singer", "question": "q"}]', "item 0 has no string field 'query'"),
        ('[{"db_id": "nope", "question": "q", "query": "SELECT 1"}]', "missing: nope"),
        (
            '[{"db_id": "concert_singer", "question": 7, "query": "SELECT 1"}]',
            "item 0: 'question' must be a string, not int 7",
        ),
        ("[1]", "item 0 is int"),
    ],
)
def test_malformed_spider_file_names_file_and_problem(spider_root, tmp_path, text, message):
    root = _spider_copy(spider_root, tmp_path, text)
    with pytest.raises(DataError, match=message) as info:
        data.load_spider("dev", root=root)
    assert "dev.json" in str(info.value)


def test_spider_item_keeps_its_own_question_id(spider_root, tmp_path):
    # A subset file (the package bundle) carries the full set's ids; items without one are
    # numbered by position as in the official files.
    items = [
        {
            "db_id": "concert_singer",
            "question": "q",
            "query": "SELECT 1",
            "question_id": "spider_dev_0042",
        },
        {"db_id": "concert_singer", "question": "r", "query": "SELECT 2"},
    ]
    root = _spider_copy(spider_root, tmp_path, json.dumps(items))
    got = [ex.question_id for ex in data.load_spider("dev", root=root)]
    assert got == ["spider_dev_0042", "spider_dev_0001"]


def test_unknown_split():
    with pytest.raises(DataError, match="unknown Spider split"):
        data.load_spider("validation")


# --- user files -------------------------------------------------------------------------------


def test_load_questions_json_and_jsonl(spider_root, tmp_path):
    db = spider_root / "database" / "concert_singer" / "concert_singer.sqlite"
    (tmp_path / "dbs" / "concert_singer").mkdir(parents=True)
    shutil.copy(db, tmp_path / "dbs" / "concert_singer" / "concert_singer.sqlite")
    items = [
        {
            "question": "How many singers?",
            "db_path": "dbs/concert_singer/concert_singer.sqlite",
            "gold_sql": "SELECT count(*) FROM singer",
        },
        {"question": "Names?", "db_id": "concert_singer", "evidence": "name is a column"},
    ]
    (tmp_path / "q.json").write_text(json.dumps(items))
    (tmp_path / "q.jsonl").write_text("\n".join(json.dumps(i) for i in items) + "\n")
    for name in ("q.json", "q.jsonl"):
        a, b = data.load_questions(tmp_path / name, db_root=tmp_path / "dbs")
        assert a.db_id == "concert_singer" and Path(a.db_path).is_file() and a.difficulty == "easy"
        assert b.gold_sql == "" and b.evidence == "name is a column" and b.difficulty == "unknown"
        assert a.question_id == f"{Path(name).stem}_0"


def test_load_questions_finds_bundled_db_by_id(data_root, tmp_path, monkeypatch):
    monkeypatch.setenv("SQLWEAVE_DATA", str(data_root))
    (tmp_path / "q.jsonl").write_text(json.dumps({"question": "q", "db_id": "superhero"}) + "\n")
    (ex,) = data.load_questions(tmp_path / "q.jsonl")
    assert ex.db_path.endswith("superhero.sqlite")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"question": "q", "db_path": "x.sqlite"}\nnot json\n', "line 2 is not valid JSON"),
        ('{"question": "q"}\n', "needs 'db_id' or 'db_path'"),
        ('{"question": "q", "db_path": "missing.sqlite"}\n', "database file not found"),
        ('{"db_path": "x.sqlite"}\n', "no string field 'question'"),
        ("\n\n", "no questions"),
    ],
)
def test_load_questions_errors(tmp_path, text, message):
    (tmp_path / "q.jsonl").write_text(text)
    with pytest.raises(DataError, match=message):
        data.load_questions(tmp_path / "q.jsonl")


# --- databases --------------------------------------------------------------------------------


def test_database_path_and_open_database_cache(data_root, spider_dev):
    assert data.database_path("concert_singer", root=data_root).name == "concert_singer.sqlite"
    assert data.database_path("superhero", root=data_root, source="bird").is_file()
    with pytest.raises(DataError, match="not found"):
        data.database_path("no_such_db", root=data_root)
    a, b = [e for e in spider_dev if e.db_id == "concert_singer"][:2]
    assert data.open_database(a) is data.open_database(b)
    assert data.open_database(a).execute("SELECT count(*) FROM singer").rows == ((6,),)


# --- evaluation slice -------------------------------------------------------------------------


def test_eval_slice_is_deterministic_stratified_and_ordered(spider_dev):
    s1 = data.eval_slice(spider_dev)
    s2 = data.eval_slice(list(spider_dev))
    assert [e.question_id for e in s1] == [e.question_id for e in s2]
    assert len(s1) == 200 and len({e.question_id for e in s1}) == 200
    positions = [spider_dev.index(e) for e in s1]
    assert positions == sorted(positions)
    full, part = Counter(e.difficulty for e in spider_dev), Counter(e.difficulty for e in s1)
    for level, count in full.items():
        assert abs(part[level] - 200 * count / len(spider_dev)) < 1, (level, part)
    other = data.eval_slice(spider_dev, seed=1)
    assert {e.question_id for e in other} != {e.question_id for e in s1}


def test_eval_slice_edges(spider_dev):
    assert data.eval_slice(spider_dev, n=None) == list(spider_dev)
    assert len(data.eval_slice(spider_dev, n=5000)) == 827
    assert len(data.eval_slice(spider_dev, n=7, stratify=None)) == 7
    assert len(data.eval_slice(spider_dev, n=3)) == 3
    with pytest.raises(ValueError):
        data.eval_slice(spider_dev, n=0)


def test_a_questions_file_may_name_its_database_by_url(tmp_path):
    """Synthesized pairs of a server's database name it by URL: the file loads, and what scores
    its questions opens that URL (not a file path that lost its "//")."""
    from conftest import duckdb_url

    from sqlweave.benchmarks import load_questions, open_database

    url = duckdb_url(tmp_path / "shop.duckdb", "CREATE TABLE shop AS SELECT 1 AS id")
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"question": "How many shops?", "sql": "SELECT 1", "db": url}))
    [example] = load_questions(path)
    assert example.db_path == url and example.db_id == "shop"
    assert open_database(example).execute("SELECT count(*) FROM shop").rows == ((1,),)
