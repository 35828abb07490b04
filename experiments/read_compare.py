"""An adopted design's single read on a reported slice, paired against recorded runs there.

Each ``--against LABEL=RECORDS`` is a run's records on the same slice (``naive``, the preset
before, today's dev-best); each comparison is ``decide.py``'s paired line (the difference, its
bootstrap interval, McNemar's exact p), on the questions both runs hold. With
``--slice``, each generator's oracle on the read too (a right candidate among its own).

    python experiments/read_compare.py results/protocol/ensemble__accurate-C-cold__bird-52__1.5b.jsonl \
        --against naive=results/protocol/naive__bird-52__1.5b.jsonl --out results/decisions/x.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from decide import _line, against_verdicts
from selection_replay import Judge

from sqlweave.data import load_slice
from sqlweave.evaluate import read_records


def pool_oracles(path: str, slice_name: str) -> dict[str, float]:
    """Per generator (an origin's part before ``:``), the share of questions where one of its
    candidates as recorded is right; ``all``: any candidate (the run's oracle)."""
    examples = {str(ex.question_id): ex for ex in load_slice(slice_name)}
    hits: dict[str, int] = {}
    records = [r for r in read_records(path) if r.get("candidates")]
    for record in records:
        judge = Judge(examples[str(record["question_id"])])
        try:
            right = {
                str(c.get("origin") or "").split(":")[0]
                for c in record["candidates"]
                if judge.correct(c["sql"])
            }
        finally:
            judge.db.close()
        for name in {*right, "all"} if right else ():
            hits[name] = hits.get(name, 0) + 1
    return {name: round(100 * k / len(records), 1) for name, k in sorted(hits.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("read", help="the design's records on the slice")
    parser.add_argument("--against", action="append", default=[], help="LABEL=RECORDS")
    parser.add_argument("--out", default="")
    parser.add_argument("--slice", default="", help="also each generator's oracle (its gold)")
    args = parser.parse_args()
    mine = against_verdicts(args.read)
    out: dict = {"read": Path(args.read).name, "n": len(mine), "against": []}
    if args.slice:
        out["pool_oracles"] = pool_oracles(args.read, args.slice)
        print(f"oracle by generator (as recorded, before any corrector): {out['pool_oracles']}")
    for item in args.against:
        label, _, path = item.partition("=")
        out["against"].append(_line("read", mine, against_verdicts(path), label))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
