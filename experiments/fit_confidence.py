"""Fit and check the answer confidence of :mod:`sqlweave.confidence` (issue 62), no LM call.

``rows``: replays a recorded × 8 pool as the ``accurate`` preset answers (the repair scope, the
``grounded`` vote, ``rules_intersect``; ``decide.py``'s replay) and as a one-call program
answers (the greedy candidate, then the rules), and writes each answer's
:func:`sqlweave.programs.stages.confidence.evidence` features with its verdict against the gold query.

``fit``: fits the two logistic models out of fold (five folds by database, seed 0), prints
AUROC, expected calibration error (10 bins) and accuracy at 50 / 70 / 90 % coverage, chooses
the threshold (the lowest whose answers above it are right ≥ 90 % of the time, out of fold),
refits on every row and writes ``sqlweave/confidence.json``, with a reliability diagram and a
risk-coverage curve (``--plot``).

``check``: the shipped models on another slice's rows (deciding nothing there).

    python experiments/fit_confidence.py rows RUN.jsonl --slice spider-train-select --limit 1000
    python experiments/fit_confidence.py fit results/confidence/RUN.rows.jsonl --plot docs/img/confidence.png
    python experiments/fit_confidence.py check results/confidence/OTHER.rows.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from decide import folds_by_db, scoped
from grounded_replay import corrected
from selection_replay import Judge
from tqdm import tqdm

from sqlweave.confidence import (
    ALIGN_FEATURES,
    FEATURES,
    LM_FEATURES,
    POOL_FEATURES,
    SHAPE_FEATURES,
    SIZE_FEATURES,
    TEXT_FEATURES,
    WEIGHTS_FILE,
    Calibrator,
    confidence_figures,
    fit_calibrator,
    packaged_calibrators,
    packaged_threshold,
    threshold_for_all,
)
from sqlweave.data import load_slice
from sqlweave.evaluate import read_records
from sqlweave.programs.stages.confidence import evidence
from sqlweave.programs.stages.grounding import GroundedSelector
from sqlweave.stats import cluster_bootstrap

RESULTS = Path(__file__).resolve().parent / "results" / "confidence"
#: Precision the threshold must keep above it (issue 62).
TARGET_PRECISION = 0.90
#: A failing SQL's features (what :func:`evidence` returns for an answer that does not run).
FAILED = {
    "agree": 0.0,
    "margin": -1.0,
    "ran": 0.0,
    "log_classes": 0.0,
    "grounded": 1.0,
    "grounded_agree": 0.0,
    "empty": 1.0,
    "null": 0.0,
    "one_row": 0.0,
    "log_candidates": 0.0,
    **dict.fromkeys(ALIGN_FEATURES, 0.0),
}


def answer_rows(record: dict[str, Any], example: Any, scope: str) -> dict[str, Any]:
    """One question: the ``accurate`` answer's and the one-call answer's features and verdicts."""
    judge = Judge(example)
    question = example.question
    try:
        pool = [c["sql"] for c in scoped(record["candidates"], scope, judge)]
        out: dict[str, Any] = {"question_id": str(record["question_id"]), "db_id": record["db_id"]}
        if pool:
            chosen = GroundedSelector()(candidates=pool, db=judge.db, question=question).sql
            final = corrected(judge, chosen, question, True)
            out["pool"], _ = evidence(question, pool, final, judge.db, shape=True)
            out["pool_right"] = judge.correct(final)
            out["pool_sql"] = final
        else:
            out["pool"], out["pool_right"] = dict(FAILED), False
        greedy = record["candidates"][0]
        if str(greedy.get("origin") or "").endswith(":repaired"):  # the original did not run
            out["single"], out["single_right"] = dict(FAILED), False
        else:
            single = judge.fixed(greedy["sql"])
            out["single"], _ = evidence(question, [single], single, judge.db, shape=True)
            out["single_right"] = judge.correct(single)
            out["single_sql"] = single
        return out
    finally:
        judge.db.close()


def cmd_rows(args: argparse.Namespace) -> None:
    run = Path(args.run)
    examples = {str(ex.question_id): ex for ex in load_slice(args.slice)}
    records = [r for r in read_records(run) if r.get("candidates") and not r.get("gold_error")]
    if args.limit:
        wanted = {str(ex.question_id) for ex in load_slice(args.slice)[: args.limit]}
        records = [r for r in records if str(r["question_id"]) in wanted]
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / run.name.removesuffix(".gz").replace(".jsonl", ".rows.jsonl")
    done = {r["question_id"] for r in read_records(out)} if out.exists() else set()
    with out.open("a", encoding="utf-8") as handle:
        for record in tqdm(records, desc="rows", unit="q"):
            if str(record["question_id"]) in done:
                continue
            row = answer_rows(record, examples[str(record["question_id"])], args.scope)
            handle.write(json.dumps(row) + "\n")
            handle.flush()
    print(f"wrote {out}")


def cmd_likelihood(args: argparse.Namespace) -> None:
    """Rule 34: each row's ``pool`` answer scored by a local model
    (:func:`~sqlweave.programs.stages.confidence.likelihood`, ``lm_mean_logprob``), appended to
    ``<rows>.likelihood.jsonl`` (resumable: a scored question is not scored again), then
    written into the rows file's ``pool`` features. Rows are scored in their file's order, a
    database's questions together, so its schema stays in the model's cache."""
    import dspy

    import sqlweave
    from sqlweave.db import Database
    from sqlweave.programs.stages.confidence import likelihood

    rows_path = Path(args.rows)
    side = rows_path.with_suffix(".likelihood.jsonl")
    examples = {str(ex.question_id): ex for ex in load_slice(args.slice)}
    rows = list(read_records(rows_path))
    done = {r["question_id"]: r for r in read_records(side)} if side.exists() else {}
    todo = [r for r in rows if r["question_id"] not in done]
    if todo:
        sqlweave.configure(args.model, n_threads=args.threads)
        lm = dspy.settings.lm
    db: Database | None = None  # the open database: a database's rows come together
    with side.open("a", encoding="utf-8") as handle:
        for row in tqdm(todo, desc="likelihood", unit="q"):
            example = examples[str(row["question_id"])]
            if db is None or db.name != example.db_id:
                if db is not None:
                    db.close()
                db = Database.open(example.db_path)
            sql = row.get("pool_sql") or ""
            evidence = getattr(example, "evidence", "") or ""
            value = likelihood(example.question, sql, db, lm, evidence)
            line = {"question_id": row["question_id"], "pool_sql": sql, "lm_mean_logprob": value}
            handle.write(json.dumps(line) + "\n")
            handle.flush()
            done[row["question_id"]] = line
    if db is not None:
        db.close()
    for row in rows:
        row["pool"]["lm_mean_logprob"] = done[row["question_id"]]["lm_mean_logprob"]
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {rows_path} ({len(rows)} rows, {len(todo)} scored now)")


# --- the figures ------------------------------------------------------------------------------


def figures(scores: Sequence[float], labels: Sequence[bool], threshold: float) -> dict[str, Any]:
    return confidence_figures(scores, labels, threshold)


def _xy(rows: Sequence[dict[str, Any]], kind: str) -> tuple[list[dict], list[bool]]:
    return [r[kind] for r in rows], [bool(r[f"{kind}_right"]) for r in rows]


#: The feature sets ``compare`` and ``fit`` take: C1 (rule 17's), C2 (rule 20: with the answer's
#: shape), C4 (rule 30: with whether the agreeing candidates wrote the answer's text), C5 (rule
#: 32: with how many candidates were drawn), C6 (rule 33: with how the query matches the
#: question), C7 (rule 34: with how probable the model finds the answer).
FEATURE_SETS = {
    "pool": POOL_FEATURES,
    "shape": POOL_FEATURES + SHAPE_FEATURES,
    "text": POOL_FEATURES + TEXT_FEATURES,
    "size": POOL_FEATURES + SIZE_FEATURES,
    "align": POOL_FEATURES + ALIGN_FEATURES,
    "lm": POOL_FEATURES + LM_FEATURES,
}


def out_of_fold(
    rows: Sequence[dict[str, Any]], kind: str, features: Sequence[str] = POOL_FEATURES
) -> list[float]:
    fold = folds_by_db(rows)
    scores = [0.0] * len(rows)
    for k in range(5):
        train = [r for r in rows if fold[r["db_id"]] != k]
        model = fit_calibrator(*_xy(train, kind), features=features)
        for i, r in enumerate(rows):
            if fold[r["db_id"]] == k:
                scores[i] = model.probability(r[kind])
    return scores


def plot(curves: dict[str, tuple[list[float], list[bool]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rel, risk) = plt.subplots(1, 2, figsize=(10, 4.2))
    rel.plot([0, 1], [0, 1], ls=":", c="grey")
    for label, (s, y) in curves.items():
        s_arr, y_arr = np.asarray(s), np.asarray(y, dtype=float)
        edges = np.linspace(0, 1, 11)
        xs, ys = [], []
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            inside = (s_arr >= lo) & (s_arr < hi if hi < 1 else s_arr <= hi)
            if inside.sum() >= 5:
                xs.append(s_arr[inside].mean())
                ys.append(y_arr[inside].mean())
        rel.plot(xs, ys, marker="o", label=label)
        order = np.argsort(-s_arr, kind="stable")
        cov = np.arange(1, len(order) + 1) / len(order)
        risk.plot(cov, 1 - np.cumsum(y_arr[order]) / np.arange(1, len(order) + 1), label=label)
    rel.set(xlabel="confidence", ylabel="share right", title="reliability (10 bins, n ≥ 5)")
    risk.set(xlabel="coverage", ylabel="error among answers kept", title="risk-coverage")
    rel.legend(fontsize=8)
    risk.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def kept_provenance(provenance: dict[str, Any], kind: str) -> dict[str, Any]:
    """Where a model kept from the shipped file was fitted: its own ``<kind>_kept`` entry when
    an earlier refit already kept it (else that entry would be lost on the second refit)."""
    return provenance.get(f"{kind}_kept") or {
        "fitted_on": provenance.get("fitted_on"),
        f"{kind}_out_of_fold": provenance.get(f"{kind}_out_of_fold"),
    }


def decision_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The rows a rule fits on: ``args.rows`` and, with ``--extra``, more rows after them (rule
    35: the 600 questions after the decision set); folds are drawn over them all."""
    rows = list(read_records(args.rows))
    for path in args.extra:
        rows += list(read_records(path))
    ids = [r["question_id"] for r in rows]
    if len(set(ids)) != len(ids):
        raise SystemExit("--extra repeats questions of the rows it is added to")
    return rows


