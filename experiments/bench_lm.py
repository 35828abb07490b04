"""Local LM speed on one set of questions (issue 15): the plain script against sqlweave.

One run, one model, one thread count, the same questions (the first 50 of ``spider-dev-200``):

- ``plain``: the reference script a user writes with llama-cpp-python alone, no sqlweave (the
  naive prompt: a system line, the database's own CREATE TABLE statements, the question; greedy,
  256 new tokens, questions in slice order);
- ``naive``: sqlweave's ``naive`` program (the same prompt) through :func:`sqlweave.evaluate`;
- ``direct``: sqlweave's ``direct`` program;
- ``direct_lookup``: ``direct`` with prompt-lookup decoding (``--lookup`` draft tokens);
- ``sc8``: self-consistency: ``direct`` with ``samples=--samples`` (the first greedy, the
  others at ``--temperature``) and its execution vote.

Per mode: EX, seconds per question, prompt tokens sent and evaluated per question (the rest came
from the KV cache or a prompt snapshot), decode tokens/s (completion tokens over the seconds
after the prompt), tokens per decode step. Checks: ``direct_lookup`` and ``direct`` give
identical completions, ``sc8``'s greedy candidate is ``direct``'s SQL, ``naive`` writes the
plain script's SQL. Targets (issue 15): ``direct`` at most 0.6x the plain script's seconds per
question at equal EX; ``sc8`` at most 3x greedy ``direct``.

Each mode starts with an empty KV cache. Model loading and a warm-up call are timed apart.

The modes run one after another, minutes apart, so a machine whose speed drifts (a shared host)
moves their ratios. ``--rounds R`` runs them R times in alternating order (ABBA: the first round
in the given order, the second reversed, ...) and pools each mode's rounds; with an even R a
linear drift weighs on every mode alike. Each round's figures are kept too (``rounds``).

    python experiments/bench_lm.py                         # 1.5B, 50 questions, all modes
    python experiments/bench_lm.py --n-threads 1 --out experiments/results/bench_lm_t1.json
    python experiments/bench_lm.py --modes plain direct --limit 5   # a quick look
    python experiments/bench_lm.py --modes direct sc8 --rounds 2     # direct sc8 sc8 direct
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import platform
import re
import sqlite3
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dspy

from sqlweave.lm import (
    DEFAULT_MODEL,
    DEFAULT_N_CTX,
    AsyncLlamaCppEngine,
    LlamaCppEngine,
    build_lm,
    default_threads,
)

logger = logging.getLogger(__name__)

MODES = ("plain", "naive", "direct", "direct_lookup", "sc8")
RESULTS = Path(__file__).resolve().parent / "results"


# --------------------------------------------------------------------------- the plain script

PLAIN_SYSTEM = "You write one SQLite query that answers the question. Reply with the SQL only."
PLAIN_MAX_TOKENS = 256
_FENCE = re.compile(r"```[A-Za-z]*\s*(.*?)```", re.S)


def plain_ddl(db_path: str | Path) -> str:
    """The database's own CREATE TABLE statements, as the plain script reads them."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL "
            "AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        ).fetchall()
    finally:
        conn.close()
    return "\n".join(str(row[0]).strip() for row in rows)


def plain_script(
    model_path: Path, examples: Sequence[Any], *, n_threads: int, n_ctx: int
) -> dict[str, Any]:
    """The reference: what a user writes in five minutes with ``llama_cpp`` and nothing else.

    Only the timing and llama.cpp's perf counters (read, not changed) are the benchmark's.
    Returns ``{"load_s", "warmup_s", "rows"}`` with one row per question.
    """
    import llama_cpp
    from llama_cpp import Llama

    started = time.perf_counter()
    llm = Llama(
        model_path=str(model_path),
        n_ctx=n_ctx,
        n_threads=n_threads,
        n_threads_batch=n_threads,
        verbose=False,
    )
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    llm.create_chat_completion(
        messages=[{"role": "user", "content": "Say OK."}], temperature=0.0, max_tokens=4
    )
    warmup_s = time.perf_counter() - started
    llm.reset()

    rows = []
    for ex in examples:
        llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
        started = time.perf_counter()
        user = f"{plain_ddl(ex.db_path)}\n\nQuestion: {ex.question}"
        if getattr(ex, "evidence", ""):
            user += f"\nHint: {ex.evidence}"
        out = llm.create_chat_completion(
            messages=[
                {"role": "system", "content": PLAIN_SYSTEM},
                {"role": "user", "content": user},
            ],
            temperature=0.0,
            max_tokens=PLAIN_MAX_TOKENS,
        )
        reply = out["choices"][0]["message"]["content"] or ""
        fenced = _FENCE.search(reply)
        sql = (fenced.group(1) if fenced else reply).strip()
        seconds = time.perf_counter() - started
        perf = llama_cpp.llama_perf_context(llm._ctx.ctx)
        usage = out.get("usage") or {}
        rows.append(
            {
                "question_id": str(ex.question_id),
                "pred_sql": sql,
                "seconds": seconds,
                "calls": [
                    {
                        "text": reply,
                        "seconds": seconds,
                        "input_tokens": int(usage.get("prompt_tokens", 0)),
                        "output_tokens": int(usage.get("completion_tokens", 0)),
                        # Without drafts llama.cpp's counters mean what ours do.
                        "prompt_eval_tokens": int(perf.n_p_eval),
                        "prompt_eval_ms": float(perf.t_p_eval_ms),
                        "decode_steps": int(perf.n_eval),
                        "draft_tokens": 0,
                        "restored_tokens": 0,
                    }
                ],
            }
        )
        logger.info("plain %s: %.1fs", ex.question_id, seconds)
    del llm
    gc.collect()
    return {"load_s": load_s, "warmup_s": warmup_s, "rows": rows}


