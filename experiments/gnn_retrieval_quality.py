"""How structurally similar are the demos each retriever picks? (MageSQL Table IV, offline part)

For every Spider dev question the gold SQL is the probe (an oracle draft), and each retriever
returns its top-k train examples. We report the mean structural similarity between the probe
and its demos' gold SQL, with two measures from :mod:`sqlweave.sqlstruct`: skeleton similarity
(difflib ratio of keyword skeletons) and pq-gram similarity (1 − pq-gram distance of node-type
trees). Retrievers: random, question embedding, question Jaccard, pq-gram (Struct-Tree), the
trained GNN (Struct-Graph) and, as a control, the same GNN with untrained weights.

Writes ``experiments/results/gnn/retrieval_quality.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from statistics import mean

import dspy
import torch

from sqlweave.data import eval_slice, load_spider
from sqlweave.gnn.graph import GraphBuilder
from sqlweave.gnn.model import GNNConfig, GraphContrastiveModel
from sqlweave.gnn.retriever import GraphRetriever, default_model_path
from sqlweave.programs.stages.retrieval import make_retriever
from sqlweave.sqlstruct import pq_gram_similarity, skeleton_similarity

logger = logging.getLogger("gnn_retrieval_quality")
RESULTS = Path(__file__).resolve().parent / "results" / "gnn"
KS = (1, 5)
LABELS = {
    "random": "Random",
    "question": "Question similarity (MiniLM)",
    "jaccard": "Question Jaccard",
    "pqgram": "pq-gram (Struct-Tree)",
    "graph": "GNN (Struct-Graph, trained)",
    "graph-untrained": "GNN, untrained weights (control)",
}


def build_retrievers(pool, model_path: Path, names: list[str]) -> dict[str, tuple[object, float]]:
    """Each retriever with its build time (seconds)."""
    out = {}
    builder = GraphBuilder()
    for name in names:
        t0 = time.perf_counter()
        if name == "graph":
            r = GraphRetriever(pool, model_path=model_path, builder=builder)
        elif name == "graph-untrained":
            torch.manual_seed(0)
            model = GraphContrastiveModel.from_config(GNNConfig(in_channels=builder.feature_dim))
            r = GraphRetriever(pool, model=model, builder=builder)
        else:
            r = make_retriever(name, pool)
        out[name] = (r, time.perf_counter() - t0)
        logger.info("built %s in %.1fs", name, out[name][1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--n", type=int, default=0, help="dev slice size (0 = all 827)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pool-n", type=int, default=0, help="first n train examples (smoke runs)")
    parser.add_argument("--model", type=Path, default=None, help="GNN file (default: cache path)")
    parser.add_argument("--retrievers", default=",".join(LABELS))
    parser.add_argument("--out", type=Path, default=RESULTS / "retrieval_quality")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(args.threads)

    pool = load_spider("train", root=args.data_root)
    if args.pool_n:
        pool = pool[: args.pool_n]
    dev = load_spider("dev", root=args.data_root)
    probes = eval_slice(dev, n=args.n or None, seed=args.seed)
    names = args.retrievers.split(",")
    retrievers = build_retrievers(pool, args.model or default_model_path(), names)

    kmax = max(KS)
    rows = {}
    for name, (retriever, build_s) in retrievers.items():
        t0 = time.perf_counter()
        skel = {k: [] for k in KS}
        pq = {k: [] for k in KS}
        exact1 = 0
        for ex in probes:
            probe = dspy.Example(**dict(ex), draft_sql=ex.gold_sql)
            demos = retriever.retrieve(probe, kmax)
            s = [skeleton_similarity(ex.gold_sql, d.gold_sql) for d in demos]
            p = [pq_gram_similarity(ex.gold_sql, d.gold_sql) for d in demos]
            for k in KS:
                skel[k].append(mean(s[:k]) if s[:k] else 0.0)
                pq[k].append(mean(p[:k]) if p[:k] else 0.0)
            exact1 += bool(s) and s[0] == 1.0
        query_s = time.perf_counter() - t0
        rows[name] = {
            "label": LABELS.get(name, name),
            **{f"skeleton@{k}": round(mean(skel[k]), 4) for k in KS},
            **{f"pqgram@{k}": round(mean(pq[k]), 4) for k in KS},
            "same_skeleton@1": round(exact1 / len(probes), 4),
            "build_s": round(build_s, 1),
            "ms_per_query": round(1000 * query_s / len(probes), 1),
        }
        logger.info("%s: %s", name, rows[name])

    report = {
        "probes": len(probes),
        "probe": "gold SQL of Spider dev (oracle draft)",
        "slice": f"eval_slice(dev, n={args.n or None}, seed={args.seed})",
        "pool": len(pool),
        "model": str(args.model or default_model_path()),
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    head = "| retriever | skeleton@1 | skeleton@5 | pq-gram@1 | pq-gram@5 | same skeleton@1 | build s | ms/query |"
    lines = [
        f"Spider dev, {len(probes)} probes (gold SQL as the draft), train pool {len(pool)}.",
        "Mean structural similarity between the probe and its top-k demos' gold SQL.",
        "",
        head,
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows.values():
        lines.append(
            f"| {r['label']} | {r['skeleton@1']:.3f} | {r['skeleton@5']:.3f} | {r['pqgram@1']:.3f} "
            f"| {r['pqgram@5']:.3f} | {r['same_skeleton@1']:.3f} | {r['build_s']} | {r['ms_per_query']} |"
        )
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