def cmd_fit(args: argparse.Namespace) -> None:
    """Fit ``--refit`` kinds on the rows; a kind not refitted keeps the shipped model and its
    provenance (rule 17a: a new design refits the ``pool`` model only). ``--features``: the
    ``pool`` model's feature set (rule 20); ``--second``: spider-train-val's rows, which the
    threshold must also hold on (rule 20; rule 17 chose it on the decision set alone);
    ``--extra``: more rows fitted on (rule 35); ``--lower-z``: the out-of-fold share must hold
    at that Wilson lower bound (rule 40: 1.645), not as a point estimate."""
    rows = decision_rows(args)
    refit = [k for k in ("pool", "single") if k in args.refit.split(",")]
    if "pool" not in refit:
        raise SystemExit("--refit must include pool: the threshold is chosen on its answers")
    shipped = json.loads(WEIGHTS_FILE.read_text(encoding="utf-8"))
    report: dict[str, Any] = {"fitted_on": Path(args.rows).name, "n": len(rows)}
    if args.lower_z:
        report["threshold_rule"] = f"Wilson lower bound at z={args.lower_z} (rule 40)"
    if args.extra:
        report["extra_rows"] = [Path(path).name for path in args.extra]
    models = dict(shipped["models"])
    curves = {}
    for kind in refit:
        feats = FEATURE_SETS[args.features] if kind == "pool" else POOL_FEATURES
        scores = out_of_fold(rows, kind, feats)
        features, labels = _xy(rows, kind)
        model = fit_calibrator(features, labels, features=feats)
        if kind == "pool" and args.second:
            second = _xy(list(read_records(args.second)), kind)
            on_second = [model.probability(f) for f in second[0]]
            cut = threshold_for_all(
                [(scores, labels), (on_second, second[1])], TARGET_PRECISION, z=[args.lower_z, 0]
            )
            report["pool_second_check"] = figures(on_second, second[1], cut)
            report["second_check_rows"] = Path(args.second).name
        else:
            cut = threshold_for_all([(scores, labels)], TARGET_PRECISION, z=[args.lower_z])
        report[f"{kind}_out_of_fold"] = figures(scores, labels, cut)
        curves[f"{kind} (out of fold)"] = (scores, labels)
        print(f"{kind}: {report[f'{kind}_out_of_fold']}")
        models[kind] = model.as_dict()
    for kind in {"pool", "single"} - set(refit):
        report[f"{kind}_kept"] = kept_provenance(shipped["provenance"], kind)
    threshold = report["pool_out_of_fold"]["threshold"]
    payload = {
        "models": models,
        "threshold": threshold,
        "features": list(FEATURES),
        "provenance": report,
        "how": "experiments/fit_confidence.py fit (docs/decisions.md, rules 17, 17a, 18b and 20)",
    }
    WEIGHTS_FILE.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {WEIGHTS_FILE} (threshold {threshold})")
    if args.plot:
        plot(curves, Path(args.plot))


