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

Several runs on the same questions (each asking some generators) give one table over all their
generators: ``ensemble_table.py RUN_A.jsonl RUN_B.jsonl`` (:func:`merge_runs`). Its per-generator
rows, "only it right" and pool oracle are exact; the vote replay over subsets is left out, since
the runs' result classes cannot be compared.
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


def is_greedy(candidate: dict[str, Any]) -> bool:
    from sqlweave.programs.voting import origin_is_greedy

    return origin_is_greedy(candidate.get("origin"))


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


def merge_runs(runs: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The first run's records, each with the candidates of every generator a later run asked
    that no earlier run did (a generator asked twice is taken from the earliest run). A result
    class is only comparable within its run, so each candidate's ``group`` becomes
    ``"<run>:<group>"``; ``oracle`` is recomputed over the joined pool. Questions missing from a
    later run raise: the runs must cover the same questions."""
    merged = []
    later = [{str(r["question_id"]): r for r in run} for run in runs[1:]]
    for record in runs[0]:
        qid = str(record["question_id"])
        cands: list[dict[str, Any]] = []
        seen: set[str] = set()
        for i, rec in enumerate([record, *(run[qid] for run in later)]):
            mine = [c for c in rec.get("candidates") or [] if generator_of(c) not in seen]
            for cand in mine:
                group = cand.get("group")
                cands.append({**cand, "group": None if group is None else f"{i}:{group}"})
            seen |= {generator_of(c) for c in rec.get("candidates") or []}
        oracle = any(c.get("correct") for c in cands)
        merged.append({**record, "candidates": cands, "oracle": oracle})
    return merged


def table(records: Sequence[dict[str, Any]], subsets: bool = True) -> dict[str, Any]:
    """Per-generator and pool figures (percent) of ``records`` (module doc); ``subsets=False``
    leaves out the vote replay over generator subsets (merged runs)."""
    from sqlweave.evaluate import oracle_hit

    n = len(records)
    names = sorted({generator_of(c) for r in records for c in r.get("candidates") or []})
    rows: dict[str, dict[str, Any]] = {}
    holders = [
        {generator_of(c) for c in r.get("candidates") or [] if c.get("correct")} for r in records
    ]
    for name in names:
        own = [[c for c in r.get("candidates") or [] if generator_of(c) == name] for r in records]
        greedy = [next((c for c in cands if is_greedy(c)), None) for cands in own]
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
    replayed = {}
    for k in range(1, len(names) + 1 if subsets else 1):
        for subset in itertools.combinations(names, k):
            chosen = [
                [c for c in r.get("candidates") or [] if generator_of(c) in subset] for r in records
            ]
            replayed[",".join(subset)] = {
                "vote_ex": 100 * sum(replay_vote(c) for c in chosen if c) / n,
                "oracle": 100 * sum(any(c.get("correct") for c in cands) for cands in chosen) / n,
            }
    return {
        "n": n,
        "ex": 100 * sum(bool(r.get("correct")) for r in records) / n,
        "oracle": 100 * sum(oracle_hit(r) for r in records) / n,
        "generators": rows,
        "subsets": replayed,
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
    if not best:
        return "\n".join(lines)
    lines += ["", "| generators (vote replay) | vote EX | oracle |", "|---|---|---|"]
    lines += [f"| {name} | {row['vote_ex']:.1f} | {row['oracle']:.1f} |" for name, row in best]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "records", type=Path, nargs="+", help="a run's JSONL with candidates on record (or more)"
    )
    args = parser.parse_args()
    from sqlweave.evaluate import read_records

    runs = [read_records(path) for path in args.records]
    if len(runs) == 1:
        result = table(runs[0])
    else:
        result = table(merge_runs(runs), subsets=False)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stems = [path.name.removesuffix(".jsonl") for path in args.records]
    out = RESULTS / ("+".join(stems) + ".json")
    names = [path.name for path in args.records]
    out.write_text(json.dumps({"records": " ".join(names), **result}, indent=1) + "\n")
    print(markdown(result))
    print(f"\nwritten {out}")


if __name__ == "__main__":
    main()