def score(examples: Sequence[Any], rows: list[dict[str, Any]]) -> None:
    """Set ``correct`` on each row by execution match (the project's EX)."""
    from sqlweave.data import open_database
    from sqlweave.metrics import check_execution, semantics_for

    for ex, row in zip(examples, rows, strict=True):
        match = check_execution(
            row["pred_sql"], ex.gold_sql, open_database(ex), semantics_for(ex), strict_gold=False
        )
        row["correct"] = bool(match.correct)


# --------------------------------------------------------------------------- through sqlweave


class RecordingEngine(LlamaCppEngine):
    """The local engine, keeping each call's completion and counters for the benchmark."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[dict[str, Any]] = []

    def complete(self, request: Any) -> Any:
        response = super().complete(request)
        self.calls.append(
            {
                "text": response.text,
                "input_tokens": response.usage.input_tokens,
                "output_tokens": response.usage.output_tokens,
                **(response.provider_data or {}),
            }
        )
        return response


def recording_lm(spec: str, *, n_threads: int, lookup: int) -> tuple[Any, RecordingEngine]:
    """``build_lm``'s LM (no response cache) on a :class:`RecordingEngine`."""
    lm = build_lm(spec, cache=False, n_threads=n_threads, prompt_lookup=lookup)
    engine = RecordingEngine.load_state(lm.engine.dump_state())
    return lm.copy(engine=engine, async_engine=AsyncLlamaCppEngine(engine)), engine


def program_for(mode: str, samples: int, temperature: float) -> Callable[..., Any]:
    """The program a mode evaluates, as a callable of the example's inputs."""
    from sqlweave import programs

    if mode == "sc8":  # direct's own self-consistency: samples, then the execution vote
        return programs.get("direct", samples=samples, temperature=temperature)
    return programs.get("direct" if mode == "direct_lookup" else mode)


def run_sqlweave(
    mode: str,
    examples: Sequence[Any],
    lm: Any,
    engine: RecordingEngine,
    *,
    samples: int,
    temperature: float,
    progress: bool,
) -> list[dict[str, Any]]:
    """Evaluate one mode's program with :func:`sqlweave.evaluate.evaluate` (questions grouped by
    database); one row per question in example order, with its calls."""
    from sqlweave.evaluate import evaluate, visit_order

    program = program_for(mode, samples, temperature)
    per_question: dict[str, dict[str, Any]] = {}
    # evaluate() calls the program with the inputs only; it visits the questions in
    # visit_order, so the ids of equal inputs are handed out in that order.
    ids: dict[tuple[str, str, str], list[str]] = {}
    for i in visit_order(examples):
        ex = examples[i]
        key = (ex.question, str(ex.db_path), getattr(ex, "evidence", "") or "")
        ids.setdefault(key, []).append(str(ex.question_id))

    def measured(**inputs: Any) -> Any:
        key = (inputs["question"], str(inputs["db_path"]), inputs.get("evidence") or "")
        question_id = ids[key].pop(0)
        first = len(engine.calls)
        pred = program(**inputs)
        per_question[question_id] = {
            "calls": engine.calls[first:],
            "candidates": list(getattr(pred, "candidates", None) or []),
        }
        return pred

    llama = engine._loaded().llama
    llama.reset()  # every mode starts with an empty KV cache
    llama.prompt_states.clear()
    with dspy.context(lm=lm):
        summary = evaluate(measured, examples, out_path=None, progress=progress)
    rows = []
    for record in summary["records"]:
        extra = per_question.get(record["question_id"], {"calls": [], "candidates": []})
        rows.append(
            {
                "question_id": record["question_id"],
                "pred_sql": record["pred_sql"],
                "correct": bool(record["correct"]),
                "error": record["error"],
                "seconds": record["seconds"],
                **extra,
            }
        )
    return rows


