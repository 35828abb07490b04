"""Fit the ``ranked`` selector's weights on train runs, and replay it on recorded candidates.

A run whose records carry every candidate (``direct`` × 8 with ``repair_scope=all``, any
``ensemble`` run) holds all the learned selector of :mod:`sqlweave.programs.stages.reranker` reads but
the results: ``classes`` re-executes each candidate on its database and writes each question's
execution classes as features with a label (the class's first member was right: the recorded
verdict, the benchmark's semantics) to ``results/reranker/*.classes.jsonl``: the one slow step.

``fit`` fits a conditional logit (a softmax over each question's classes, L2 penalty ``--l2``;
:func:`sqlweave.programs.stages.reranker.fit_weights`) on class files of ``spider-train-select`` (train
databases outside validation) and writes the weights; ``cv`` cross-validates every set of
feature groups (or ``--features``) × ``--l2`` × ``--max-share`` gates there (five folds by
database) to choose them without validation;
``replay`` scores weights against the vote on other class files (validation to check the choice,
dev and bird to report it), paired on the same questions:

    python experiments/fit_reranker.py classes results/protocol/direct__samples8-joins-all__spider-train-select__1.5b.jsonl --slice spider-train-select
    python experiments/fit_reranker.py cv results/reranker/direct__samples8-joins-all__spider-train-select.classes.jsonl
    python experiments/fit_reranker.py cv results/reranker/direct__samples8-joins-all__spider-train-select.classes.jsonl --features vote,result,soft,align --l2 1 --max-share 1 0.75 0.5
    python experiments/fit_reranker.py fit results/reranker/direct__samples8-joins-all__spider-train-select.classes.jsonl --features vote,result,soft,align --l2 1 --out programs/reranker_weights.json
    python experiments/fit_reranker.py replay programs/reranker_weights.json results/reranker/direct__samples8-joins-all__spider-train-val.classes.jsonl

A guide for choosing on validation, never a result by itself: a choice is confirmed by running the
program with ``selector=ranked`` on the slice reported.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from sqlweave.data import load_slice
from sqlweave.db import Database
from sqlweave.evaluate import read_records
from sqlweave.programs.stages.reranker import class_design as design
from sqlweave.programs.stages.reranker import class_features, fit_weights
from sqlweave.programs.stages.reranker import replay_choices as choices
from sqlweave.programs.stages.sampling import origin_is_greedy
from sqlweave.programs.stages.voting import execution_groups, ranked_groups
from sqlweave.stats import bootstrap_ci, paired

RESULTS = Path(__file__).resolve().parent / "results" / "reranker"


def records(path: str | Path) -> list[dict[str, Any]]:
    """A JSONL file's rows (a run's records or a class file's), through the evaluator's reader:
    a run still being written loses only its half-written last line. A missing file is an error."""
    if not Path(path).exists():
        raise SystemExit(f"{path}: no such file")
    return read_records(path)


def question_classes(record: dict[str, Any], example: Any) -> dict[str, Any]:
    """One question's classes: features, label, and whether the vote picks it."""
    cands = record.get("candidates") or [
        {"sql": record["pred_sql"], "origin": "greedy", "correct": record["correct"]}
    ]
    sqls = [str(c["sql"] or "") for c in cands]
    greedy = [origin_is_greedy(c.get("origin")) for c in cands]
    if not any(greedy):
        greedy[0] = True
    db = Database.open(example.db_path)
    try:
        groups, _ = execution_groups(sqls, db, timeout_s=10.0)
    finally:
        db.close()
    out: dict[str, Any] = {
        "question_id": record["question_id"],
        "db_id": record["db_id"],
        "fallback_correct": bool(cands[0].get("correct")),
        "oracle": any(bool(c.get("correct")) for c in cands),
        "classes": [],
    }
    if not groups:
        return out
    top = ranked_groups(groups)
    order = {id(g): i for i, g in enumerate(top)}
    for g, f in zip(groups, class_features(record["question"], sqls, groups, greedy), strict=True):
        out["classes"].append(
            {
                "features": f,
                "correct": bool(cands[g.first].get("correct")),
                "vote_rank": order[id(g)],
                "sql": sqls[g.first],
            }
        )
    return out


