"""A fresh install runs every program: the graph retriever's checkpoint ships in the package, so
MageSQL's full system needs no ``sqlweave gnn train``, and every registered program answers a
bundled question with its defaults, nothing in the user's cache and only the bundled data."""

from __future__ import annotations

import functools
from pathlib import Path

import dspy
import pytest
import torch
from conftest import DEMO_ROOT as BUNDLE
from dspy.utils import DummyLM

from sqlweave import programs
from sqlweave.data import load_spider
from sqlweave.gnn import retriever as gnn_retriever
from sqlweave.gnn.retriever import (
    SHIPPED_MODEL_PATH,
    GraphRetriever,
    pool_fingerprint,
    resolve_model_path,
)
from sqlweave.gnn.train import CHECKPOINT_FORMAT
from sqlweave.programs.stages import pools

EASY = "SELECT count(*) FROM singer"
QUESTION = "How many singers do we have?"
#: One reply that fills every output field of every signature, so any program can run on it.
ANY_ANSWER = {
    "sql": EASY,
    "corrected_sql": EASY,
    "reviewed_sql": EASY,
    "elements": '["singers"]',
    "conditions": "[]",
    "keywords": '["count"]',
    "columns": '["singer.singer_id"]',
    "reason": "none",
    "choice": "0",
}


@pytest.fixture()
def fresh_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An empty user cache and only the data bundled in the package, as after ``pip install``."""
    monkeypatch.setattr(gnn_retriever, "DEFAULT_MODEL_PATH", str(tmp_path / "cache" / "g.pt"))
    monkeypatch.setenv("SQLWEAVE_DATA", str(BUNDLE))
    # Default pools and their retrievers are cached per process under root=None: give this test
    # empty ones, and give the other tests theirs back afterwards.
    monkeypatch.setattr(pools, "_load", functools.lru_cache(maxsize=8)(pools._load.__wrapped__))
    monkeypatch.setattr(pools, "_RETRIEVERS", {})


def test_the_checkpoint_ships_with_the_index_of_both_train_pools() -> None:
    assert SHIPPED_MODEL_PATH.is_file()
    assert SHIPPED_MODEL_PATH.stat().st_size < 5_000_000  # small enough for package data
    payload = torch.load(SHIPPED_MODEL_PATH, map_location="cpu", weights_only=True)
    assert payload["format"] == CHECKPOINT_FORMAT
    prints = [payload["index"]["fingerprint"]]
    prints += [i["fingerprint"] for i in payload["extra_indexes"]]
    # The bundle's default pool: its train questions without the validation databases.
    bundle_pool = pools.default_pool("spider", root=BUNDLE)
    assert len(bundle_pool) < len(load_spider("train", root=BUNDLE))
    assert pool_fingerprint(bundle_pool) in prints
    assert payload["index"]["embeddings"].shape == (len(payload["index"]["rows"]), 64)
    assert payload["provenance"]["pool"] == "spider train"


def test_model_path_prefers_a_trained_one_then_the_shipped_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cached = tmp_path / "g.pt"
    monkeypatch.setattr(gnn_retriever, "DEFAULT_MODEL_PATH", str(cached))
    assert resolve_model_path() == SHIPPED_MODEL_PATH
    cached.write_bytes(b"")
    assert resolve_model_path() == cached
    with pytest.raises(FileNotFoundError, match="sqlweave gnn train"):
        resolve_model_path(tmp_path / "missing.pt")


def test_mage_graph_answers_a_bundled_question_on_a_fresh_install(
    fresh_install: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_embedding(self: GraphRetriever) -> None:
        raise AssertionError("the shipped index should make embedding the pool unnecessary")

    monkeypatch.setattr(GraphRetriever, "_embed_pool", no_embedding)
    question = next(ex for ex in load_spider("dev") if ex.question == QUESTION)
    program = programs.get("mage")
    assert program.strategy == "graph"
    lm = DummyLM([{"sql": EASY}, {"sql": EASY}])
    with dspy.context(lm=lm):
        pred = program(question=question.question, db_path=question.db_path)
    assert pred.sql == EASY
    assert pred.stages == ["generator", "demos", "generator", "corrector"]
    # Demos come from the bundled train pool, chosen by the draft's structure (counts).
    assert len(pred.demos) == program.num_demos
    assert sum(sql.lower().startswith("select count(") for sql in pred.demo_sql) >= 2


@pytest.mark.parametrize("name", programs.available())
def test_every_program_answers_a_bundled_question_with_its_defaults(
    fresh_install: None, name: str
) -> None:
    question = next(ex for ex in load_spider("dev") if ex.question == QUESTION)
    lm = DummyLM([ANY_ANSWER] * 40)
    with dspy.context(lm=lm):
        pred = programs.get(name)(question=question.question, db_path=question.db_path)
    assert 1 <= len(lm.history) < 40
    # ``naive`` reads the raw completion, which here holds every field: the SQL is in it.
    assert EASY in pred.sql
