"""An adopted design's single read on a reported slice, paired against recorded runs there.

Each ``--against LABEL=RECORDS`` is a run's records on the same slice (``naive``, the preset
before, today's dev-best); the figures are the paired bootstrap interval of the difference and
McNemar's exact p (:func:`sqlweave.stats.paired`), on the questions both runs hold.

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("read", help="the design's records on the slice")
    parser.add_argument("--against", action="append", default=[], help="LABEL=RECORDS")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    mine = verdicts(args.read)
    out = {"read": Path(args.read).name, "n": len(mine), "against": []}
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
