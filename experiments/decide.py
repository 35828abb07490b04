"""Rule 16 of docs/decisions.md: today's parts re-decided on the decision set, by replay.

A ``direct`` run with ``samples=8`` and ``repair=joins`` (scope ``all``) records every candidate,
a repaired one marked ``:repaired``. That pool holds what the program sees under each repair
scope (``all`` as recorded; ``none`` without the repaired candidates, each of which replaced one
that failed to run; ``fallback``: ``all`` only where no unrepaired candidate runs). For every
question and scope this script replays, without an LM call, each selector the rule compares
(``vote``, ``grounded``), each followed by each corrector (``rules``, ``rules_intersect``), and
keeps each execution class's features (:func:`sqlweave.programs.stages.reranker.class_features` plus
the ``ground`` group of :func:`ground_features`) with its verdict after each corrector, so the
fitted selector can be scored out of fold (five folds by database) afterwards.

    python experiments/decide.py table RUN.jsonl --slice spider-train-select --limit 1000
    python experiments/decide.py rule16 --p07 P07.table.jsonl --p10 P10.table.jsonl
    python experiments/decide.py rule18 --p07 P07.table.jsonl --w W.table.jsonl \
        --p10 P10.table.jsonl [--union UNION.table.jsonl]
    python experiments/decide.py union P07.jsonl W.jsonl --slice spider-train-select --limit 1000

``table`` writes ``experiments/results/decisions/<run>.table.jsonl`` (one line a question,
resumable), gzipped when done (``.table.jsonl.gz``, what is committed); ``rule16`` prints each step's comparison and writes ``rule16.json`` beside it; ``rule18``
(a wider pool W against P0.7, both with rule 16's selection) writes ``rule18.json``; ``union``
pools two runs' candidates question by question (a records file ``table`` can read) so the
union's oracle and selection are replayed exactly, not guessed from the two pools' figures.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from fit_reranker import fit
from grounded_replay import corrected
from selection_replay import Judge
from tqdm import tqdm

from sqlweave.data import load_slice
from sqlweave.evaluate import read_records
from sqlweave.programs.stages.grounding import GroundedSelector, ValueLookup, is_grounded
from sqlweave.programs.stages.reranker import class_features, score
from sqlweave.programs.stages.sampling import origin_generator
from sqlweave.programs.stages.voting import ExecutionGroup, execution_groups, ranked_groups
from sqlweave.stats import bootstrap_ci, paired

RESULTS = Path(__file__).resolve().parent / "results" / "decisions"
SCOPES = ("none", "fallback", "all")
CORRECTORS = {"rules": False, "rules_intersect": True}
#: The feature groups rule 16 fixes for the fitted selector (``ground`` is new; the others are
#: what issue 37's second round chose on the same slice) and its L2 penalty.
FITTED_GROUPS = ("vote", "result", "soft", "align", "ground")
FITTED_L2 = 1.0


def ground_features(
    sqls: Sequence[str], groups: Sequence[ExecutionGroup], lookup: ValueLookup
) -> list[dict[str, float]]:
    """Per class: ``ground_ok`` (its first member's string values are stored in the database,
    :func:`~sqlweave.programs.stages.grounding.is_grounded`) and ``ground_share`` (its share of the
    grounded members of all classes; 0 when no member of any class is grounded)."""
    grounded = {i: is_grounded(sqls[i], lookup) for g in groups for i in g.members}
    total = sum(grounded.values())
    return [
        {
            "ground_ok": float(grounded[g.first]),
            "ground_share": sum(grounded[i] for i in g.members) / total if total else 0.0,
        }
        for g in groups
    ]


def scoped(cands: Sequence[dict[str, Any]], scope: str, judge: Judge) -> list[dict[str, Any]]:
    """The candidates the program would have seen with ``repair_scope=scope`` (module doc)."""
    from sqlweave.db import ExecutionError

    kept = [c for c in cands if not str(c.get("origin") or "").endswith(":repaired")]
    if scope == "all" or len(kept) == len(cands):
        return list(cands)
    if scope == "none":
        return kept
    runs = any(not isinstance(judge.db.try_execute(c["sql"]), ExecutionError) for c in kept)
    return kept if runs else list(cands)


def question_row(record: dict[str, Any], example: Any) -> dict[str, Any]:
    """One question's verdicts under every scope, selector and corrector, and its classes."""
    judge = Judge(example)
    lookup = ValueLookup(judge.db)
    question = example.question
    row: dict[str, Any] = {"question_id": str(record["question_id"]), "db_id": record["db_id"]}
    memo: dict[tuple[str, ...], dict[str, Any]] = {}
    for scope in SCOPES:
        cands = scoped(record["candidates"], scope, judge)
        key = tuple(c["sql"] for c in cands)
        if key not in memo:
            origins = [str(c.get("origin") or "") for c in cands]
            memo[key] = _replay(list(key), question, judge, lookup, origins)
        row[scope] = memo[key]
    judge.db.close()
    return row


