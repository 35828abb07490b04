"""Coder-Reviewer reranking replayed on a run's recorded candidates: does the model's own
likelihood pick the right answer where the execution vote does not?

Coder-Reviewer reranking (Zhang et al., ICML 2023) scores each candidate program ``y`` for an
instruction ``x`` by ``log p(y | x)`` (the *coder*: how likely the model is to write it) and
``log p(x | y)`` (the *reviewer*: how well it explains the instruction, a round trip without
sampling). The reviewer favours a query that accounts for the whole question: a dropped
condition or a wrong grouping makes the question less likely given the SQL.

Step ``score`` (LM): one SQL text per result class
(:func:`sqlweave.programs.stages.replay.representatives`) of every question with
more than one class is scored both ways by a local model, the question's schema first in both
prompts so the KV cache reads it once per database; one JSONL line per question, resumable.

Step ``select`` (no LM): result classes (the run's recorded execution groups) ranked by the vote's
weight (greedy 2), and by the vote's log-weight
plus ``lam`` times a score, for a grid of ``lam``; EX of each, with the run's own per-candidate
correctness. Choose ``lam`` on validation (``spider-train-val``), then replay it on dev with
``--lam``: a replay of recorded candidates, the program's selection being deterministic given them.

    python experiments/reviewer_replay.py score results/protocol/X__spider-train-val__1.5b.jsonl --slice spider-train-val
    python experiments/reviewer_replay.py select results/ensemble/X__spider-train-val__1.5b.reviewer.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from sqlweave.programs.stages.replay import distinct_texts, representatives
from sqlweave.programs.stages.sampling import origin_generator, origin_is_greedy

RESULTS = Path(__file__).resolve().parent / "results" / "ensemble"
SYSTEM = "You are a SQLite expert."


def _messages(schema: str, evidence: str, shown: str, ask: str) -> list[dict[str, str]]:
    """System line, then the schema first (the KV cache reads it once per database), the
    evidence, what is shown and what is asked."""
    hint = f"\n\nExternal knowledge: {evidence}" if evidence else ""
    content = f"{schema}{hint}\n\n{shown}\n\n{ask}"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}]


def reviewer_messages(schema: str, sql: str, evidence: str = "") -> list[dict[str, str]]:
    """The reviewer's prompt: the schema, the query; the answer scored is the question."""
    ask = "Write the question, in English, that this SQL query answers."
    return _messages(schema, evidence, f"SQL query:\n{sql}", ask)


def coder_messages(schema: str, question: str, evidence: str = "") -> list[dict[str, str]]:
    """The coder's prompt: the schema, the question; the answer scored is the SQL."""
    ask = "Write the SQLite query that answers the question."
    return _messages(schema, evidence, f"Question: {question}", ask)


def score_run(
    records: Sequence[dict[str, Any]], examples: dict[str, Any], lm: Any, out: Path
) -> None:
    """Append one scored line per question of ``records`` not yet in ``out`` (step ``score``)."""
    from sqlweave.db import Database
    from sqlweave.lm.scoring import score_answer
    from sqlweave.programs.stages import generators

    done = set()
    if out.exists():
        done = {json.loads(line)["question_id"] for line in out.read_text().splitlines() if line}
    direct = generators.build("direct")
    with out.open("a") as sink:
        for record in tqdm(records, desc="score", unit="q"):
            qid = str(record["question_id"])
            example = examples.get(qid)
            if qid in done or example is None or not record.get("candidates"):
                continue
            db = Database.open(example.db_path)
            evidence = getattr(example, "evidence", "") or ""
            schema = direct.schema_text(example.question, db)
            texts = distinct_texts(record["candidates"])
            chosen = representatives(texts)
            if len(chosen) > 1:  # one class (or none) leaves nothing to choose: not scored
                coder = coder_messages(schema, example.question, evidence)
                for entry in chosen:
                    scored = score_answer(lm, coder, entry["sql"])
                    entry["coder"], entry["coder_tokens"] = scored.total, len(scored.logprobs)
                for entry in chosen:
                    review = reviewer_messages(schema, entry["sql"], evidence)
                    entry["reviewer"] = score_answer(lm, review, example.question).total
            line = {"question_id": qid, "db_id": example.db_id, "texts": texts}
            sink.write(json.dumps(line) + "\n")
            sink.flush()


