"""What a batch of rows costs the local model, and how far a row's logits move inside one.

Batched samples (issue 15, docs/lm.md) decode one row per distinct sequence history per step.
Two figures decide what that buys on a given machine:

- **step cost**: one ``llama_decode`` of 1..``--max-rows`` rows (each its own sequence, one
  token each, after a ``--prompt-tokens`` prompt they share), median of ``--reps`` steps; on a
  compute-bound CPU a step of r rows costs nearly r times one row, where a memory-bound device
  pays little more than one;
- **row noise**: the same token at the same position decoded as r identical rows of one batch
  (r = 1..``--max-rows``), each row's logits against the one-row decode: the largest difference,
  the largest between rows with identical inputs, and whether the best token changed. llama.cpp's
  CPU kernels sum a row differently in a batch than alone, so a greedy answer decoded in a batch
  (the greedy call hosting its samples' batch) can tip a near-tie.

    python experiments/bench_rows.py                     # 1.5B, 2 threads
    python experiments/bench_rows.py --model qwen2.5-coder-0.5b --reps 10

Writes ``experiments/results/bench_rows.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_lm import _commit, machine

from sqlweave.lm import DEFAULT_MODEL, LlamaCppEngine

RESULTS = Path(__file__).resolve().parent / "results"

PROMPT = (
    "CREATE TABLE airports (City TEXT, AirportCode TEXT PRIMARY KEY, AirportName TEXT, "
    "Country TEXT, CountryAbbrev TEXT);\n"
    "CREATE TABLE flights (Airline INTEGER, FlightNo INTEGER, SourceAirport TEXT REFERENCES "
    "airports (AirportCode), DestAirport TEXT REFERENCES airports (AirportCode));\n"
)
QUESTION = (
    "-- Using valid SQLite, answer: Which city and country is the Alton airport at?\n"
    "SELECT T1.City, T1.Country FROM airports AS T1 JOIN flights AS T2 ON T1.AirportCode = T2."
)


def _prompt_tokens(llama: Any, n: int) -> list[int]:
    """About ``n`` tokens: the schema repeated, then the question (its last token decoded)."""
    schema = llama.tokenize(PROMPT.encode())
    tail = llama.tokenize(QUESTION.encode(), add_bos=False)
    body = (schema * (max(n - len(tail), len(schema)) // len(schema) + 1))[: max(0, n - len(tail))]
    return body + tail


def _clear(llama: Any, rows: int, keep: int) -> None:
    """Drop every sequence's cells from position ``keep`` on."""
    for seq in range(rows):
        llama._seq_rm(seq, keep)


def step_costs(llama: Any, tokens: list[int], max_rows: int, reps: int) -> list[dict[str, float]]:
    """Median seconds of one decode step of r rows, r = 1..max_rows, interleaved per rep."""
    n = len(tokens)
    times: dict[int, list[float]] = {r: [] for r in range(1, max_rows + 1)}
    for rep in range(reps):
        for rows in times:
            entries = [(tokens[(rep + r) % n], n, [r]) for r in range(rows)]
            started = time.perf_counter()
            code = llama._decode_multi(entries)
            times[rows].append(time.perf_counter() - started)
            if code != 0:
                raise RuntimeError(f"llama_decode returned {code} for {rows} rows")
            _clear(llama, max_rows, n)
    out = []
    for rows, seconds in times.items():
        ms = statistics.median(seconds) * 1000
        out.append({"rows": rows, "ms": round(ms, 2), "ms_per_row": round(ms / rows, 2)})
    return out


def row_noise(llama: Any, tokens: list[int], max_rows: int) -> list[dict[str, Any]]:
    """The last prompt token decoded as r identical rows: each row's logits against one row's."""
    n_vocab = llama.n_vocab()
    last, pos = tokens[-1], len(tokens) - 1

    def logits(i: int) -> np.ndarray:
        return np.ctypeslib.as_array(llama._ctx.get_logits_ith(i), shape=(n_vocab,)).copy()

    out: list[dict[str, Any]] = []
    alone: np.ndarray | None = None
    for rows in range(1, max_rows + 1):
        code = llama._decode_multi([(last, pos, [r]) for r in range(rows)])
        if code != 0:
            raise RuntimeError(f"llama_decode returned {code} for {rows} rows")
        found = [logits(i) for i in range(rows)]
        _clear(llama, max_rows, pos)
        if alone is None:
            alone = found[0]
        best = int(alone.argmax())
        top2 = np.sort(alone)[-2:]
        out.append(
            {
                "rows": rows,
                "max_diff_vs_alone": round(float(max(abs(f - alone).max() for f in found)), 4),
                "max_diff_between_rows": round(
                    float(max(abs(f - found[0]).max() for f in found)), 4
                ),
                "best_token_changed": any(int(f.argmax()) != best for f in found),
                "top2_gap_alone": round(float(top2[1] - top2[0]), 4),
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a model spec or registry name")
    parser.add_argument("--n-threads", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=300)
    parser.add_argument("--max-rows", type=int, default=8)
    parser.add_argument("--reps", type=int, default=25)
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_rows.json")
    args = parser.parse_args()
    if args.max_rows < 1 or args.reps < 1:
        parser.error("--max-rows and --reps must be at least 1")

    spec = args.model if ":" in args.model else f"local:{args.model}"
    engine = LlamaCppEngine(spec, n_threads=args.n_threads, n_seq_max=max(args.max_rows, 2))
    llama = engine._loaded().llama
    if llama.n_seq_max < args.max_rows:
        parser.error(f"the model was loaded for {llama.n_seq_max} sequences")
    llama.reset()
    tokens = _prompt_tokens(llama, args.prompt_tokens)
    llama.eval(tokens[:-1])  # the prompt but its last token, which the noise test decodes
    for seq in range(1, args.max_rows):
        llama._seq_cp(0, seq)
    noise = row_noise(llama, tokens, args.max_rows)
    llama.eval(tokens[-1:])
    for seq in range(1, args.max_rows):
        llama._seq_cp(0, seq)
    costs = step_costs(llama, tokens, args.max_rows, args.reps)
    llama.reset()

    print(f"{args.model}, {args.n_threads} threads, prompt {len(tokens)} tokens")
    print(
        "rows  step ms  ms/row  vs one row | max |logit diff| vs alone  between rows  best changed"
    )
    one = costs[0]["ms"]
    for cost, row in zip(costs, noise, strict=True):
        print(
            f"{cost['rows']:>4}  {cost['ms']:>7.1f}  {cost['ms_per_row']:>6.1f}  {cost['ms'] / one:>9.2f}x"
            f" | {row['max_diff_vs_alone']:>24.4f}  {row['max_diff_between_rows']:>12.4f}"
            f"  {row['best_token_changed']}"
        )
    result = {
        "machine": machine(),
        "commit": _commit(),
        "settings": {
            "model": args.model,
            "n_threads": args.n_threads,
            "prompt_tokens": len(tokens),
            "max_rows": args.max_rows,
            "reps": args.reps,
        },
        "step_costs": costs,
        "row_noise": noise,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
