"""Evaluate programs and their ablation configurations on the fixed benchmark slices.

One JSON summary per (program, configuration, model, dataset) under
``experiments/results/programs/`` plus the per-question JSONL it was computed from. Runs resume:
a finished question is never asked again, and DSPy's on-disk cache replays LM calls that were
already made, so re-running after an interruption (or after a scoring fix) is cheap.

    python experiments/run_programs.py --program rsl --config full --model local:qwen2.5-coder-1.5b
    python experiments/run_programs.py --program mage --all-configs --model local:qwen2.5-coder-0.5b \
        --spider-n 50

The slices are fixed: Spider dev stratified by hardness (``eval_slice(n, seed=0)``) and every
question of the BIRD superhero slice.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlweave.runs import model_tag  # re-exported: two scripts import it from here

RESULTS = Path(__file__).resolve().parent / "results" / "programs"


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _slice(dataset: str, n: int, seed: int) -> list[Any]:
    from sqlweave.data import eval_slice, load_bird, load_spider

    if dataset == "spider":
        return eval_slice(load_spider(split="dev"), n=n or None, seed=seed)
    return eval_slice(load_bird(split="dev"), n=n or None, seed=seed)


def run_one(
    program: str,
    config: str,
    switches: dict[str, Any],
    model: str,
    dataset: str,
    n: int,
    seed: int,
    threads: int,
) -> dict[str, Any]:
    """Evaluate one configuration and write its JSON summary; returns the summary."""
    from sqlweave import programs
    from sqlweave.evaluate import evaluate

    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = f"{program}__{config}__{model_tag(model)}__{dataset}{n or 'all'}"
    jsonl = RESULTS / f"{stem}.jsonl"
    examples = _slice(dataset, n, seed)
    prog = programs.get(program, **switches)
    started = time.perf_counter()
    result = evaluate(prog, examples, out_path=jsonl, resume=True, num_threads=threads)
    wall = time.perf_counter() - started
    usage = result.get("usage") or {}
    summary = {
        "program": program,
        "config": config,
        "switches": switches,
        "model": model,
        "dataset": dataset,
        "slice": {"n": len(examples), "seed": seed, "stratify": "difficulty"},
        "ex": result["ex"],
        "n": result["n"],
        "errors": result.get("errors"),
        "by_difficulty": result["by_difficulty"],
        "usage_per_question": usage,
        "wall_seconds_this_run": round(wall, 1),
        "records": jsonl.name,
        "commit": _commit(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    (RESULTS / f"{stem}.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--program", required=True)
    parser.add_argument("--config", action="append", help="ABLATIONS entry (repeatable)")
    parser.add_argument("--all-configs", action="store_true")
    parser.add_argument("--model", default="local:qwen2.5-coder-1.5b")
    parser.add_argument("--datasets", default="spider,bird")
    parser.add_argument("--spider-n", type=int, default=100)
    parser.add_argument("--bird-n", type=int, default=0, help="0 = all 52")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import sqlweave.lm
    from sqlweave import programs

    sqlweave.lm.configure(args.model)
    cls = type(programs.get(args.program))
    ablations: dict[str, dict[str, Any]] = dict(getattr(cls, "ABLATIONS", {"full": {}}))
    configs = list(ablations) if args.all_configs else (args.config or ["full"])
    for config in configs:
        if config not in ablations:
            raise SystemExit(f"{args.program} has no configuration {config!r}: {list(ablations)}")
        for dataset in args.datasets.split(","):
            n = args.spider_n if dataset == "spider" else args.bird_n
            s = run_one(
                args.program,
                config,
                ablations[config],
                args.model,
                dataset,
                n,
                args.seed,
                args.threads,
            )
            u = s["usage_per_question"]
            print(
                f"{args.program:6s} {config:22s} {dataset:6s} n={s['n']:3d} EX={100 * s['ex']:5.1f} "
                f"calls/q={u.get('calls', 0):.2f} prompt_tok/q={u.get('prompt_tokens', 0):.0f} "
                f"s/q={u.get('seconds', 0):.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
