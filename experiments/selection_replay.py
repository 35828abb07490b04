"""Selection strategies replayed over a run's recorded candidates, for choosing on validation.

A run whose records carry every candidate with its origin (``ensemble`` with ``early_stop=false``)
holds everything a selector sees except the LM. This script re-executes each candidate on the
question's database and replays, without any LM call, the selections the ``ensemble`` program can
be switched to, each scored against the gold query with the benchmark's semantics:

* ``vote``: the execution vote (:func:`sqlweave.programs.stages.voting.vote`, its tie rules included),
  then MageSQL's rules on the winner: what ``selector=vote corrector=rules`` does;
* ``rules-first``: MageSQL's rules applied to *every* candidate before the vote (a candidate that
  fails on a misspelled column or a wrongly cased value joins the vote repaired);
* ``across``: the answer held by the most *different generators* wins (the vote's weight breaks
  ties): agreement between prompts is stronger evidence than four samples of one prompt agreeing
  (``selector=across`` of the ``ensemble`` program);
* each over every subset of the run's generators, with the greedy candidate weighted 1 or 2.

With ``--repair joins`` each candidate that fails to run is first given the joins its stray
columns need (what ``repair=joins`` does in the program; no LM call).

With ``--runoff`` it also replays the ``runoff`` selector, which does call the LM: the vote, and
when the runner-up holds ``threshold`` of the leader's weight, the LM chooses between the two
leading answers shown with their results (CHASE-SQL's pairwise choice). That costs one call per
close question, so it runs only on the best few vote strategies (``--runoff-top``).

It also reports each variant's oracle: some candidate of the pool right once MageSQL's rules
have repaired it (the program repairs whichever candidate wins, so that is what selection can
reach). It is a guide for
choosing switches on a validation slice (``spider-train-val``), never a result: a choice is
confirmed by running the program on the slice we report.

    python experiments/selection_replay.py results/protocol/ensemble__five_nostop__spider-train-val__1.5b.jsonl --slice spider-train-val
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# Judge is imported from here by decide.py, fit_confidence.py, grounded_replay.py and
# intersect_replay.py: the replay itself lives in the library (sqlweave.programs.stages.replay).
from sqlweave.programs.stages.replay import (
    Judge,
    first_per_generator,
    judged,
    pick,
    repair_joins,
    replay_runoff,
    strategy_key,
    strategy_of,
)
from sqlweave.programs.stages.replay import replay_selections as replay

RESULTS = Path(__file__).resolve().parent / "results" / "ensemble"

__all__ = [
    "Judge",
    "first_per_generator",
    "judged",
    "pick",
    "repair_joins",
    "replay",
    "replay_runoff",
    "strategy_key",
    "strategy_of",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", type=Path, help="a run's JSONL with candidates on record")
    parser.add_argument("--slice", required=True, help="the slice the run asked (for databases)")
    parser.add_argument("--top", type=int, default=15, help="strategies to print")
    parser.add_argument(
        "--samples",
        default="",
        help="comma-separated candidates per generator to replay as well (e.g. 1,2)",
    )
    parser.add_argument(
        "--runoff",
        default="",
        help="comma-separated runoff thresholds to replay with the LM (e.g. 0.5,1)",
    )
    parser.add_argument("--runoff-top", type=int, default=3, help="vote strategies to runoff")
    parser.add_argument(
        "--repair", choices=("none", "joins"), default="none", help="repair failing candidates"
    )
    parser.add_argument("--model", default="local:qwen2.5-coder-1.5b")
    parser.add_argument("--n-threads", type=int, default=None)
    args = parser.parse_args()
    from sqlweave.data import load_slice
    from sqlweave.evaluate import read_records

    examples = {str(ex.question_id): ex for ex in load_slice(args.slice)}
    sizes = [None, *(int(k) for k in args.samples.split(",") if k)]
    records = read_records(args.records)
    if args.repair == "joins":
        records = repair_joins(records, examples)
    result = replay(records, examples, sizes)
    RESULTS.mkdir(parents=True, exist_ok=True)
    suffix = "" if args.repair == "none" else f".{args.repair}"
    out = RESULTS / (args.records.name.removesuffix(".jsonl") + f"{suffix}.replay.json")
    thresholds = [float(t) for t in args.runoff.split(",") if t]
    if thresholds:
        import sqlweave

        sqlweave.configure(args.model, **({"n_threads": args.n_threads} if args.n_threads else {}))
        votes = [k for k in result["ex"] if " | vote | " in k][: args.runoff_top]
        strategies = [strategy_of(k) for k in votes]
        runoff = replay_runoff(records, examples, strategies, thresholds)
        result["runoff"] = runoff
        for key, ex in runoff["ex"].items():
            print(f"| {key} | {ex:.1f} | asked {runoff['asked'][key]:.1f}% |")
    out.write_text(json.dumps({"records": args.records.name, **result}, indent=1) + "\n")
    print(f"n = {result['n']}")
    print("| strategy (generators | selection | greedy weight) | EX | oracle |\n|---|---|---|")
    for key, ex in list(result["ex"].items())[: args.top]:
        parts = key.split(" | ")
        pool_key = " | ".join([parts[0], parts[1], *parts[3:]])
        pool_key = pool_key.replace("across+", "").replace("across", "vote")
        print(f"| {key} | {ex:.1f} | {result['oracle'].get(pool_key, float('nan')):.1f} |")
    print(f"\nwritten {out}")


if __name__ == "__main__":
    main()
