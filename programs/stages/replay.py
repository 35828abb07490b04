"""Selections replayed over a run's recorded candidates: choosing switches without asking the LM.

A run whose records carry every candidate with its origin (``"<generator>:greedy|sampled"``; an
``ensemble`` run with ``early_stop=false``, ``direct`` with ``samples``) holds everything a
selector sees except the LM. The functions here re-execute those candidates on the question's
database and replay what the programs' own stages would have chosen under other switches, each
answer scored against the gold query with the benchmark's semantics:

* :func:`replay_selections`: the execution vote, MageSQL's rules before it (``rules-first``) or
  after it, the ``across`` selector, over every subset of the run's generators, with the greedy
  candidate weighted 1 or 2, and fewer samples per generator (:func:`first_per_generator`);
* :func:`replay_runoff`: the ``runoff`` selector (this one asks the configured LM, on close votes);
* :func:`repair_joins` and :func:`repair_scopes`: the ``joins`` repair of failing candidates, and
  the program's ``repair_scope`` choices (``none``, ``all``, ``fallback``);
* :func:`generator_table`: what each generator adds to the pool (its greedy query, its own vote,
  its oracle, the questions only it gets right), from the classes the run recorded;
* :func:`representatives`: one SQL text per recorded result class, for scoring classes.

A replay is a guide for choosing on a validation slice (``spider-train-val``), never a result: a
choice is confirmed by running the program on the slice reported. The scripts of ``experiments/``
(``selection_replay.py``, ``repair_replay.py``, ``ensemble_table.py``, ...) run these over a run's
JSONL and write their tables.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

from tqdm import tqdm

from sqlweave.programs.stages.sampling import origin_generator, origin_is_greedy

#: The ``repair_scope`` choices :func:`repair_scopes` replays.
REPAIR_SCOPES = ("none", "all", "fallback")


class Judge:
    """Executes and scores SQL for one question, remembering every verdict by SQL text.

    ``example`` has ``db_path``, ``gold_sql`` and what :func:`sqlweave.metrics.semantics_for`
    reads (``source``, ``semantics``), as :func:`sqlweave.data.load_slice`'s examples do.
    """

    def __init__(self, example: Any, timeout_s: float = 10.0) -> None:
        from sqlweave.db import Database

        self.example = example
        self.db = Database.open(example.db_path)
        self.timeout_s = timeout_s
        self._correct: dict[str, bool] = {}
        self._fixed: dict[str, str] = {}

    def correct(self, sql: str) -> bool:
        """Whether ``sql`` matches the gold query's result (an empty text never does)."""
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
        """``sql`` after MageSQL's rules (:func:`sqlweave.programs.stages.rules.apply_rules`)."""
        from sqlweave.programs.stages.rules import apply_rules

        if sql not in self._fixed:
            try:
                self._fixed[sql] = apply_rules(sql, self.db).sql
            except Exception:  # noqa: BLE001 - a rule that breaks leaves the SQL as it was
                self._fixed[sql] = sql
        return self._fixed[sql]

    def select(
        self, sqls: Sequence[str], weights: Sequence[float], sources: Sequence[str] | None = None
    ) -> str:
        """The vote's winner; with ``sources`` (each candidate's generator), the ``across``
        selector's: the answer the most different generators hold."""
        from sqlweave.programs.stages.voting import AcrossSelector, vote

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
    """Each record with candidates and a known question (``examples`` by question id): its
    candidates, example and judge; a progress bar named ``desc``."""
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


def strategy_of(key: str) -> tuple[tuple[str, ...], int | None, float]:
    """``(generators, samples, greedy weight)`` of a replay key such as
    ``"dubo_v1,sea | vote | greedy=2 | samples=2"``."""
    parts = key.split(" | ")
    samples = next((int(p.split("=")[1]) for p in parts if p.startswith("samples=")), None)
    greedy = next(float(p.split("=")[1]) for p in parts if p.startswith("greedy="))
    return tuple(parts[0].split(",")), samples, greedy


