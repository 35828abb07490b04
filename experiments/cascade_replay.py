"""Rule 27 of docs/decisions.md: the cascade replayed on M's recorded pools, no LM call.

For every question of a mix (``decide.py mix``: each prompt's candidates in order, the greedy
one first, a failed one replaced in place by its join repair and marked ``:repaired``), the
two greedy candidates are executed; where they agree
(:func:`sqlweave.programs.stages.cascade.greedy_agree`) the pool is those two and its row is
tabled as ``decide.py table`` tables one (:func:`decide.question_row`); elsewhere the pool is
the mix's own and so is its row of the mix's table. The result is a table ``decide.py read``
reads, the pools themselves (a records file, e.g. for ``fit_confidence.py rows``), and a
summary of the calls each question would have drawn (2 or the mix's own).

    python experiments/cascade_replay.py MIX.jsonl.gz MIX.table.jsonl.gz --slice spider-train-select \
        --name cascade__direct4-t10-dubo_v1-4-t07__spider-train-select__1.5b
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from decide import RESULTS, compress, question_row
from selection_replay import Judge
from tqdm import tqdm

from sqlweave.data import load_slice
from sqlweave.evaluate import read_records
from sqlweave.programs.stages.cascade import greedy_agree
from sqlweave.programs.stages.grounding import ValueLookup
from sqlweave.programs.stages.voting import VoteTally

DESIGN = ("fallback", "grounded|rules_intersect")


def greedy_pair(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Each prompt's greedy candidate, in pool order; a repaired one (its original failed) kept
    so that the pair fails the agreement test."""
    seen: dict[str, dict[str, Any]] = {}
    for cand in record["candidates"]:
        origin = str(cand.get("origin") or "")
        generator, _, rest = origin.partition(":")
        if rest.startswith("greedy") and generator not in seen:
            seen[generator] = cand
    return list(seen.values())


def stops(
    record: dict[str, Any], judge: Judge, grounded: bool = False
) -> tuple[bool, list[dict[str, Any]]]:
    """Whether the cascade stops on ``record`` (rule 27; with ``grounded``, rule 29), and the
    greedy candidates."""
    pair = greedy_pair(record)
    if any(str(c.get("origin") or "").endswith(":repaired") for c in pair):
        return False, pair
    sqls = [c["sql"] for c in pair]
    tally = VoteTally(judge.db, judge.timeout_s)  # as the program judges them
    outcomes = [tally.outcome(s) for s in sqls]
    lookup = ValueLookup(judge.db) if grounded else None
    return greedy_agree(sqls, outcomes, judge.db.dialect, lookup), pair


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mix")
    parser.add_argument("table")
    parser.add_argument("--slice", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument(
        "--grounded", action="store_true", help="rule 29: stop only if both are grounded too"
    )
    args = parser.parse_args()
    examples = {str(ex.question_id): ex for ex in load_slice(args.slice)}
    rows = {r["question_id"]: r for r in read_records(args.table)}
    out = RESULTS / f"{args.name}.table.jsonl"
    pools = RESULTS / f"{args.name}.jsonl"
    stopped: dict[str, bool] = {}
    calls: dict[str, int] = {}
    with out.open("w", encoding="utf-8") as handle, pools.open("w", encoding="utf-8") as kept:
        for record in tqdm(list(read_records(args.mix)), desc="cascade", unit="q"):
            qid = str(record["question_id"])
            if qid not in rows:
                continue
            judge = Judge(examples[qid])
            try:
                stop, pair = stops(record, judge, args.grounded)
            finally:
                judge.db.close()
            row = rows[qid]
            if stop:
                record = {**record, "candidates": pair}
                row = question_row(record, examples[qid])
            kept.write(json.dumps({**record, "cascade_stop": stop}) + "\n")
            row = {**row, "cascade_stop": stop}
            stopped[qid] = stop
            calls[qid] = len(record["candidates"])  # the greedy pair where it stopped
            handle.write(json.dumps(row) + "\n")
    packed = compress(out)
    compress(pools)
    scope, key = DESIGN
    mine = {r["question_id"]: r for r in read_records(packed)}
    summary: dict[str, Any] = {
        "mix": Path(args.mix).name,
        "n": len(mine),
        "stopped": round(100 * float(np.mean(list(stopped.values()))), 1),
        "calls_per_question": round(float(np.mean(list(calls.values()))), 2),
    }
    for part, keep in (("stopped", True), ("drawn", False)):
        ids = [q for q, s in stopped.items() if s is keep]
        summary[f"ex_{part}"] = {
            "n": len(ids),
            "cascade": round(100 * float(np.mean([mine[q][scope][key] for q in ids])), 1)
            if ids else None,
            "mix": round(100 * float(np.mean([rows[q][scope][key] for q in ids])), 1)
            if ids else None,
        }  # fmt: skip
    side = RESULTS / f"{args.name}.summary.json"
    side.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=1))
    print(f"wrote {packed}, its pools and {side}")


if __name__ == "__main__":
    main()
