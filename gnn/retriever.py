"""Demonstration retrieval by graph embedding of a draft SQL (MageSQL's Struct-Graph selector).

The pool (train examples with gold SQL) is embedded once with the trained graph model; a
question's draft SQL is embedded the same way and the pool items with the highest cosine
similarity are its demonstrations. Weights and the pool index are saved together, so a retriever
over the pool it was trained on starts without re-embedding anything.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dspy
import torch

from sqlweave.demo_choice import pick_demos
from sqlweave.gnn.graph import GraphBuilder, GraphError
from sqlweave.gnn.model import GNNConfig, GraphContrastiveModel
from sqlweave.gnn.train import (
    TrainConfig,
    TrainResult,
    load_checkpoint,
    save_checkpoint,
    train_on_examples,
)

logger = logging.getLogger(__name__)

DEFAULT_MODEL_PATH = "~/.cache/sqlweave/gnn/spider-train.pt"

#: The checkpoint shipped in the package: trained on the Spider train pool, with the saved index of
#: that pool and of the demo bundle's train subset, so ``strategy="graph"`` works on a fresh install.
SHIPPED_MODEL_PATH = Path(__file__).resolve().parent / "checkpoints" / "spider-train.pt"


def default_model_path() -> Path:
    """Where ``sqlweave gnn train`` writes, and the retriever looks first, by default."""
    return Path(DEFAULT_MODEL_PATH).expanduser()


def resolve_model_path(model_path: str | Path | None = None) -> Path:
    """The checkpoint a retriever loads: ``model_path`` when given, else the one ``sqlweave gnn
    train`` wrote to :func:`default_model_path`, else the shipped :data:`SHIPPED_MODEL_PATH`.

    Raises ``FileNotFoundError`` (saying how to train one) when the chosen file is missing.
    """
    if model_path:
        path = Path(model_path).expanduser()
    else:
        trained = default_model_path()
        path = trained if trained.is_file() else SHIPPED_MODEL_PATH
    if not path.is_file():
        raise FileNotFoundError(
            f"no trained graph model at {path}: run `sqlweave gnn train` "
            f"(or pass model_path= to a model saved by it)"
        )
    return path


def _get(example: Any, name: str, default: Any = None) -> Any:
    try:
        value = example[name]
    except (KeyError, TypeError):
        value = getattr(example, name, default)
    return default if value is None else value


def pool_fingerprint(pool: Sequence[Any], sql_field: str = "gold_sql") -> str:
    """A hash of the pool's ids, databases and SQL: a saved index is reused only on a match."""
    h = hashlib.sha1()
    for i, ex in enumerate(pool):
        qid = _get(ex, "question_id", i)
        h.update(f"{qid}\x1f{_get(ex, 'db_id', '')}\x1f{_get(ex, sql_field, '')}\x1e".encode())
    return h.hexdigest()


def check_pool(pool: Sequence[Any]) -> None:
    """Demonstrations must come from train data: refuse any item whose ``split`` is not train."""
    for i, ex in enumerate(pool):
        split = _get(ex, "split")
        if split != "train":
            raise ValueError(
                f"pool item {i} ({_get(ex, 'question_id', '?')}) has split={split!r}; "
                "demonstrations may only come from the train split"
            )


