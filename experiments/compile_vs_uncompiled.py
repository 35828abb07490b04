"""Compiled versus uncompiled, under the evaluation protocol (issue 16).

For one (program, optimizer, model) this script

1. **compiles** with ``python -m sqlweave compile``, the command users run: train is Spider train
   without the ``spider-train-val`` databases, validation is the first ``--n-val`` questions of
   ``spider-train-val`` (databases the demos never saw, as dev's are). The compile keeps a
   checkpoint, so a killed run resumes; a finished artefact is reused
   (``results/compile/<program>__<optimizer>__<model>.artefact.json``; ``--recompile`` redoes it);
2. for each report slice (``--slices``, default ``spider-dev-200``), runs ``protocol.py`` for the
   **uncompiled** program (reused when its summary exists) and for the **artefact**, loaded in a
   fresh process as a user would (``protocol.py --artifact``); both runs resume;
3. writes ``results/compile/<stem>.json``: the compile's cost (LM calls used of the budget,
   seconds, what the search chose) and per slice EX with its 95% interval before and after, the
   paired difference and McNemar's exact p (from the protocol summaries).

Nothing here is chosen on a report slice: the optimizer sees train and spider-train-val only.

    python experiments/compile_vs_uncompiled.py --program direct --optimizer search --n-val 40 \
        --budget 2500
    python experiments/compile_vs_uncompiled.py --program pet --optimizer search \
        --space samples=2,8 --space num_demos=0,2 --n-val 40 --budget 3000 --slices spider-dev-200
    python experiments/compile_vs_uncompiled.py --table   # results/compile/README.md

``--n-threads`` sets the llama.cpp threads of every step (``SQLWEAVE_N_THREADS`` for the compile).
``--no-run`` runs no step: it prints each step's command and writes the summary from the artefact
and the protocol summaries already there (none without an artefact).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from protocol import RESULTS as PROTOCOL_RESULTS
from protocol import stem as protocol_stem
from run_programs import _commit, model_tag

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "compile"
DEFAULT_MODEL = "local:qwen2.5-coder-1.5b"


def compile_command(args: argparse.Namespace, artefact: Path) -> list[str]:
    """The ``sqlweave compile`` command line for ``args`` (validation: spider-train-val)."""
    cmd = [
        sys.executable,
        "-m",
        "sqlweave",
        "compile",
        "--program",
        args.program,
        "--optimizer",
        args.optimizer,
        "--train",
        "spider",
        "--val",
        "spider-train-val",
        "--n-val",
        str(args.n_val),
        "--n-train",
        str(args.n_train),
        "--max-demos",
        str(args.max_demos),
        "--trials",
        str(args.trials),
        "--model",
        args.model,
        "--out",
        str(artefact),
        "--no-progress",
    ]
    if args.budget is not None:
        cmd += ["--budget", str(args.budget)]
    if args.search_val:
        cmd += ["--search-val", str(args.search_val)]
    for item in args.space:
        cmd += ["--space", item]
    if args.proposer_model:
        cmd += ["--proposer-model", args.proposer_model]
    return cmd


def protocol_command(args: argparse.Namespace, slice_name: str, artefact: Path | None) -> list[str]:
    """``protocol.py`` for the uncompiled program (``artefact`` None) or the compiled one."""
    cmd = [sys.executable, str(HERE / "protocol.py"), "--slice", slice_name, "--model", args.model]
    cmd += ["--artifact", str(artefact)] if artefact else ["--program", args.program]
    if artefact and getattr(args, "tag", ""):  # its own protocol files, beside an earlier one's
        cmd += ["--config", _compiled_config(args.optimizer, args.tag)]
    if args.n_threads:
        cmd += ["--n-threads", str(args.n_threads)]
    return cmd


def _tagged(optimizer: str, tag: str = "") -> str:
    """``<optimizer>[-<tag>]``: a compile's name in its file names and protocol label."""
    return optimizer + (f"-{tag}" if tag else "")


def _compiled_config(optimizer: str, tag: str = "") -> str:
    """The protocol label of a compiled run: ``compiled-<optimizer>[-<tag>]``."""
    return f"compiled-{_tagged(optimizer, tag)}"


def _stem(args: argparse.Namespace) -> str:
    """``<program>__<optimizer>[-<tag>]__<model>``: the compile's file names."""
    optimizer = _tagged(args.optimizer, getattr(args, "tag", ""))
    return f"{args.program}__{optimizer}__{model_tag(args.model)}"


