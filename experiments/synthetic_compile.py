"""Compiled on its own databases' synthesized pairs, versus uncompiled and versus Spider train
(issue 38, step 3).

For one program and one slice this script

1. takes each of the slice's databases' synthesized pairs (``synthesize_pairs.py`` writes them
   to ``results/synthesis/<db>.jsonl``; no question of the slice is read to make them) and
   compiles the program on them with ``sqlweave compile --db ... --synthesize N`` (the command a
   user runs; ``N`` pairs per database, a fifth of each held for validation), optimizer ``knn``:
   per question, the ``--k`` nearest synthesized questions of its own database as demos; or,
   with ``--optimizer search``, the switch search over ``--space`` (pairs synthesized without
   the round trip, ``--no-check``, and ``--val-fraction`` of each database's pairs validating:
   a search needs no demos, only validation the round-trip program did not pick);
2. with ``--spider``, compiles the same program with the same optimizer on Spider train (the
   slice's databases held out), as every compile before synthesis did;
3. runs ``protocol.py`` on the slice's real questions for naive, the uncompiled program and each
   artefact (loaded in a fresh process, as a user would); every run resumes;
4. writes ``results/synthesis/compile__<program>__<slice>__<model>.json``: EX with its 95%
   interval per row, and each compiled row paired against the uncompiled program, Spider train's
   compile and naive (bootstrap interval, McNemar's exact p).

    python experiments/synthetic_compile.py --slice spider-train-val --n 20 --k 4 --spider
    python experiments/synthetic_compile.py --slice spider-train-val --n 12 --optimizer search \
        --space samples=1,8 --space repair=none,joins --space repair_scope=fallback,all \
        --val-fraction 0.9 --no-check --pairs results/synthesis-unchecked --design unchecked

``--recorded RUN.jsonl`` names a recorded protocol run of the same program, slice and model (a
``<RUN>.run.json`` beside it says its switches): when a switch search (no demos) chose exactly
that run's switches and the run answered every question of the slice, its records are the
compiled row, and the result says so (``compiled_row_from``);
otherwise the compiled artefact is run as usual. A cold ``direct`` x 8 run costs 40 minutes
on dev; the recorded one is a run of the very program the compile chose, made before it chose.

``--baseline NAME=RUN.jsonl`` pairs the synthetic compile with any other recorded run of the
slice as well (e.g. the program compiled on Spider train by the switch search).

The pairs files get this machine's database paths in a work folder
(``$SQLWEAVE_CACHE/synthetic-experiments/<slice>``, else ``~/.cache/sqlweave/...``;
:func:`sqlweave.synthesis.sets.stage_pairs`), and the artefacts are written there too: the
committed sets and results stay portable.

``--no-run`` runs no step: it stages the pairs and prints each step's command, and stops there
(the result needs the runs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from compile_vs_uncompiled import _interval, _run
from protocol import RESULTS as PROTOCOL_RESULTS
from protocol import stem as protocol_stem
from run_programs import _commit, model_tag

from sqlweave.data import load_slice
from sqlweave.evaluate import compare, read_records, recorded_run_matches, summarize
from sqlweave.synthesis.pairs import SynthesisError
from sqlweave.synthesis.sets import cache_dir
from sqlweave.synthesis.sets import stage_pairs as stage_in

HERE = Path(__file__).resolve().parent
PAIRS = HERE / "results" / "synthesis"
DEFAULT_MODEL = "local:qwen2.5-coder-1.5b"


def work_dir(slice_name: str) -> Path:
    """Beside the library's synthetic cache (``$SQLWEAVE_CACHE`` or ``~/.cache/sqlweave``)."""
    return cache_dir().parent / "synthetic-experiments" / slice_name


def stage_pairs(slice_name: str, pairs_dir: Path, out_dir: Path) -> list[Path]:
    """Each database's pairs where ``sqlweave compile --synthetic-out out_dir/pairs`` reads them,
    with the database's path (:func:`sqlweave.synthesis.sets.stage_pairs`); returns the
    databases' files. A database without pairs stops the run: synthesizing is
    ``synthesize_pairs.py``'s job, with its own figures."""
    paths = {ex.db_id: Path(ex.db_path) for ex in load_slice(slice_name)}
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        return stage_in(paths, pairs_dir, out_dir / "pairs")
    except SynthesisError as err:
        missing = err.context.get("missing")
        if not missing:
            raise
        sys.exit(
            f"no synthesized pairs for {', '.join(missing)} in {pairs_dir}: run "
            f"python experiments/synthesize_pairs.py --dbs {' '.join(missing)}"
        )


