"""GraphRetriever: structural matches first, filters, train-only pools, saved index, CLI."""

from __future__ import annotations

import dspy
import pytest
import torch
from test_gnn_graph import HashEncoder
from typer.testing import CliRunner

from sqlweave.gnn.cli import app
from sqlweave.gnn.graph import GraphBuilder
from sqlweave.gnn.model import GNNConfig, GraphContrastiveModel
from sqlweave.gnn.retriever import GraphRetriever, pool_fingerprint


@pytest.fixture(scope="module")
def pool(spider_root):
    from sqlweave.data import load_spider

    train = load_spider("train", root=spider_root.parent)
    return train[:40] + train[2000:2040]


def make(pool, **options) -> GraphRetriever:
    builder = GraphBuilder(encoder=HashEncoder())
    torch.manual_seed(0)
    model = GraphContrastiveModel.from_config(GNNConfig(in_channels=builder.feature_dim))
    return GraphRetriever(pool, model=model, builder=builder, **options)


def norm(sql: str) -> str:
    return " ".join(sql.lower().split())


def probe(sql: str, db_id: str, question: str = "a new question", **extra) -> dspy.Example:
    return dspy.Example(question=question, db_id=db_id, draft_sql=sql, **extra)


def test_same_structure_is_retrieved_first(pool):
    retriever = make(pool)
    hits = 0
    for j in (3, 17, 45, 66):
        target = pool[j]
        # same query written differently (spacing, keyword case): identical graph
        sql = " ".join(target.gold_sql.split()).replace("SELECT", "select").replace("FROM", "from")
        top = retriever.retrieve(probe(sql, target.db_id), k=3)
        assert len(top) == 3
        hits += norm(top[0].gold_sql) == norm(target.gold_sql)
        scores = retriever.scores(sql, target.db_id)
        assert float(scores.max()) == pytest.approx(1.0, abs=1e-4)
    assert hits == 4


def test_never_returns_the_query_itself(pool):
    retriever = make(pool)
    ex = pool[10]
    query = dspy.Example(**dict(ex), draft_sql=ex.gold_sql)
    got = retriever.retrieve(query, k=10)
    assert all(d.question_id != ex.question_id for d in got)
    assert all(not (d.question == ex.question and d.db_id == ex.db_id) for d in got)


def test_exclude_same_db_and_one_per_db(pool):
    ex = pool[5]
    query = probe(ex.gold_sql, ex.db_id)
    same_db = make(pool).retrieve(query, k=5)
    assert any(d.db_id == ex.db_id for d in same_db)
    excluded = make(pool, exclude_same_db=True).retrieve(query, k=5)
    assert excluded and all(d.db_id != ex.db_id for d in excluded)
    diverse = make(pool, one_per_db=True).retrieve(query, k=5)
    dbs = [d.db_id for d in diverse]
    assert len(dbs) == len(set(dbs)) and len(dbs) <= len({p.db_id for p in pool})


def test_same_db_first_ranks_the_questions_database_ahead(pool):
    ex = pool[60]  # a database of the pool's second block
    query = probe(pool[5].gold_sql, ex.db_id)  # the structure of a query on another database
    own = sum(p.db_id == ex.db_id for p in pool)
    got = make(pool, same_db_first=True).retrieve(query, k=own + 2)
    assert [d.db_id == ex.db_id for d in got] == [True] * own + [False] * 2
    plain = make(pool).retrieve(query, k=own)
    assert [d.db_id for d in plain] != [ex.db_id] * own


def test_pool_must_be_train(pool):
    bad = list(pool[:3]) + [dspy.Example(**{**dict(pool[3]), "split": "dev"})]
    with pytest.raises(ValueError, match="train split"):
        make(bad)


def test_missing_model_tells_how_to_train(pool, tmp_path):
    with pytest.raises(FileNotFoundError, match="sqlweave gnn train"):
        GraphRetriever(pool, model_path=tmp_path / "none.pt")


