"""An adopted design's single read on a reported slice, paired against recorded runs there.

Each ``--against LABEL=RECORDS`` is a run's records on the same slice (``naive``, the preset
before, today's dev-best); the figures are the paired bootstrap interval of the difference and
McNemar's exact p (:func:`sqlweave.stats.paired`), on the questions both runs hold. With
``--slice``, each generator's oracle on the read too (a right candidate among its own).

    python experiments/read_compare.py results/protocol/ensemble__accurate-C-cold__bird-52__1.5b.jsonl \
        --against naive=results/protocol/naive__bird-52__1.5b.jsonl --out results/decisions/x.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sqlweave.evaluate import read_records
from sqlweave.stats import paired


def verdicts(path: str) -> dict[str, bool]:
    """Each question's verdict in a run's records."""
    return {str(r["question_id"]): bool(r.get("correct")) for r in read_records(path)}


def pool_oracles(path: str, slice_name: str) -> dict[str, float]:
    """Per generator (an origin's part before ``:``), the share of questions where one of its
    candidates as recorded is right; ``all``: any candidate (the run's oracle)."""
    from selection_replay import Judge

    from sqlweave.data import load_slice

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
    mine = verdicts(args.read)
    out: dict = {"read": Path(args.read).name, "n": len(mine), "against": []}
    if args.slice:
        out["pool_oracles"] = pool_oracles(args.read, args.slice)
        print(f"oracle by generator (as recorded, before any corrector): {out['pool_oracles']}")
    for item in args.against:
        label, _, path = item.partition("=")
        c = paired(mine, verdicts(path))
        print(f"{label}: {100 * c.ex_a:.1f} vs {100 * c.ex_b:.1f}, {c.diff} p={c.p_value:.3g} "
              f"({c.only_a} vs {c.only_b})")  # fmt: skip
        out["against"].append(
            {
                "label": label,
                "records": Path(path).name,
                "n": c.n,
                "ex": round(100 * c.ex_a, 1),
                "ex_against": round(100 * c.ex_b, 1),
                "delta": round(100 * (c.ex_a - c.ex_b), 1),
                "interval": [round(100 * c.diff.low, 1), round(100 * c.diff.high, 1)],
                "p_value": c.p_value,
                "gained": c.only_a,
                "lost": c.only_b,
            }
        )
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
