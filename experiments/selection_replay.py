"""Selection strategies replayed over a run's recorded candidates, for choosing on validation.

A run whose records carry every candidate with its origin (``ensemble`` with ``early_stop=false``)
holds everything a selector sees except the LM. This script re-executes each candidate on the
question's database and replays, without any LM call, the selections the ``ensemble`` program can
be switched to, each scored against the gold query with the benchmark's semantics:

* ``vote``: the execution vote (:func:`sqlweave.programs.voting.vote`, its tie rules included),
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
import itertools
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from sqlweave.programs.voting import origin_generator, origin_is_greedy

RESULTS = Path(__file__).resolve().parent / "results" / "ensemble"


class Judge:
    """Executes and scores SQL for one question, remembering every verdict by SQL text."""

    def __init__(self, example: Any, timeout_s: float = 10.0) -> None:
        from sqlweave.db import Database

        self.example = example
        self.db = Database.open(example.db_path)
        self.timeout_s = timeout_s
        self._correct: dict[str, bool] = {}
        self._fixed: dict[str, str] = {}

    def correct(self, sql: str) -> bool:
        from sqlweave.metrics import check_execution, semantics_for

        if sql not in self._correct:
            ex = self.example
            self._correct[sql] = bool(
                sql.strip()
                and check_execution(
                    sql, ex.gold_sql, self.db, semantics_for(ex), timeout_s=self.timeout_s
                ).correct
            )
        return self._correct[sql]

    def fixed(self, sql: str) -> str:
        from sqlweave.programs.rules import apply_rules

        if sql not in self._fixed:
            try:
                self._fixed[sql] = apply_rules(sql, self.db).sql
            except Exception:  # noqa: BLE001 - a rule that breaks leaves the SQL as it was
                self._fixed[sql] = sql
        return self._fixed[sql]

    def select(
        self, sqls: Sequence[str], weights: Sequence[float], sources: Sequence[str] | None = None
    ) -> str:
        """The vote's winner; with ``sources``, the ``across`` selector's (module doc)."""
        from sqlweave.programs.voting import AcrossSelector, vote

        if sources is None:
            return vote(list(sqls), self.db, list(weights), timeout_s=self.timeout_s).sql
        across = AcrossSelector(timeout_s=self.timeout_s)
        return across(candidates=list(sqls), db=self.db, weights=list(weights), sources=sources).sql


def first_per_generator(
    candidates: Sequence[dict[str, Any]], k: int | None
) -> list[dict[str, Any]]:
    """The first ``k`` candidates of each generator (greedy first, as drawn): what the program
    with ``samples=k`` would have drawn; all of them when ``k`` is None."""
    if k is None:
        return list(candidates)
    seen: dict[str, int] = {}
    kept = []
    for cand in candidates:
        name = origin_generator(cand.get("origin"))
        seen[name] = seen.get(name, 0) + 1
        if seen[name] <= k:
            kept.append(cand)
    return kept


def judged(
    records: Sequence[dict[str, Any]], examples: dict[str, Any], desc: str
) -> Iterator[tuple[list[dict[str, Any]], Any, Judge]]:
    """Each record with candidates and a known question: its candidates, example and judge."""
    for record in tqdm(records, desc=desc, unit="q"):
        cands = record.get("candidates") or []
        example = examples.get(str(record["question_id"]))
        if cands and example is not None:
            yield cands, example, Judge(example)


def pick(
    cands: Sequence[dict[str, Any]], k: int | None, subset: Sequence[str], greedy_w: float
) -> tuple[list[dict[str, Any]], list[float]]:
    """The candidates a program asking ``subset`` for ``k`` each would have drawn, and their
    vote weights (``greedy_w`` for each generator's greedy candidate)."""
    chosen = [
        c for c in first_per_generator(cands, k) if origin_generator(c.get("origin")) in subset
    ]
    weights = [greedy_w if origin_is_greedy(c.get("origin")) else 1.0 for c in chosen]
    return chosen, weights


def strategy_key(subset: Sequence[str], mode: str, greedy_w: float | None, k: int | None) -> str:
    """A strategy's name in the replay's tables, e.g. ``"dubo_v1,sea | vote | greedy=2 |
    samples=2"`` (:func:`strategy_of` reads it back); ``greedy_w=None`` names the pool, whose
    oracle no weight changes (``"dubo_v1,sea | vote | samples=2"``)."""
    weight = "" if greedy_w is None else f" | greedy={greedy_w:g}"
    size = "" if k is None else f" | samples={k}"
    return f"{','.join(subset)} | {mode}{weight}{size}"


def replay(
    records: Sequence[dict[str, Any]],
    examples: dict[str, Any],
    samples: Sequence[int | None] = (None,),
) -> dict[str, Any]:
    """EX and oracle (percent) of every strategy (module doc) over ``records``; ``samples``
    replays the pool as if each generator had drawn only that many (None: all recorded)."""
    names = sorted(
        {origin_generator(c.get("origin")) for r in records for c in r.get("candidates") or []}
    )
    subsets = [s for k in range(1, len(names) + 1) for s in itertools.combinations(names, k)]
    hits: dict[str, int] = {}
    oracle: dict[str, int] = {}
    n = 0
    for cands, _example, judge in judged(records, examples, "replay"):
        n += 1
        modes = ("vote", "rules-first", "across", "across+rules-first")
        for k, subset, mode, greedy_w in itertools.product(samples, subsets, modes, (1.0, 2.0)):
            chosen, weights = pick(cands, k, subset, greedy_w)
            if not chosen:
                continue
            first = mode.endswith("rules-first")
            sqls = [judge.fixed(c["sql"]) if first else c["sql"] for c in chosen]
            sources = [origin_generator(c.get("origin")) for c in chosen]
            across = sources if mode.startswith("across") else None
            winner = judge.fixed(judge.select(sqls, weights, across))
            key = strategy_key(subset, mode, greedy_w, k)
            hits[key] = hits.get(key, 0) + judge.correct(winner)
            if greedy_w == 1.0 and not mode.startswith("across"):
                pool_key = strategy_key(subset, mode, None, k)
                oracle[pool_key] = oracle.get(pool_key, 0) + any(
                    judge.correct(judge.fixed(s)) for s in sqls
                )
    pct = lambda v: round(100 * v / max(n, 1), 1)  # noqa: E731
    return {
        "n": n,
        "generators": names,
        "ex": {k: pct(v) for k, v in sorted(hits.items(), key=lambda kv: -kv[1])},
        "oracle": {k: pct(v) for k, v in sorted(oracle.items(), key=lambda kv: -kv[1])},
    }


def repair_joins(
    records: Sequence[dict[str, Any]], examples: dict[str, Any]
) -> list[dict[str, Any]]:
    """``records`` as the ``ensemble`` program with ``repair=joins`` would have drawn them: each
    candidate that fails to run is given the joins its stray columns need and, where that runs,
    replaced, its origin marked ``:repaired`` (the program's own
    :class:`~sqlweave.programs.voting.PoolRepair`, scope ``all``); replaced candidates lose
    their recorded group (the replay re-executes them)."""
    from sqlweave.programs.voting import PoolRepair, VoteTally

    repair = PoolRepair("joins", scope="all")
    by_id = {str(r["question_id"]): r for r in records}
    out = []
    for cands, example, judge in judged(records, examples, "joins"):
        sqls = [c["sql"] for c in cands]
        origins = [f"{c.get('origin')}" for c in cands]
        repair(
            sqls,
            origins,
            VoteTally(judge.db).outcome,
            {"db": judge.db, "question": example.question},
        )
        mended = [
            cand if sql == cand["sql"] else {**cand, "sql": sql, "origin": origin, "group": None}
            for cand, sql, origin in zip(cands, sqls, origins, strict=True)
        ]
        out.append({**by_id[str(example.question_id)], "candidates": mended})
    return out


def strategy_of(key: str) -> tuple[tuple[str, ...], int | None, float]:
    """``(generators, samples, greedy weight)`` of a replay key such as
    ``"dubo_v1,sea | vote | greedy=2 | samples=2"``."""
    parts = key.split(" | ")
    samples = next((int(p.split("=")[1]) for p in parts if p.startswith("samples=")), None)
    greedy = next(float(p.split("=")[1]) for p in parts if p.startswith("greedy="))
    return tuple(parts[0].split(",")), samples, greedy


def replay_runoff(
    records: Sequence[dict[str, Any]],
    examples: dict[str, Any],
    strategies: Sequence[tuple[tuple[str, ...], int | None, float]],
    thresholds: Sequence[float],
) -> dict[str, Any]:
    """EX (percent) of the ``runoff`` selector (then MageSQL's rules on the winner, as the program
    does) for each strategy and threshold, and how often it asked the LM; needs a configured LM.
    The LM sees the first generator's schema, as in the ``ensemble`` program."""
    from sqlweave.programs import generators as generator_registry
    from sqlweave.programs.selection import RunoffSelector

    built: dict[str, Any] = {}
    selectors = {t: RunoffSelector(threshold=t) for t in thresholds}
    hits: dict[str, int] = {}
    asked: dict[str, int] = {}
    n = 0
    for cands, example, judge in judged(records, examples, "runoff"):
        n += 1
        question = example.question
        evidence = getattr(example, "evidence", "") or ""
        for subset, k, greedy_w in strategies:
            chosen, weights = pick(cands, k, subset, greedy_w)
            if not chosen:
                continue
            first = next(origin_generator(c.get("origin")) for c in chosen)
            if first not in built:
                built[first] = generator_registry.build(first)
            generator = built[first]
            schema = generator.prompt(question=question, db=judge.db, evidence=evidence).schema
            sqls = [c["sql"] for c in chosen]
            for threshold, selector in selectors.items():
                key = strategy_key(subset, f"runoff={threshold:g}", greedy_w, k)
                if len(sqls) > 1:
                    out = selector(
                        candidates=sqls,
                        db=judge.db,
                        question=question,
                        evidence=evidence,
                        db_schema=schema,
                        weights=weights,
                    )
                    sql, called = out.sql, bool(out.lm_called)
                else:
                    sql, called = sqls[0], False
                hits[key] = hits.get(key, 0) + judge.correct(judge.fixed(sql))
                asked[key] = asked.get(key, 0) + called
    pct = lambda v: round(100 * v / max(n, 1), 1)  # noqa: E731
    return {
        "n": n,
        "ex": {k: pct(v) for k, v in sorted(hits.items(), key=lambda kv: -kv[1])},
        "asked": {k: pct(v) for k, v in asked.items()},
    }


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
