"""The "both" rewrite (``corrector=rules_intersect``) replayed on a run's recorded answers.

A run's ``pred_sql`` is its answer after MageSQL's rules; the ``rules_intersect`` corrector
would then split a "both" question's two-value ``IN`` list into an INTERSECT
(:func:`sqlweave.programs.stages.setops.both_as_intersect`), kept only if it runs and returns a row.
This applies exactly that to every recorded answer, scores both with the benchmark's
semantics, and prints EX before and after, paired (McNemar), with each changed question. No LM
call, so the decision costs seconds.

    python experiments/intersect_replay.py results/protocol/direct__samples8-joins-all__spider-train-val__1.5b.jsonl --slice spider-train-val
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from selection_replay import Judge

from sqlweave.data import load_slice
from sqlweave.evaluate import read_records
from sqlweave.programs.stages.setops import BOTH, checked_rewrite
from sqlweave.stats import bootstrap_ci, paired


def replay(records: list[dict[str, Any]], examples: dict[str, Any]) -> dict[str, Any]:
    """Per question: right before, right after, and the rewrite where it applied."""
    before: dict[str, bool] = {}
    after: dict[str, bool] = {}
    changed: list[dict[str, Any]] = []
    for record in records:
        qid = str(record["question_id"])
        example = examples.get(qid)
        if example is None or record.get("gold_error"):
            continue
        sql = record.get("pred_sql") or ""
        before[qid] = bool(record.get("correct"))
        after[qid] = before[qid]
        if not BOTH.search(example.question):
            continue  # most questions: no database to open
        judge = Judge(example)
        rewritten = checked_rewrite(sql, example.question, judge.db, judge.timeout_s)
        if rewritten is None:
            continue
        after[qid] = judge.correct(rewritten)
        changed.append(
            {
                "question_id": qid,
                "question": example.question,
                "before": sql,
                "after": rewritten,
                "right_before": before[qid],
                "right_after": after[qid],
            }
        )
    return {"before": before, "after": after, "changed": changed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", type=Path, nargs="+", help="runs' JSONL (the same slice)")
    parser.add_argument("--slice", required=True, help="the slice the runs asked")
    parser.add_argument("--out", type=Path, help="write the figures and changes as JSON")
    args = parser.parse_args()
    examples = {str(ex.question_id): ex for ex in load_slice(args.slice)}
    report = []
    for path in args.records:
        result = replay(read_records(path), examples)
        cmp = paired(result["after"], result["before"])
        print(
            f"{path.name}: n={cmp.n} with the rewrite {bootstrap_ci(list(result['after'].values()))}"
            f" as recorded {100 * cmp.ex_b:.1f}; {100 * cmp.delta:+.1f} {cmp.diff} "
            f"p={cmp.p_value:.3g} ({cmp.only_a} gained, {cmp.only_b} lost, "
            f"{len(result['changed'])} rewritten)"
        )
        for row in result["changed"]:
            mark = f"{int(row['right_before'])}->{int(row['right_after'])}"
            print(f"  {mark} {row['question_id']}: {row['question']}")
        report.append(
            {
                "run": path.name,
                "n": cmp.n,
                "ex_after": round(100 * cmp.ex_a, 1),
                "ex_before": round(100 * cmp.ex_b, 1),
                "gained": cmp.only_a,
                "lost": cmp.only_b,
                "p_value": cmp.p_value,
                "changed": result["changed"],
            }
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"written {args.out}")


if __name__ == "__main__":
    main()