def cmd_classes(args: argparse.Namespace) -> None:
    run = Path(args.run)
    examples = {str(ex.question_id): ex for ex in load_slice(args.slice)}
    out = (
        Path(args.out) if args.out else RESULTS / run.name.replace("__1.5b.jsonl", ".classes.jsonl")
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = records(run)
    with out.open("w", encoding="utf-8") as handle:
        for record in tqdm(rows, desc="classes"):
            row = question_classes(record, examples[str(record["question_id"])])
            handle.write(json.dumps(row) + "\n")
    print(f"wrote {out} ({len(rows)} questions)")


def load_classes(paths: Sequence[str]) -> list[dict[str, Any]]:
    return [row for p in paths for row in records(p)]


#: Feature groups ``--features`` picks from (names as :func:`class_features` writes them).
GROUPS = ("vote", "result", "soft", "sql", "cross", "align")
_VOTE = {"share", "log_count", "is_top", "greedy"}


def group_of(name: str) -> str:
    """The group a feature belongs to."""
    if name in _VOTE:
        return "vote"
    if name.startswith("soft_"):
        return "soft"
    if name.startswith("sql_"):
        return "sql"
    if name.startswith("align_"):
        return "align"
    if "_x_" in name:
        return "cross"
    return "result"


def check_groups(groups: Sequence[str]) -> None:
    """Stop on a feature group :data:`GROUPS` does not hold (a typo would select nothing)."""
    unknown = set(groups) - set(GROUPS)
    if unknown:
        raise SystemExit(f"--features: unknown group(s) {sorted(unknown)}; choose from {GROUPS}")


def left_out(rows: Sequence[dict[str, Any]], groups: Sequence[str]) -> list[str]:
    """The feature names of ``rows`` outside ``groups``."""
    check_groups(groups)
    names = {n for row in rows for c in row["classes"] for n in c["features"]}
    return sorted(n for n in names if group_of(n) not in groups)


def cross_validate(
    rows: Sequence[dict[str, Any]],
    l2: float,
    drop: Sequence[str],
    folds: int = 5,
    max_shares: Sequence[float] = (1.0,),
) -> dict[float, dict[str, bool]]:
    """Out-of-fold choices for each gate of ``max_shares``, the folds by database (a database's
    questions share one fold)."""
    dbs = sorted({r["db_id"] for r in rows})
    random.Random(0).shuffle(dbs)
    fold = {db: i % folds for i, db in enumerate(dbs)}
    out: dict[float, dict[str, bool]] = {g: {} for g in max_shares}
    for k in range(folds):
        weights = fit([r for r in rows if fold[r["db_id"]] != k], l2, drop)
        held = [r for r in rows if fold[r["db_id"]] == k]
        for g in max_shares:
            out[g].update(choices(held, weights, max_share=g))
    return out


def fit(rows: Sequence[dict[str, Any]], l2: float, drop: Sequence[str] = ()) -> dict[str, float]:
    """Conditional-logit weights (:func:`sqlweave.programs.stages.reranker.fit_weights`); stops the
    script when no question has a right and a wrong class."""
    try:
        return fit_weights(rows, l2, drop)
    except ValueError as err:
        raise SystemExit(str(err)) from None


def cmd_fit(args: argparse.Namespace) -> None:
    rows = load_classes(args.classes)
    weights = fit(rows, args.l2, left_out(rows, args.features.split(",")))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "fitted_on": [Path(p).name for p in args.classes],
        "l2": args.l2,
        "features": args.features.split(","),
        "questions": len(design(rows, sorted(weights))),
        "max_share": args.max_share,
        "weights": weights,
    }
    out.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    train = choices(rows, weights, args.max_share)
    vote = choices(rows, None)
    print(f"fitted {len(weights)} weights on {payload['questions']} questions -> {out}")
    print(
        f"  on its own train rows: ranked {100 * np.mean(list(train.values())):.1f}, "
        f"vote {100 * np.mean(list(vote.values())):.1f}"
    )