def compile_cmd(args: argparse.Namespace, artefact: Path, data: list[str]) -> None:
    """``sqlweave compile`` of the program on ``data``'s options: ``knn`` with ``--k`` demos, or
    the switch search over ``--space`` (every trial scored on all of validation)."""
    cmd = [sys.executable, "-m", "sqlweave", "compile", "--program", args.program]
    cmd += ["--optimizer", args.optimizer, "--model", args.model, *data]
    if args.optimizer == "knn":
        cmd += ["--max-demos", str(args.k)]
    else:
        cmd += ["--trials", str(args.trials), "--n-val", "0", "--search-val", "0"]
        cmd += [part for item in args.space for part in ("--space", item)]
    _run([*cmd, "--out", str(artefact), "--no-progress"], dict(os.environ), args.no_run)


def synthetic_data(args: argparse.Namespace) -> list[str]:
    """The compile options of the slice's own synthesized pairs (staged first, in a folder of
    the design's own so two designs' pairs never mix)."""
    staged = work_dir(args.slice) / args.design if args.design else work_dir(args.slice)
    dbs = stage_pairs(args.slice, args.pairs, staged)
    data = [part for db in dbs for part in ("--db", str(db))]
    data += ["--synthesize", str(args.n), "--synthetic-out", str(staged / "pairs")]
    data += ["--synthetic-val-fraction", str(args.val_fraction)]
    # said either way: a search alone would otherwise default to no round trip
    return [*data, "--no-synthesis-check" if args.no_check else "--synthesis-check"]


def spider_data(args: argparse.Namespace) -> list[str]:
    """The compile options of Spider train (the slice's databases held out by ``--val``)."""
    return ["--train", "spider", "--n-train", "1000", "--val", args.slice, "--n-val", "4"]


def protocol(
    args: argparse.Namespace, *, program: str, artefact: Path | None = None, config: str = ""
) -> dict[str, Any] | None:
    """Run (or resume) ``protocol.py``; its summary and records, read once (None with
    ``--no-run``)."""
    cmd = [sys.executable, str(HERE / "protocol.py"), "--slice", args.slice, "--model", args.model]
    cmd += ["--artifact", str(artefact), "--config", config] if artefact else ["--program", program]
    if args.n_threads:
        cmd += ["--n-threads", str(args.n_threads)]
    _run(cmd, dict(os.environ), args.no_run)
    if args.no_run:
        return None
    path = PROTOCOL_RESULTS / f"{protocol_stem(program, config, args.slice, args.model)}.json"
    summary = json.loads(path.read_text())
    return {
        "row": _interval(summary),
        "records": read_records(PROTOCOL_RESULTS / summary["records"]),
    }


def _question_ids(slice_name: str) -> Iterator[str]:
    """The slice's question ids, loaded when first read (only if the rest of a run matches)."""
    for ex in load_slice(slice_name):
        yield ex.question_id


def recorded_match(
    run: Path, program: str, switches: dict[str, Any], slice_name: str, model: str
) -> bool:
    """Whether the recorded protocol run ``run`` (its ``.run.json`` beside it) ran the same
    program, slice and model with exactly ``switches`` (every switch, not only the searched
    ones) on every question of the slice (:func:`sqlweave.evaluate.recorded_run_matches`). Only
    a switch search's artefact can match: a run's record holds switches, not demos."""
    identity = {"program": program, "slice": slice_name, "model": model, "switches": switches}
    try:
        return recorded_run_matches(run, identity, _question_ids(slice_name))
    except FileNotFoundError:
        sys.exit(f"--recorded needs a run's JSONL with its .run.json beside it, got {run}")


def recorded_row(run: Path) -> dict[str, Any]:
    """A recorded run's row (EX with its interval) and its records."""
    records = read_records(run)
    summary = {**summarize(records), "records": run.name}
    return {"row": _interval(summary), "records": records}