def origin_features(
    origins: Sequence[str], groups: Sequence[ExecutionGroup]
) -> list[dict[str, float]]:
    """Per class (rule 18a): ``origin_share``, the share of the pool's generators (an origin's
    part before ``:``, e.g. ``direct`` or ``dubo_v1``) among its members, and ``origin_greedy``,
    its share of the pool's greedy candidates. Two programs reading different evidence that
    agree on a result is evidence a single program's vote cannot give."""
    gens = {o.split(":")[0] for o in origins}
    greedy = [":greedy" in o for o in origins]
    n_greedy = sum(greedy)
    return [
        {
            "origin_share": len({origins[i].split(":")[0] for i in g.members}) / len(gens),
            "origin_greedy": sum(greedy[i] for i in g.members) / n_greedy if n_greedy else 0.0,
        }
        for g in groups
    ]


def _replay(
    sqls: list[str], question: str, judge: Judge, lookup: ValueLookup, origins: Sequence[str]
) -> dict[str, Any]:
    if not sqls:  # scope none, every candidate repaired: none of the originals ran
        wrong = {f"{s}|{c}": False for s in ("vote", "grounded", "oracle") for c in CORRECTORS}
        return {"n": 0, **wrong, "classes": []}
    verdict = {name: lambda sql, i=i: judge.correct(corrected(judge, sql, question, i))
               for name, i in CORRECTORS.items()}  # fmt: skip
    out: dict[str, Any] = {"n": len(sqls)}
    voted = judge.select(sqls, [1.0] * len(sqls))
    grounded = GroundedSelector()(candidates=sqls, db=judge.db, question=question).sql
    for corrector, right in verdict.items():
        out[f"vote|{corrector}"] = right(voted)
        out[f"grounded|{corrector}"] = right(grounded)
        out[f"oracle|{corrector}"] = any(right(s) for s in dict.fromkeys(sqls))
    groups, _ = execution_groups(sqls, judge.db, timeout_s=judge.timeout_s)
    classes = []
    if groups:
        order = {id(g): i for i, g in enumerate(ranked_groups(groups))}
        feats = class_features(question, sqls, groups)
        grounds = ground_features(sqls, groups, lookup)
        for g, f, gf, of in zip(
            groups, feats, grounds, origin_features(origins, groups), strict=True
        ):
            rep = sqls[g.first]
            classes.append(
                {
                    "features": {**f, **gf, **of},
                    "vote_rank": order[id(g)],
                    **{f"correct|{c}": right(rep) for c, right in verdict.items()},
                }
            )
    out["classes"] = classes
    return out


