"""sqlweave.runs (what experiments/protocol.py records and tabulates): one row per summary, naive
first, and the share of calls that DSPy's cache answered shown beside the cost, so a row whose
tokens and seconds come mostly from cache hits cannot pass for a cold run's cost; a run's
identity, resume and provenance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sqlweave import runs


def _summary(program: str, ex: float, usage: dict | None, config: str = "") -> dict:
    return {
        "program": program,
        "config": config,
        "slice": "bird-52",
        "model": "local:qwen2.5-coder-1.5b",
        "ex": ex,
        "interval": [ex - 0.1, ex + 0.1],
        "n": 52,
        "usage": usage,
    }


def test_table_shows_cached_calls_beside_cost(tmp_path):
    cold = {
        "calls": 1.0,
        "cached_calls": 0.0,
        "prompt_tokens": 500.0,
        "completion_tokens": 20.0,
        "wall_seconds": 3.1,
    }
    warm = {
        "calls": 8.0,
        "cached_calls": 8.0,
        "prompt_tokens": 0.0,
        "completion_tokens": 0.0,
        "wall_seconds": 0.02,
    }
    (tmp_path / "naive__bird-52__1.5b.json").write_text(json.dumps(_summary("naive", 0.25, cold)))
    (tmp_path / "weave__c__bird-52__1.5b.json").write_text(
        json.dumps(_summary("weave", 0.48, warm, config="compiled-search"))
    )
    (tmp_path / "old__bird-52__1.5b.json").write_text(json.dumps(_summary("old", 0.30, None)))
    lines = runs.table(tmp_path).splitlines()
    header = next(line for line in lines if line.startswith("| program"))
    assert "| calls/q | cached/q | tokens/q | s/q |" in header
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| program")]
    assert rows[0].startswith("| naive |")
    assert rows[0].endswith("| 1.00 | 0.00 | 520 | 3.1 |")
    weave = next(r for r in rows if r.startswith("| weave (compiled-search)"))
    assert weave.endswith("| 8.00 | 8.00 | 0 | 0.0 |")
    assert next(r for r in rows if r.startswith("| old |")).endswith("| — | — | — | — |")
    assert all(r.count("|") == header.count("|") for r in rows)


def _records(path: Path, correct: list[bool]) -> None:
    path.write_text(
        "".join(
            json.dumps({"question_id": f"q{i}", "correct": ok, "pred_sql": "SELECT 1"}) + "\n"
            for i, ok in enumerate(correct)
        )
    )


def test_a_compiled_run_compares_with_the_uncompiled_records_it_names(tmp_path):
    # direct's defaults changed after its compiled run was measured: the comparison must keep
    # reading the records of the program that was compiled, not today's default run.
    compiled = tmp_path / "direct__compiled-search__bird-52__1.5b.jsonl"
    _records(compiled, [True, True, True, False])
    _records(tmp_path / "direct__bird-52__1.5b.jsonl", [True, True, True, True])
    _records(tmp_path / "direct__compact_script__bird-52__1.5b.jsonl", [False, False, True, False])
    kwargs = dict(program="direct", config="compiled-search", switches={}, slice_name="bird-52")
    default = runs.summarize_run(compiled, model="local:qwen2.5-coder-1.5b", **kwargs)
    assert default["uncompiled_records"] == "direct__bird-52__1.5b.jsonl"
    assert default["vs_uncompiled"]["only_baseline"] == 1
    named = runs.summarize_run(
        compiled,
        model="local:qwen2.5-coder-1.5b",
        uncompiled="direct__compact_script__bird-52__1.5b.jsonl",
        **kwargs,
    )
    assert named["uncompiled_records"] == "direct__compact_script__bird-52__1.5b.jsonl"
    assert named["vs_uncompiled"]["only_run"] == 2 and named["vs_uncompiled"]["only_baseline"] == 0


def test_a_resume_under_other_switches_is_refused(tmp_path, singers_example):
    import dspy
    from dspy.utils import DummyLM

    from sqlweave import programs
    from sqlweave.evaluate import evaluate

    ex = singers_example
    out = tmp_path / "direct__spider-dev-200__1.5b.jsonl"
    old = programs.get("direct", schema_layout="compact", corrector="none")
    new = programs.get("direct")
    first = runs.run_identity("direct", dict(old.switches), "spider-dev-200", "m")
    with dspy.context(lm=DummyLM([{"sql": "SELECT count(*) FROM singer"}] * 3)):
        evaluate(old, [ex], out_path=out, resume=True, progress=False, identity=first)
        again = runs.run_identity("direct", dict(new.switches), "spider-dev-200", "m")
        with pytest.raises(ValueError):
            evaluate(new, [ex], out_path=out, resume=True, progress=False, identity=again)
    assert (
        first["switches"]["schema_layout"] == "compact"
        and again["switches"]["corrector"] == "rules"
    )


def test_run_identities_beside_the_records_are_not_summaries(tmp_path):
    (tmp_path / "naive__bird-52__1.5b.json").write_text(json.dumps(_summary("naive", 0.25, None)))
    (tmp_path / "naive__bird-52__1.5b.jsonl.run.json").write_text(
        json.dumps({"_run": {"program": "naive", "switches": {}}})
    )
    assert "| naive | 52 |" in runs.table(tmp_path)


def test_a_run_recorded_before_a_switch_existed_resumes_at_its_default(tmp_path):
    from sqlweave import programs
    from sqlweave.evaluate import _write_identity

    out = tmp_path / "direct__spider-dev-200__1.5b.jsonl"
    out.write_text('{"question_id": "q0"}\n')
    now = runs.run_identity("direct", dict(programs.get("direct").switches), "dev", "m")
    before = {k: v for k, v in now["switches"].items() if not k.startswith("repair")}
    _write_identity(out, {**now, "switches": before})  # written before `repair` existed
    assert runs.resumable_identity(now, out, programs.program_class("direct"))["switches"] == before
    # a new switch set away from its default, or any other difference, is left to be refused
    other = runs.run_identity(
        "direct", dict(programs.get("direct", repair="joins").switches), "dev", "m"
    )
    assert runs.resumable_identity(other, out, programs.program_class("direct")) == other
    moved = {**now, "switches": {**now["switches"], "samples": 4}}
    assert runs.resumable_identity(moved, out, programs.program_class("direct")) == moved


def test_a_resume_that_ran_nothing_keeps_the_provenance_of_the_run_that_did():
    made = {"n_threads": 1, "wall_seconds_this_invocation": 1248.5, "commit": "b3214e0"}
    made["finished"] = "2026-11-23T23:31:16+00:00"
    fresh = {"n_threads": 2, "wall_seconds_this_invocation": 0.1, "commit": "9114f42"}
    fresh["finished"] = "2026-11-26T22:44:02+00:00"
    old = {**_summary("naive", 0.555, None), **made}
    assert runs.provenance(old, ran_nothing=True, fresh=fresh) == made
    # records added, no summary yet, or one written before these fields: this invocation's
    assert runs.provenance(old, ran_nothing=False, fresh=fresh) == fresh
    assert runs.provenance(None, ran_nothing=True, fresh=fresh) == fresh
    assert runs.provenance(_summary("naive", 0.5, None), ran_nothing=True, fresh=fresh) == fresh


def test_a_cold_run_says_so_and_a_resume_keeps_it():
    """``--no-cache`` runs are marked ``response_cache: false``; a no-op resume keeps the mark,
    and a summary older than the field keeps its other provenance (the field is not required)."""
    made = {"n_threads": 2, "wall_seconds_this_invocation": 2100.0, "commit": "abc1234"}
    made |= {"finished": "2026-11-27T09:00:00+00:00", "response_cache": False}
    fresh = {"n_threads": 2, "wall_seconds_this_invocation": 0.1, "commit": "def5678"}
    fresh |= {"finished": "2026-11-27T10:00:00+00:00", "response_cache": True}
    old = {**_summary("direct", 0.8, None), **made}
    assert runs.provenance(old, ran_nothing=True, fresh=fresh) == made
    older = {k: v for k, v in old.items() if k != "response_cache"}
    assert runs.provenance(older, ran_nothing=True, fresh=fresh) == {
        k: v for k, v in made.items() if k != "response_cache"
    }


def test_no_cache_asks_for_an_lm_without_the_response_cache():
    assert runs.lm_options(2, no_cache=True) == {"n_threads": 2, "cache": False}
    # without --no-cache the engine keeps its own default, and no thread count means its own
    assert runs.lm_options(2, no_cache=False) == {"n_threads": 2}
    assert runs.lm_options(None, no_cache=False) == {}
