"""Rule 38 of docs/decisions.md: one more sample where the cascade stops, for the confidence (C1p).

``records`` writes Cg's recorded pools with the *probe* appended where the cascade stopped:
``direct``'s first sample at 1.0 from M's pools (the pools Cg was replayed from); one recorded
repaired (its original did not run) stands in as a query that does not run. ``compare`` fits
C1 on the rows of both (``fit_confidence.py rows``), out of fold by database, and prints the
rule's comparison.

    python experiments/probe_replay.py records CG.jsonl.gz MIX.jsonl.gz --out PROBED.jsonl.gz
    python experiments/fit_confidence.py rows PROBED.jsonl.gz --slice spider-train-select
    python experiments/probe_replay.py compare --cg CG.rows.jsonl --probed PROBED.rows.jsonl \
        --second-cg CG_VAL.rows.jsonl --second-probed PROBED_VAL.rows.jsonl --out rule38.json
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
from fit_confidence import _xy, brier, out_of_fold, write_comparison
from tqdm import tqdm

from sqlweave.confidence import fit_calibrator
from sqlweave.evaluate import read_records
from sqlweave.stats import cluster_bootstrap

#: What a probe recorded repaired stands for: a sampled query that does not run.
NOT_RUN = "SELECT * FROM sqlweave_probe_did_not_run"


def probe_of(mixed: dict[str, Any]) -> dict[str, Any]:
    """The probe of one question: M's first ``direct`` sample, as it was drawn."""
    sample = next(
        c for c in mixed["candidates"] if c.get("origin", "").startswith("direct:sampled")
    )
    if str(sample.get("origin", "")).endswith(":repaired"):
        return {**sample, "sql": NOT_RUN, "origin": "direct:probe"}
    return {**sample, "origin": "direct:probe"}


def cmd_records(args: argparse.Namespace) -> None:
    mix = {str(r["question_id"]): r for r in read_records(args.mix)}
    out = Path(args.out)
    stopped = repaired = 0
    with gzip.open(out, "wt", encoding="utf-8") as handle:
        for record in read_records(args.cg):
            if record.get("cascade_stop") or len(record["candidates"]) == 2:
                probe = probe_of(mix[str(record["question_id"])])
                record = {**record, "candidates": [*record["candidates"], probe]}
                stopped += 1
                repaired += probe["sql"] == NOT_RUN
            handle.write(json.dumps(record) + "\n")
    print(f"wrote {out}: {stopped} stopped pools probed ({repaired} probes did not run)")


def cmd_draw(args: argparse.Namespace) -> None:
    """Rule 39: the probe drawn by the program's own sampler for each stopped pool of a Cg run
    (``direct``'s prompt, ``Sampler(n=2, temperature=1.0).rest``: one sample at 1.0), appended
    to the pool; resumable (a question already in ``--out`` is not drawn again)."""
    import sqlweave
    from sqlweave.data import load_slice
    from sqlweave.db import Database
    from sqlweave.programs.stages.generators import build
    from sqlweave.programs.stages.sampling import Sampler

    examples = {str(ex.question_id): ex for ex in load_slice(args.slice)}
    out = Path(args.out)
    done = {str(r["question_id"]) for r in read_records(out)} if out.exists() else set()
    records = [r for r in read_records(args.cg) if str(r["question_id"]) not in done]
    sqlweave.configure(args.model, n_threads=args.threads)
    generator = build("direct")
    probe = Sampler(generator.generate, n=2, temperature=1.0)
    with out.open("a", encoding="utf-8") as handle:
        for record in tqdm(records, desc="probe", unit="q"):
            if len(record["candidates"]) == 2:  # the cascade stopped
                example = examples[str(record["question_id"])]
                with Database.open(example.db_path) as db:
                    evidence = getattr(example, "evidence", "") or ""
                    prompt = generator.prompt(question=example.question, db=db, evidence=evidence)
                    sql = list(probe.rest(db, **prompt.inputs))[0]
                extra = {"sql": sql, "origin": "direct:probe"}
                record = {**record, "candidates": [*record["candidates"], extra]}
            handle.write(json.dumps(record) + "\n")
            handle.flush()
    print(f"wrote {out}")


