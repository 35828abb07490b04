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

from run_programs import _commit, model_tag  # the same commit stamp and file-name tags

RESULTS = Path(__file__).resolve().parent / "results" / "protocol"
DEFAULT_MODEL = "local:qwen2.5-coder-1.5b"


def stem(program: str, config: str, slice_name: str, model: str) -> str:
    name = program if config in ("", "full", "default") else f"{program}__{config}"
    return f"{name}__{slice_name}__{model_tag(model)}"


def _parse_switches(items: list[str]) -> dict[str, Any]:
    from sqlweave.cli import parse_switches

    return parse_switches(items)


def summarize_run(
    jsonl: Path,
    *,
    program: str,
    config: str,
    switches: dict,
    slice_name: str,
    model: str,
    uncompiled: str | None = None,
) -> dict[str, Any]:
    """The JSON summary of one run's records, with the paired comparisons against naive and,
    for a compiled run, against the uncompiled program's records (``uncompiled``: their file
    name here; default: the program's default run on the slice)."""
    from sqlweave.evaluate import compare, read_records, summarize

    records = read_records(jsonl)
    summary = summarize(records)
    summary.pop("records")
    out: dict[str, Any] = {
        "program": program,
        "config": config,
        "switches": switches,
        "slice": slice_name,
        "model": model,
        "records": jsonl.name,
        **summary,
    }
    naive = RESULTS / f"{stem('naive', '', slice_name, model)}.jsonl"
    if program != "naive" and naive.exists():
        out["vs_naive"] = compare(records, read_records(naive))
    base = RESULTS / (uncompiled or f"{stem(program, '', slice_name, model)}.jsonl")
    if config.startswith("compiled") and base.exists():
        out["uncompiled_records"] = base.name
        out["vs_uncompiled"] = compare(records, read_records(base))
    return out


def _identity(program: str, switches: dict[str, Any], slice_name: str, model: str) -> dict:
    """What a run's records were made by, written beside its JSONL: a resume under other
    switches (a program's defaults changed, another ``--set``) raises instead of mixing runs.
    ``evaluate`` writes and compares it as JSON (a value JSON cannot hold becomes its text)."""
    return {"program": program, "switches": switches, "slice": slice_name, "model": model}


def resumable_identity(identity: dict[str, Any], jsonl: Path) -> dict[str, Any]:
    """``identity``, less the switches added to the program since ``jsonl``'s run was recorded
    and left at their default, when that is all that tells the two apart: a new switch's
    default keeps the old behaviour (a program names in ``LEGACY_SWITCHES`` the ones whose
    default does not), so resuming or re-reading that run is resuming the same run. Any other
    difference is left for ``evaluate`` to refuse."""
    from inspect import Parameter, signature

    from sqlweave.evaluate import read_run_identity
    from sqlweave.programs import program_class

    recorded = read_run_identity(jsonl) if jsonl.is_file() else None
    if not recorded or not isinstance(recorded.get("switches"), dict):
        return identity
    try:
        cls = program_class(identity["program"])
    except (KeyError, ValueError):
        return identity
    params = signature(cls.__init__).parameters
    legacy = getattr(cls, "LEGACY_SWITCHES", {})
    switches = identity["switches"]
    added = [
        name
        for name, value in switches.items()
        if name not in recorded["switches"]
        and name not in legacy
        and name in params
        and params[name].default is not Parameter.empty
        and value == params[name].default
    ]
    if not added:
        return identity
    reduced = {**identity, "switches": {k: v for k, v in switches.items() if k not in added}}
    if json.loads(json.dumps(reduced, sort_keys=True, default=str)) != recorded:
        return identity
    print(f"{jsonl.name}: recorded before the switches {', '.join(added)} (at their defaults)")
    return reduced


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
    name = stem(args.program, args.config, args.slice, args.model)
    jsonl = RESULTS / f"{name}.jsonl"
    examples = load_slice(args.slice)
    if args.limit:
        examples = examples[: args.limit]
    options: dict[str, Any] = {}
    if args.n_threads:
        options["n_threads"] = args.n_threads
    if args.no_cache:
        options["cache"] = False  # every call asked of the model: cold figures, fresh samples
    configure(args.model, **options)
    prog = artifact[0] if artifact is not None else programs.get(args.program, **switches)
    started = time.perf_counter()
    identity = _identity(args.program, dict(prog.switches), args.slice, args.model)
    identity = resumable_identity(identity, jsonl)
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


