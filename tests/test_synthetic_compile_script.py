"""experiments/synthetic_compile.py: the pairs it compiles on carry this machine's database paths
(sqlweave.synthesis.sets.stage_pairs), a database without pairs stops the run with the
command that makes them, the compile it asks for, and when a recorded run stands for the compiled
row (sqlweave.evaluate.recorded_run_matches). The script runs with ``--no-run``: it prints its
steps and runs none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_experiment

from sqlweave.data import load_slice
from sqlweave.evaluate import recorded_run_matches
from sqlweave.synthesis.pairs import SynthesisError
from sqlweave.synthesis.sets import stage_pairs


def _write_pairs(folder: Path, db_id: str) -> None:
    pair = {"question_id": f"syn_{db_id}_0", "db_id": db_id, "question": "How many?"}
    (folder / f"{db_id}.jsonl").write_text(json.dumps({**pair, "gold_sql": "SELECT 1"}) + "\n")
    (folder / f"{db_id}.jsonl.tried.jsonl").write_text('{"why": "kept"}\n')


def _db_paths(slice_name: str) -> dict[str, Any]:
    return {ex.db_id: ex.db_path for ex in load_slice(slice_name)}


def test_staged_pairs_name_each_database_file(spider_root: Path, tmp_path: Path) -> None:
    examples = load_slice("spider-train-val")
    dbs = sorted({ex.db_id for ex in examples})
    source, work = tmp_path / "pairs", tmp_path / "work"
    source.mkdir()
    for db_id in dbs:
        _write_pairs(source, db_id)
    files = stage_pairs(_db_paths("spider-train-val"), source, work / "pairs")
    assert sorted(f.stem for f in files) == dbs
    staged = json.loads((work / f"pairs.{dbs[0]}.jsonl").read_text())
    expected = next(ex.db_path for ex in examples if ex.db_id == dbs[0])
    assert staged["db_path"] == str(expected) and Path(staged["db_path"]).is_file()
    assert (work / f"pairs.{dbs[0]}.jsonl.tried.jsonl").read_text() == '{"why": "kept"}\n'


def test_a_database_without_pairs_stops_with_the_command_that_makes_them(
    spider_root: Path, tmp_path: Path
) -> None:
    dbs = sorted({ex.db_id for ex in load_slice("spider-train-val")})
    pairs = tmp_path / "pairs"
    pairs.mkdir()
    for db_id in dbs[1:]:
        _write_pairs(pairs, db_id)
    with pytest.raises(SynthesisError, match=f"no synthesized pairs for {dbs[0]} in ") as err:
        stage_pairs(_db_paths("spider-train-val"), pairs, tmp_path / "work" / "pairs")
    assert err.value.context["missing"] == [dbs[0]]
    assert not (tmp_path / "work").exists()  # nothing staged
    # the script stops there, naming the command that synthesizes them
    options = ["--slice", "spider-train-val", "--pairs", pairs, "--no-run"]
    done = run_experiment("synthetic_compile", *options, env={"SQLWEAVE_CACHE": str(tmp_path)})
    assert done.returncode == 1
    assert done.stderr.strip().endswith(f"synthesize_pairs.py --dbs {dbs[0]}"), done.stderr


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
    stage_pairs(_db_paths("bird-52"), source, work / "pairs")
    staged = json.loads((work / "pairs").read_text())
    assert Path(staged["db_path"]) == Path(bird[0].db_path)
    assert (work / "pairs.tried.jsonl").read_text() == '{"why": "kept"}\n'


def _compile_command(tmp_path: Path, *options: str) -> list[str]:
    """The ``sqlweave compile`` command the script prints with ``--no-run`` on bird-52 (one
    database, its pairs under ``tmp_path``), split into words."""
    [db_id] = sorted({ex.db_id for ex in load_slice("bird-52")})
    pairs = tmp_path / "pairs"
    pairs.mkdir(exist_ok=True)
    _write_pairs(pairs, db_id)
    common = ["--slice", "bird-52", "--pairs", pairs, "--program", "direct", "--model", "local:m"]
    done = run_experiment(
        "synthetic_compile",
        *common,
        *options,
        "--no-run",
        env={"SQLWEAVE_CACHE": str(tmp_path / "cache")},
    )
    assert done.returncode == 0, done.stderr
    [line] = [x for x in done.stdout.splitlines() if x.startswith("$ -m sqlweave compile")]
    return line.split()


def test_the_search_compile_scores_every_trial_on_all_of_validation(
    bird_root: Path, tmp_path: Path
) -> None:
    """``--optimizer search`` hands the compile its space, no validation cap and the share of
    pairs that validates; ``knn`` keeps its demos option."""
    space = ["samples=1,8", "repair=none,joins"]
    search = ["--optimizer", "search", "--trials", "8", "--val-fraction", "0.9"]
    cmd = _compile_command(tmp_path, *search, *(p for s in space for p in ("--space", s)))
    assert cmd[cmd.index("--optimizer") + 1] == "search"
    assert cmd[cmd.index("--n-val") + 1] == "0" and cmd[cmd.index("--search-val") + 1] == "0"
    assert [cmd[i + 1] for i, part in enumerate(cmd) if part == "--space"] == space
    assert "--max-demos" not in cmd and "0.9" in cmd
    knn = _compile_command(tmp_path, "--optimizer", "knn", "--k", "4")
    assert knn[knn.index("--max-demos") + 1] == "4" and "--space" not in knn


def test_a_recorded_run_counts_only_when_program_switches_slice_model_and_questions_match(
    spider_root: Path, tmp_path: Path
) -> None:
    """``--recorded``: a run made before the compile stands for the compiled row only when it
    ran exactly the chosen program on every question of the slice; one switch apart, another
    program or a partial run, and the artefact is run as usual."""
    ids = [ex.question_id for ex in load_slice("spider-dev-200")]

    def match(run: Path, program: str, switches: dict, slice_name: str, model: str) -> bool:
        identity = {"program": program, "slice": slice_name, "model": model, "switches": switches}
        return recorded_run_matches(run, identity, ids)

    run = tmp_path / "direct__samples8__spider-dev-200__1.5b.jsonl"
    run.write_text("".join(json.dumps({"question_id": q}) + "\n" for q in ids))
    switches = {"samples": 8, "repair": "joins", "repair_scope": "all", "selector": "vote"}
    meta = {"model": "local:m", "program": "direct", "slice": "spider-dev-200"}
    run.with_name(run.name + ".run.json").write_text(
        json.dumps({"_run": {**meta, "switches": switches}})
    )
    assert match(run, "direct", dict(switches), "spider-dev-200", "local:m")
    other = {**switches, "repair_scope": "fallback"}
    assert not match(run, "direct", other, "spider-dev-200", "local:m")
    assert not match(run, "weave", dict(switches), "spider-dev-200", "local:m")
    assert not match(run, "direct", dict(switches), "spider-dev-200", "local:other")
    run.write_text("".join(json.dumps({"question_id": q}) + "\n" for q in ids[:20]))
    assert not match(run, "direct", dict(switches), "spider-dev-200", "local:m")  # a --limit run
    with pytest.raises(FileNotFoundError, match="run.json"):
        match(tmp_path / "missing.jsonl", "direct", switches, "spider-dev-200", "local:m")