def classes(
    texts: Sequence[dict[str, Any]], generators: Iterable[str] | None = None, greedy_w: float = 2
) -> list[dict[str, Any]]:
    """The question's result classes (recorded groups; failed candidates have none) among the
    candidates of ``generators`` (None: all), in order of first appearance, each with its vote
    weight and its representative's scores (mean per token for the coder's)."""
    keep = None if generators is None else set(generators)
    found: dict[Any, dict[str, Any]] = {}
    for entry in texts:
        if entry.get("group") is None:
            continue
        origins = [o for o in entry["origins"] if keep is None or origin_generator(o) in keep]
        if not origins:
            continue
        weight = sum(greedy_w if origin_is_greedy(o) else 1.0 for o in origins)
        cls = found.setdefault(
            entry["group"],
            {"weight": 0.0, "correct": entry["correct"], "reviewer": 0.0, "coder": 0.0},
        )
        cls["weight"] += weight
        if "reviewer" in entry:  # the class's representative (a lone class has none)
            cls["reviewer"] = entry["reviewer"]
            cls["coder"] = entry["coder"] / max(1, entry["coder_tokens"])
    return list(found.values())


def choose(found: Sequence[dict[str, Any]], key: str, lam: float) -> dict[str, Any] | None:
    """The class with the highest ``log(weight) + lam * score``; ``key="vote"`` is the vote
    (weight, then earliest)."""
    if not found:
        return None
    if key == "vote":
        return max(found, key=lambda c: round(c["weight"], 9))  # max keeps the first of ties
    return max(found, key=lambda c: math.log(c["weight"]) + lam * c[key])


def select(
    lines: Sequence[dict[str, Any]],
    generators: Iterable[str] | None,
    lams: Sequence[float],
    greedy_w: float = 2,
) -> dict[str, float]:
    """EX (percent of ``lines``) of the vote, and of each score mixed in at each ``lam``."""
    hits: dict[str, int] = {}
    oracle = 0
    for line in lines:
        found = classes(line["texts"], generators, greedy_w)
        oracle += any(c["correct"] for c in found)
        options = [("vote", "vote", 0.0)] + [
            (f"{key} lam={lam:g}", key, lam) for key in ("reviewer", "coder") for lam in lams
        ]
        for name, key, lam in options:
            won = choose(found, key, lam)
            hits[name] = hits.get(name, 0) + bool(won and won["correct"])
    n = max(1, len(lines))
    result = {name: round(100 * v / n, 1) for name, v in hits.items()}
    result["oracle"] = round(100 * oracle / n, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    scoring = sub.add_parser("score", help="score every candidate text with the LM")
    scoring.add_argument("records", type=Path, help="a run's JSONL with candidates on record")
    scoring.add_argument("--slice", required=True, help="the slice the run asked")
    scoring.add_argument("--model", default="local:qwen2.5-coder-1.5b")
    scoring.add_argument("--n-threads", type=int, default=None)
    scoring.add_argument("--limit", type=int, default=None, help="first N questions only")
    selecting = sub.add_parser("select", help="replay the selections (no LM)")
    selecting.add_argument("scores", type=Path, help="the score step's JSONL")
    selecting.add_argument("--generators", default="", help="comma-separated subset (all: '')")
    selecting.add_argument("--lam", default="0.05,0.1,0.2,0.3,0.5,1,2,5,100")
    args = parser.parse_args()
    if args.step == "score":
        from sqlweave.data import load_slice
        from sqlweave.evaluate import read_records
        from sqlweave.lm import build_lm

        examples = {str(ex.question_id): ex for ex in load_slice(args.slice)}
        records = read_records(args.records)[: args.limit]
        options = {"n_threads": args.n_threads} if args.n_threads else {}
        lm = build_lm(args.model, **options)
        RESULTS.mkdir(parents=True, exist_ok=True)
        out = RESULTS / (args.records.name.removesuffix(".jsonl") + ".reviewer.jsonl")
        score_run(records, examples, lm, out)
        print(f"written {out}")
        return
    lines = [json.loads(line) for line in args.scores.read_text().splitlines() if line]
    generators = [g for g in args.generators.split(",") if g] or None
    lams = [float(v) for v in args.lam.split(",") if v]
    result = select(lines, generators, lams)
    print(f"n = {len(lines)}; generators: {','.join(generators or ['all'])}")
    for name, ex in sorted(result.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {ex:.1f} |")


if __name__ == "__main__":
    main()
