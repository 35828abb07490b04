"""Local LM throughput: prompt processing and decode speed, with and without KV prefix reuse.

One schema-heavy prompt (a Spider database's DDL plus sample rows, padded to about
``--prompt-tokens`` tokens) is asked several dev questions about that database. "cold" resets the
llama.cpp context before every call, so the whole prompt is processed each time; "reuse" keeps
it, so only the question differs and llama.cpp's longest-common-prefix reuse skips the schema.
Figures come from llama.cpp's own perf counters, read by the engine after each call.

    python experiments/bench_lm.py --models qwen2.5-coder-0.5b qwen2.5-coder-1.5b
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

from dspy.lm15 import Config, Message, Request

from sqlweave.lm import LlamaCppEngine

logger = logging.getLogger(__name__)

SYSTEM = "You translate questions into SQLite queries. Answer with the SQL only."


def data_root(explicit: str | None) -> Path:
    """Shared data folder: argument, then $SQLWEAVE_DATA, then ../shared/data."""
    if explicit:
        return Path(explicit)
    if os.environ.get("SQLWEAVE_DATA"):
        return Path(os.environ["SQLWEAVE_DATA"])
    return Path(__file__).resolve().parents[2] / "shared" / "data"


def schema_prompt(db: Path, count_tokens: Any, target: int) -> str:
    """DDL of ``db`` followed by sample rows, one row per table in turn, until ``target`` tokens."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type='table' AND sql IS NOT NULL ORDER BY name"
        ).fetchall()
        text = "\n".join(sql + ";" for _, sql in tables) + "\n\n-- sample rows\n"
        cursors = {name: conn.execute(f'SELECT * FROM "{name}"') for name, _ in tables}
        while count_tokens(text) < target and cursors:
            for name in list(cursors):
                row = cursors[name].fetchone()
                if row is None:
                    del cursors[name]
                    continue
                text += f"-- {name}: {row!r}\n"
    finally:
        conn.close()
    return text


def run_mode(
    engine: LlamaCppEngine, schema: str, questions: list[str], *, reuse: bool, max_tokens: int
) -> list[dict[str, Any]]:
    """Ask every question once; ``reuse=False`` clears the KV cache before each call."""
    llama = engine._loaded().llama
    llama.reset()
    rows = []
    for question in questions:
        if not reuse:
            llama.reset()
        request = Request(
            model=engine.spec,
            system=SYSTEM,
            messages=(Message.user(f"{schema}\nQuestion: {question}\nSQL:"),),
            config=Config(temperature=0.0, max_tokens=max_tokens),
        )
        started = time.perf_counter()
        response = engine.complete(request)
        wall = time.perf_counter() - started
        perf = dict(response.provider_data or {})
        rows.append(
            {
                "question": question,
                "answer": response.text,
                "wall_s": wall,
                "prompt_tokens": response.usage.input_tokens,
                "completion_tokens": response.usage.output_tokens,
                **perf,
            }
        )
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of per-call rates and times (robust to a noisy shared CPU), plus calls 2+ alone.

    With reuse, call 1 processes the whole prompt and calls 2+ only the differing suffix, so they
    are reported apart.
    """

    def rate(tokens: str, ms: str, subset: list[dict[str, Any]]) -> float | None:
        rates = [r[tokens] / (r[ms] / 1000) for r in subset if r[ms] > 0 and r[tokens] > 0]
        return statistics.median(rates) if rates else None

    later = rows[1:] or rows
    return {
        "calls": len(rows),
        "prompt_tokens_per_call": statistics.mean(r["prompt_tokens"] for r in rows),
        "prompt_tokens_evaluated_call1": rows[0]["prompt_eval_tokens"],
        "prompt_tokens_evaluated_calls2plus": statistics.median(
            r["prompt_eval_tokens"] for r in later
        ),
        "prompt_tok_per_s": rate(
            "prompt_eval_tokens",
            "prompt_eval_ms",
            rows[:1]
            if len(rows) > 1 and rows[1]["prompt_eval_tokens"] < rows[0]["prompt_eval_tokens"] / 2
            else rows,
        ),
        "decode_tok_per_s": rate("eval_tokens", "eval_ms", rows),
        "s_call1": rows[0]["wall_s"],
        "s_per_call_calls2plus": statistics.median(r["wall_s"] for r in later),
        "s_per_call_mean": statistics.mean(r["wall_s"] for r in rows),
    }


def main() -> None:
    """Parse arguments, run every model in both modes, print a table and write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    parser.add_argument("--db", default="world_1", help="Spider database id for the schema prompt")
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=1500)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=None, help="default: os.cpu_count()")
    parser.add_argument("--data", default=None)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "bench_lm.json"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    root = data_root(args.data)
    db = root / "spider" / "database" / args.db / f"{args.db}.sqlite"
    dev = json.loads((root / "spider" / "dev.json").read_text())
    questions = [item["question"] for item in dev if item["db_id"] == args.db][: args.questions]

    results: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "data")},
        "models": {},
    }
    print(
        f"{'model':<20}{'mode':<7}{'prompt tok':>11}{'eval 2+':>8}{'pp tok/s':>10}"
        f"{'decode tok/s':>13}{'s call1':>9}{'s/call 2+':>10}{'s/call mean':>12}"
    )
    for name in args.models:
        engine = LlamaCppEngine(f"local:{name}", n_threads=args.threads)
        llama = engine._loaded().llama
        schema = schema_prompt(
            db, lambda text, llama=llama: len(llama.tokenize(text.encode())), args.prompt_tokens
        )
        # warm-up: page the weights in so the first measured call is not a disk read
        run_mode(engine, "warm up", ["Say OK."], reuse=False, max_tokens=4)
        entry: dict[str, Any] = {"threads": engine.threads}
        for mode, reuse in (("cold", False), ("reuse", True)):
            rows = run_mode(engine, schema, questions, reuse=reuse, max_tokens=args.max_tokens)
            summary = summarise(rows)
            entry[mode] = {"summary": summary, "calls": rows}
            print(
                f"{name:<20}{mode:<7}{summary['prompt_tokens_per_call']:>11.0f}"
                f"{summary['prompt_tokens_evaluated_calls2plus']:>8.0f}{summary['prompt_tok_per_s']:>10.1f}"
                f"{summary['decode_tok_per_s']:>13.1f}{summary['s_call1']:>9.2f}"
                f"{summary['s_per_call_calls2plus']:>10.2f}{summary['s_per_call_mean']:>12.2f}",
                flush=True,
            )
        results["models"][name] = entry

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
