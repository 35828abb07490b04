"""Repairing failing candidates, replayed on a run's recorded candidates (no LM call).

A run that records every candidate (``ensemble`` with ``early_stop=false``; ``direct`` with
``samples``) holds what the ``repair`` stage sees. For each question this re-executes the pool,
gives each failing candidate the joins its stray columns need
(:func:`sqlweave.programs.joins.complete_joins`, the ``joins`` corrector), and scores three
scopes of the program's ``repair_scope`` with its selection (the ``across`` selector, greedy
weight 2, then MageSQL's rules on the winner, as :mod:`selection_replay` does):

* ``none``: the pool as drawn;
* ``all``: every failing candidate replaced by its repair where that runs;
* ``fallback``: the same, only for questions where no candidate runs.

EX and oracle (some candidate right once the rules repaired it) per generator subset. Choose on
validation (``spider-train-val``), then confirm with the program on the slices we report.

    python experiments/repair_replay.py results/protocol/ensemble__five_nostop__spider-train-val__1.5b.jsonl --slice spider-train-val --subsets dubo_v2,pet,sea direct
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from selection_replay import Judge, pick, repair_joins

from sqlweave.programs.voting import origin_generator

RESULTS = Path(__file__).resolve().parent / "results" / "ensemble"
SCOPES = ("none", "all", "fallback")


def scores(
    records: Sequence[dict[str, Any]],
    examples: dict[str, Any],
    subsets: Sequence[tuple[str, ...]],
) -> dict[str, dict[str, float]]:
    """``{"<subset> | <scope>": {"ex", "oracle", "n"}}`` (percent) for each subset and scope."""
    from sqlweave.db import ExecutionError

    mended = {str(r["question_id"]): r for r in repair_joins(records, examples)}
    tally: dict[str, list[int]] = {}
    for record in records:
        qid = str(record["question_id"])
        example = examples.get(qid)
        if example is None or qid not in mended or not record.get("candidates"):
            continue
        judge = Judge(example)
        for subset in subsets:
            drawn, weights = pick(record["candidates"], None, subset, 2.0)
            fixed, fixed_w = pick(mended[qid]["candidates"], None, subset, 2.0)
            if not drawn:
                continue
            runs = any(
                not isinstance(judge.db.try_execute(c["sql"]), ExecutionError) for c in drawn
            )
            for scope in SCOPES:
                repaired = scope == "all" or (scope == "fallback" and not runs)
                pool, w = (fixed, fixed_w) if repaired else (drawn, weights)
                sources = [origin_generator(c["origin"]) for c in pool]
                winner = judge.fixed(judge.select([c["sql"] for c in pool], w, sources))
                row = tally.setdefault(f"{','.join(subset)} | {scope}", [0, 0, 0])
                row[0] += judge.correct(winner)
                row[1] += any(judge.correct(judge.fixed(c["sql"])) for c in pool)
                row[2] += 1
    return {
        key: {"ex": round(100 * h / n, 1), "oracle": round(100 * o / n, 1), "n": n}
        for key, (h, o, n) in tally.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", type=Path, help="a run's JSONL with candidates on record")
    parser.add_argument("--slice", required=True, help="the slice the run asked")
    parser.add_argument("--subsets", nargs="+", required=True, help="e.g. dubo_v2,pet,sea direct")
    args = parser.parse_args()
    from sqlweave.data import load_slice
    from sqlweave.evaluate import read_records

    examples = {str(ex.question_id): ex for ex in load_slice(args.slice)}
    subsets = [tuple(s.split(",")) for s in args.subsets]
    result = scores(read_records(args.records), examples, subsets)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / (args.records.name.removesuffix(".jsonl") + ".repair.json")
    out.write_text(json.dumps({"records": args.records.name, "scores": result}, indent=1) + "\n")
    print("| generators | repair scope | EX | oracle | n |\n|---|---|---|---|---|")
    for key, row in result.items():
        subset, scope = key.split(" | ")
        print(f"| {subset} | {scope} | {row['ex']:.1f} | {row['oracle']:.1f} | {row['n']} |")
    print(f"\nwritten {out}")


if __name__ == "__main__":
    main()