def brier(scores: Sequence[float], labels: Sequence[bool]) -> list[float]:
    """Each answer's squared error of its confidence against its verdict."""
    return [(s - float(y)) ** 2 for s, y in zip(scores, labels, strict=True)]


def cmd_compare(args: argparse.Namespace) -> None:
    """Rules 20, 28, 30, 32, 33, 34: a candidate feature set (``--candidate``, C2 ``shape`` by default)
    against C1 (:data:`POOL_FEATURES`), ``pool`` answers; ``--extra`` rows join the decision
    set's, ``--level`` is the interval's (rule 35: 0.975 for a second look)."""
    rows = decision_rows(args)
    second = list(read_records(args.second))
    labels, dbs = _xy(rows, "pool")[1], [r["db_id"] for r in rows]
    sets = {"pool": FEATURE_SETS["pool"], args.candidate: FEATURE_SETS[args.candidate]}
    oof = {name: out_of_fold(rows, "pool", feats) for name, feats in sets.items()}
    full = {
        name: fit_calibrator(*_xy(rows, "pool"), features=feats) for name, feats in sets.items()
    }
    feats2, labels2 = _xy(second, "pool")
    on_second = {name: [m.probability(f) for f in feats2] for name, m in full.items()}
    c2 = args.candidate
    diff = [b - a for a, b in zip(brier(oof["pool"], labels), brier(oof[c2], labels), strict=True)]
    mean, low, high = cluster_bootstrap(diff, dbs, level=args.level)
    second_brier = {k: float(np.mean(brier(v, labels2))) for k, v in on_second.items()}
    adopted = high < 0 and second_brier[c2] <= second_brier["pool"]
    report: dict[str, Any] = {
        "rule": args.rule,
        "candidate": c2,
        "decision_set": Path(args.rows).name,
        "extra_rows": [Path(path).name for path in args.extra or []],
        "n": len(rows),
        "level": args.level,
        "second_check": Path(args.second).name,
        "brier_out_of_fold": {
            k: round(float(np.mean(brier(v, labels))), 4) for k, v in oof.items()
        },
        "brier_c2_minus_c1": {"mean": round(mean, 4), "low": round(low, 4), "high": round(high, 4)},
        "brier_second_check": {k: round(v, 4) for k, v in second_brier.items()},
        "c2_adopted": adopted,
    }
    write_comparison(report, full, oof, labels, on_second, labels2, args.out)