def _portable(record: dict[str, Any]) -> dict[str, Any]:
    """The artefact's record of the synthetic set without this machine's paths."""
    databases = [
        {k: v for k, v in entry.items() if k not in ("db", "file")}
        for entry in record.get("databases", [])
    ]
    return {**record, "databases": databases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--program", default="direct")
    parser.add_argument("--slice", default="spider-train-val")
    parser.add_argument("--n", type=int, default=20, help="synthesized pairs per database")
    parser.add_argument("--k", type=int, default=4, help="demos per question")
    parser.add_argument("--spider", action="store_true", help="also compile on Spider train")
    parser.add_argument("--pairs", type=Path, default=PAIRS, help="the <db>.jsonl pairs' folder")
    parser.add_argument(
        "--design",
        default="",
        help="a name for this synthetic set's design (e.g. 'any'): it names the artefact, the "
        "protocol run and the result file, so designs never resume each other's runs",
    )
    parser.add_argument("--optimizer", choices=("knn", "search"), default="knn")
    parser.add_argument("--space", action="append", default=[], help="search: switch=a,b,c")
    parser.add_argument("--trials", type=int, default=8, help="search: configurations to try")
    parser.add_argument(
        "--val-fraction", type=float, default=0.2, help="each database's share that validates"
    )
    parser.add_argument(
        "--no-check", action="store_true", help="the pairs were synthesized without round trip"
    )
    parser.add_argument(
        "--baseline",
        action="append",
        default=[],
        help="NAME=RUN.jsonl: another recorded run of the slice to pair the compile with",
    )
    parser.add_argument(
        "--recorded",
        type=Path,
        action="append",
        default=[],
        help="RUN.jsonl: a recorded run whose records stand for the compiled row when the "
        "compile chose exactly its switches",
    )
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--n-threads", type=int, default=None)
    parser.add_argument("--no-run", action="store_true", help="print the steps, run none")
    args = parser.parse_args()
    if args.optimizer == "search" and not args.space:
        parser.error("--optimizer search needs --space (the switches the compile may choose)")
    if args.n_threads:
        os.environ["SQLWEAVE_N_THREADS"] = str(args.n_threads)  # the compiles' threads

    tag = model_tag(args.model)
    rows = {
        "naive": protocol(args, program="naive"),
        "uncompiled": protocol(args, program=args.program),
    }
    # Artefacts beside the staged pairs, not under results/: they record this machine's paths,
    # and a knn compile rebuilds them in seconds with no LM call.
    method = args.optimizer
    if method == "knn" and args.k != 4:  # the file names of k = 4, the first design
        method = f"knn{args.k}"
    compiles = {"synthetic": synthetic_data, **({"spider": spider_data} if args.spider else {})}
    artefacts: dict[str, Path] = {}
    compiled_from: dict[str, str] = {}
    for name, data in compiles.items():
        optimizer = f"{method}-{name}"
        if name == "synthetic" and args.design:
            optimizer += f"-{args.design}"
        artefact = work_dir(args.slice) / f"{args.program}__{optimizer}__{tag}.artefact.json"
        if not artefact.exists():
            compile_cmd(args, artefact, data(args))
        if args.no_run:
            continue
        artefacts[name] = artefact
        switches = json.loads(artefact.read_text())["meta"].get("switches") or {}
        searched = name == "synthetic" and args.optimizer == "search"  # switches, no demos
        same = [
            run
            for run in args.recorded
            if searched and recorded_match(run, args.program, switches, args.slice, args.model)
        ]
        if same:
            rows[name] = recorded_row(same[0])
            compiled_from[name] = same[0].name
            print(f"{name}: the compile chose the switches of {same[0].name}; its records count")
            continue
        rows[name] = protocol(
            args, program=args.program, artefact=artefact, config=f"compiled-{optimizer}"
        )

    if args.no_run:
        return
    for item in args.baseline:
        name, sep, path = item.partition("=")
        if not sep or not name or not Path(path).is_file():
            sys.exit(f"--baseline needs NAME=RUN.jsonl of a recorded run, got {item!r}")
        rows[name] = recorded_row(Path(path))

    meta = json.loads(artefacts["synthetic"].read_text())["meta"]
    search = ((meta.get("extra") or {}).get("details") or {}).get("search")
    result = {
        "program": args.program,
        "slice": args.slice,
        "model": args.model,
        "optimizer": args.optimizer,
        "k": args.k if args.optimizer == "knn" else None,
        "chosen_switches": meta.get("switches"),
        "search": search,
        "synthetic_val_ex_pct": meta.get("val_ex_pct"),
        "design": args.design or "answer",
        "synthetic": _portable((meta.get("extra") or {}).get("synthetic") or {}),
        "rows": {name: run["row"] for name, run in rows.items()},
        "compiled_row_from": compiled_from,
        "synthetic_vs": {
            name: compare(rows["synthetic"]["records"], run["records"])
            for name, run in rows.items()
            if name != "synthetic"
        },
        "commit": _commit(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    design = f"__{args.design}" if args.design else ""
    out = PAIRS / f"compile__{args.program}__{args.slice}__{tag}{design}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    for name, row in result["rows"].items():
        lo, hi = row["interval"]
        print(f"{name:>10}: EX {100 * row['ex']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] n={row['n']}")
    for name, c in result["synthetic_vs"].items():
        lo, hi = c["delta_interval"]
        print(
            f"synthetic vs {name}: {100 * c['delta']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] "
            f"p={c['p']:.3g} (only synthetic {c['only_run']}, only {name} {c['only_baseline']})"
        )
    print(f"-> {out}")


if __name__ == "__main__":
    main()