def cmd_compare(args: argparse.Namespace) -> None:
    cg = [r for path in [args.cg, *args.extra_cg] for r in read_records(path)]
    probed = [r for path in [args.probed, *args.extra_probed] for r in read_records(path)]
    if len({r["question_id"] for r in cg}) != len(cg):
        raise SystemExit("the rows repeat questions")
    by_id = {r["question_id"]: r for r in probed}
    probed = [by_id[r["question_id"]] for r in cg]
    same = all(a["pool_sql"] == b["pool_sql"] for a, b in zip(cg, probed, strict=True))
    print(f"the answers are Cg's on every question: {same}")
    labels, dbs = _xy(cg, "pool")[1], [r["db_id"] for r in cg]
    oof = {"C1": out_of_fold(cg, "pool"), "C1p": out_of_fold(probed, "pool")}
    diff = [b - a for a, b in zip(brier(oof["C1"], labels), brier(oof["C1p"], labels), strict=True)]
    mean, low, high = cluster_bootstrap(diff, dbs, level=args.level)
    second_rows = {
        "C1": list(read_records(args.second_cg)),
        "C1p": list(read_records(args.second_probed)),
    }
    full = {"C1": fit_calibrator(*_xy(cg, "pool")), "C1p": fit_calibrator(*_xy(probed, "pool"))}
    on_second = {k: [full[k].probability(f) for f in _xy(second_rows[k], "pool")[0]] for k in full}
    labels2 = _xy(second_rows["C1"], "pool")[1]
    second_brier = {k: float(np.mean(brier(v, labels2))) for k, v in on_second.items()}
    adopted = same and high < 0 and second_brier["C1p"] <= second_brier["C1"]
    report: dict[str, Any] = {
        "rule": "docs/decisions.md, rule 39" if args.extra_cg else "docs/decisions.md, rule 38",
        "answers_unchanged": same,
        "n": len(cg),
        "extra_rows": [Path(p).name for p in [*args.extra_cg, *args.extra_probed]],
        "level": args.level,
        "brier_out_of_fold": {
            k: round(float(np.mean(brier(v, labels))), 4) for k, v in oof.items()
        },
        "brier_c1p_minus_c1": {
            "mean": round(mean, 4),
            "low": round(low, 4),
            "high": round(high, 4),
        },
        "brier_second_check": {k: round(v, 4) for k, v in second_brier.items()},
        "c1p_adopted": adopted,
    }
    write_comparison(report, full, oof, labels, on_second, labels2, args.out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("records", help="Cg's pools with the probe where the cascade stopped")
    r.add_argument("cg")
    r.add_argument("mix")
    r.add_argument("--out", required=True)
    r.set_defaults(func=cmd_records)
    d = sub.add_parser("draw", help="rule 39: the probe drawn now for a Cg run's stopped pools")
    d.add_argument("cg")
    d.add_argument("--slice", required=True)
    d.add_argument("--out", required=True)
    d.add_argument("--model", default="local:qwen2.5-coder-1.5b")
    d.add_argument("--threads", type=int, default=2)
    d.set_defaults(func=cmd_draw)
    c = sub.add_parser("compare", help="rule 38: C1 on the probed rows against C1 on Cg's")
    c.add_argument("--cg", required=True)
    c.add_argument("--probed", required=True)
    c.add_argument("--second-cg", required=True)
    c.add_argument("--second-probed", required=True)
    c.add_argument("--out", default="rule38.json")
    c.add_argument("--extra-cg", nargs="*", default=[], help="rule 39: more of Cg's rows")
    c.add_argument("--extra-probed", nargs="*", default=[], help="rule 39: their probed rows")
    c.add_argument("--level", type=float, default=0.95, help="the interval's level (39: 0.975)")
    c.set_defaults(func=cmd_compare)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