class GraphRetriever:
    """Top-k pool examples whose gold-SQL graph is closest to the question's draft-SQL graph.

    Options: ``exclude_same_db`` (never return demos from the question's own database),
    ``one_per_db`` (at most one demo per database, for diversity), ``same_db_first`` (the
    question's own database's pool items before the others'), ``probe_field`` (the example
    field holding the draft SQL, ``draft_sql``), ``sql_field`` (pool SQL, ``gold_sql``),
    ``dialect``, ``builder`` and ``model`` (inject a :class:`GraphBuilder` / trained
    :class:`GraphContrastiveModel` instead of loading ``model_path``), ``index`` (a precomputed
    :meth:`index_payload`, used when its fingerprint matches the pool).
    """

    def __init__(
        self,
        pool: Sequence[Any],
        model_path: str | Path | None = None,
        *,
        model: GraphContrastiveModel | None = None,
        builder: GraphBuilder | None = None,
        exclude_same_db: bool = False,
        one_per_db: bool = False,
        same_db_first: bool = False,
        probe_field: str = "draft_sql",
        sql_field: str = "gold_sql",
        dialect: str | None = "sqlite",
        batch_size: int = 256,
        index: dict[str, Any] | None = None,
        allow_non_train: bool = False,
    ) -> None:
        if not allow_non_train:  # a user's own question bank, as every retriever takes it
            check_pool(pool)
        self.pool = list(pool)
        self.exclude_same_db = exclude_same_db
        self.one_per_db = one_per_db
        self.same_db_first = same_db_first
        self.probe_field = probe_field
        self.sql_field = sql_field
        self.batch_size = batch_size
        self.builder = builder or GraphBuilder(dialect=dialect)
        self.fingerprint = pool_fingerprint(self.pool, sql_field)
        saved: list[dict[str, Any]] = [index] if index else []
        if model is None:
            path = resolve_model_path(model_path)
            model, payload = load_checkpoint(path)
            logger.info("graph model from %s", path)
            saved += [payload["index"]] if payload.get("index") else []
            saved += list(payload.get("extra_indexes") or [])
        self.model = model
        self.model.eval()
        match = next((i for i in saved if i.get("fingerprint") == self.fingerprint), None)
        if match is not None:
            self.rows: list[int] = list(match["rows"])
            self.embeddings: torch.Tensor = match["embeddings"].float()
            logger.info("reusing the saved index of %d pool graphs", len(self.rows))
        else:
            logger.info(
                "no saved index for this pool of %d examples: embedding it once (graphs and "
                "MiniLM node features; minutes for thousands of queries on a CPU)",
                len(self.pool),
            )
            self._embed_pool()

    def _embed_pool(self) -> None:
        graphs = self.builder.build_pool(self.pool, sql_field=self.sql_field, progress=True)
        self.rows = [i for i, g in enumerate(graphs) if g is not None]
        usable = [g for g in graphs if g is not None]
        self.embeddings = self.model.embed(usable, batch_size=self.batch_size)
        logger.info(
            "embedded %d pool graphs (%d unparseable skipped)",
            len(usable),
            len(graphs) - len(usable),
        )

    def index_payload(self) -> dict[str, Any]:
        """The pool index as saved next to the weights."""
        return {"fingerprint": self.fingerprint, "rows": self.rows, "embeddings": self.embeddings}

    def save(self, path: str | Path) -> Path:
        """Write weights, model config and the pool index to ``path``."""
        return save_checkpoint(path, self.model, index=self.index_payload())

    @classmethod
    def load(cls, path: str | Path, pool: Sequence[Any], **options: Any) -> GraphRetriever:
        """A retriever over ``pool`` from a saved file (index reused when the pool matches)."""
        return cls(pool, model_path=path, **options)

    def embed_sql(
        self, sql: str, db_id: str | None = None, db_path: str | Path | None = None
    ) -> torch.Tensor:
        """Unit-norm embedding of one query; raises :class:`GraphError` when it does not parse."""
        graph = self.builder.build(sql, db_id=db_id, db_path=db_path)
        return self.model.embed([graph])[0]

    def scores(self, sql: str, db_id: str | None = None, db_path: Any = None) -> torch.Tensor:
        """Cosine similarity of ``sql`` to every indexed pool graph (aligned with ``rows``)."""
        return self.embeddings @ self.embed_sql(sql, db_id, db_path)

    def retrieve(self, example: Any, k: int) -> list[dspy.Example]:
        """The ``k`` pool examples most similar to ``example``'s draft SQL, best first.

        The example itself (same ``question_id``, or same question on the same database) is
        never returned. A draft that does not parse yields no demonstrations (logged), so the
        caller falls back to zero-shot rather than to arbitrary demos.
        """
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        if k == 0:
            return []
        sql = _get(example, self.probe_field)
        if not sql:
            raise ValueError(f"example has no {self.probe_field!r} to retrieve with")
        db_id = _get(example, "db_id")
        try:
            sims = self.scores(str(sql), db_id, _get(example, "db_path"))
        except GraphError as err:
            logger.warning("draft SQL does not parse, no graph demonstrations: %s", err)
            return []
        qid, question = _get(example, "question_id"), _get(example, "question")

        def db_of(pos: int) -> Any:
            return _get(self.pool[self.rows[pos]], "db_id")

        # the question as the other retrievers key it (case and surrounding blanks aside), on
        # its database or, when the example names none, on any
        asked = None if question is None else str(question).strip().lower()

        def is_query(pos: int) -> bool:
            item = self.pool[self.rows[pos]]
            if qid is not None and _get(item, "question_id") == qid:
                return True
            return (
                asked is not None
                and str(_get(item, "question") or "").strip().lower() == asked
                and (db_id is None or str(_get(item, "db_id")) == str(db_id))
            )

        chosen = pick_demos(
            torch.argsort(sims, descending=True, stable=True).tolist(),
            db_of,
            db_id,
            k,
            is_query=is_query,
            exclude_same_db=self.exclude_same_db,
            one_per_db=self.one_per_db,
            same_db_first=self.same_db_first,
        )
        return [self.pool[self.rows[pos]] for pos in chosen]

    def __repr__(self) -> str:
        return (
            f"GraphRetriever(pool={len(self.pool)}, indexed={len(self.rows)}, "
            f"exclude_same_db={self.exclude_same_db}, one_per_db={self.one_per_db})"
        )


