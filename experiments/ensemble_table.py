"""What each paper's generator adds to the pool: the per-generator table of an ``ensemble`` run.

Reads the records of a run whose predictions carried every candidate with its origin and
execution class (``ensemble`` with ``early_stop=false``, so each generator was asked on every
question) and prints, per generator: the EX of its greedy query alone, of the execution vote over
its own candidates, its oracle (some candidate of its own right), and the questions only it has
a right candidate for; then the pool's oracle and the vote replayed over subsets of generators.

The replay groups candidates by the class the run recorded and weighs them as the vote would
(earliest member wins a tie); it skips the empty-result tie rule and the rules corrector, so it
is a guide for choosing on validation, not a result: a choice is confirmed by running it.

    python experiments/ensemble_table.py results/protocol/ensemble__nostop__spider-dev-200__1.5b.jsonl
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "ensemble"


def generator_of(candidate: dict[str, Any]) -> str:
    from sqlweave.programs.voting import origin_generator

    return origin_generator(candidate.get("origin"))


def replay_vote(
    candidates: Sequence[dict[str, Any]], weights: dict[str, float] | None = None
) -> bool:
    """Whether the weighted execution vote over ``candidates`` picks a right one (module doc)."""
    tally: dict[Any, float] = {}
    first: dict[Any, int] = {}
    right: dict[Any, bool] = {}
    for i, cand in enumerate(candidates):
        group = cand.get("group")
        if group is None:
            continue
        weight = 1.0 if weights is None else weights.get(generator_of(cand), 1.0)
        tally[group] = tally.get(group, 0.0) + weight
        first.setdefault(group, i)
        right.setdefault(group, bool(cand.get("correct")))
    if not tally:
        return bool(candidates and candidates[0].get("correct"))
    best = max(tally, key=lambda g: (round(tally[g], 9), -first[g]))
    return right[best]


def table(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-generator and pool figures (percent) of ``records`` (module doc)."""
    from sqlweave.evaluate import oracle_hit

    n = len(records)
    names = sorted({generator_of(c) for r in records for c in r.get("candidates") or []})
    rows: dict[str, dict[str, Any]] = {}
    holders = [
        {generator_of(c) for c in r.get("candidates") or [] if c.get("correct")} for r in records
    ]
    for name in names:
        own = [[c for c in r.get("candidates") or [] if generator_of(c) == name] for r in records]
        greedy = [
            next((c for c in cands if c["origin"].endswith(":greedy")), None) for cands in own
        ]
        rows[name] = {
            "greedy_ex": 100 * sum(bool(g and g.get("correct")) for g in greedy) / n,
            "vote_ex": 100 * sum(replay_vote(c) for c in own if c) / n,
            "oracle": 100 * sum(any(c.get("correct") for c in cands) for cands in own) / n,
            "only_it": sum(h == {name} for h in holders),
            "candidates_per_q": sum(len(c) for c in own) / n,
            "distinct_answers_per_q": sum(
                len({c.get("group") for c in cands if c.get("group") is not None}) for cands in own
            )
            / n,
        }
    subsets = {}
    for k in range(1, len(names) + 1):
        for subset in itertools.combinations(names, k):
            chosen = [
                [c for c in r.get("candidates") or [] if generator_of(c) in subset] for r in records
            ]
            subsets[",".join(subset)] = {
                "vote_ex": 100 * sum(replay_vote(c) for c in chosen if c) / n,
                "oracle": 100 * sum(any(c.get("correct") for c in cands) for cands in chosen) / n,
            }
    return {
        "n": n,
        "ex": 100 * sum(bool(r.get("correct")) for r in records) / n,
        "oracle": 100 * sum(oracle_hit(r) for r in records) / n,
        "generators": rows,
        "subsets": subsets,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"n = {result['n']}; the run's EX {result['ex']:.1f}, pool oracle {result['oracle']:.1f}",
        "",
        "| generator | greedy EX | own vote EX | own oracle | only it right | distinct answers/q |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in result["generators"].items():
        lines.append(
            f"| {name} | {row['greedy_ex']:.1f} | {row['vote_ex']:.1f} | {row['oracle']:.1f} "
            f"| {row['only_it']} | {row['distinct_answers_per_q']:.2f} |"
        )
    best = sorted(result["subsets"].items(), key=lambda kv: -kv[1]["vote_ex"])[:8]
    lines += ["", "| generators (vote replay) | vote EX | oracle |", "|---|---|---|"]
    lines += [f"| {name} | {row['vote_ex']:.1f} | {row['oracle']:.1f} |" for name, row in best]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", type=Path, help="a run's JSONL with candidates on record")
    args = parser.parse_args()
    from sqlweave.evaluate import read_records

    result = table(read_records(args.records))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / (args.records.name.removesuffix(".jsonl") + ".json")
    out.write_text(json.dumps({"records": args.records.name, **result}, indent=1) + "\n")
    print(markdown(result))
    print(f"\nwritten {out}")


if __name__ == "__main__":
    main()
