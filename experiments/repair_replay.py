"""Repairing failing candidates, replayed on a run's recorded candidates (no LM call).

A run that records every candidate (``ensemble`` with ``early_stop=false``; ``direct`` with
``samples``) holds what the ``repair`` stage sees. For each question this re-executes the pool,
gives each failing candidate the joins its stray columns need
(:func:`sqlweave.programs.stages.joins.complete_joins`, the ``joins`` corrector), and scores three
scopes of the program's ``repair_scope`` with its selection (the ``across`` selector, greedy
weight 2, then MageSQL's rules on the winner, as :mod:`selection_replay` does;
:func:`sqlweave.programs.stages.replay.repair_scopes`):

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
from pathlib import Path

from sqlweave.programs.stages.replay import repair_scopes as scores

RESULTS = Path(__file__).resolve().parent / "results" / "ensemble"


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
