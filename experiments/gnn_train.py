"""Train the MageSQL graph retriever on the Spider train pool and record what it cost.

Writes ``experiments/results/gnn/train.json`` (wall time of graph building and of training,
peak resident memory, loss per epoch) and saves weights + pool index to ``--out`` (default: the
path the retriever loads by default). Run in the background on a shared machine:

    nice -n 10 .venv/bin/python experiments/gnn_train.py > experiments/results/gnn/train.log 2>&1 &
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import resource
import time
from pathlib import Path

import torch

from sqlweave.data import load_spider
from sqlweave.gnn.graph import GraphBuilder
from sqlweave.gnn.model import GNNConfig
from sqlweave.gnn.retriever import default_model_path, train_retriever
from sqlweave.gnn.train import TrainConfig

logger = logging.getLogger("gnn_train")
RESULTS = Path(__file__).resolve().parent / "results" / "gnn"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=None, help="benchmark data root (default: resolved)")
    parser.add_argument("--n", type=int, default=None, help="first n train examples (default all)")
    parser.add_argument("--epochs", type=int, default=TrainConfig.epochs)
    parser.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
    parser.add_argument("--lr", type=float, default=TrainConfig.lr)
    parser.add_argument("--seed", type=int, default=TrainConfig.seed)
    parser.add_argument("--out", type=Path, default=None, help="model file (default: cache path)")
    parser.add_argument("--json", type=Path, default=RESULTS / "train.json")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1 is ~4x faster than 2 on a busy shared 2-core machine)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(args.threads)

    pool = load_spider("train", root=args.data_root)
    if args.n:
        pool = pool[: args.n]
    out = args.out or default_model_path()
    builder = GraphBuilder()
    train_config = TrainConfig(
        epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, seed=args.seed, progress=False
    )
    t0 = time.perf_counter()
    retriever, result = train_retriever(pool, out, builder=builder, train_config=train_config)
    total = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

    usable = retriever.rows
    report = {
        "pool": len(pool),
        "graphs": len(usable),
        "unparseable": len(pool) - len(usable),
        "epochs": train_config.epochs,
        "batch_size": train_config.batch_size,
        "lr": train_config.lr,
        "seed": train_config.seed,
        "model": repr(retriever.model),
        "model_config": GNNConfig.to_dict(retriever.model.config),
        "train_seconds": round(result.seconds, 1),
        "total_seconds": round(total, 1),
        "prep_seconds": round(total - result.seconds, 1),
        "seconds_per_epoch": round(result.seconds / max(train_config.epochs, 1), 1),
        "peak_rss_mb": round(peak_mb, 1),
        "loss_per_epoch": [round(x, 4) for x in result.losses],
        "embedded_texts": builder.cache_size,
        "model_path": str(out),
        "machine": f"{platform.machine()}, torch threads {torch.get_num_threads()}",
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
