"""The ``grounded`` selector replayed on a run's recorded candidates, against the plain vote.

For each question with recorded candidates: the execution vote's winner and the ``grounded``
selector's (:class:`sqlweave.programs.stages.grounding.GroundedSelector`: the vote among candidates
whose ``col = 'text'`` values the database stores), each followed by the corrector the program
runs on the winner (MageSQL's rules; with ``--intersect``, then the "both" rewrite of
``corrector=rules_intersect``). Both are scored with the benchmark's semantics and compared,
paired (McNemar), with each question whose verdict changed. ``vote as recorded`` checks the
replay: it counts the questions where the replayed vote's verdict differs from the run's own.
No LM call.

    python experiments/grounded_replay.py results/protocol/direct__samples8-joins-all__spider-train-select__1.5b.jsonl --slice spider-train-select
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from selection_replay import Judge
from tqdm import tqdm

from sqlweave.data import load_slice
from sqlweave.evaluate import read_records
from sqlweave.programs.stages.grounding import GroundedSelector
from sqlweave.programs.stages.setops import BOTH, checked_rewrite
from sqlweave.stats import bootstrap_ci, paired


def corrected(judge: Judge, sql: str, question: str, intersect: bool) -> str:
    """``sql`` after the program's corrector: MageSQL's rules, then (``intersect``) the "both"
    rewrite where it applies and returns a row."""
    fixed = judge.fixed(sql)
    if intersect and BOTH.search(question):
        rewritten = checked_rewrite(fixed, question, judge.db, judge.timeout_s)
        if rewritten is not None:
            return rewritten
    return fixed


def replay(
    records: list[dict[str, Any]], examples: dict[str, Any], intersect: bool
) -> dict[str, Any]:
    """Per question: right with the vote, right with ``grounded``, the changed answers, and how
    many replayed votes disagree with the run's recorded verdict."""
    vote: dict[str, bool] = {}
    grounded: dict[str, bool] = {}
    changed: list[dict[str, Any]] = []
    mismatched = 0
    selector = GroundedSelector()
    for record in tqdm(records, desc="replay", unit="q"):
        qid = str(record["question_id"])
        example = examples.get(qid)
        sqls = [c["sql"] for c in record.get("candidates") or []]
        if example is None or not sqls or record.get("gold_error"):
            continue
        judge = Judge(example)
        before = corrected(
            judge, judge.select(sqls, [1.0] * len(sqls)), example.question, intersect
        )
        chosen = selector(candidates=sqls, db=judge.db, question=example.question)
        after = corrected(judge, chosen.sql, example.question, intersect)
        vote[qid], grounded[qid] = judge.correct(before), judge.correct(after)
        mismatched += vote[qid] != bool(record.get("correct"))
        if before != after:
            changed.append(
                {
                    "question_id": qid,
                    "question": example.question,
                    "vote": before,
                    "grounded": after,
                    "right_vote": vote[qid],
                    "right_grounded": grounded[qid],
                    "dropped": len(sqls) - len(chosen.kept),
                }
            )
    return {"vote": vote, "grounded": grounded, "changed": changed, "mismatched": mismatched}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", type=Path, nargs="+", help="runs' JSONL (the same slice)")
    parser.add_argument("--slice", required=True, help="the slice the runs asked")
    parser.add_argument(
        "--intersect", action="store_true", help="the winner's corrector is rules_intersect"
    )
    parser.add_argument("--out", type=Path, help="write the figures and changes as JSON")
    args = parser.parse_args()
    examples = {str(ex.question_id): ex for ex in load_slice(args.slice)}
    report = []
    for path in args.records:
        result = replay(read_records(path), examples, args.intersect)
        cmp = paired(result["grounded"], result["vote"])
        print(
            f"{path.name}: n={cmp.n} grounded {bootstrap_ci(list(result['grounded'].values()))}"
            f" vote {100 * cmp.ex_b:.1f}; {100 * cmp.delta:+.1f} {cmp.diff} p={cmp.p_value:.3g}"
            f" ({cmp.only_a} gained, {cmp.only_b} lost, {len(result['changed'])} answers changed;"
            f" vote as recorded on all but {result['mismatched']})"
        )
        for row in result["changed"]:
            if row["right_vote"] != row["right_grounded"]:
                mark = f"{int(row['right_vote'])}->{int(row['right_grounded'])}"
                print(f"  {mark} {row['question_id']}: {row['question']}")
        report.append(
            {
                "run": path.name,
                "n": cmp.n,
                "ex_grounded": round(100 * cmp.ex_a, 1),
                "ex_vote": round(100 * cmp.ex_b, 1),
                "gained": cmp.only_a,
                "lost": cmp.only_b,
                "p_value": cmp.p_value,
                "vote_mismatched_recorded": result["mismatched"],
                "changed": result["changed"],
            }
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"written {args.out}")


if __name__ == "__main__":
    main()