def test_unparseable_draft_gives_no_demos_and_missing_draft_is_an_error(pool):
    retriever = make(pool)
    assert retriever.retrieve(probe("SELEC ((( nonsense", pool[0].db_id), k=3) == []
    with pytest.raises(ValueError, match="draft_sql"):
        retriever.retrieve(dspy.Example(question="q", db_id="x"), k=3)
    assert retriever.retrieve(probe(pool[0].gold_sql, pool[0].db_id), k=0) == []


def test_save_and_load_reuse_the_pool_index(pool, tmp_path):
    retriever = make(pool)
    path = retriever.save(tmp_path / "g.pt")
    enc = HashEncoder()
    loaded = GraphRetriever.load(path, pool, builder=GraphBuilder(encoder=enc))
    assert enc.calls == []  # nothing re-embedded
    assert loaded.rows == retriever.rows and torch.equal(loaded.embeddings, retriever.embeddings)
    query = probe(pool[7].gold_sql, pool[7].db_id)
    assert [d.question_id for d in loaded.retrieve(query, 5)] == [
        d.question_id for d in retriever.retrieve(query, 5)
    ]
    other = GraphRetriever.load(path, pool[:20], builder=GraphBuilder(encoder=HashEncoder()))
    assert len(other.rows) == 20  # different pool: fingerprint differs, re-embedded
    assert pool_fingerprint(pool[:20]) != pool_fingerprint(pool)


def test_cli_train_and_missing_model(spider_root, tmp_path):
    runner = CliRunner()
    out = tmp_path / "cli.pt"
    result = runner.invoke(
        app,
        [
            "train",
            "--data-root",
            str(spider_root.parent),
            "--n",
            "12",
            "--epochs",
            "1",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert out.is_file() and "loss per epoch" in result.output
    missing = runner.invoke(
        app,
        [
            "retrieve",
            "SELECT count(*) FROM head",
            "--model",
            str(tmp_path / "no.pt"),
            "--data-root",
            str(spider_root.parent),
        ],
    )
    assert missing.exit_code == 2 and "sqlweave gnn train" in missing.output


def test_the_question_itself_is_never_a_demo_whatever_its_case_or_database(pool):
    """Found by review: only the exact text was skipped (Spider train holds the same question in
    lower case), and a probe naming no database skipped nothing."""
    retriever = make(pool)
    ex = pool[10]
    for question, db_id in (
        (ex.question.upper() + "  ", ex.db_id),
        (ex.question, None),
    ):
        got = retriever.retrieve(probe(ex.gold_sql, db_id, question=question), k=80)
        assert all(d.question.strip().lower() != ex.question.strip().lower() for d in got)


def test_a_graph_retriever_takes_a_users_own_bank(pool):
    bank = [dspy.Example(**{**dict(item), "split": "mine"}) for item in pool[:6]]
    with pytest.raises(ValueError, match="train split"):
        make(bank)
    assert len(make(bank, allow_non_train=True).rows) == 6


def test_sql_nested_past_the_stack_is_skipped_not_a_crash(pool):
    from sqlweave.gnn.graph import GraphError, parse_graph
    from sqlweave.sqlstruct import pq_gram_profile

    deep = "SELECT name FROM singer WHERE " + " OR ".join(f"age = {i}" for i in range(3000))
    with pytest.raises(GraphError):
        parse_graph(deep)
    assert not pq_gram_profile(deep)
    retriever = make(pool)
    assert retriever.retrieve(probe(deep, pool[0].db_id), k=3) == []
    assert len(make([*pool[:5], dspy.Example(**{**dict(pool[5]), "gold_sql": deep})]).rows) == 5


@pytest.mark.parametrize("content", [b"garbage bytes", b"", "list"])
def test_a_file_that_holds_no_graph_model_is_one_clear_error(pool, tmp_path, content):
    path = tmp_path / "model.pt"
    if content == "list":
        torch.save([1, 2], path)
    else:
        path.write_bytes(content)
    with pytest.raises(ValueError, match="is not a sqlweave graph model"):
        GraphRetriever(pool, model_path=path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "--split", "dev"], "--split"),
        (["train", "--batch-size", "0"], "--batch-size"),
        (["retrieve", "SELECT 1", "--k", "0"], "--k"),
    ],
)
def test_the_gnn_commands_refuse_bad_options_in_one_line(args, message):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and message in result.output
    assert "Traceback" not in result.output