# --------------------------------------------------------------------------- summaries


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-question means and pooled rates of one mode."""
    n = len(rows)
    calls = [call for row in rows for call in row["calls"]]
    completion = sum(c["output_tokens"] for c in calls)
    prompt_eval = sum(c["prompt_eval_tokens"] for c in calls)
    prompt_s = sum(c["prompt_eval_ms"] for c in calls) / 1000
    decode_s = sum(max(0.0, c["seconds"] - c["prompt_eval_ms"] / 1000) for c in calls)
    steps = sum(c["decode_steps"] for c in calls) + len(calls)  # + the token off the prompt
    return {
        "n": n,
        "ex": sum(row["correct"] for row in rows) / n if n else 0.0,
        "s_per_question": sum(row["seconds"] for row in rows) / n if n else 0.0,
        "calls_per_question": len(calls) / n if n else 0.0,
        "prompt_tokens_per_question": sum(c["input_tokens"] for c in calls) / n if n else 0.0,
        "prompt_tokens_evaluated_per_question": prompt_eval / n if n else 0.0,
        "prompt_tokens_restored_per_question": (
            sum(c.get("restored_tokens", 0) for c in calls) / n if n else 0.0
        ),
        "completion_tokens_per_question": completion / n if n else 0.0,
        "prompt_tok_per_s": prompt_eval / prompt_s if prompt_s else None,
        "decode_tok_per_s": completion / decode_s if decode_s else None,
        "tokens_per_decode_step": completion / steps if steps else None,
        "draft_tokens": sum(c.get("draft_tokens", 0) for c in calls),
        # Answers taken from a batch of samples decoded together (lm.batched_samples).
        "batched_answers_per_question": sum("batch_index" in c for c in calls) / n if n else 0.0,
        # Samples a batch gave up once the vote was settled (programs.stages.sampling.Sampler).
        "cancelled_samples_per_question": (
            sum(c.get("batch_cancelled", 0) for c in calls) / n if n else 0.0
        ),
    }


def same_outputs(
    a: list[dict[str, Any]], b: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any]
) -> dict[str, Any]:
    """How many questions give the same ``key`` in two modes, and which do not."""
    by_id = {row["question_id"]: row for row in b}
    differ = [row["question_id"] for row in a if key(row) != key(by_id[row["question_id"]])]
    return {"n": len(a), "identical": len(a) - len(differ), "differ": differ}


def _completions(row: dict[str, Any]) -> list[str]:
    return [call["text"] for call in row["calls"]]


def _sql(row: dict[str, Any]) -> str:
    return row["pred_sql"]


def _first_candidate(row: dict[str, Any]) -> str:
    """The generator's own first SQL, before any corrector (``direct`` mends it with rules)."""
    return (row.get("candidates") or [row["pred_sql"]])[0]


