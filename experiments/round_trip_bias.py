"""Can a switch search choose on synthesized questions? Only on questions the round trip did not pick.

The round trip keeps a synthesized pair when the round-trip program (``direct`` as it is) answers
its question with the label's rows. On kept pairs that program is right by construction, so a
switch search validated on them can never see another configuration beat it. This script holds
the *written* questions instead: every question the writer wrote for a label that ran, the kept
pairs and the ones the round trip rejected, i.e. the set synthesis without the round trip would
have made from the same drafts.

    python experiments/round_trip_bias.py build results/synthesis-meaning results/round-trip/written.jsonl
    sqlweave evaluate -p direct --set samples=8 --set repair=joins --set repair_scope=all \\
        -d results/round-trip/written.jsonl --n 0 --data-root ../../shared/data/spider \\
        --out results/round-trip/written__direct-s8-joins-all.jsonl
    python experiments/round_trip_bias.py score results/round-trip/written__direct-s8-joins-all.jsonl

``build`` writes the questions file (``db_id`` names the Spider database; ``kept`` says which
pairs the round trip kept). ``score`` prints, for the kept and the rejected questions and for
all of them, the round-trip program's EX (kept: all, rejected: none, by construction), the run's
greedy candidate, the run's answer and its oracle, and writes ``<run>.summary.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sqlweave.evaluate import read_records
from sqlweave.programs.stages.sampling import origin_is_greedy
from sqlweave.synthesis.pairs import ROUND_TRIP_REJECTED, read_pairs


def written(pairs_dir: Path) -> list[dict[str, Any]]:
    """Every kept pair of ``pairs_dir/<db>.jsonl`` and every question its ``.tried.jsonl`` says the
    round trip rejected, in file order, each marked ``kept``."""
    rows: list[dict[str, Any]] = []
    for kept_file in sorted(pairs_dir.glob("*.jsonl")):
        if kept_file.name.endswith(".tried.jsonl"):
            continue
        db_id = kept_file.stem
        rows += [{**pair, "kept": True} for pair in read_pairs(kept_file)]
        verdicts = read_pairs(kept_file.with_name(kept_file.name + ".tried.jsonl"))
        rejected = [v for v in verdicts if v.get("why") == ROUND_TRIP_REJECTED]
        for i, verdict in enumerate(rejected):
            rows.append(
                {
                    "question_id": f"rej_{db_id}_{i:03d}",
                    "db_id": db_id,
                    "question": verdict["question"],
                    "gold_sql": verdict["sql"],
                    "template": verdict.get("template"),
                    "source": "synthetic",
                    "kept": False,
                }
            )
    return rows


def score(records: list[dict[str, Any]], kept_ids: set[str]) -> dict[str, dict[str, float]]:
    """Per part (kept / rejected / all): n and, in percent, the round-trip program (by
    construction), the greedy candidate, the answer and the oracle."""
    parts: dict[str, list[dict[str, Any]]] = {"kept": [], "rejected": [], "all": records}
    for record in records:
        parts["kept" if record["question_id"] in kept_ids else "rejected"].append(record)
    table: dict[str, dict[str, float]] = {}
    for name, rows in parts.items():
        n = len(rows) or 1
        greedy = sum(
            any(c["correct"] for c in r.get("candidates") or [] if origin_is_greedy(c["origin"]))
            for r in rows
        )
        table[name] = {
            "n": len(rows),
            "round_trip_program": 100 * sum(r["question_id"] in kept_ids for r in rows) / n,
            "greedy": 100 * greedy / n,
            "answer": 100 * sum(bool(r["correct"]) for r in rows) / n,
            "oracle": 100 * sum(bool(r.get("oracle", r["correct"])) for r in rows) / n,
        }
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="the written questions of a pairs folder")
    build.add_argument("pairs", type=Path)
    build.add_argument("out", type=Path)
    run = sub.add_parser("score", help="a recorded run on the written questions, by part")
    run.add_argument("records", type=Path)
    run.add_argument("--questions", type=Path, default=None, help="default: written.jsonl beside")
    args = parser.parse_args()
    if args.command == "build":
        rows = written(args.pairs)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{len(rows)} written questions, {sum(r['kept'] for r in rows)} kept -> {args.out}")
        return
    questions = args.questions or args.records.with_name("written.jsonl")
    kept_ids = {q["question_id"] for q in read_pairs(questions) if q.get("kept")}
    records = read_records(args.records)
    table = score(records, kept_ids)
    for name, row in table.items():
        print(
            f"{name:>8}: n={row['n']:3d}  round-trip program {row['round_trip_program']:5.1f}  "
            f"greedy {row['greedy']:5.1f}  answer {row['answer']:5.1f}  oracle {row['oracle']:5.1f}"
        )
    out = args.records.with_suffix(".summary.json")
    out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
