"""Optimizer wiring with DummyLM: complete demos, every optimizer, the LM-call budget, resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave import programs
from sqlweave.data import load_spider
from sqlweave.optimizers import gold_demos, run_optimizer

WRONG = "SELECT 1"


@pytest.fixture(scope="module")
def train(spider_root: Path) -> list[dspy.Example]:
    return load_spider("train", root=spider_root)[:8]


@pytest.fixture(scope="module")
def val(spider_root: Path) -> list[dspy.Example]:
    return load_spider("train", root=spider_root)[8:11]


def scripted(examples: list[dspy.Example], right: set[int], **extra: Any) -> DummyLM:
    """Answers the gold SQL for the questions at indexes ``right``, a wrong query otherwise."""
    answers: dict[str, dict[str, Any]] = {
        ex.question: {**extra, "sql": ex.gold_sql if i in right else WRONG}
        for i, ex in enumerate(examples)
    }
    return DummyLM({**answers, "": {**extra, "sql": WRONG}})


def asked(lm: DummyLM) -> list[str]:
    """The last user message of each call: the question the program asked about."""
    return [entry["messages"][-1]["content"] for entry in lm.history]


def test_gold_demos_render_schema_like_the_program(train: list[dspy.Example]) -> None:
    ex = train[0]
    demos = gold_demos(programs.get("direct"), ex)
    assert set(demos) == {"generate"}
    demo = demos["generate"]
    assert demo.sql == ex.gold_sql
    assert demo.dialect == "sqlite"
    assert "CREATE TABLE" in demo.db_schema and "head" in demo.db_schema
    # Exactly the inputs the predictor reads at inference time.
    assert set(demo.keys()) == {"dialect", "db_schema", "question", "evidence", "sql"}


def test_labeled_demos_are_complete_and_need_no_lm(train: list[dspy.Example]) -> None:
    lm = DummyLM([])  # any call would fail with "No more responses"
    with dspy.context(lm=lm):
        out = run_optimizer(
            programs.get("direct"), train, train[:1], optimizer="labeled", max_demos=3
        )
    demos = out.program.generate.demos
    assert len(demos) == 3 and out.report.lm_calls == 0 and not lm.history
    golds = {ex.gold_sql for ex in train}
    for demo in demos:
        assert demo.sql in golds
        assert "CREATE TABLE" in demo.db_schema and demo.dialect == "sqlite"
        assert "db_path" not in demo  # trimmed to the signature's fields


def test_labeled_demos_reach_the_prompt(train: list[dspy.Example]) -> None:
    with dspy.context(lm=DummyLM([])):
        compiled = run_optimizer(
            programs.get("direct"), train, train[:1], optimizer="labeled", max_demos=2
        ).program
    lm = DummyLM([{"sql": "SELECT 2"}])
    with dspy.context(lm=lm):
        compiled(question="Anything?", db_path=train[0].db_path)
    prompt = json.dumps(lm.history[-1]["messages"])
    for demo in compiled.generate.demos:
        assert json.dumps(demo.sql)[1:-1] in prompt


def test_bootstrap_keeps_traces_that_match_gold(train: list[dspy.Example]) -> None:
    lm = scripted(train, right={2, 5})
    with dspy.context(lm=lm):
        out = run_optimizer(
            programs.get("direct"), train, train[:1], optimizer="bootstrap", max_demos=2
        )
    demos = out.program.generate.demos
    augmented = [d for d in demos if d.get("augmented")]
    assert [d.sql for d in augmented] == [train[2].gold_sql, train[5].gold_sql]
    # It stops once it has max_demos traces: examples 0..5 were run, 6 and 7 were not.
    assert out.report.lm_calls == 6 == len(lm.history)
    assert all("CREATE TABLE" in d.db_schema for d in demos)


def test_random_search_picks_the_best_candidate(
    train: list[dspy.Example], val: list[dspy.Example]
) -> None:
    # Validation answers are right only when the prompt carries demos: zero-shot scores 0.
    lm = scripted(train + val, right={1, 8, 9, 10})
    with dspy.context(lm=lm):
        out = run_optimizer(
            programs.get("direct"), train, val, optimizer="random_search", max_demos=2, candidates=1
        )
    scores = out.report.details["candidate_scores"]
    assert set(scores) == {-3, -2, -1, 0}
    assert out.report.details["best_score"] == max(scores.values())
    assert out.report.lm_calls == len(lm.history) > 0


def test_knn_picks_demos_nearest_to_the_question(train: list[dspy.Example]) -> None:
    with dspy.context(lm=DummyLM([])):
        compiled = run_optimizer(
            programs.get("direct"), train, train[:1], optimizer="knn", max_demos=1
        ).program
    assert len(compiled.knn_pool["pool"]) == len(train)
    for target in (train[3], train[6]):
        lm = DummyLM([{"sql": "SELECT 2"}])
        with dspy.context(lm=lm):
            compiled(question=target.question + " ", db_path=target.db_path)
        prompt = json.dumps(lm.history[-1]["messages"])
        assert json.dumps(target.gold_sql)[1:-1] in prompt
        others = [ex.gold_sql for ex in train if ex.gold_sql != target.gold_sql]
        assert not any(json.dumps(g)[1:-1] in prompt for g in others)


def test_mipro_runs_with_dummy_lm(train: list[dspy.Example], val: list[dspy.Example]) -> None:
    pytest.importorskip("optuna")
    extra = {
        "proposed_instruction": "Write a single SQLite query; check every column exists.",
        "program_description": "text to SQL",
        "module_description": "writes SQL",
        "observations": "questions about tables",
        "summary": "a summary",
    }
    lm = scripted(train + val, right={0, 1, 8}, **extra)
    with dspy.context(lm=lm):
        out = run_optimizer(
            programs.get("direct"), train, val, optimizer="mipro", max_demos=2, proposer_lm=lm
        )
    # MIPROv2 bootstraps with copies of the LM (their history is their own): count >= history.
    assert out.report.lm_calls >= len(lm.history) > 0
    assert out.program.generate.signature.instructions


def test_gepa_respects_the_budget(train: list[dspy.Example], val: list[dspy.Example]) -> None:
    lm = scripted(train + val, right={0}, new_instruction="Write careful SQL.")
    with dspy.context(lm=lm):
        out = run_optimizer(
            programs.get("direct"), train, val, optimizer="gepa", budget=12, proposer_lm=lm
        )
    assert out.report.lm_calls <= 12
    assert len(lm.history) == out.report.lm_calls


@pytest.mark.parametrize("optimizer", ["bootstrap", "random_search", "mipro"])
def test_budget_is_a_hard_cap(
    optimizer: str, train: list[dspy.Example], val: list[dspy.Example]
) -> None:
    if optimizer == "mipro":
        pytest.importorskip("optuna")
    lm = scripted(
        train + val,
        right=set(),
        proposed_instruction="x",
        program_description="x",
        module_description="x",
        observations="x",
        summary="x",
    )
    with dspy.context(lm=lm):
        out = run_optimizer(
            programs.get("direct"), train, val, optimizer=optimizer, max_demos=2, budget=3
        )
    assert out.report.lm_calls == 3 and len(lm.history) <= 3
    assert out.report.budget_exhausted


def test_budget_stop_keeps_the_traces_found_so_far(train: list[dspy.Example]) -> None:
    lm = scripted(train, right={1})
    with dspy.context(lm=lm):
        out = run_optimizer(
            programs.get("direct"), train, train[:1], optimizer="bootstrap", max_demos=3, budget=4
        )
    assert out.report.budget_exhausted and out.report.lm_calls == 4
    augmented = [d for d in out.program.generate.demos if d.get("augmented")]
    assert [d.sql for d in augmented] == [train[1].gold_sql]


def test_interrupted_bootstrap_resumes_without_repeat_calls(
    train: list[dspy.Example], tmp_path: Path
) -> None:
    right = {4, 6}
    ckpt = tmp_path / "ckpt.json"
    # Reference: one uninterrupted compile.
    full_lm = scripted(train, right)
    with dspy.context(lm=full_lm):
        full = run_optimizer(programs.get("direct"), train, train[:1], max_demos=2)
    # Interrupted after 3 LM calls (the budget stands in for a crash: nothing after it runs).
    first_lm = scripted(train, right)
    with dspy.context(lm=first_lm):
        first = run_optimizer(
            programs.get("direct"), train, train[:1], max_demos=2, budget=3, checkpoint=ckpt
        )
    assert first.report.budget_exhausted and ckpt.is_file()
    # Resumed: a fresh process-like start, same checkpoint, no budget.
    second_lm = scripted(train, right)
    with dspy.context(lm=second_lm):
        second = run_optimizer(
            programs.get("direct"), train, train[:1], max_demos=2, checkpoint=ckpt
        )
    assert second.report.resumed_units == 3
    assert len(second_lm.history) == len(full_lm.history) - 3
    done_questions = {train[i].question for i in range(3)}
    assert not any(q in msg for msg in asked(second_lm) for q in done_questions)
    assert [d.toDict() for d in second.program.generate.demos] == [
        d.toDict() for d in full.program.generate.demos
    ]


def test_random_search_resumes_finished_candidates(
    train: list[dspy.Example], val: list[dspy.Example], tmp_path: Path
) -> None:
    ckpt = tmp_path / "rs.json"
    right = {1, 8, 9}
    args = dict(optimizer="random_search", max_demos=2, candidates=1, checkpoint=ckpt)
    with dspy.context(lm=scripted(train + val, right)):
        first = run_optimizer(programs.get("direct"), train, val, budget=4, **args)
    assert first.report.budget_exhausted
    lm = scripted(train + val, right)
    with dspy.context(lm=lm):
        second = run_optimizer(programs.get("direct"), train, val, **args)
    assert second.report.resumed_units >= 1
    full_lm = scripted(train + val, right)
    with dspy.context(lm=full_lm):
        full = run_optimizer(
            programs.get("direct"), train, val, **{**args, "checkpoint": tmp_path / "other.json"}
        )
    assert len(lm.history) < len(full_lm.history)
    assert second.report.details["candidate_scores"] == full.report.details["candidate_scores"]


def test_checkpoint_of_another_compile_is_not_reused(
    train: list[dspy.Example], tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt.json"
    with dspy.context(lm=scripted(train, {0})):
        run_optimizer(programs.get("direct"), train, train[:1], max_demos=1, checkpoint=ckpt)
    lm = scripted(train, {0})
    with dspy.context(lm=lm):
        out = run_optimizer(programs.get("direct"), train, train[:1], max_demos=2, checkpoint=ckpt)
    assert out.report.resumed_units == 0 and len(lm.history) > 0


def test_unknown_optimizer_is_a_clear_error(train: list[dspy.Example]) -> None:
    with pytest.raises(ValueError, match="unknown optimizer 'nope'"):
        run_optimizer(programs.get("direct"), train, optimizer="nope")
