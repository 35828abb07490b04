"""Compiled versus uncompiled: validation and dev EX of one program before and after an optimizer.

For one (program, optimizer, model) this script

1. takes a fixed slice of Spider **train** (``--n-train``, seed 0) for the optimizer and a disjoint
   fixed slice of train (``--n-val``) for validation, so no dev question is ever seen while
   compiling;
2. scores the uncompiled program on the validation slice and on the dev slices;
3. compiles with ``sqlweave.compile`` (optimizer, LM-call budget, wall time recorded), saves the
   artefact, **loads it back** and scores the loaded program on the same slices;
4. writes ``experiments/results/compile/<program>__<optimizer>__<model>.json`` (plus one JSONL per
   scored slice; every slice resumes, and DSPy's cache replays finished LM calls).

    python experiments/compile_vs_uncompiled.py --program direct --optimizer knn --n-train 1000 \
        --model local:qwen2.5-coder-1.5b
    python experiments/compile_vs_uncompiled.py --program sea --optimizer bootstrap --budget 40 \
        --model local:qwen2.5-coder-0.5b

The dev slices are the ones ``run_programs.py`` uses (Spider dev stratified by hardness, seed 0;
BIRD superhero stratified by difficulty), so the uncompiled figures match that table.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "compile"


def _model_tag(model: str) -> str:
    return model.split(":")[-1].replace("/", "_").replace("qwen2.5-coder-", "")


def _slices(args: argparse.Namespace) -> tuple[list[Any], list[Any], dict[str, list[Any]]]:
    from sqlweave.data import assert_disjoint, eval_slice, load_bird, load_spider

    train_all = load_spider(split="train")
    pool = eval_slice(train_all, n=args.n_train + args.n_val, seed=0, stratify=None)
    # The validation questions are the first n_val of a seeded shuffle of the pool; the rest train.
    from sqlweave.optimizers.compile import split_train_val

    trainset, valset = split_train_val(pool, val_fraction=args.n_val / len(pool), seed=0)
    dev: dict[str, list[Any]] = {}
    if args.spider_n:
        dev["spider"] = eval_slice(load_spider(split="dev"), n=args.spider_n, seed=0)
    if args.bird_n:
        dev["bird"] = eval_slice(load_bird(split="dev"), n=args.bird_n, seed=0)
    for examples in dev.values():
        assert_disjoint(trainset + valset, examples)
    return trainset, valset, dev


def _score(program: Any, examples: list[Any], out: Path) -> dict[str, Any]:
    from sqlweave.evaluate import evaluate

    result = evaluate(program, examples, out_path=out, resume=True)
    return {
        "ex": result["ex"],
        "n": result["n"],
        "by_difficulty": result["by_difficulty"],
        "usage_per_question": result.get("usage") or {},
        "records": out.name,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--program", required=True)
    parser.add_argument("--set", action="append", default=[], help="switch=value (repeatable)")
    parser.add_argument("--optimizer", default="bootstrap")
    parser.add_argument("--budget", type=int, default=None, help="optimizer LM-call cap")
    parser.add_argument("--max-demos", type=int, default=4)
    parser.add_argument("--n-train", type=int, default=48)
    parser.add_argument("--n-val", type=int, default=20)
    parser.add_argument("--spider-n", type=int, default=30)
    parser.add_argument("--bird-n", type=int, default=0)
    parser.add_argument("--model", default="local:qwen2.5-coder-1.5b")
    parser.add_argument("--tag", default="", help="suffix for the output names")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import sqlweave.lm
    from sqlweave import api, programs
    from sqlweave.cli import parse_switches

    sqlweave.lm.configure(args.model)
    switches = parse_switches(args.set)
    stem = f"{args.program}__{args.optimizer}__{_model_tag(args.model)}{args.tag}"
    RESULTS.mkdir(parents=True, exist_ok=True)
    trainset, valset, dev = _slices(args)

    uncompiled = programs.get(args.program, **switches)
    before = {"val": _score(uncompiled, valset, RESULTS / f"{stem}__uncompiled__val.jsonl")}
    for name, examples in dev.items():
        before[name] = _score(uncompiled, examples, RESULTS / f"{stem}__uncompiled__{name}.jsonl")
        print(f"uncompiled {name}: EX {100 * before[name]['ex']:.1f}", flush=True)
    print(f"uncompiled val: EX {100 * before['val']['ex']:.1f}", flush=True)

    artefact = RESULTS / f"{stem}.artefact.json"
    started = time.perf_counter()
    compiled = api.compile(
        args.program,
        trainset,
        valset,
        optimizer=args.optimizer,
        budget=args.budget,
        max_demos=args.max_demos,
        checkpoint=RESULTS / f"{stem}.ckpt.json",
        progress=True,
        **switches,
    )
    compile_wall = time.perf_counter() - started
    compiled.save(artefact)
    loaded = api.load(artefact)
    after = {"val": {"ex": loaded.meta.val_ex, "n": len(valset)}}
    for name, examples in dev.items():
        after[name] = _score(loaded.program, examples, RESULTS / f"{stem}__compiled__{name}.jsonl")
        print(f"compiled {name}: EX {100 * after[name]['ex']:.1f}", flush=True)
    print(f"compiled val: EX {100 * (loaded.meta.val_ex or 0):.1f}", flush=True)

    meta = loaded.meta
    summary = {
        "program": args.program,
        "switches": switches,
        "optimizer": args.optimizer,
        "budget": args.budget,
        "max_demos": args.max_demos,
        "model": args.model,
        "n_train": len(trainset),
        "n_val": len(valset),
        "dev_slices": {k: len(v) for k, v in dev.items()},
        "compile": {
            "wall_seconds": round(compile_wall, 1),
            "optimizer_lm_calls": meta.lm_calls,
            "optimizer_seconds": meta.compile_seconds,
            "budget_exhausted": meta.extra.get("budget_exhausted"),
            "val_lm_calls": meta.extra.get("val_lm_calls"),
        },
        "uncompiled": before,
        "compiled": after,
        "artefact": artefact.name,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    (RESULTS / f"{stem}.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