def compress(path: Path) -> Path:
    """``path`` gzipped beside itself (what is committed: the tables are large), then removed."""
    packed = path.with_name(path.name + ".gz")
    with path.open("rb") as src, gzip.open(packed, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()
    return packed


def table_path(run: Path) -> Path:
    """Where ``table`` writes ``run``'s table: ``RESULTS/<run>.table.jsonl``, the same for a
    gzipped run (what is committed) as for the plain one it was packed from."""
    return RESULTS / run.name.removesuffix(".gz").replace(".jsonl", ".table.jsonl")


def cmd_table(args: argparse.Namespace) -> None:
    run = Path(args.run)
    examples = {str(ex.question_id): ex for ex in load_slice(args.slice)}
    records = [r for r in read_records(run) if r.get("candidates")]
    if args.limit:
        order = [str(ex.question_id) for ex in load_slice(args.slice)][: args.limit]
        wanted = set(order)
        records = [r for r in records if str(r["question_id"]) in wanted]
    out = table_path(run)
    out.parent.mkdir(parents=True, exist_ok=True)
    packed = out.with_name(out.name + ".gz")
    if packed.exists() and not out.exists():  # a finished table: resume from its rows
        out.write_text("".join(json.dumps(r) + "\n" for r in read_records(packed)))
    done = {r["question_id"] for r in read_records(out)} if out.exists() else set()
    with out.open("a", encoding="utf-8") as handle:
        for record in tqdm(records, desc="table", unit="q"):
            qid = str(record["question_id"])
            if qid in done or record.get("gold_error"):
                continue
            handle.write(json.dumps(question_row(record, examples[qid])) + "\n")
            handle.flush()
    print(f"wrote {compress(out)}")


# --- the rule's steps -------------------------------------------------------------------------


def verdicts(table: Sequence[dict[str, Any]], scope: str, key: str) -> dict[str, bool]:
    return {r["question_id"]: bool(r[scope][key]) for r in table}


def _oracles(table: Sequence[dict[str, Any]], corrector: str) -> dict[str, float]:
    """Each scope's oracle EX (a right candidate in the pool, after ``corrector``)."""
    return {s: round(100 * float(np.mean([r[s][f"oracle|{corrector}"] for r in table])), 1)
            for s in SCOPES}  # fmt: skip


def folds_by_db(table: Sequence[dict[str, Any]], k: int = 5) -> dict[str, int]:
    """Five folds by database, databases shuffled with seed 0 (``fit_reranker.cross_validate``)."""
    dbs = sorted({r["db_id"] for r in table})
    random.Random(0).shuffle(dbs)
    return {db: i % k for i, db in enumerate(dbs)}


def _fit_rows(table: Sequence[dict[str, Any]], scope: str, corrector: str) -> list[dict]:
    return [
        {
            "question_id": r["question_id"],
            "db_id": r["db_id"],
            "classes": [
                {"features": c["features"], "correct": c[f"correct|{corrector}"]}
                for c in r[scope]["classes"]
            ],
        }
        for r in table
    ]


def _drop(rows: Sequence[dict[str, Any]], groups: Sequence[str]) -> list[str]:
    from fit_reranker import group_of

    names = {n for row in rows for c in row["classes"] for n in c["features"]}
    return sorted(n for n in names if _group(n, group_of) not in groups)


def _group(name: str, group_of: Any) -> str:
    for prefix in ("ground", "origin"):
        if name.startswith(prefix + "_"):
            return prefix
    return group_of(name)


def fitted_choice(row: Mapping[str, Any], weights: Mapping[str, float], corrector: str) -> bool:
    """Whether the best-scoring class (the vote's order breaking ties) is right; a question
    with no class that runs keeps the vote's verdict."""
    classes = sorted(row["classes"], key=lambda c: c["vote_rank"])
    if not classes:
        return bool(row[f"vote|{corrector}"])
    best = max(classes, key=lambda c: score(c["features"], weights))
    return bool(best[f"correct|{corrector}"])


def out_of_fold(
    table: Sequence[dict[str, Any]],
    scope: str,
    corrector: str,
    groups: Sequence[str] = FITTED_GROUPS,
) -> tuple[dict[str, bool], dict[str, float]]:
    """The fitted selector's verdicts out of fold, and the weights fitted on the whole table."""
    rows = _fit_rows(table, scope, corrector)
    drop = _drop(rows, groups)
    fold = folds_by_db(table)
    got: dict[str, bool] = {}
    for k in range(5):
        weights = fit([r for r in rows if fold[r["db_id"]] != k], FITTED_L2, drop)
        for r in table:
            if fold[r["db_id"]] == k:
                got[r["question_id"]] = fitted_choice(r[scope], weights, corrector)
    return got, fit(rows, FITTED_L2, drop)


def _line(name: str, a: dict[str, bool], b: dict[str, bool], label_b: str) -> dict[str, Any]:
    cmp = paired(a, b)
    ci = bootstrap_ci(list(a.values()))
    text = (
        f"{name}: {ci} vs {label_b} {100 * cmp.ex_b:.1f}; "
        f"{100 * cmp.delta:+.1f} [{100 * cmp.diff.low:.1f}, {100 * cmp.diff.high:.1f}] "
        f"p={cmp.p_value:.3g} ({cmp.only_a} vs {cmp.only_b})"
    )
    print("  " + text)
    return {
        "name": name,
        "against": label_b,
        "n": cmp.n,
        "ex": round(100 * cmp.ex_a, 1),
        "interval": [round(100 * ci.low, 1), round(100 * ci.high, 1)],
        "ex_against": round(100 * cmp.ex_b, 1),
        "delta": round(100 * cmp.delta, 1),
        "delta_interval": [round(100 * cmp.diff.low, 1), round(100 * cmp.diff.high, 1)],
        "p_value": cmp.p_value,
        "gained": cmp.only_a,
        "lost": cmp.only_b,
    }


def ahead(line: dict[str, Any]) -> bool:
    """The rule's threshold: ahead, with McNemar p < 0.05."""
    return line["delta"] > 0 and line["p_value"] < 0.05


def selection_steps(pool: list[dict[str, Any]], temp: str, steps: dict[str, Any]) -> dict:
    """Steps 2-5 of rule 16 on one pool (module doc); fills ``steps``, returns the verdicts of
    the adopted design and its switches."""
    print(f"2. repair scope (T={temp}, vote, rules)")
    none = verdicts(pool, "none", "vote|rules")
    lines = {
        s: _line(s, verdicts(pool, s, "vote|rules"), none, "none") for s in ("fallback", "all")
    }
    scope = "none"
    if ahead(lines["fallback"]) and ahead(lines["all"]):
        lines["all_vs_fallback"] = _line("all", verdicts(pool, "all", "vote|rules"),
                                         verdicts(pool, "fallback", "vote|rules"), "fallback")  # fmt: skip
        scope = "all" if ahead(lines["all_vs_fallback"]) else "fallback"
    elif ahead(lines["fallback"]) or ahead(lines["all"]):
        scope = "fallback" if ahead(lines["fallback"]) else "all"
    steps["repair_scope"] = {"lines": lines, "adopted": scope}

    print(f"3. corrector (T={temp}, {scope}, vote)")
    c = _line("rules_intersect", verdicts(pool, scope, "vote|rules_intersect"),
              verdicts(pool, scope, "vote|rules"), "rules")  # fmt: skip
    corrector = "rules_intersect" if ahead(c) else "rules"
    steps["corrector"] = {"line": c, "adopted": corrector}

    print(f"4. grounded filter (T={temp}, {scope}, {corrector})")
    g = _line("grounded", verdicts(pool, scope, f"grounded|{corrector}"),
              verdicts(pool, scope, f"vote|{corrector}"), "vote")  # fmt: skip
    selector = "grounded" if ahead(g) else "vote"
    steps["selector"] = {"line": g, "adopted": selector}
    chosen = verdicts(pool, scope, f"{selector}|{corrector}")

    print(f"5. fitted selector, out of fold (T={temp}, {scope}, {corrector})")
    oof, weights = out_of_fold(pool, scope, corrector)
    f = _line("fitted", oof, chosen, selector)
    adopted = "fitted" if ahead(f) else selector
    steps["fitted"] = {"line": f, "adopted": adopted, "weights": weights}
    steps["oracle"] = _oracles(pool, corrector)
    design = {"temperature": float(temp), "repair_scope": scope, "corrector": corrector,
              "selector": adopted}  # fmt: skip
    steps["design"] = design
    final = oof if adopted == "fitted" else chosen
    steps["adopted_ex"] = round(100 * np.mean(list(final.values())), 1)
    steps["verdicts"] = final
    print(f"adopted: {design}; EX {steps['adopted_ex']} (out of fold where fitted)")
    print(f"oracle by scope ({corrector}): {steps['oracle']}")
    return steps


def _header(pools: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    first = next(iter(pools.values()))
    n_db = len({r["db_id"] for r in first})
    print(f"decision set: {len(first)} questions on {n_db} databases")
    return {"n": len(first), "databases": n_db}


def rule16(p07: list[dict[str, Any]], p10: list[dict[str, Any]]) -> dict[str, Any]:
    """Rule 16's five steps in order (docs/decisions.md), on the questions both pools hold."""
    shared = {r["question_id"] for r in p07} & {r["question_id"] for r in p10}
    pools = {
        "0.7": [r for r in p07 if r["question_id"] in shared],
        "1.0": [r for r in p10 if r["question_id"] in shared],
    }
    steps = _header(pools)
    print("1. temperature (repair all, vote, rules)")
    t = _line("1.0", verdicts(pools["1.0"], "all", "vote|rules"),
              verdicts(pools["0.7"], "all", "vote|rules"), "0.7")  # fmt: skip
    temp = "1.0" if ahead(t) else "0.7"
    steps["temperature"] = {"line": t, "adopted": temp}
    selection_steps(pools[temp], temp, steps)
    final = steps.pop("verdicts")
    print("deciding nothing:")
    best = verdicts(pools["1.0"], "all", "grounded|rules_intersect")
    artefact = verdicts(pools["0.7"], "none", "vote|rules")
    steps["reported"] = [
        _line("adopted", final, best, "today's dev-best"),
        _line("adopted", final, artefact, "the compiled direct artefact"),
    ]
    return steps


def rule16a(p07: list[dict[str, Any]]) -> dict[str, Any]:
    """Rule 16a: steps 2-5 on P0.7 (temperature 0.7, step 1's tie value)."""
    steps = _header({"0.7": p07})
    steps["temperature"] = {"adopted": "0.7", "why": "rule 16a: P1.0 not complete"}
    selection_steps(p07, "0.7", steps)
    final = steps.pop("verdicts")
    print("deciding nothing:")
    steps["reported"] = [
        _line(
            "adopted",
            final,
            verdicts(p07, "none", "vote|rules"),
            "the compiled direct artefact (P0.7, none, vote, rules)",
        ),  # fmt: skip
        _line(
            "adopted",
            final,
            verdicts(p07, "all", "vote|rules"),
            "P0.7 as recorded (all, vote, rules)",
        ),  # fmt: skip
    ]
    return steps


def cmd_rule16(args: argparse.Namespace) -> None:
    p07 = read_records(args.p07)
    if args.p10:
        result, name = rule16(p07, read_records(args.p10)), "rule16.json"
    else:
        result, name = rule16a(p07), "rule16a.json"
    out = RESULTS / name
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")


#: Rule 16's adopted selection (repair scope, selector, corrector), what rule 18 replays.
RULE16_DESIGN = "fallback|grounded|rules_intersect"
#: Rule 18a's feature groups: rule 16's and the two programs' agreement (:func:`origin_features`).
RULE18A_GROUPS = (*FITTED_GROUPS, "origin")


def _shared(*tables: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    keep = set.intersection(*({r["question_id"] for r in t} for t in tables))
    return [[r for r in t if r["question_id"] in keep] for t in tables]


def rule18(
    p07: list[dict[str, Any]],
    w: list[dict[str, Any]],
    p10: list[dict[str, Any]] | None = None,
    union: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Rule 18 (docs/decisions.md): W against P0.7 with rule 16's selection, on the questions
    both hold; adopted if ahead with p < 0.05. The rest is reported and decides nothing."""
    p07, w = _shared(p07, w)
    out = _header({"W": w})
    scope, _, corrector = RULE16_DESIGN.split("|")
    print(f"rule 18: W against P0.7, both {RULE16_DESIGN}")
    got_w, got_p = design_verdicts(w, RULE16_DESIGN), design_verdicts(p07, RULE16_DESIGN)
    line = _line("W", got_w, got_p, "P0.7")
    kept = "W" if ahead(line) else "P0.7"
    out["decision"] = {"line": line, "adopted": kept}
    print(f"adopted: {kept}")
    print(f"rule 18a: the fitted selector on W, out of fold ({scope}, {corrector}, "
          f"groups {'+'.join(RULE18A_GROUPS)}), against {kept} with {RULE16_DESIGN}")  # fmt: skip
    oof, weights = out_of_fold(w, scope, corrector, RULE18A_GROUPS)
    fitted = _line("W fitted", oof, got_w if kept == "W" else got_p, kept)
    out["fitted"] = {
        "line": fitted,
        "groups": list(RULE18A_GROUPS),
        "adopted": ahead(fitted),
        "weights": weights,
    }
    print(f"adopted: {'W with the fitted selector' if ahead(fitted) else kept}")
    print("deciding nothing:")
    pools = {"W": w, "P0.7": p07}
    if union:
        pools["union"] = [r for r in union if r["question_id"] in got_w]
    out["pools"] = {}
    for name, table in pools.items():
        got = design_verdicts(table, RULE16_DESIGN)
        ex = round(100 * float(np.mean(list(got.values()))), 1)
        oracle = _oracles(table, corrector)
        out["pools"][name] = {
            "n": len(got),
            "ex": ex,
            "oracle": oracle,
            "selection_gap": round(oracle[scope] - ex, 1),
            "vote_ex": round(100 * float(np.mean(list(
                design_verdicts(table, f"{scope}|vote|{corrector}").values()))), 1),
        }  # fmt: skip
        print(
            f"  {name}: EX {ex}, oracle by scope {oracle}, gap {out['pools'][name]['selection_gap']}"
        )
    reported = []
    if union:
        reported.append(_line("union (16 calls)", design_verdicts(pools["union"], RULE16_DESIGN),
                              got_w, "W"))  # fmt: skip
    if p10:
        best = design_verdicts(p10, "all|grounded|rules_intersect")
        best = {q: v for q, v in best.items() if q in got_w}
        reported.append(_line("W", {q: got_w[q] for q in best}, best, "today's dev-best (P1.0)"))
    artefact = design_verdicts(p07, "none|vote|rules")
    reported.append(
        _line("W", got_w, artefact, "the compiled direct artefact (P0.7, none, vote, rules)")
    )
    out["reported"] = reported
    return out


def cmd_rule18(args: argparse.Namespace) -> None:
    result = rule18(
        read_records(args.p07),
        read_records(args.w),
        read_records(args.p10) if args.p10 else None,
        read_records(args.union) if args.union else None,
    )
    out = RESULTS / "rule18.json"
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")


def mix_records(
    a: Sequence[dict[str, Any]],
    b: Sequence[dict[str, Any]],
    first: int | None = None,
    generator: str = "",
    take: int | None = None,
) -> list[dict[str, Any]]:
    """Per question both runs hold: ``a``'s record with its first ``first`` candidates (all
    by default), then ``b``'s candidates, only ``generator``'s if one is named (each join repair
    as recorded, in place), the first ``take`` of those if given: one pool replayed from two
    runs' LM calls, every candidate one vote. With the defaults, the union of both pools
    (``union``); rule 19's pool M takes four of ``a``'s and ``b``'s ``dubo_v1`` ones, rule 21's
    pool T three of each and then a third run's two (``mix`` twice)."""
    other = {str(r["question_id"]): r for r in b if r.get("candidates")}
    out = []
    for r in a:
        qid = str(r["question_id"])
        if not r.get("candidates") or qid not in other:
            continue
        theirs = [
            c
            for c in other[qid]["candidates"]
            if not generator or str(c.get("origin") or "").split(":")[0] == generator
        ]
        out.append({**r, "candidates": list(r["candidates"][:first]) + theirs[:take]})
    return out


def _write_pool(name: str, rows: list[dict[str, Any]], slice_name: str) -> None:
    """``rows`` as a records file ``table`` reads, under the results folder."""
    out = RESULTS / f"{name}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {out} ({len(rows)} questions); replay it with: decide.py table {out} "
          f"--slice {slice_name}")  # fmt: skip


def cmd_union(args: argparse.Namespace) -> None:
    a, b = Path(args.a), Path(args.b)
    name = args.name or f"union__{a.name.split('__')[1]}+{b.name.split('__')[1]}"
    _write_pool(name, mix_records(read_records(a), read_records(b)), args.slice)


def cmd_mix(args: argparse.Namespace) -> None:
    rows = mix_records(
        read_records(args.a), read_records(args.b), args.first, args.generator, args.take
    )
    _write_pool(args.name, rows, args.slice)


def weighted_replay(
    record: dict[str, Any], example: Any, weightings: Sequence[Callable[[str], float]]
) -> list[tuple[bool, str]]:
    """For each of ``weightings`` (a candidate's origin → its weight in the grounded vote),
    whether rule 16's selection (repair ``fallback``, ``grounded``, ``rules_intersect``) is right
    on ``record``'s pool, and the answer it gives (``""`` when no candidate is left). The
    database is opened and the pool scoped once for all weightings."""
    judge = Judge(example)
    try:
        cands = scoped(record["candidates"], "fallback", judge)
        if not cands:
            return [(False, "")] * len(weightings)
        sqls = [c["sql"] for c in cands]
        origins = [str(c.get("origin") or "") for c in cands]
        out = []
        for weight_of in weightings:
            chosen = GroundedSelector()(
                candidates=sqls,
                db=judge.db,
                question=example.question,
                weights=[weight_of(o) for o in origins],
            ).sql
            fixed = corrected(judge, chosen, example.question, CORRECTORS["rules_intersect"])
            out.append((bool(judge.correct(fixed)), fixed))
        return out
    finally:
        judge.db.close()


def greedy_weighted(
    record: dict[str, Any], example: Any, greedy_weights: Sequence[float]
) -> list[bool]:
    """Rule 22: for each of ``greedy_weights``, whether rule 16's selection is right on
    ``record``'s pool when each prompt's greedy candidate weighs that much in the grounded vote
    (1 reproduces the table's verdict)."""

    def by_greedy(weight: float) -> Callable[[str], float]:
        return lambda origin: weight if ":greedy" in origin else 1.0

    return [
        ok for ok, _ in weighted_replay(record, example, [by_greedy(w) for w in greedy_weights])
    ]


def _reproduced(
    replayed: dict[str, bool], recorded: dict[str, bool], whose: str, **head: Any
) -> dict[str, Any]:
    """The share of questions where the replay at weight 1 gives the recorded verdict (a rule's
    replay stands only where it reproduces the run it replays), printed; returned as the head
    of the replay's JSON, after ``head`` (the slice and the file replayed)."""
    same = sum(replayed[q] == recorded[q] for q in replayed) / len(replayed)
    print(f"weight 1 reproduces {whose} verdicts on {100 * same:.1f}% of {len(replayed)}")
    return {**head, "reproduced": round(100 * same, 1)}


def _write_json(path: str, out: dict[str, Any]) -> None:
    """``out`` as indented JSON at ``path`` (nothing when no path was asked for)."""
    if path:
        Path(path).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path}")


def cmd_greedy(args: argparse.Namespace) -> None:
    """Rule 22 on one slice: the replay checked against the table at weight 1, then weight
    ``--weight`` against weight 1."""
    examples = {str(ex.question_id): ex for ex in load_slice(args.slice)}
    table = {r["question_id"]: r for r in read_records(args.table)}
    records = [r for r in read_records(args.mix) if str(r["question_id"]) in table]
    one: dict[str, bool] = {}
    heavy: dict[str, bool] = {}
    for record in tqdm(records, desc="greedy weight", unit="q"):
        qid = str(record["question_id"])
        one[qid], heavy[qid] = greedy_weighted(record, examples[qid], (1.0, args.weight))
    recorded = design_verdicts(list(table.values()), "fallback|grounded|rules_intersect")
    out = {
        **_reproduced(one, recorded, "the table's", slice=args.slice, mix=Path(args.mix).name),
        "weight": args.weight,
        "against": _line(f"greedy weight {args.weight:g}", heavy, one, "greedy weight 1 (M)"),
    }
    _write_json(args.out, out)


def generator_weights(spec: str, names: Sequence[str]) -> Callable[[str], float]:
    """``"dubo_v1=2"`` → a candidate's weight from its origin's generator (others 1), parsed as
    ``ensemble``'s ``weights`` switch parses it (:func:`~sqlweave.programs.ensemble.parse_weights`;
    ``names``: the generators the pools hold)."""
    from sqlweave.programs.ensemble import parse_weights

    table = parse_weights(spec, list(names))
    return lambda origin: table.get(origin_generator(origin), 1.0)


def cmd_weights(args: argparse.Namespace) -> None:
    """Rule 36 on one set of recorded pools: the replay with every weight 1 checked against the
    recorded verdicts (a table replayed with rule 16's design, or the records' own), then
    ``--weights`` against weight 1; ``--write`` keeps the weighted answers as a records file
    (``pred_sql`` and ``correct`` replaced; a read, or ``fit_confidence.py rows``, reads it)."""
    examples = {str(ex.question_id): ex for ex in load_slice(args.slice)}
    records = list(read_records(args.records))
    if args.table:
        recorded = design_verdicts(read_records(args.table), "fallback|grounded|rules_intersect")
    else:
        recorded = {str(r["question_id"]): bool(r.get("correct")) for r in records}
    records = [r for r in records if str(r["question_id"]) in recorded]
    one: dict[str, bool] = {}
    heavy: dict[str, bool] = {}
    names = sorted(
        {origin_generator(c.get("origin") or "") for r in records for c in r["candidates"]}
    )
    weighted = generator_weights(args.weights, names)
    kept = []
    for record in tqdm(records, desc=f"weights {args.weights}", unit="q"):
        qid = str(record["question_id"])
        (one[qid], _), (heavy[qid], sql) = weighted_replay(
            record, examples[qid], [lambda _origin: 1.0, weighted]
        )
        kept.append({**record, "pred_sql": sql, "correct": heavy[qid]})
    head = {"slice": args.slice, "records": Path(args.records).name}
    out = {
        **_reproduced(one, recorded, "the recorded", **head),
        "weights": args.weights,
        "against": _line(f"weights {args.weights}", heavy, one, "weight 1 (Cg)"),
        "verdicts": {q: [one[q], heavy[q]] for q in one},  # [weight 1, weighted]
    }
    if args.write:
        with gzip.open(args.write, "wt", encoding="utf-8") as handle:
            handle.writelines(json.dumps(r) + "\n" for r in kept)
        print(f"wrote {args.write}")
    _write_json(args.out, out)


def cmd_pooled(args: argparse.Namespace) -> None:
    """Rule 36's comparison over several sets at once: the ``weights`` outputs' per-question
    verdicts pooled (question ids must not repeat across them)."""
    one: dict[str, bool] = {}
    heavy: dict[str, bool] = {}
    for path in args.outputs:
        verdicts = json.loads(Path(path).read_text(encoding="utf-8"))["verdicts"]
        if set(verdicts) & set(one):
            raise SystemExit(f"{path} repeats questions of an earlier output")
        for qid, (a, b) in verdicts.items():
            one[qid], heavy[qid] = a, b
    out = {
        "outputs": [Path(p).name for p in args.outputs],
        "against": _line(f"weighted ({len(one)} questions)", heavy, one, "weight 1 (Cg)"),
    }
    _write_json(args.out, out)


def design_verdicts(table: Sequence[dict[str, Any]], design: str) -> dict[str, bool]:
    """``"scope|selector|corrector"`` (e.g. ``"fallback|grounded|rules_intersect"``) replayed."""
    scope, selector, corrector = design.split("|")
    return verdicts(table, scope, f"{selector}|{corrector}")


def against_verdicts(spec: str) -> dict[str, bool]:
    """A run's records as recorded (``records.jsonl``), or a table replayed with a design
    (``table.jsonl.gz@scope|selector|corrector``): what ``read --against`` compares with."""
    path, _, design = spec.partition("@")
    if design:
        return design_verdicts(read_records(path), design)
    return {str(r["question_id"]): bool(r.get("correct")) for r in read_records(path)}


def cmd_read(args: argparse.Namespace) -> None:
    """One design's figures on a slice's table, beside recorded runs (``--against``)."""
    table = read_records(args.table)
    got = design_verdicts(table, args.design)
    scope, _, corrector = args.design.split("|")
    oracle = [r[scope][f"oracle|{corrector}"] for r in table]
    ci = bootstrap_ci(list(got.values()))
    out: dict[str, Any] = {
        "table": Path(args.table).name,
        "design": args.design,
        "n": len(got),
        "ex": round(100 * ci.estimate, 1),
        "interval": [round(100 * ci.low, 1), round(100 * ci.high, 1)],
        "oracle": round(100 * float(np.mean(oracle)), 1),
        "against": [],
    }
    out["selection_gap"] = round(out["oracle"] - out["ex"], 1)
    print(f"{args.design} on {out['table']}: {ci} oracle {out['oracle']}")
    for item in args.against or []:
        label, _, path = item.partition("=")
        out["against"].append(_line("design", got, against_verdicts(path), label))
    _write_json(args.out, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table", help="replay a run's pool into a per-question table")
    t.add_argument("run")
    t.add_argument("--slice", required=True)
    t.add_argument("--limit", type=int, default=0, help="the slice's first N questions only")
    t.set_defaults(func=cmd_table)
    r = sub.add_parser("rule16", help="rule 16's steps over two tables")
    r.add_argument("--p07", required=True)
    r.add_argument("--p10", default="", help="without it: rule 16a (steps 2-5 on P0.7)")
    r.set_defaults(func=cmd_rule16)
    r18 = sub.add_parser("rule18", help="rule 18: a wider pool W against P0.7")
    r18.add_argument("--p07", required=True)
    r18.add_argument("--w", required=True)
    r18.add_argument("--p10", default="", help="reported: W against today's dev-best")
    r18.add_argument("--union", default="", help="reported: the union's table (see union)")
    r18.set_defaults(func=cmd_rule18)
    u = sub.add_parser("union", help="two runs' candidates pooled per question, for table")
    u.add_argument("a")
    u.add_argument("b")
    u.add_argument("--slice", required=True)
    u.add_argument("--name", default="")
    u.set_defaults(func=cmd_union)
    m = sub.add_parser("mix", help="a's first N candidates + b's of one generator (rule 19)")
    m.add_argument("a")
    m.add_argument("b")
    m.add_argument("--first", type=int, default=None, help="a's first N candidates (all)")
    m.add_argument("--generator", default="", help="only b's candidates from this generator")
    m.add_argument("--take", type=int, default=None, help="b's first N chosen candidates (all)")
    m.add_argument("--slice", required=True)
    m.add_argument("--name", required=True)
    m.set_defaults(func=cmd_mix)
    g = sub.add_parser("greedy", help="rule 22: the greedy candidates weighted in the vote")
    g.add_argument("mix")
    g.add_argument("table")
    g.add_argument("--slice", required=True)
    g.add_argument("--weight", type=float, default=2.0)
    g.add_argument("--out", default="")
    g.set_defaults(func=cmd_greedy)
    w = sub.add_parser("weights", help="rule 36: per-generator weights in the vote")
    w.add_argument("records", help="recorded pools (.jsonl or .jsonl.gz)")
    w.add_argument("--table", default="", help="the verdicts to reproduce (else the records')")
    w.add_argument("--slice", required=True)
    w.add_argument("--weights", default="dubo_v1=2")
    w.add_argument("--write", default="", help="the weighted answers, a .jsonl.gz records file")
    w.add_argument("--out", default="")
    w.set_defaults(func=cmd_weights)
    pl = sub.add_parser("pooled", help="rule 36: weights outputs pooled into one comparison")
    pl.add_argument("outputs", nargs="+")
    pl.add_argument("--out", default="")
    pl.set_defaults(func=cmd_pooled)
    d = sub.add_parser("read", help="one design's figures on a table, beside recorded runs")
    d.add_argument("table")
    d.add_argument("--design", required=True, help="scope|selector|corrector")
    d.add_argument(
        "--against", action="append", help="LABEL=records.jsonl or LABEL=table@design (paired)"
    )
    d.add_argument("--out", default="")
    d.set_defaults(func=cmd_read)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