PROVENANCE = ("n_threads", "wall_seconds_this_invocation", "commit", "finished")
"""What a summary says of the invocation that made its records."""
LATER_PROVENANCE = ("response_cache",)
"""Provenance fields newer than the summaries of older runs: carried when there, never required."""


def provenance(old: dict[str, Any] | None, *, ran_nothing: bool, fresh: dict[str, Any]) -> dict:
    """The run's provenance fields: ``fresh`` when this invocation added records, else the
    summary's own. A resume that found every record done (another script asking for the same
    run) made nothing: stamping it with its own commit, threads and 0.1 s would erase which
    code and settings did make the records."""
    if ran_nothing and old and all(key in old for key in PROVENANCE):
        return {key: old[key] for key in (*PROVENANCE, *LATER_PROVENANCE) if key in old}
    return fresh


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


def _row(summary: dict[str, Any]) -> str:
    usage = summary.get("usage") or {}
    ex = 100 * summary["ex"]
    low, high = (100 * x for x in summary["interval"])
    label = summary["program"] + (
        f" ({summary['config']})" if summary.get("config") not in ("", "full", None) else ""
    )
    cmp = summary.get("vs_naive")
    if cmp:
        delta = f"{100 * cmp['delta']:+.1f} [{100 * cmp['delta_interval'][0]:+.1f}, {100 * cmp['delta_interval'][1]:+.1f}]"
        p = f"{cmp['p']:.2g}"
    else:
        delta, p = "—", "—"
    against = summary.get("vs_uncompiled")
    if against:
        label += f"; vs uncompiled {100 * against['delta']:+.1f}, p {against['p']:.2g}"
    calls = usage.get("calls")
    cached = usage.get("cached_calls") or 0.0
    secs = usage.get("wall_seconds")
    tokens = (usage.get("prompt_tokens") or 0) + (usage.get("completion_tokens") or 0)
    cost = (
        f"{calls:.2f} | {cached:.2f} | {tokens:,.0f} | {secs:.1f}"
        if calls is not None
        else "— | — | — | —"
    )
    oracle = summary.get("oracle_ex")
    ceiling = f"{100 * oracle:.1f}" if oracle is not None else "–"
    return (
        f"| {label} | {summary['n']} | {ex:.1f} | [{low:.1f}, {high:.1f}] | {ceiling} | {delta} "
        f"| {p} | {cost} |"
    )


def table() -> str:
    """Markdown tables, one per (slice, model), naive first, from the JSON summaries."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for path in sorted(RESULTS.glob("*.json")):
        if path.name.endswith(".run.json"):  # a run's identity, beside its JSONL
            continue
        summary = json.loads(path.read_text())
        groups.setdefault((summary["slice"], summary["model"]), []).append(summary)
    lines = [
        "# Protocol results",
        "",
        "Written by `python experiments/protocol.py --table` from the JSON summaries beside it. "
        "EX in %, 95% bootstrap interval; Δ vs naive is paired on the same questions (bootstrap "
        "interval), p is McNemar's exact test. oracle: EX of a perfect selector over the run's recorded candidates (some candidate right; – where the run recorded none). calls/q, cached/q (calls DSPy's cache answered "
        "from an earlier run), tokens/q (prompt + completion, cold calls only) and s/q are per "
        "question (s/q: wall seconds on this 2-core CPU machine, which other jobs shared during "
        "some runs). A cache hit costs no tokens and ~0 s, so a row with cached calls understates "
        "what a cold run costs.",
        "",
    ]
    for (slice_name, model), rows in sorted(groups.items()):
        rows.sort(key=lambda s: (s["program"] != "naive", -s["ex"]))
        lines += [
            f"## {slice_name}, {model}",
            "",
            "| program | n | EX | 95% CI | oracle | Δ vs naive [95% CI] | p | calls/q | cached/q "
            "| tokens/q | s/q |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *(_row(s) for s in rows),
            "",
        ]
    return "\n".join(lines)


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
