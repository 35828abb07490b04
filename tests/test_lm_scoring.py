"""Likelihood scoring (``sqlweave.lm.scoring``): log p(text | prompt) from the local model.

The real-model checks (marked ``lm``) compare our scores with llama-cpp-python's own
``echo=True`` log-probabilities from a model built with ``logits_all=True``, and check that a
second continuation of a cached prompt scores as it would from an empty cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import need_llama_cpp, stand_in_llama

from sqlweave import lm as sqlweave_lm
from sqlweave.lm import LlamaCppEngine, LMSpecError, build_lm
from sqlweave.lm.scoring import Scored, score, score_answer, split_tokens

PROMPT = (
    "CREATE TABLE singer (singer_id INT PRIMARY KEY, name TEXT, country TEXT, age INT);\n"
    "-- SQL: SELECT count(*) FROM singer WHERE country = 'France'\n-- Question:"
)


class ByteTokens:
    """A tokenizer of one token per byte (and none for BOS), enough for :func:`split_tokens`."""

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> list[int]:
        return list(text)


def test_scored_sums_and_averages() -> None:
    scored = Scored((-1.0, -2.0, -3.0))
    assert scored.total == -6.0 and scored.mean == -2.0
    assert Scored(()).mean == 0.0


def test_split_cuts_where_the_prompt_ends() -> None:
    head, tail = split_tokens(ByteTokens(), "ab", "cd")
    assert bytes(head) == b"ab" and bytes(tail) == b"cd"


def test_a_served_model_is_refused_with_a_clear_error() -> None:
    lm = build_lm("openai/some-model", api_base="http://127.0.0.1:9/v1")
    with pytest.raises(LMSpecError, match="needs a local model"):
        score(lm, "prompt", "text")


def test_an_empty_continuation_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spec = stand_in_llama(monkeypatch, tmp_path, ByteTokens())
    with pytest.raises(ValueError, match="nothing to score"):
        score(LlamaCppEngine(spec), "prompt", "")


def _reference(llama_cpp: Any, path: Path, prompt: str, text: str) -> list[float]:
    """llama-cpp-python's own log-probabilities of ``text``'s tokens after ``prompt``."""
    full = llama_cpp.Llama(model_path=str(path), n_ctx=512, logits_all=True, verbose=False)
    try:
        head, tail = split_tokens(full, prompt, text)
        out = full.create_completion(
            head + tail, max_tokens=1, echo=True, logprobs=1, temperature=0
        )
        return list(
            out["choices"][0]["logprobs"]["token_logprobs"][len(head) : len(head) + len(tail)]
        )
    finally:
        full.close()


@pytest.mark.lm
def test_small_model_scores_match_llama_cpps_own_logprobs() -> None:
    need_llama_cpp()
    import llama_cpp

    engine = LlamaCppEngine(sqlweave_lm.SMALL_MODEL)
    text = " How many singers are from France?"
    ours = score(engine, PROMPT, text).logprobs
    expected = _reference(llama_cpp, engine.model_path(), PROMPT, text)
    assert len(ours) == len(expected) > 3
    assert ours == pytest.approx(expected, abs=0.05)


@pytest.mark.lm
def test_small_model_prefers_the_question_the_sql_answers() -> None:
    need_llama_cpp()
    engine = LlamaCppEngine(sqlweave_lm.SMALL_MODEL)
    right = score(engine, PROMPT, " How many singers are from France?").total
    wrong = score(engine, PROMPT, " What is the name of the oldest singer?").total
    assert right > wrong


@pytest.mark.lm
def test_small_model_a_cached_prompt_scores_as_a_fresh_one() -> None:
    need_llama_cpp()
    engine = LlamaCppEngine(sqlweave_lm.SMALL_MODEL)
    llama = engine._loaded().llama
    messages = [{"role": "user", "content": PROMPT}]
    llama.reset()
    fresh = score_answer(engine, messages, "How many singers are from France?").logprobs
    score_answer(engine, messages, "List every singer.")  # leaves the prompt in the KV cache
    cached = score_answer(engine, messages, "How many singers are from France?").logprobs
    assert llama.n_tokens > 0
    assert cached == pytest.approx(fresh, abs=0.05)
