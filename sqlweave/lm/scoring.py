"""Likelihoods from a local model: how probable the model finds a given text after a prompt.

A completion asks the model what comes next; a score asks how likely a text we already have is.
Rerankers need the second: Coder-Reviewer reranking (Zhang et al., 2023) scores a candidate
program by how well it explains the instruction, ``log p(question | SQL)``, beside how likely
the model is to write it, ``log p(SQL | question)``. Only the in-process llama.cpp engine
exposes token log-probabilities of a given text here; a served model is refused with a clear
error rather than approximated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlweave.lm.engine import LlamaCppEngine
from sqlweave.lm.snapshots import common_prefix
from sqlweave.lm.spec import LMSpecError


@dataclass(frozen=True)
class Scored:
    """The log-probability (natural log) of each token of a scored text."""

    logprobs: tuple[float, ...]

    @property
    def total(self) -> float:
        """``log p(text | prompt)``: the sum over its tokens."""
        return float(sum(self.logprobs))

    @property
    def mean(self) -> float:
        """Per-token average: comparable across texts of different lengths."""
        return self.total / max(1, len(self.logprobs))


def _engine(lm: Any) -> LlamaCppEngine:
    engine = getattr(lm, "engine", lm)
    if not isinstance(engine, LlamaCppEngine):
        raise LMSpecError(
            "likelihood scoring needs a local model (local:NAME or gguf:PATH); "
            f"{getattr(lm, 'model', lm)!r} is served, and its API gives no scores of a given text"
        )
    return engine


def split_tokens(llama: Any, prompt: str, continuation: str) -> tuple[list[int], list[int]]:
    """The tokens of ``prompt + continuation``, cut where the prompt's own tokens end.

    Tokenising the whole text (not the two parts apart) scores the continuation as the model
    would read it; should a token straddle the boundary, it counts as continuation. Prompts
    ending in a newline avoid that."""
    whole = llama.tokenize((prompt + continuation).encode("utf-8"), add_bos=True, special=True)
    head = llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
    cut = min(common_prefix(head, whole), len(whole) - 1)
    return list(whole[:cut]), list(whole[cut:])


def score(lm: Any, prompt: str, continuation: str) -> Scored:
    """How likely ``lm`` finds ``continuation`` right after ``prompt`` (raw text: special
    tokens such as a chat template's are read as such).

    Calls that share a prompt prefix reuse the KV cache, so scoring several continuations of
    one prompt (one per candidate) evaluates the prompt once. Takes the loaded model's lock:
    safe beside completions on the same model."""
    if not continuation:
        raise ValueError("nothing to score: the continuation is empty")
    loaded = _engine(lm)._loaded()
    with loaded.lock:
        head, tail = split_tokens(loaded.llama, prompt, continuation)
        return Scored(tuple(loaded.llama.score_continuation(head, tail)))


def score_answer(lm: Any, messages: list[dict[str, str]], answer: str) -> Scored:
    """How likely ``lm`` finds ``answer`` as the assistant's reply to the chat ``messages``
    (rendered with the model's own chat template, as a completion would read them)."""
    from sqlweave.lm.chat import render_turns

    loaded = _engine(lm)._loaded()
    prompt = render_turns(loaded.llama, messages).prompt
    return score(lm, prompt, answer)
