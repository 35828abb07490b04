"""The evaluation protocol: one program on one named slice, scored beside ``naive``.

Every claim in the README comes from here: a named slice (``spider-dev-200``, ``bird-52``, or
``spider-train-val`` for choices), one model, a JSONL of per-question records (resumable: a killed
run continues where it stopped) and a JSON summary with EX, its 95% bootstrap interval, EX per
difficulty, calls / tokens / seconds per question and, when the ``naive`` run of the same slice and
model exists, the paired difference against it with McNemar's exact p-value.

    python experiments/protocol.py --program naive --slice spider-dev-200
    python experiments/protocol.py --program weave --slice spider-dev-200 --n-threads 1
    python experiments/protocol.py --program direct --slice spider-train-val --set schema_layout=native \
        --config native
    python experiments/protocol.py --artifact direct.search.json --slice spider-dev-200
    python experiments/protocol.py --table       # experiments/results/protocol/README.md

``--artifact`` evaluates a compiled program saved by ``sqlweave compile`` (loaded in this fresh
process, as a user would): its file is labelled ``<program>__compiled-<optimizer>`` and its summary
adds the paired comparison against the uncompiled program's run on the same slice.

Files: ``experiments/results/protocol/<program>[__<config>]__<slice>__<model>.{jsonl,json}``.
Choose on ``spider-train-val``; report on ``spider-dev-200`` and ``bird-52``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from run_programs import _commit  # the same commit stamp as the other scripts

from sqlweave.runs import (
    lm_options,
    provenance,
    resumable_identity,
    run_identity,
    stem,
    summarize_run,
)
from sqlweave.runs import table as runs_table

RESULTS = Path(__file__).resolve().parent / "results" / "protocol"
DEFAULT_MODEL = "local:qwen2.5-coder-1.5b"


def _parse_switches(items: list[str]) -> dict[str, Any]:
    from sqlweave.cli import parse_switches

    return parse_switches(items)


def _program_class(name: str) -> type | None:
    """The registered class of program ``name``, or ``None`` when none is registered."""
    from sqlweave.programs import program_class

    try:
        return program_class(name)
    except (KeyError, ValueError):
        return None


def table() -> str:
    """Markdown tables of this folder's summaries (``sqlweave.runs.table``)."""
    return runs_table(RESULTS)


def questions(examples: list[Any], skip: int = 0, limit: int = 0) -> list[Any]:
    """The slice's questions a run asks: the first ``skip`` left out, then ``limit`` (0: all)."""
    if skip < 0 or limit < 0:
        raise SystemExit("--skip and --limit take a number of questions >= 0")
    kept = examples[skip:]
    return kept[:limit] if limit else kept


def config_label(config: str | None, skip: int = 0) -> str | None:
    """The label in the run's file names: with ``skip``, ``-from<skip + 1>`` is added, so a pilot
    on later questions never shares a records file with a run over the first ones."""
    return f"{config or 'default'}-from{skip + 1}" if skip else config