def cmd_cv(args: argparse.Namespace) -> None:
    wanted = set(args.features.split(",")) if args.features else set()
    check_groups(wanted)
    if wanted and "vote" not in wanted:
        raise SystemExit("--features: the vote is among the groups every variant refines")
    rows = load_classes(args.classes)
    vote = choices(rows, None)
    print(f"n={len(rows)} vote {100 * np.mean(list(vote.values())):.1f} (5 folds by database)")
    results = []
    for r in range(1, len(GROUPS) + 1):
        for groups in itertools.combinations(GROUPS, r):
            if "vote" not in groups:
                continue  # the vote's share is what every variant refines
            if wanted and set(groups) != wanted:
                continue
            for l2 in args.l2:
                by_gate = cross_validate(
                    rows, l2, left_out(rows, groups), max_shares=args.max_share
                )
                for g, got in by_gate.items():
                    cmp = paired(got, vote)
                    results.append((cmp.ex_a, g, ",".join(groups), l2, cmp))
    # best first; among equals the larger gate (it overturns the vote less often)
    for ex, g, groups, l2, cmp in sorted(results, key=lambda t: (-t[0], -t[1]))[: args.top]:
        print(
            f"  {groups:26s} l2={l2:<5g} max_share={g:<5g} {100 * ex:.1f}  "
            f"vs vote {100 * cmp.delta:+.1f} p={cmp.p_value:.3g} ({cmp.only_a} vs {cmp.only_b})"
        )


def cmd_replay(args: argparse.Namespace) -> None:
    payload = json.loads(Path(args.weights).read_text(encoding="utf-8"))
    weights = payload["weights"]
    for path in args.classes:
        rows = load_classes([path])
        ranked = choices(rows, weights, payload.get("max_share", 1.0))
        vote = choices(rows, None)
        oracle = {r["question_id"]: r["oracle"] for r in rows}
        cmp = paired(ranked, vote)
        print(
            f"{Path(path).name}: n={len(rows)} ranked {bootstrap_ci(list(ranked.values()))} "
            f"vote {100 * cmp.ex_b:.1f} oracle {100 * np.mean(list(oracle.values())):.1f}; "
            f"ranked - vote {100 * cmp.delta:+.1f} {cmp.diff} p={cmp.p_value:.3g} "
            f"({cmp.only_a} vs {cmp.only_b})"
        )
        if args.show:
            top = sorted(weights.items(), key=lambda kv: -abs(kv[1]))[: args.show]
            print("  " + ", ".join(f"{k} {v:+.2f}" for k, v in top))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("classes", help="execute a run's candidates; write its classes")
    p.add_argument("run")
    p.add_argument("--slice", required=True)
    p.add_argument("--out", default="")
    p.set_defaults(func=cmd_classes)
    p = sub.add_parser("fit", help="fit weights on class files")
    p.add_argument("classes", nargs="+")
    p.add_argument("--l2", type=float, default=1.0)
    p.add_argument("--features", default=",".join(GROUPS), help=f"groups of {GROUPS}")
    p.add_argument("--max-share", type=float, default=1.0, help="the gate (1: none)")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_fit)
    p = sub.add_parser("cv", help="feature-group sets x l2 x gates, cross-validated by database")
    p.add_argument("classes", nargs="+")
    p.add_argument("--l2", type=float, nargs="+", default=[1.0, 3.0, 10.0, 30.0])
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--features", default="", help="only this group set (default: every one)")
    p.add_argument(
        "--max-share", type=float, nargs="+", default=[1.0], help="gates to try (1: no gate)"
    )
    p.set_defaults(func=cmd_cv)
    p = sub.add_parser("replay", help="score weights against the vote on class files")
    p.add_argument("weights")
    p.add_argument("classes", nargs="+")
    p.add_argument("--show", type=int, default=0, help="print the N largest weights")
    p.set_defaults(func=cmd_replay)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