def write_comparison(
    report: dict[str, Any],
    full: dict[str, Calibrator],
    oof: dict[str, list[float]],
    labels: Sequence[bool],
    on_second: dict[str, list[float]],
    labels2: Sequence[bool],
    name: str,
) -> None:
    """A Brier comparison's report (rules 20-39) completed with each model's figures at the
    threshold both train-side sets hold and its weights, printed and written under
    ``results/confidence/name``."""
    for model in full:
        cut = threshold_for_all(
            [(oof[model], labels), (on_second[model], labels2)], TARGET_PRECISION
        )
        report[f"{model}_out_of_fold"] = figures(oof[model], labels, cut)
        report[f"{model}_second_check"] = figures(on_second[model], labels2, cut)
        report[f"{model}_weights"] = full[model].as_dict()
    print(json.dumps(report, indent=1))
    out = RESULTS / name
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")


def cmd_check(args: argparse.Namespace) -> None:
    models: dict[str, Calibrator] = packaged_calibrators()
    threshold = packaged_threshold()
    out = {}
    for path in args.rows:
        rows = list(read_records(path))
        for kind in ("pool", "single"):
            feats, labels = _xy(rows, kind)
            scores = [models[kind].probability(f) for f in feats]
            out[f"{Path(path).name} {kind}"] = figures(scores, labels, threshold)
            print(f"{Path(path).name} {kind}: {out[f'{Path(path).name} {kind}']}")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rows")
    r.add_argument("run")
    r.add_argument("--slice", required=True)
    r.add_argument("--limit", type=int, default=0)
    r.add_argument("--scope", default="fallback", help="the accurate preset's repair scope")
    r.set_defaults(func=cmd_rows)
    f = sub.add_parser("fit")
    f.add_argument("rows")
    f.add_argument("--plot", default="")
    f.add_argument("--refit", default="pool,single", help="the models refitted (others kept)")
    f.add_argument("--features", choices=sorted(FEATURE_SETS), default="pool")
    f.add_argument("--second", default="", help="spider-train-val's rows (rule 20's threshold)")
    f.add_argument("--extra", nargs="*", default=[], help="more rows fitted on (rule 35)")
    f.add_argument(
        "--lower-z", type=float, default=0.0, help="rule 40: the threshold's Wilson bound's z"
    )
    f.set_defaults(func=cmd_fit)
    m = sub.add_parser(
        "compare", help="rules 20, 28, 30, 32, 33, 34: C1 against a candidate feature set"
    )
    m.add_argument("rows", help="the decision set's rows")
    m.add_argument("--second", required=True, help="spider-train-val's rows (the second check)")
    m.add_argument("--candidate", choices=("shape", "text", "size", "align", "lm"), default="shape")
    m.add_argument("--rule", default="docs/decisions.md, rule 20", help="written in the report")
    m.add_argument("--out", default="rule20.json", help="its name under results/confidence/")
    m.add_argument("--extra", nargs="*", default=[], help="more rows (rule 35)")
    m.add_argument("--level", type=float, default=0.95, help="the interval's level")
    m.set_defaults(func=cmd_compare)
    lk = sub.add_parser("likelihood", help="rule 34: score each row's answer with a local model")
    lk.add_argument("rows")
    lk.add_argument("--slice", required=True)
    lk.add_argument("--model", default="local:qwen2.5-coder-1.5b")
    lk.add_argument("--threads", type=int, default=2)
    lk.set_defaults(func=cmd_likelihood)
    c = sub.add_parser("check")
    c.add_argument("rows", nargs="+")
    c.add_argument("--out", default="")
    c.set_defaults(func=cmd_check)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