def run(args: argparse.Namespace) -> dict[str, Any]:
    from sqlweave import programs
    from sqlweave.data import load_slice
    from sqlweave.evaluate import evaluate
    from sqlweave.lm import configure

    switches = _parse_switches(args.set or [])
    artifact = None
    if args.artifact:
        from sqlweave.optimizers import load_program

        artifact = load_program(args.artifact)
        meta = artifact[1]
        args.program = meta.program
        args.config = args.config or f"compiled-{meta.optimizer}"
        switches = dict(artifact[0].switches)
    RESULTS.mkdir(parents=True, exist_ok=True)
    args.config = config_label(args.config, args.skip)
    name = stem(args.program, args.config, args.slice, args.model)
    jsonl = RESULTS / f"{name}.jsonl"
    examples = questions(load_slice(args.slice), args.skip, args.limit)
    configure(args.model, **lm_options(args.n_threads, args.no_cache))
    prog = artifact[0] if artifact is not None else programs.get(args.program, **switches)
    started = time.perf_counter()
    identity = run_identity(args.program, dict(prog.switches), args.slice, args.model)
    identity = resumable_identity(identity, jsonl, _program_class(args.program))
    before = jsonl.read_bytes() if jsonl.is_file() else None
    evaluate(prog, examples, out_path=jsonl, resume=True, num_threads=1, identity=identity)
    wall = time.perf_counter() - started
    summary_path = RESULTS / f"{name}.json"
    old = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    summary = summarize_run(
        jsonl,
        program=args.program,
        config=args.config,
        switches=switches,
        slice_name=args.slice,
        model=args.model,
    )
    fresh = {
        "n_threads": args.n_threads,
        # of this invocation: a resume with the cache on, of a run begun without, says True
        "response_cache": not args.no_cache,
        "wall_seconds_this_invocation": round(wall, 1),
        "commit": _commit(),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    ran_nothing = before is not None and jsonl.read_bytes() == before
    summary.update(provenance(old, ran_nothing=ran_nothing, fresh=fresh))
    summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def rescore(jsonl: Path) -> tuple[int, int]:
    """Score every record of ``jsonl`` again with the current metrics (the LM's SQL is kept), so
    runs made before a scoring fix compare under one semantics. Returns (records, changed)."""
    from sqlweave.data import load_slice, open_database
    from sqlweave.evaluate import read_records
    from sqlweave.metrics import check_execution, semantics_for

    slice_name = jsonl.stem.split("__")[-2]
    examples = {str(ex.question_id): ex for ex in load_slice(slice_name)}
    records = read_records(jsonl)
    changed = 0
    for record in records:
        ex = examples[str(record["question_id"])]
        sem = semantics_for(ex)
        match = check_execution(
            record.get("pred_sql") or "", ex.gold_sql, open_database(ex), sem, strict_gold=False
        )
        if bool(match.correct) != bool(record.get("correct")):
            changed += 1
        record["correct"] = bool(match.correct)
        record["semantics"] = sem
    jsonl.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return len(records), changed


def build_parser() -> argparse.ArgumentParser:
    """The command line (a function, so tests read what a flag sets)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--program", default="naive")
    parser.add_argument("--config", default="", help="a label for these switches in file names")
    parser.add_argument("--set", action="append", help="switch=value for the program")
    parser.add_argument("--slice", default="spider-dev-200")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--n-threads", type=int, default=None, help="llama.cpp threads")
    parser.add_argument("--limit", type=int, default=0, help="first N questions only (iterate)")
    parser.add_argument(
        "--skip",
        type=int,
        default=0,
        help="leave out the slice's first N questions: a pilot on spider-train-select's "
        "questions the decision set (its first 1,000) never holds; the config gets -fromN+1",
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="ask the model every time (DSPy's response cache off): cold timings, and samples "
        "no earlier run's cache can answer",
    )
    parser.add_argument("--artifact", default="", help="a compiled program's file to evaluate")
    parser.add_argument("--table", action="store_true", help="write results/protocol/README.md")
    parser.add_argument(
        "--rescore", action="store_true", help="re-score every run here with the current metrics"
    )
    return parser


def main() -> None:
    args = build_parser().parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.rescore:
        runs = sorted(RESULTS.glob("*.jsonl"))
        for jsonl in runs:
            n, changed = rescore(jsonl)
            print(f"{jsonl.name}: {n} records, {changed} verdicts changed")
        for jsonl in runs:  # after every run is rescored: the vs-naive comparisons read naive
            summary_path = jsonl.with_suffix(".json")
            if summary_path.exists():
                old = json.loads(summary_path.read_text())
                new = summarize_run(
                    jsonl,
                    program=old["program"],
                    config=old.get("config", ""),
                    switches=old.get("switches", {}),
                    slice_name=old["slice"],
                    model=old["model"],
                    uncompiled=old.get("uncompiled_records"),
                )
                old.update(new)
                summary_path.write_text(json.dumps(old, indent=1) + "\n")
        return
    if args.table:
        (RESULTS / "README.md").write_text(table() + "\n")
        print(table())
        return
    summary = run(args)
    usage = summary.get("usage") or {}
    line = (
        f"{args.program} {args.slice} n={summary['n']} EX={100 * summary['ex']:.1f} "
        f"[{100 * summary['interval'][0]:.1f}, {100 * summary['interval'][1]:.1f}] "
        f"calls/q={usage.get('calls', 0):.2f} s/q={usage.get('wall_seconds', 0):.1f}"
    )
    if "oracle_ex" in summary:
        line += f" oracle={100 * summary['oracle_ex']:.1f} gap={100 * summary['selection_gap']:.1f}"
    for key, label in (("vs_naive", "naive"), ("vs_uncompiled", "uncompiled")):
        if key in summary:
            cmp = summary[key]
            line += f" vs {label} {100 * cmp['delta']:+.1f} p={cmp['p']:.3g}"
    print(line)


if __name__ == "__main__":
    main()
