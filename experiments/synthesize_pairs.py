"""Synthesize question/SQL pairs for databases and measure what they cost and how many survive.

For each database: :func:`sqlweave.synthesize` with the local model (template SQL checked by
execution, the question written by the LM, the round trip through ``direct``), then the figures:
pairs kept, drafts tried and why they were rejected (per template and difficulty), wall and CPU
seconds per kept pair. The pairs themselves are written beside the figures, for reading by hand.

    python experiments/synthesize_pairs.py --dbs farm cinema --n 25
    python experiments/synthesize_pairs.py --slice spider-train-val --n 40   # every db of a slice
    python experiments/synthesize_pairs.py --slice bird-52 --n 20   # found where the slice's are
    python experiments/synthesize_pairs.py --slice spider-train-val --n 20 --accept any \
        --check-samples 8 --out results/synthesis-any   # kept when any of 8 readings matches

Writes ``experiments/results/synthesis/<db>.jsonl`` (pairs), ``<db>.jsonl.tried.jsonl`` (every
verdict) and ``summary.json`` (``--out``). Resumable: a rerun continues each file.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import sqlweave
from sqlweave.data import database_path, load_slice
from sqlweave.synthesis.pairs import synthesize

RESULTS = Path(__file__).resolve().parent / "results" / "synthesis"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dbs", nargs="*", default=[])
    parser.add_argument("--slice", default=None, help="every database of a named slice")
    parser.add_argument("--n", type=int, default=25, help="pairs per database")
    parser.add_argument("--model", default="local:qwen2.5-coder-1.5b")
    parser.add_argument("--n-threads", type=int, default=None)
    parser.add_argument("--no-check", action="store_true", help="skip the round trip")
    parser.add_argument("--sample-rows", type=int, default=0, help="rows shown to the writer")
    parser.add_argument(
        "--accept",
        choices=("answer", "any"),
        default="answer",
        help="round trip: the answer must return the label's rows, or any candidate may",
    )
    parser.add_argument(
        "--check-samples",
        type=int,
        default=1,
        help="candidates of the round trip's direct (the first greedy; with more than one, "
        "direct x K with the joins repair on every candidate, the best program's setting)",
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="ask the model every time (DSPy's response cache off): the CPU figures of a cold run",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    options: dict[str, Any] = {"n_threads": args.n_threads} if args.n_threads else {}
    if args.no_cache:
        options["cache"] = False
    sqlweave.configure(args.model, **options)
    # A slice's databases where its questions find them (BIRD's are not Spider train's); the
    # questions themselves are not read.
    where = {ex.db_id: Path(ex.db_path) for ex in load_slice(args.slice)} if args.slice else {}
    dbs = list(args.dbs) + sorted(where)
    args.out.mkdir(parents=True, exist_ok=True)
    summary_path = args.out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    for db_id in dbs:
        path = where.get(db_id) or database_path(db_id, split="train")
        out = args.out / f"{db_id}.jsonl"
        wall, cpu = time.perf_counter(), time.process_time()
        before = len(out.read_text().splitlines()) if out.is_file() else 0
        pairs = synthesize(
            path,
            args.n,
            out=out,
            check=not args.no_check,
            sample_rows=args.sample_rows,
            program=answerer(args.check_samples),
            accept=args.accept,
        )
        portable(out)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        tried = [
            json.loads(x) for x in out.with_name(out.name + ".tried.jsonl").read_text().splitlines()
        ]
        new = len(pairs) - before
        entry = summary.get(db_id, {"wall_s": 0.0, "cpu_s": 0.0})
        entry["wall_s"] = round(entry["wall_s"] + wall, 1)
        entry["cpu_s"] = round(entry["cpu_s"] + cpu, 1)
        entry.update(
            {
                "pairs": len(pairs),
                "tried": len(tried),
                "why": dict(Counter(t["why"] for t in tried)),
                "kept_by_difficulty": dict(Counter(p["difficulty"] for p in pairs)),
                "kept_by_template": dict(Counter(p["template"] for p in pairs)),
                "wall_s_per_pair": round(entry["wall_s"] / max(1, len(pairs)), 1),
                "cpu_s_per_pair": round(entry["cpu_s"] / max(1, len(pairs)), 1),
                "model": args.model,
                "round_trip": not args.no_check,
                "sample_rows": args.sample_rows,
                "accept": args.accept,
                "response_cache": not args.no_cache,
                "check_samples": args.check_samples,
            }
        )
        summary[db_id] = entry
        print(
            f"{db_id}: {len(pairs)} pairs (+{new}), {len(tried)} drafts tried, "
            f"{entry['wall_s_per_pair']} s wall / {entry['cpu_s_per_pair']} s CPU per pair"
        )
        summary_path.write_text(json.dumps(summary, indent=1) + "\n")


def answerer(samples: int) -> Any:
    """The round trip's program: ``direct``, or with ``samples > 1`` direct x ``samples`` whose
    every candidate is drawn (the joins repair on all of them turns the settled-vote early stop
    off), so ``--accept any`` sees the whole pool."""
    from sqlweave.programs import get

    if samples <= 1:
        return get("direct")
    return get("direct", samples=samples, repair="joins", repair_scope="all")


def portable(path: Path) -> None:
    """Drop each pair's ``db_path`` (this machine's path to the database): the ``db_id`` names a
    bundled benchmark database, which ``load_questions`` finds by id, so the committed file reads
    the same on any checkout. A resumed run only counts the pairs already there."""
    pairs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    path.write_text(
        "".join(
            json.dumps({k: v for k, v in pair.items() if k != "db_path"}, ensure_ascii=False) + "\n"
            for pair in pairs
        )
    )


if __name__ == "__main__":
    main()
