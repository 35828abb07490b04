"""Likelihood scoring (``sqlweave.lm.scoring``): log p(text | prompt) from the local model.

The real-model checks (marked ``lm``) compare our batched scores with the same model decoding the
text one token at a time, and check that a second continuation of a cached prompt scores as it
would from an empty cache.
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


def _one_at_a_time(llama: Any, prompt: str, text: str) -> list[float]:
    """The log-probabilities of ``text``'s tokens after ``prompt`` read the plain way: the
    prompt evaluated, then one token per decode, each step's last logits soft-maxed. (Upstream's
    ``echo=True`` logprobs need ``logits_all=True``, whose scores this llama-cpp-python
    release leaves unfilled.)"""
    import llama_cpp
    import numpy as np

    head, tail = split_tokens(llama, prompt, text)
    llama.reset()
    llama_cpp.Llama.eval(llama, head)
    out = []
    for token in tail:
        row = np.ctypeslib.as_array(
            llama_cpp.llama_get_logits_ith(llama._ctx.ctx, -1), shape=(llama.n_vocab(),)
        ).astype(np.float64)
        top = row.max()
        out.append(float(row[token] - top - np.log(np.exp(row - top).sum())))
        llama_cpp.Llama.eval(llama, [token])
    llama.reset()
    return out


@pytest.mark.lm
def test_small_model_scores_match_token_by_token_decoding() -> None:
    need_llama_cpp()
    engine = LlamaCppEngine(sqlweave_lm.SMALL_MODEL)
    text = " How many singers are from France?"
    engine._loaded().llama.reset()
    ours = score(engine, PROMPT, text).logprobs
    expected = _one_at_a_time(engine._loaded().llama, PROMPT, text)
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
