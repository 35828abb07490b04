"""Questions per minute against a served model at 1, 2 and 4 client threads.

Starts llama.cpp's OpenAI-compatible server (``python -m llama_cpp.server``, the ``served`` extra)
on a free loopback port with a local model, unless ``--api-base`` names one already running, and
evaluates the same bundled Spider questions through LiteLLM (``openai/<alias>``) at each client
thread count, with DSPy's cache off so every call reaches the server. Prints one line per thread
count and writes ``experiments/results/bench_served.json``.

    .venv/bin/python experiments/bench_served.py --n 8 --threads 1 2 4

llama-cpp-python's server answers one request at a time, so extra client threads only overlap the
client's own work (prompt building, SQL execution) with the model's; a server that batches
concurrent requests (vLLM, llama.cpp's ``llama-server --parallel N``) is where threads pay off.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy

from sqlweave import models, programs
from sqlweave.data import eval_slice, load_spider
from sqlweave.evaluate import evaluate
from sqlweave.lm import build_lm

logger = logging.getLogger("bench_served")
REPO = Path(__file__).resolve().parents[1]
BUNDLE = REPO / "sqlweave" / "demo"
RESULTS = REPO / "experiments" / "results" / "bench_served.json"


def free_port() -> int:
    """A TCP port nothing listens on now (loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def llama_server(
    weights: Path, alias: str, *, n_ctx: int, n_threads: int, log: Path
) -> Iterator[str]:
    """Run ``llama_cpp.server`` on loopback for the block; yields its ``/v1`` base URL."""
    port = free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(weights),
        "--model_alias", alias, "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(n_ctx), "--n_threads", str(n_threads),
        "--n_threads_batch", str(n_threads),
    ]  # fmt: skip
    with open(log, "wb") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}; see {log}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"server not ready after 120s; see {log}") from None
                time.sleep(0.5)
        logger.info("llama.cpp server ready at %s", url)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def measure(program: Any, examples: list[Any], lm: dspy.LM, threads: int) -> dict[str, Any]:
    """One timed evaluation of ``examples`` at ``threads`` client threads."""
    with dspy.context(lm=lm):
        start = time.perf_counter()
        summary = evaluate(program, examples, out_path=None, num_threads=threads, progress=False)
        wall = time.perf_counter() - start
    records = summary["records"]
    usage = summary.get("usage") or {}
    return {
        "threads": threads,
        "questions": len(records),
        "wall_seconds": round(wall, 2),
        "questions_per_minute": round(60 * len(records) / wall, 2),
        "ex": summary["ex"],
        "calls_per_question": usage.get("calls"),
        "cached_calls": summary.get("usage_total", {}).get("cached_calls", 0),
        "prompt_tokens_per_question": usage.get("prompt_tokens"),
        "completion_tokens_per_question": usage.get("completion_tokens"),
        "predictions": {r["question_id"]: r["pred_sql"] for r in records},
    }


def write_results(
    args: argparse.Namespace,
    examples: list[Any],
    rows: list[dict[str, Any]],
    load_at_start: tuple[float, float, float],
) -> dict[str, Any]:
    """Write (and return) the JSON summary of the runs so far."""
    base = rows[0]["predictions"]
    result = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_average_at_start": load_at_start,
            "load_average_at_end": os.getloadavg(),
        },
        "settings": {
            "model": args.model,
            "served_by": "external" if args.api_base else "llama_cpp.server (loopback)",
            "server_threads": args.server_threads,
            "n_ctx": args.n_ctx,
            "program": args.program,
            "questions": len(examples),
            "seed": args.seed,
            "dspy_cache": False,
        },
        "runs": [{k: v for k, v in row.items() if k != "predictions"} for row in rows],
        "same_predictions_at_every_thread_count": all(r["predictions"] == base for r in rows),
        "speedup_vs_first": {
            str(r["threads"]): round(r["questions_per_minute"] / rows[0]["questions_per_minute"], 2)
            for r in rows
        },
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="local model to serve")
    parser.add_argument("--api-base", default=None, help="use this running server instead")
    parser.add_argument("--program", default="direct", help="registry program to evaluate")
    parser.add_argument("--n", type=int, default=8, help="bundled Spider dev questions")
    parser.add_argument("--seed", type=int, default=0, help="seed of the question slice")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--server-threads", type=int, default=2, help="llama.cpp CPU threads")
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--data-root", type=Path, default=BUNDLE)
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.setdefault("OPENAI_API_KEY", "sk-local")  # LiteLLM wants one; the server ignores it
    # DSPy fetches LiteLLM's price map from GitHub on the first call; offline that is a wait for
    # nothing (a self-hosted model has no price anyway).
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    load_at_start = os.getloadavg()

    examples = eval_slice(load_spider("dev", root=args.data_root), n=args.n, seed=args.seed)
    program = programs.get(args.program)
    with contextlib.ExitStack() as stack:
        api_base = args.api_base
        if api_base is None:
            weights = models.ensure_model(args.model)
            log = Path(os.environ.get("TMPDIR", "/tmp")) / "bench_served_server.log"
            api_base = stack.enter_context(
                llama_server(
                    weights, args.model, n_ctx=args.n_ctx, n_threads=args.server_threads, log=log
                )
            )
        lm = build_lm(f"openai/{args.model}", api_base=api_base, cache=False)
        measure(program, examples[:1], lm, 1)  # warm-up: model pages in, first prompt cached
        rows: list[dict[str, Any]] = []
        for threads in args.threads:
            row = measure(program, examples, lm, threads)
            rows.append(row)
            write_results(args, examples, rows, load_at_start)  # a cut-short run keeps its rows
            print(
                f"threads={threads}: {row['questions_per_minute']:.2f} questions/min "
                f"({row['questions']} questions in {row['wall_seconds']:.1f}s, "
                f"EX {100 * row['ex']:.1f}, {row['prompt_tokens_per_question']:.0f} prompt "
                f"tokens/question)",
                flush=True,
            )
    result = write_results(args, examples, rows, load_at_start)
    print(
        f"same predictions at every thread count: {result['same_predictions_at_every_thread_count']}"
    )
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
