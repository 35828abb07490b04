"""Candidates on record: every candidate a program chose among is scored and written, so oracle
EX (some candidate right) and the selection gap are known for every run."""

from __future__ import annotations

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave import data
from sqlweave.evaluate import candidates_of, evaluate, oracle_ex, read_records, summarize
from sqlweave.programs import get


@pytest.fixture(scope="module")
def examples(data_root):
    return data.eval_slice(data.load_spider("dev", root=data_root), n=6, seed=0)


WRONG = "SELECT 1 WHERE 0"


def test_candidates_of_reads_the_contract_fields():
    pred = dspy.Prediction(
        sql="SELECT 1",
        candidates=["SELECT 1", "SELECT 2"],
        candidate_origins=["direct:greedy", "sea:sampled"],
        candidate_groups=[0, None],
    )
    assert candidates_of(pred) == [
        {"sql": "SELECT 1", "origin": "direct:greedy", "group": 0},
        {"sql": "SELECT 2", "origin": "sea:sampled", "group": None},
    ]
    assert candidates_of("SELECT 1") == [] and candidates_of(None) == []
    assert candidates_of(dspy.Prediction(sql="SELECT 1")) == []
    assert candidates_of({"sql": "x", "candidates": ["a"]}) == [{"sql": "a"}]


def test_each_candidate_is_scored_and_oracle_counts_a_right_one_the_vote_missed(examples, tmp_path):
    gold = {e.question: e.gold_sql for e in examples}
    right_in_pool = {examples[0].question, examples[1].question}

    def program(question, **_):
        # answers wrong; for two questions the gold query sits among the candidates
        pool = [WRONG, gold[question]] if question in right_in_pool else [WRONG, WRONG]
        return dspy.Prediction(
            sql=WRONG, candidates=pool, candidate_origins=["a:greedy", "b:greedy"]
        )

    out = tmp_path / "run.jsonl"
    summary = evaluate(program, examples, out_path=out, progress=False, usage_tracker=None)
    records = {r["question"]: r for r in read_records(out)}
    for question, record in records.items():
        verdicts = [c["correct"] for c in record["candidates"]]
        assert verdicts == ([False, True] if question in right_in_pool else [False, False])
        assert [c["origin"] for c in record["candidates"]] == ["a:greedy", "b:greedy"]
        assert record["oracle"] is (question in right_in_pool)
    assert summary["ex"] == 0.0
    assert summary["oracle_ex"] == pytest.approx(2 / len(examples))
    assert summary["selection_gap"] == pytest.approx(2 / len(examples))


def test_a_run_without_candidates_has_no_oracle(examples):
    gold = {e.question: e.gold_sql for e in examples}
    summary = evaluate(
        lambda question, **_: gold[question],
        examples,
        out_path=None,
        progress=False,
        usage_tracker=None,
    )
    assert "oracle_ex" not in summary and oracle_ex(summary["records"]) is None


def test_oracle_counts_the_answer_of_a_record_without_candidates():
    records = [
        {"correct": True},
        {"correct": False, "candidates": [{"sql": "x", "correct": True}], "oracle": True},
        {"correct": False, "candidates": [], "oracle": False},
    ]
    assert oracle_ex(records) == pytest.approx(2 / 3)
    assert summarize(records)["selection_gap"] == pytest.approx(1 / 3)


def test_direct_says_which_candidates_were_greedy_and_which_sampled(examples):
    ex = examples[0]
    lm = DummyLM([{"sql": ex.gold_sql}] * 3)
    program = get("direct", samples=3, selector="vote", corrector="none")
    with dspy.context(lm=lm):
        pred = program(question=ex.question, db_path=ex.db_path)
    assert (
        pred.candidate_origins
        == ["direct:greedy", "direct:sampled", "direct:sampled"][: len(pred.candidates)]
    )
    assert len(pred.candidate_origins) == len(pred.candidates) >= 1