def checks(modes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The identity checks and the issue's targets, for the modes that ran."""
    rows = {name: mode["rows"] for name, mode in modes.items()}
    stats = {name: mode["summary"] for name, mode in modes.items()}
    out: dict[str, Any] = {}
    if "direct" in rows and "direct_lookup" in rows:
        out["lookup_identical_completions"] = same_outputs(
            rows["direct_lookup"], rows["direct"], _completions
        )
        out["lookup_speedup"] = stats["direct"]["s_per_question"] / max(
            stats["direct_lookup"]["s_per_question"], 1e-9
        )
    if "direct" in rows and "sc8" in rows:
        # sc8's greedy candidate against direct's generated SQL, both before the corrector
        out["sc_greedy_is_direct"] = same_outputs(rows["sc8"], rows["direct"], _first_candidate)
        out["sc_over_direct"] = stats["sc8"]["s_per_question"] / max(
            stats["direct"]["s_per_question"], 1e-9
        )
        out["target_sc_at_most_3x_direct"] = out["sc_over_direct"] <= 3.0
    if "plain" in rows and "naive" in rows:
        out["naive_sql_is_plain_sql"] = same_outputs(rows["naive"], rows["plain"], _sql)
    if "plain" in rows and "direct" in rows:
        ratio = stats["direct"]["s_per_question"] / max(stats["plain"]["s_per_question"], 1e-9)
        out["direct_over_plain"] = ratio
        out["target_direct_at_most_0.6x_plain"] = ratio <= 0.6
        out["direct_ex_minus_plain_ex"] = stats["direct"]["ex"] - stats["plain"]["ex"]
    return out


def _commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def machine() -> dict[str, Any]:
    """What a benchmark's figures depend on: cores, platform, Python, the load when it started."""
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "loadavg_start": os.getloadavg(),
    }


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    """Parse arguments, run the chosen modes on the same questions, print a table, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="local:NAME or gguf:PATH")
    parser.add_argument("--slice", default="spider-dev-200")
    parser.add_argument("--limit", type=int, default=50, help="first N questions of the slice")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--n-threads", type=int, default=None, help="default: default_threads()")
    parser.add_argument("--lookup", type=int, default=10, help="draft tokens for direct_lookup")
    parser.add_argument("--samples", type=int, default=8, help="self-consistency samples")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_lm_spider50.json")
    parser.add_argument("--progress", action="store_true", help="a progress bar per mode")
    parser.add_argument(
        "--rounds", type=int, default=1, help="run the modes this many times, order alternating"
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.rounds % 2:
        logger.warning(
            "--rounds %d is odd: a drift in speed weighs on the modes unequally", args.rounds
        )

    from sqlweave.data import load_slice

    examples = load_slice(args.slice)[: args.limit]
    n_threads = args.n_threads or default_threads()
    results: dict[str, Any] = {
        "machine": machine(),
        "commit": _commit(),
        "settings": {
            "model": args.model,
            "slice": args.slice,
            "questions": len(examples),
            "n_threads": n_threads,
            "n_ctx": DEFAULT_N_CTX,
            "lookup": args.lookup,
            "samples": args.samples,
            "temperature": args.temperature,
        },
        "modes": {},
    }
    model_path = LlamaCppEngine(args.model).model_path()
    modes = [mode for mode in MODES if mode in args.modes]
    results["settings"]["rounds"] = args.rounds
    results["settings"]["order"] = [
        modes if r % 2 == 0 else modes[::-1] for r in range(args.rounds)
    ]

    lm: Any = None
    engine: Any = None
    load_s = warmup_s = 0.0
    lookup: tuple[Any, Any] | None = None

    def run(mode: str) -> dict[str, Any]:
        """One round of one mode: its rows, and its load and warm-up times. sqlweave's model is
        loaded when its first mode runs (the plain script, run first, loads its own)."""
        nonlocal lm, engine, load_s, warmup_s, lookup
        if mode == "plain":
            plain = plain_script(model_path, examples, n_threads=n_threads, n_ctx=DEFAULT_N_CTX)
            score(examples, plain["rows"])
            return plain
        if lm is None:
            lm, engine = recording_lm(args.model, n_threads=n_threads, lookup=0)
            started = time.perf_counter()
            engine._loaded()
            load_s = time.perf_counter() - started
            started = time.perf_counter()
            lm("Say OK.", max_tokens=4)
            warmup_s = time.perf_counter() - started
        mode_lm, mode_engine = lm, engine
        if mode == "direct_lookup":
            if lookup is None:
                lookup = recording_lm(args.model, n_threads=n_threads, lookup=args.lookup)
            mode_lm, mode_engine = lookup
        rows = run_sqlweave(
            mode,
            examples,
            mode_lm,
            mode_engine,
            samples=args.samples,
            temperature=args.temperature,
            progress=args.progress,
        )
        return {"rows": rows, "load_s": load_s, "warmup_s": warmup_s}

    rounds: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    for order in results["settings"]["order"]:
        for mode in order:
            rounds[mode].append(run(mode))
    for mode in modes:
        first = rounds[mode][0]
        results["modes"][mode] = {
            "load_s": first["load_s"],
            "warmup_s": first["warmup_s"],
            # every round's rows pooled; ``rows`` (for the checks) are the first round's
            "summary": summarise([row for one in rounds[mode] for row in one["rows"]]),
            "rows": first["rows"],
        }
        if args.rounds > 1:
            results["modes"][mode]["rounds"] = [summarise(one["rows"]) for one in rounds[mode]]

    results["checks"] = checks(results["modes"])
    results["machine"]["loadavg_end"] = os.getloadavg()

    print(
        f"{'mode':<15}{'EX':>6}{'s/q':>8}{'calls/q':>9}{'prompt/q':>10}{'evaluated/q':>13}"
        f"{'pp tok/s':>10}{'decode tok/s':>14}{'tok/step':>10}"
    )
    for name, mode in results["modes"].items():
        s = mode["summary"]
        print(
            f"{name:<15}{s['ex'] * 100:>6.1f}{s['s_per_question']:>8.2f}"
            f"{s['calls_per_question']:>9.1f}{s['prompt_tokens_per_question']:>10.0f}"
            f"{s['prompt_tokens_evaluated_per_question']:>13.0f}"
            f"{_fmt(s['prompt_tok_per_s'], '.1f'):>10}{_fmt(s['decode_tok_per_s'], '.1f'):>14}"
            f"{_fmt(s['tokens_per_decode_step'], '.2f'):>10}"
        )
    for name, value in results["checks"].items():
        shown = (
            f"{value['identical']}/{value['n']} identical"
            + (f" (differ: {', '.join(value['differ'][:5])})" if value["differ"] else "")
            if isinstance(value, dict)
            else value
        )
        print(f"{name}: {shown}")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
