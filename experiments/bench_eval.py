"""How fast is EX scoring? Every bundled gold query scored against itself, cold and warm.

* cold: fresh :class:`Database` objects, so each gold query really runs (the prediction, being the
  same SQL, then hits the gold's cache entry: one execution per question);
* warm: the same objects again, second pass: every execution is a cache hit, so this measures
  the comparison and the bookkeeping alone;
* raw: each gold query executed once more with the cache off, for the engine time alone.

Both semantics are timed (Spider's strips DISTINCT, so its queries differ from BIRD's). With
``--audit`` it also checks the data for non-determinism (two uncached runs differ) and counts gold
queries whose ``ORDER BY ... LIMIT k`` cuts through a tie, where an equally right prediction could
pick another row. Writes ``experiments/results/bench_eval.json``.

    python experiments/bench_eval.py [--data-root PATH] [--audit]
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import time
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from sqlweave import data
from sqlweave.db import Database, ExecutionError
from sqlweave.metrics import check_execution

logger = logging.getLogger("bench_eval")


def load_all(root: Path | None) -> dict[str, list[Any]]:
    return {
        "spider_dev": data.load_spider("dev", root=root),
        "spider_train": data.load_spider("train", root=root),
        "bird_dev": data.load_bird("dev", root=root),
    }


def score_pass(examples: list[Any], dbs: dict[str, Database], semantics: str) -> dict[str, Any]:
    start = time.perf_counter()
    correct = 0
    for ex in examples:
        db = dbs.get(ex.db_path)
        if db is None:
            db = dbs[ex.db_path] = Database.open(ex.db_path)
        correct += check_execution(ex.gold_sql, ex.gold_sql, db, semantics).correct
    seconds = time.perf_counter() - start
    return {
        "n": len(examples),
        "correct": correct,
        "seconds": round(seconds, 3),
        "qps": round(len(examples) / seconds, 1),
    }


def raw_pass(examples: list[Any], dbs: dict[str, Database]) -> dict[str, Any]:
    start = time.perf_counter()
    for ex in examples:
        dbs[ex.db_path].execute(ex.gold_sql, max_rows=None, use_cache=False)
    seconds = time.perf_counter() - start
    return {
        "n": len(examples),
        "seconds": round(seconds, 3),
        "qps": round(len(examples) / seconds, 1),
    }


def audit(examples: list[Any], dbs: dict[str, Database]) -> dict[str, Any]:
    """Non-deterministic golds, and ORDER BY ... LIMIT golds whose cut falls inside a tie."""
    nondeterministic, limited, ties, unchecked = [], 0, [], 0
    for ex in examples:
        db = dbs[ex.db_path]
        first = db.execute(ex.gold_sql, max_rows=None, use_cache=False)
        second = db.execute(ex.gold_sql, max_rows=None, use_cache=False)
        if first.rows != second.rows or "random" in ex.gold_sql.lower():
            nondeterministic.append(ex.question_id)
        tree = sqlglot.parse_one(ex.gold_sql, read="sqlite")
        if not (isinstance(tree, exp.Select) and tree.args.get("order") and tree.args.get("limit")):
            continue
        limited += 1
        try:
            k = int(tree.args["limit"].expression.name)
        except (ValueError, AttributeError):
            unchecked += 1
            continue
        # The sort keys of every row, without the limit: a tie across the cut means the gold's
        # answer depends on the engine's order among equal rows.
        keys = tree.copy()
        keys.set("limit", None)
        keys.set("distinct", None)
        keys.set("expressions", [o.this.copy() for o in tree.args["order"].expressions])
        try:
            rows = db.execute(keys.sql(dialect="sqlite"), max_rows=None, use_cache=False).rows
        except ExecutionError:
            unchecked += 1
            continue
        if len(rows) > k and rows[k - 1] == rows[k]:
            ties.append(ex.question_id)
    return {
        "nondeterministic": nondeterministic,
        "order_by_limit": limited,
        "tie_at_limit": len(ties),
        "tie_at_limit_examples": ties[:10],
        "unchecked": unchecked,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=None)
    parser.add_argument("--audit", action="store_true", help="also audit the gold queries")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "bench_eval.json"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    sets = load_all(args.data_root)
    results: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or "?"},
        "sets": {k: len(v) for k, v in sets.items()},
        "timings": {},
    }
    for semantics in ("spider", "bird"):
        for name, examples in sets.items():
            dbs: dict[str, Database] = {}
            cold = score_pass(examples, dbs, semantics)
            warm = score_pass(examples, dbs, semantics)
            row = {"cold": cold, "warm": warm}
            if semantics == "spider":
                row["raw_execute"] = raw_pass(examples, dbs)
            results["timings"][f"{name}/{semantics}"] = row
            print(
                f"{name:>13} {semantics:>6}: cold {cold['seconds']:7.2f} s ({cold['qps']:8.1f} q/s)"
                f"  warm {warm['seconds']:6.2f} s ({warm['qps']:8.1f} q/s)"
                f"  EX {cold['correct']}/{cold['n']}"
            )
            if args.audit and semantics == "spider":
                results.setdefault("audit", {})[name] = audit(examples, dbs)
                print(f"{'':>13} audit: {results['audit'][name]}")
            for db in dbs.values():
                db.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
