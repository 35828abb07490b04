"""Local LM throughput on a busy machine (issue 15): idle against one competing busy process.

llama.cpp splits every prompt batch and decode step over ``n_threads`` threads that meet at a
barrier. With as many threads as cores, any other busy process takes a core from one of them and
the others wait at every barrier, so throughput collapses (the issue measured ~0.1x idle). With
fewer threads than cores the neighbour takes the spare core instead. This script measures that
rule on the same questions, for each thread count asked for:

- ``idle``: ``direct`` (one greedy call per question, through :func:`sqlweave.evaluate`) on the
  first ``--limit`` questions of ``spider-dev-200``, nothing else running;
- ``busy``: the same, while ``--busy`` child processes spin on the CPU at the same priority (a
  pure-Python loop: a compile, a test run or a browser tab stands in for it).

Per thread count and condition: seconds per question and throughput relative to idle; the SQL
written under load is checked to be the same as idle (greedy decoding does not depend on timing).
The target (issue 15): with the default thread rule (:func:`sqlweave.lm.default_threads`), the
busy throughput is at least 0.5x idle. Each run starts with an empty KV cache and without the
response cache, so every question is decoded.

    python experiments/bench_busy.py                        # 1.5B, 10 questions, 1 and 2 threads
    python experiments/bench_busy.py --threads 1 --limit 5  # a quick look

Run it with the machine otherwise idle: it *is* the competing load it measures. Whether the
kernel groups processes by session (``/proc/sys/kernel/sched_autogroup_enabled``) is recorded:
the busy child shares the benchmark's session either way, so the result does not depend on it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench_lm import _commit, machine, recording_lm, run_sqlweave

from sqlweave.lm import DEFAULT_MODEL, default_threads

logger = logging.getLogger(__name__)

RESULTS = Path(__file__).resolve().parent / "results"
TARGET = 0.5  # busy throughput / idle throughput, with the default thread rule
_SPIN = "while True:\n    pass\n"


@contextmanager
def busy_processes(count: int) -> Iterator[list[int]]:
    """``count`` child processes spinning on the CPU for the duration of the block."""
    children = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(count)]
    try:
        time.sleep(0.5)  # let them reach the loop before timing starts
        yield [child.pid for child in children]
    finally:
        for child in children:
            child.kill()
        for child in children:
            child.wait()


def autogroup() -> str | None:
    """The kernel's session grouping setting, if this is Linux and it is readable."""
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip()
    except OSError:
        return None


def measure(
    model: str, examples: list[Any], n_threads: int, busy: int, progress: bool
) -> dict[str, Any]:
    """``direct`` on ``examples`` with ``n_threads``, idle and beside ``busy`` spinning processes."""
    lm, engine = recording_lm(model, n_threads=n_threads, lookup=0)
    engine._loaded()
    lm("Say OK.", max_tokens=4)  # warm-up, not timed
    out: dict[str, Any] = {"n_threads": n_threads}
    for condition in ("idle", "busy"):
        with busy_processes(busy if condition == "busy" else 0):
            started = time.perf_counter()
            rows = run_sqlweave(
                "direct",
                examples,
                lm,
                engine,
                samples=1,
                temperature=0.0,
                progress=progress,
            )
            seconds = time.perf_counter() - started
        out[condition] = {
            "seconds": seconds,
            "s_per_question": seconds / len(examples),
            "ex": sum(row["correct"] for row in rows) / len(rows),
            "sql": {row["question_id"]: row["pred_sql"] for row in rows},
        }
        logger.info("%d threads, %s: %.2f s/q", n_threads, condition, seconds / len(examples))
    idle, loaded = out["idle"], out["busy"]
    out["throughput_vs_idle"] = idle["seconds"] / loaded["seconds"] if loaded["seconds"] else None
    out["same_sql"] = sum(idle["sql"][qid] == sql for qid, sql in loaded["sql"].items()) / len(
        examples
    )
    return out


def main() -> None:
    """Parse arguments, measure each thread count idle and busy, print a table, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="local:NAME or gguf:PATH")
    parser.add_argument("--slice", default="spider-dev-200")
    parser.add_argument("--limit", type=int, default=10, help="first N questions of the slice")
    parser.add_argument("--threads", type=int, nargs="+", default=None, help="default: 1 .. cores")
    parser.add_argument("--busy", type=int, default=1, help="competing busy processes")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_busy.json")
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    from sqlweave.data import load_slice

    examples = load_slice(args.slice)[: args.limit]
    cores = os.cpu_count() or 1
    threads = args.threads or list(range(1, cores + 1))
    rule = default_threads()
    results: dict[str, Any] = {
        "machine": {**machine(), "sched_autogroup_enabled": autogroup()},
        "commit": _commit(),
        "settings": {
            "model": args.model,
            "slice": args.slice,
            "questions": len(examples),
            "busy_processes": args.busy,
            "default_threads": rule,
        },
        "runs": [measure(args.model, examples, t, args.busy, args.progress) for t in threads],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")

    print(f"{len(examples)} questions, {args.busy} busy process(es), {cores} cores, {args.model}")
    print("| n_threads | idle s/q | busy s/q | busy throughput / idle | same SQL |")
    print("|---|---|---|---|---|")
    for run in results["runs"]:
        mark = " (default)" if run["n_threads"] == rule else ""
        print(
            f"| {run['n_threads']}{mark} | {run['idle']['s_per_question']:.2f} "
            f"| {run['busy']['s_per_question']:.2f} | {run['throughput_vs_idle']:.2f} "
            f"| {run['same_sql']:.0%} |"
        )
    chosen = next((r for r in results["runs"] if r["n_threads"] == rule), None)
    if chosen is not None:
        met = chosen["throughput_vs_idle"] >= TARGET
        print(
            f"default rule ({rule} thread(s)): busy/idle {chosen['throughput_vs_idle']:.2f}, "
            f"target >= {TARGET}: {'met' if met else 'missed'}"
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