def add_pool_index(path: str | Path, pool: Sequence[Any], **options: Any) -> Path:
    """Embed ``pool`` with the model saved at ``path`` and store its index in the same file.

    A checkpoint keeps the index of the pool it was trained on; indexes added here (the shipped
    model carries the demo bundle's train subset) let retrievers over other pools start without
    embedding anything. An index for the same pool fingerprint is replaced, not duplicated.
    """
    path = Path(path).expanduser()
    model, payload = load_checkpoint(path)
    retriever = GraphRetriever(pool, model=model, **options)
    extra = [
        i
        for i in payload.get("extra_indexes") or []
        if i.get("fingerprint") != retriever.fingerprint
    ]
    if (payload.get("index") or {}).get("fingerprint") != retriever.fingerprint:
        extra.append(retriever.index_payload())
    keep = {k: v for k, v in payload.items() if k not in ("format", "config", "state_dict")}
    return save_checkpoint(path, model, **{**keep, "extra_indexes": extra})


def train_retriever(
    pool: Sequence[Any],
    out_path: str | Path | None = None,
    *,
    builder: GraphBuilder | None = None,
    model_config: GNNConfig | None = None,
    train_config: TrainConfig | None = None,
    **options: Any,
) -> tuple[GraphRetriever, TrainResult]:
    """Train a graph model on ``pool``'s gold SQL and return a retriever over the same pool.

    The training graphs are reused as the retrieval index, and when ``out_path`` is given
    (default: none; the CLI passes :func:`default_model_path`) weights and index are saved.
    """
    check_pool(pool)
    builder = builder or GraphBuilder(dialect=options.pop("dialect", "sqlite"))
    sql_field = options.get("sql_field", "gold_sql")
    model, result, graphs = train_on_examples(
        pool, builder, model_config, train_config, sql_field=sql_field
    )
    usable = [g for g in graphs if g is not None]
    index = {
        "fingerprint": pool_fingerprint(pool, sql_field),
        "rows": [i for i, g in enumerate(graphs) if g is not None],
        "embeddings": model.embed(usable),
    }
    retriever = GraphRetriever(pool, model=model, builder=builder, index=index, **options)
    if out_path is not None:
        retriever.save(out_path)
    return retriever, result
