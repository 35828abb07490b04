"""Unsupervised contrastive training of the graph model on a pool of train queries.

Each anchor graph gets ``num_positives`` views, each made by one random SQL-preserving
augmentation, and ``num_negatives`` other queries of the batch (different SQL text) as negatives.
Adam, lr 1e-4, 10 epochs by default; seeds are fixed; loss per epoch goes to the logger, a tqdm
bar, and the returned :class:`TrainResult`. :func:`save_checkpoint` stores weights, the model
config and (optionally) a pool index so a retriever can start without re-embedding the pool.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Batch, Data

from sqlweave.gnn.augment import ValueVocabulary, augmentation_texts, default_augmentations
from sqlweave.gnn.graph import GraphBuilder
from sqlweave.gnn.model import GNNConfig, GraphContrastiveModel, model_view

logger = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "sqlweave-gnn/1"


@dataclass
class TrainConfig:
    """Optimiser and loop settings (the model's sizes live in :class:`GNNConfig`)."""

    epochs: int = 10
    lr: float = 1e-4
    batch_size: int = 64
    seed: int = 0
    progress: bool = True


@dataclass
class TrainResult:
    """What a training run did: mean loss per epoch, wall time, pool size."""

    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    num_graphs: int = 0
    config: dict[str, Any] = field(default_factory=dict)


def set_seed(seed: int) -> None:
    """Seed Python, NumPy and torch so a run (weights, batches, augmentations) repeats."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _negatives(
    keys: Sequence[str], batch_idx: list[int], n: int, rng: random.Random, pool_size: int
) -> tuple[list[list[int]], list[int]]:
    """Per anchor, ``n`` positions of negatives: other batch members with different SQL first,
    then pool graphs appended after the batch (returned as extra pool indices)."""
    extra: list[int] = []
    out: list[list[int]] = []
    for pos, i in enumerate(batch_idx):
        others = [p for p, j in enumerate(batch_idx) if p != pos and keys[j] != keys[i]]
        chosen = rng.sample(others, n) if len(others) >= n else list(others)
        tries = 0
        while len(chosen) < n and tries < 10 * n:
            tries += 1
            j = rng.randrange(pool_size)
            if keys[j] != keys[i]:
                chosen.append(len(batch_idx) + len(extra))
                extra.append(j)
        while len(chosen) < n:  # a pool of one query: reuse what there is
            chosen.append(chosen[-1] if chosen else pos)
        out.append(chosen)
    return out, extra


def train_model(
    model: GraphContrastiveModel,
    graphs: Sequence[Data],
    augment: Callable[[Data], Data],
    config: TrainConfig | None = None,
    on_epoch: Callable[[int, float], None] | None = None,
) -> TrainResult:
    """Train ``model`` in place on ``graphs`` with views from ``augment``; returns the losses."""
    from tqdm.auto import tqdm

    config = config or TrainConfig()
    if not graphs:
        raise ValueError("cannot train on an empty pool")
    set_seed(config.seed)
    rng = random.Random(config.seed)
    n_pos, n_neg = model.config.num_positives, model.config.num_negatives
    keys = [
        " ".join(str(g.sql).lower().split()) if "sql" in g else str(i) for i, g in enumerate(graphs)
    ]
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    result = TrainResult(num_graphs=len(graphs), config=asdict(config))
    start = time.perf_counter()
    model.train()
    order = list(range(len(graphs)))
    for epoch in range(config.epochs):
        rng.shuffle(order)
        total, count = 0.0, 0
        batches = [
            order[i : i + config.batch_size] for i in range(0, len(order), config.batch_size)
        ]
        bar = tqdm(batches, desc=f"epoch {epoch + 1}/{config.epochs}", disable=not config.progress)
        for batch_idx in bar:
            negs, extra = _negatives(keys, batch_idx, n_neg, rng, len(graphs))
            anchors = [graphs[i] for i in batch_idx]
            views = [augment(g) for g in anchors for _ in range(n_pos)]
            members = anchors + [graphs[j] for j in extra] + views
            emb = model(Batch.from_data_list([model_view(g) for g in members]))
            b = len(anchors)
            first_view = b + len(extra)
            anchor_emb = emb[:b]
            pos_emb = emb[first_view:].view(b, n_pos, -1)
            neg_emb = emb[torch.tensor(negs, dtype=torch.long)]  # (B, N, d)
            loss = model.loss(anchor_emb, pos_emb, neg_emb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * b
            count += b
            bar.set_postfix(loss=f"{total / count:.4f}")
        mean = total / max(count, 1)
        result.losses.append(mean)
        logger.info("epoch %d/%d: loss %.4f", epoch + 1, config.epochs, mean)
        if on_epoch is not None:
            on_epoch(epoch + 1, mean)
    result.seconds = time.perf_counter() - start
    model.eval()
    return result


def train_on_examples(
    examples: Sequence[Any],
    builder: GraphBuilder | None = None,
    model_config: GNNConfig | None = None,
    train_config: TrainConfig | None = None,
    sql_field: str = "gold_sql",
    on_epoch: Callable[[int, float], None] | None = None,
) -> tuple[GraphContrastiveModel, TrainResult, list[Data | None]]:
    """Build the pool's graphs, catalog and value vocabulary, then train a fresh model.

    Returns the model, the result, and the graphs (``None`` where the SQL did not parse), in
    the order of ``examples`` so they can be reused as a retrieval index.
    """
    train_config = train_config or TrainConfig()
    builder = builder or GraphBuilder()
    set_seed(train_config.seed)
    graphs = builder.build_pool(examples, sql_field=sql_field, progress=train_config.progress)
    usable = [g for g in graphs if g is not None]
    logger.info("built %d graphs (%d unparseable)", len(usable), len(graphs) - len(usable))
    model_config = model_config or GNNConfig(in_channels=builder.feature_dim)
    if model_config.in_channels != builder.feature_dim:
        raise ValueError(
            f"model expects {model_config.in_channels} input features, "
            f"graphs have {builder.feature_dim}"
        )
    builder.prepare(augmentation_texts(builder.catalog), progress=train_config.progress)
    augment = default_augmentations(
        builder, builder.catalog, ValueVocabulary(usable), seed=train_config.seed
    )
    set_seed(train_config.seed)
    model = GraphContrastiveModel.from_config(model_config)
    logger.info("training %r on %d graphs", model, len(usable))
    result = train_model(model, usable, augment, train_config, on_epoch=on_epoch)
    return model, result, graphs


def save_checkpoint(path: str | Path, model: GraphContrastiveModel, **extra: Any) -> Path:
    """Write weights + model config (+ ``extra``, e.g. a pool index) to ``path``."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": CHECKPOINT_FORMAT,
        "config": model.config.to_dict(),
        "state_dict": model.state_dict(),
        **extra,
    }
    torch.save(payload, path)
    logger.info("saved graph model to %s", path)
    return path


def load_checkpoint(path: str | Path) -> tuple[GraphContrastiveModel, dict[str, Any]]:
    """Load a model saved by :func:`save_checkpoint`; returns it (eval mode) and the payload."""
    path = Path(path).expanduser()
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as err:  # noqa: BLE001 - torch's unpickling errors are many; one message
        # (never weights_only=False, which torch's own message suggests: it runs the file's code)
        raise ValueError(f"{path} is not a sqlweave graph model (it cannot be read)") from err
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(f"{path} is not a sqlweave graph model (format {found!r})")
    model = GraphContrastiveModel.from_config(GNNConfig.from_dict(payload["config"]))
    model.load_state_dict(payload["state_dict"])
    model.eval()
    return model, payload
