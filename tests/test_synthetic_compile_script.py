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


def test_the_search_compile_scores_every_trial_on_all_of_validation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--optimizer search`` hands the compile its space, no validation cap and the share of
    pairs that validates; ``knn`` keeps its demos option."""
    ran: list[list[str]] = []
    monkeypatch.setattr(synthetic_compile, "_run", lambda cmd, env: ran.append(cmd))
    args = type("Args", (), {})()
    args.program, args.model, args.k, args.trials = "direct", "local:m", 4, 8
    args.optimizer, args.space = "search", ["samples=1,8", "repair=none,joins"]
    data = ["--db", "a.sqlite", "--synthesize", "12", "--synthetic-val-fraction", "0.9"]
    synthetic_compile.compile_cmd(args, tmp_path / "a.json", data)
    cmd = ran[-1]
    assert cmd[cmd.index("--optimizer") + 1] == "search"
    assert cmd[cmd.index("--n-val") + 1] == "0" and cmd[cmd.index("--search-val") + 1] == "0"
    assert [cmd[i + 1] for i, part in enumerate(cmd) if part == "--space"] == args.space
    assert "--max-demos" not in cmd and "0.9" in cmd
    args.optimizer = "knn"
    synthetic_compile.compile_cmd(args, tmp_path / "a.json", data)
    assert ran[-1][ran[-1].index("--max-demos") + 1] == "4" and "--space" not in ran[-1]


def test_a_recorded_run_counts_only_when_program_switches_slice_model_and_questions_match(
    spider_root: Path, tmp_path: Path
) -> None:
    """``--recorded``: a run made before the compile stands for the compiled row only when it
    ran exactly the chosen program on every question of the slice; one switch apart, another
    program or a partial run, and the artefact is run as usual."""
    ids = [ex.question_id for ex in load_slice("spider-dev-200")]
    run = tmp_path / "direct__samples8__spider-dev-200__1.5b.jsonl"
    run.write_text("".join(json.dumps({"question_id": q}) + "\n" for q in ids))
    switches = {"samples": 8, "repair": "joins", "repair_scope": "all", "selector": "vote"}
    meta = {"model": "local:m", "program": "direct", "slice": "spider-dev-200"}
    run.with_name(run.name + ".run.json").write_text(
        json.dumps({"_run": {**meta, "switches": switches}})
    )
    match = synthetic_compile.recorded_match
    assert match(run, "direct", dict(switches), "spider-dev-200", "local:m")
    other = {**switches, "repair_scope": "fallback"}
    assert not match(run, "direct", other, "spider-dev-200", "local:m")
    assert not match(run, "weave", dict(switches), "spider-dev-200", "local:m")
    assert not match(run, "direct", dict(switches), "spider-dev-200", "local:other")
    run.write_text("".join(json.dumps({"question_id": q}) + "\n" for q in ids[:20]))
    assert not match(run, "direct", dict(switches), "spider-dev-200", "local:m")  # a --limit run
    with pytest.raises(SystemExit, match="run.json"):
        match(tmp_path / "missing.jsonl", "direct", switches, "spider-dev-200", "local:m")
