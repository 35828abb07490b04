"""experiments/synthetic_compile.py: the pairs it compiles on carry this machine's database paths,
and a database without pairs stops the run with the command that makes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import load_experiment

from sqlweave.data import load_slice

synthetic_compile = load_experiment("synthetic_compile")


def _write_pairs(folder: Path, db_id: str) -> None:
    pair = {"question_id": f"syn_{db_id}_0", "db_id": db_id, "question": "How many?"}
    (folder / f"{db_id}.jsonl").write_text(json.dumps({**pair, "gold_sql": "SELECT 1"}) + "\n")
    (folder / f"{db_id}.jsonl.tried.jsonl").write_text('{"why": "kept"}\n')


def test_staged_pairs_name_each_database_file(spider_root: Path, tmp_path: Path) -> None:
    examples = load_slice("spider-train-val")
    dbs = sorted({ex.db_id for ex in examples})
    source, work = tmp_path / "pairs", tmp_path / "work"
    source.mkdir()
    for db_id in dbs:
        _write_pairs(source, db_id)
    files = synthetic_compile.stage_pairs("spider-train-val", source, work)
    assert sorted(f.stem for f in files) == dbs
    staged = json.loads((work / f"pairs.{dbs[0]}.jsonl").read_text())
    expected = next(ex.db_path for ex in examples if ex.db_id == dbs[0])
    assert staged["db_path"] == str(expected) and Path(staged["db_path"]).is_file()
    assert (work / f"pairs.{dbs[0]}.jsonl.tried.jsonl").read_text() == '{"why": "kept"}\n'


def test_a_database_without_pairs_stops_with_the_command_that_makes_them(
    spider_root: Path, tmp_path: Path
) -> None:
    dbs = sorted({ex.db_id for ex in load_slice("spider-train-val")})
    for db_id in dbs[1:]:
        _write_pairs(tmp_path, db_id)
    with pytest.raises(SystemExit, match=f"synthesize_pairs.py --dbs {dbs[0]}$"):
        synthetic_compile.stage_pairs("spider-train-val", tmp_path, tmp_path / "work")


def test_a_one_database_slice_is_staged_where_the_compile_reads_it(
    bird_root: Path, tmp_path: Path
) -> None:
    """With one ``--db``, ``sqlweave compile --synthetic-out F`` reads F itself: staging under
    another name made the compile synthesize the set again."""
    bird = load_slice("bird-52")
    [db_id] = sorted({ex.db_id for ex in bird})
    source, work = tmp_path / "pairs", tmp_path / "work"
    source.mkdir()
    _write_pairs(source, db_id)
    synthetic_compile.stage_pairs("bird-52", source, work)
    staged = json.loads((work / "pairs").read_text())
    assert Path(staged["db_path"]) == Path(bird[0].db_path)
    assert (work / "pairs.tried.jsonl").read_text() == '{"why": "kept"}\n'