def replay_selections(
    records: Sequence[dict[str, Any]],
    examples: dict[str, Any],
    samples: Sequence[int | None] = (None,),
) -> dict[str, Any]:
    """EX and oracle (percent) of every selection strategy over ``records`` (module doc); each
    question's example is ``examples[question_id]``. ``samples`` replays the pool as if each
    generator had drawn only that many (None: all recorded).

    Modes: ``vote`` (the execution vote, then MageSQL's rules on the winner), ``rules-first``
    (the rules on every candidate before the vote), ``across`` and ``across+rules-first``; each
    over every subset of the generators, greedy weight 1 and 2. ``{"n", "generators", "ex":
    {strategy_key: pct}, "oracle": {pool key: pct}}``, best first; the oracle is some candidate
    of the pool right once the rules repaired it."""
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
    :class:`~sqlweave.programs.stages.voting.PoolRepair`, scope ``all``); replaced candidates lose
    their recorded group (the replay re-executes them)."""
    from sqlweave.programs.stages.voting import PoolRepair, VoteTally

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


def repair_scopes(
    records: Sequence[dict[str, Any]],
    examples: dict[str, Any],
    subsets: Sequence[tuple[str, ...]],
) -> dict[str, dict[str, float]]:
    """The ``joins`` repair (:func:`repair_joins`) under each of :data:`REPAIR_SCOPES`, with the
    ``across`` selection (greedy weight 2, then MageSQL's rules on the winner): ``none``, the
    pool as drawn; ``all``, every failing candidate replaced by its repair where that runs;
    ``fallback``, the same only where no candidate runs. ``{"<subset> | <scope>": {"ex",
    "oracle", "n"}}`` (percent) for each generator subset and scope."""
    from sqlweave.db import ExecutionError

    mended = {str(r["question_id"]): r for r in repair_joins(records, examples)}
    tally: dict[str, list[int]] = {}
    for record in records:
        qid = str(record["question_id"])
        example = examples.get(qid)
        if example is None or qid not in mended or not record.get("candidates"):
            continue
        judge = Judge(example)
        for subset in subsets:
            drawn, weights = pick(record["candidates"], None, subset, 2.0)
            fixed, fixed_w = pick(mended[qid]["candidates"], None, subset, 2.0)
            if not drawn:
                continue
            runs = any(
                not isinstance(judge.db.try_execute(c["sql"]), ExecutionError) for c in drawn
            )
            for scope in REPAIR_SCOPES:
                repaired = scope == "all" or (scope == "fallback" and not runs)
                pool, w = (fixed, fixed_w) if repaired else (drawn, weights)
                sources = [origin_generator(c["origin"]) for c in pool]
                winner = judge.fixed(judge.select([c["sql"] for c in pool], w, sources))
                row = tally.setdefault(f"{','.join(subset)} | {scope}", [0, 0, 0])
                row[0] += judge.correct(winner)
                row[1] += any(judge.correct(judge.fixed(c["sql"])) for c in pool)
                row[2] += 1
    return {
        key: {"ex": round(100 * h / n, 1), "oracle": round(100 * o / n, 1), "n": n}
        for key, (h, o, n) in tally.items()
    }


def replay_runoff(
    records: Sequence[dict[str, Any]],
    examples: dict[str, Any],
    strategies: Sequence[tuple[tuple[str, ...], int | None, float]],
    thresholds: Sequence[float],
) -> dict[str, Any]:
    """EX (percent) of the ``runoff`` selector (then MageSQL's rules on the winner, as the program
    does) for each strategy (:func:`strategy_of`) and threshold, and how often it asked the LM;
    needs a configured LM. The LM sees the first generator's schema, as in the ``ensemble``
    program."""
    from sqlweave.programs.stages import generators as generator_registry
    from sqlweave.programs.stages.selection import RunoffSelector

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


# --- what each generator adds to the pool (from the recorded classes, nothing re-executed) -----


def _generator(candidate: dict[str, Any]) -> str:
    return origin_generator(candidate.get("origin"))


def replay_vote(
    candidates: Sequence[dict[str, Any]], weights: dict[str, float] | None = None
) -> bool:
    """Whether the weighted execution vote over ``candidates`` picks a right one: candidates
    grouped by the class the run recorded (``group``; None for a failed one, which joins no
    class), each weighing its generator's entry of ``weights`` (default 1), the earliest member
    winning a tie. It skips the empty-result tie rule and the rules corrector: a guide, not a
    result. With no class, the first candidate's verdict."""
    tally: dict[Any, float] = {}
    first: dict[Any, int] = {}
    right: dict[Any, bool] = {}
    for i, cand in enumerate(candidates):
        group = cand.get("group")
        if group is None:
            continue
        weight = 1.0 if weights is None else weights.get(_generator(cand), 1.0)
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
    later run raise KeyError: the runs must cover the same questions."""
    merged = []
    later = [{str(r["question_id"]): r for r in run} for run in runs[1:]]
    for record in runs[0]:
        qid = str(record["question_id"])
        cands: list[dict[str, Any]] = []
        seen: set[str] = set()
        for i, rec in enumerate([record, *(run[qid] for run in later)]):
            mine = [c for c in rec.get("candidates") or [] if _generator(c) not in seen]
            for cand in mine:
                group = cand.get("group")
                cands.append({**cand, "group": None if group is None else f"{i}:{group}"})
            seen |= {_generator(c) for c in rec.get("candidates") or []}
        oracle = any(c.get("correct") for c in cands)
        merged.append({**record, "candidates": cands, "oracle": oracle})
    return merged


def generator_table(records: Sequence[dict[str, Any]], subsets: bool = True) -> dict[str, Any]:
    """Per generator of the pool (percent of ``records``, each candidate with ``origin``,
    ``group`` and ``correct``): the EX of its greedy query alone (``greedy_ex``), of
    :func:`replay_vote` over its own candidates (``vote_ex``), its ``oracle``, the questions only
    it has a right candidate for (``only_it``), candidates and distinct answers per question;
    then the run's EX, the pool's oracle and the vote replayed over every subset of generators
    (``subsets=False`` leaves that out, as for :func:`merge_runs`' records)."""
    from sqlweave.evaluate import oracle_hit

    n = len(records)
    names = sorted({_generator(c) for r in records for c in r.get("candidates") or []})
    rows: dict[str, dict[str, Any]] = {}
    holders = [
        {_generator(c) for c in r.get("candidates") or [] if c.get("correct")} for r in records
    ]
    for name in names:
        own = [[c for c in r.get("candidates") or [] if _generator(c) == name] for r in records]
        greedy = [
            next((c for c in cands if origin_is_greedy(c.get("origin"))), None) for cands in own
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
    replayed = {}
    for k in range(1, len(names) + 1 if subsets else 1):
        for subset in itertools.combinations(names, k):
            chosen = [
                [c for c in r.get("candidates") or [] if _generator(c) in subset] for r in records
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


def generator_table_markdown(result: dict[str, Any]) -> str:
    """:func:`generator_table`'s result as Markdown: one row per generator, then the eight best
    subsets of the vote replay (when it was made)."""
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


# --- one text per result class ------------------------------------------------------------------


def distinct_texts(candidates: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each distinct non-empty SQL text of a record's candidates once, with its recorded
    ``group``, its verdict (``correct``) and the ``origins`` that wrote it."""
    texts: dict[str, dict[str, Any]] = {}
    for cand in candidates:
        sql = (cand.get("sql") or "").strip()
        if not sql:
            continue
        entry = texts.setdefault(
            sql,
            {"sql": sql, "group": cand.get("group"), "correct": bool(cand.get("correct"))},
        )
        entry.setdefault("origins", []).append(cand.get("origin"))
    return list(texts.values())


def representatives(texts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One text of :func:`distinct_texts` per result class, the one most candidates wrote (the
    first of ties): the class's voice when classes are scored. Texts of no class (failed) are
    left out. Scoring every distinct text instead costs ~3x more (7 texts, 2.4 classes per
    question on spider-dev-200) for the same choice between classes."""
    best: dict[Any, dict[str, Any]] = {}
    for entry in texts:
        group = entry.get("group")
        if group is None:
            continue
        if group not in best or len(entry["origins"]) > len(best[group]["origins"]):
            best[group] = entry
    return list(best.values())


__all__ = [
    "REPAIR_SCOPES",
    "Judge",
    "distinct_texts",
    "first_per_generator",
    "generator_table",
    "generator_table_markdown",
    "judged",
    "merge_runs",
    "pick",
    "repair_joins",
    "repair_scopes",
    "replay_runoff",
    "replay_selections",
    "replay_vote",
    "representatives",
    "strategy_key",
    "strategy_of",
]
