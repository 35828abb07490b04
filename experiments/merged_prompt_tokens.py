"""Prompt tokens per call on a merged slice against the questions' own databases, every call counted.

A run answered partly from DSPy's cache records tokens only for its cold calls, so its tokens per
call say little. This script sends each question of a merged slice, and of its base slice, through
a program with a stand-in LM that records every prompt (no model runs: the prompt is what is
measured) and counts the tokens of each call's messages with the model's tokenizer. The schema
filter, the component rule and short names run as in a real run.

    python experiments/merged_prompt_tokens.py --slice spider-dev-200-merged
    python experiments/merged_prompt_tokens.py --slice bird-52-merged --program dubo_v1

Writes ``experiments/results/schema_filter/prompt_tokens__<program>__<slice>.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from tqdm import tqdm

from sqlweave.data import load_slice
from sqlweave.lm.usage import prompt_tokens_per_call
from sqlweave.programs import get

RESULTS = Path(__file__).resolve().parent / "results" / "schema_filter"


def prompt_tokens(program_name: str, examples: list, count) -> list[float]:
    """Mean tokens per LM call of ``program_name`` on each example (stand-in LM:
    :func:`sqlweave.lm.usage.prompt_tokens_per_call`)."""
    shown = tqdm(examples, desc=examples[0].db_id if examples else "", unit="q")
    return prompt_tokens_per_call(lambda: get(program_name), shown, count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slice", default="spider-dev-200-merged")
    parser.add_argument("--program", default="direct")
    parser.add_argument("--tokenizer-model", default="qwen2.5-coder-1.5b")
    args = parser.parse_args()
    from llama_cpp import Llama

    from sqlweave.models import ensure_model

    vocab = Llama(
        model_path=str(ensure_model(args.tokenizer_model)), vocab_only=True, verbose=False
    )

    def count(text: str) -> int:
        return len(vocab.tokenize(text.encode("utf-8"), add_bos=False))

    merged = load_slice(args.slice)
    own = load_slice(args.slice.removesuffix("-merged"))
    a = prompt_tokens(args.program, merged, count)
    b = prompt_tokens(args.program, own, count)
    ratios = [x / y for x, y in zip(a, b, strict=True) if y]
    result = {
        "slice": args.slice,
        "program": args.program,
        "n": len(a),
        "tokens_per_call_merged": round(statistics.mean(a), 1),
        "tokens_per_call_own": round(statistics.mean(b), 1),
        "ratio_of_means": round(statistics.mean(a) / statistics.mean(b), 3),
        "mean_ratio": round(statistics.mean(ratios), 3),
        "max_ratio": round(max(ratios), 3),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"prompt_tokens__{args.program}__{args.slice}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