def _run(cmd: list[str], env: dict[str, str], no_run: bool = False) -> None:
    """Run one step (only print its command with ``no_run``); from this folder, so ``python -m
    sqlweave`` imports the installed package (on ``PYTHONPATH`` or the venv), never a
    ``sqlweave/`` folder in the caller's directory."""
    print("$", " ".join(cmd[1:]), flush=True)
    if not no_run:
        subprocess.run(cmd, check=True, env=env, cwd=HERE)


def _interval(summary: dict[str, Any]) -> dict[str, Any]:
    return {
        "n": summary["n"],
        "ex": summary["ex"],
        "interval": summary["interval"],
        "calls_per_q": (summary.get("usage") or {}).get("calls"),
        "seconds_per_q": (summary.get("usage") or {}).get("wall_seconds"),
        "records": summary["records"],
    }


def summarize(args: argparse.Namespace, artefact: Path, compile_wall: float | None) -> dict:
    """The comparison's summary from the artefact and the protocol summaries."""
    data = json.loads(artefact.read_text())
    meta = data.get("meta") or {}
    extra = meta.get("extra") or {}
    search = (extra.get("details") or {}).get("search") or {}
    slices: dict[str, Any] = {}
    for slice_name in args.slices:
        before = (
            PROTOCOL_RESULTS / f"{protocol_stem(args.program, '', slice_name, args.model)}.json"
        )
        config = _compiled_config(meta.get("optimizer", args.optimizer), getattr(args, "tag", ""))
        after = (
            PROTOCOL_RESULTS / f"{protocol_stem(args.program, config, slice_name, args.model)}.json"
        )
        if not (before.exists() and after.exists()):
            continue
        b, a = json.loads(before.read_text()), json.loads(after.read_text())
        slices[slice_name] = {
            "uncompiled": _interval(b),
            "compiled": _interval(a),
            "vs_uncompiled": a.get("vs_uncompiled"),
            "compiled_vs_naive": a.get("vs_naive"),
        }
    return {
        "program": args.program,
        "optimizer": meta.get("optimizer", args.optimizer),
        "model": args.model,
        "protocol": True,
        "budget": meta.get("budget", args.budget),
        "compile": {
            "lm_calls": meta.get("lm_calls"),
            "seconds": meta.get("compile_seconds"),
            "wall_seconds_this_invocation": compile_wall,
            "budget_exhausted": extra.get("budget_exhausted"),
            "n_train": meta.get("n_train"),
            "n_val": meta.get("n_val"),
            # a fraction, as this file always held; artefacts now store a percentage
            "val_ex": (
                meta["val_ex_pct"] / 100
                if meta.get("val_ex_pct") is not None
                else meta.get("val_ex")
            ),
        },
        "chosen": search.get("chosen"),
        "search_trials": [
            {k: t.get(k) for k in ("switches", "score", "calls", "seconds", "status")}
            for t in search.get("trials", [])
        ],
        "slices": slices,
        "artefact": artefact.name,
        "commit": _commit(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def previous_compile_wall(summary_path: Path) -> float | None:
    """The compile wall time an earlier summary recorded: a rerun that reuses the artefact (to add a
    slice) compiles nothing, and must not erase what the compile cost."""
    if not summary_path.exists():
        return None
    try:
        previous = json.loads(summary_path.read_text()).get("compile") or {}
    except (json.JSONDecodeError, AttributeError):
        return None
    return previous.get("wall_seconds_this_invocation")


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def protocol_rows() -> list[str]:
    rows = []
    for path in sorted(RESULTS.glob("*.json")):
        if path.name.endswith((".artefact.json", ".ckpt.json")):
            continue
        r = json.loads(path.read_text())
        if not r.get("protocol"):
            continue
        c = r["compile"]
        chosen = ", ".join(f"{k}={v}" for k, v in (r.get("chosen") or {}).items()) or "—"
        budget = f" of {r['budget']}" if r.get("budget") else ""
        for slice_name, s in r["slices"].items():
            b, a, cmp = s["uncompiled"], s["compiled"], s.get("vs_uncompiled") or {}
            delta = (
                f"{100 * cmp['delta']:+.1f} [{100 * cmp['delta_interval'][0]:+.1f}, "
                f"{100 * cmp['delta_interval'][1]:+.1f}] | {cmp['p']:.2g}"
                if cmp
                else "— | —"
            )
            rows.append(
                f"| {r['program']} | {r['optimizer']} | {slice_name} | {a['n']} "
                f"| {_pct(b['ex'])} | {_pct(a['ex'])} [{_pct(a['interval'][0])}, "
                f"{_pct(a['interval'][1])}] | {delta} | {c['lm_calls']}{budget} "
                f"| {c['seconds'] or 0:.0f} | {_pct(c['val_ex'])} (n={c['n_val']}) | {chosen} |"
            )
    return rows


def table() -> str:
    """``results/compile/README.md``: the protocol comparisons, then the older small-sample ones."""
    lines = [
        "# Compiled versus uncompiled",
        "",
        "Generated by `python experiments/compile_vs_uncompiled.py --table`. Each compile saw Spider",
        "train only (without the spider-train-val databases) and chose on spider-train-val; the",
        "compiled figures are the artefact's, loaded back in a fresh process (`protocol.py",
        "--artifact`). Δ is paired on the same questions (bootstrap 95% interval), p is McNemar's",
        "exact test; compile s is the optimizer's time on this 2-core CPU.",
        "",
        "| program | optimizer | slice | n | uncompiled EX | compiled EX [95% CI] | Δ [95% CI] | p "
        "| calls used | compile s | validation EX | chosen |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *protocol_rows(),
        "",
        "Earlier compiles (before the protocol, n = 20–30 dev questions: small samples) are kept",
        "beside this file as `*__knn__*`, `*__bootstrap__*` JSON/JSONL for the record.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", action="store_true", help="only write results/compile/README.md")
    parser.add_argument("--program")
    parser.add_argument("--optimizer", default="search")
    parser.add_argument("--budget", type=int, default=None, help="the compile's LM-call cap")
    parser.add_argument("--n-train", type=int, default=24, help="train examples (0 = all)")
    parser.add_argument("--n-val", type=int, default=40, help="spider-train-val questions")
    parser.add_argument("--search-val", type=int, default=0, help="search: questions per trial")
    parser.add_argument("--trials", type=int, default=8, help="search: configurations")
    parser.add_argument("--space", action="append", default=[], help="search: switch=a,b,c")
    parser.add_argument("--max-demos", type=int, default=2)
    parser.add_argument("--proposer-model", default=None)
    parser.add_argument("--slices", nargs="+", default=["spider-dev-200"])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--n-threads", type=int, default=None)
    parser.add_argument("--recompile", action="store_true", help="compile even if saved")
    parser.add_argument("--skip-uncompiled", action="store_true", help="no uncompiled runs")
    parser.add_argument(
        "--tag", default="", help="names this compile's files apart from an earlier one's"
    )
    parser.add_argument(
        "--no-run", action="store_true", help="print the steps; summarise what is already there"
    )
    args = parser.parse_args()
    if args.table:
        text = table()
        (RESULTS / "README.md").write_text(text)
        print(text)
        return
    if not args.program:
        parser.error("--program is required (or --table)")
    RESULTS.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if args.n_threads:
        env["SQLWEAVE_N_THREADS"] = str(args.n_threads)
    artefact = RESULTS / f"{_stem(args)}.artefact.json"
    compile_wall = None
    if args.recompile or not artefact.exists():
        started = time.perf_counter()
        _run(compile_command(args, artefact), env, args.no_run)
        if not args.no_run:
            compile_wall = round(time.perf_counter() - started, 1)
    for slice_name in args.slices:
        before = (
            PROTOCOL_RESULTS / f"{protocol_stem(args.program, '', slice_name, args.model)}.json"
        )
        if not args.skip_uncompiled and not before.exists():
            _run(protocol_command(args, slice_name, None), env, args.no_run)
        _run(protocol_command(args, slice_name, artefact), env, args.no_run)
    if not artefact.exists():  # --no-run before the compile
        print(f"no {artefact.name} yet: no summary")
        return
    out = RESULTS / f"{_stem(args)}.json"
    if compile_wall is None:
        compile_wall = previous_compile_wall(out)
    summary = summarize(args, artefact, compile_wall)
    out.write_text(json.dumps(summary, indent=1) + "\n")
    for slice_name, s in summary["slices"].items():
        cmp = s.get("vs_uncompiled") or {}
        print(
            f"{args.program} {args.optimizer} {slice_name}: uncompiled "
            f"{_pct(s['uncompiled']['ex'])} -> compiled {_pct(s['compiled']['ex'])}"
            + (f" ({100 * cmp['delta']:+.1f}, p={cmp['p']:.3g})" if cmp else "")
        )


if __name__ == "__main__":
    main()
