"""A completion as the decoding loop builds it: its text token by token, the state and outcome
of each sequence of a batch of samples, and what the call cost.

These are the pieces :class:`~sqlweave.lm.decoding.DecodingLlama` keeps per call; they hold no
llama.cpp state of their own (the model they read tokens with is passed in).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class CallStats:
    """What one completion cost, counted by the loaded model itself.

    llama.cpp's own counters file every multi-token batch as prompt processing, so the
    verification batches of prompt-lookup decoding would count as prompt; these do not.
    ``prompt_eval_tokens`` are the prompt tokens evaluated (not taken from the KV cache or a
    snapshot; a fully cached prompt still replays its last token), ``eval_tokens`` the tokens
    fed to decode steps (each step's sampled token plus its draft), ``draft_tokens`` the
    drafted ones, ``restored_tokens`` the prompt tokens a snapshot brought back.

    A completion decoded in a batch of samples (:func:`batched_samples`) counts its own share:
    ``eval_tokens`` and ``decode_steps`` of its sequence, ``eval_ms`` each step's time divided
    among the sequences in it; ``batch_size`` is the number of sequences decoded together (0
    outside a batch), ``batch_tokens`` (tokens fed, summed over the sequences) and ``batch_ms``
    the whole batch's, and ``batch_rows`` the rows llama.cpp evaluated for them: sequences whose
    tokens are so far the same share one row per step (see :meth:`_generate_batched`);
    ``batch_cancelled`` the sequences given up unfinished once the batch's caller had settled
    (counted in ``batch_size`` too: they were decoded for a while).
    """

    prompt_eval_tokens: int = 0
    prompt_eval_ms: float = 0.0
    eval_tokens: int = 0
    eval_ms: float = 0.0
    decode_steps: int = 0
    draft_tokens: int = 0
    restored_tokens: int = 0
    snapshot_ms: float = 0.0
    batch_size: int = 0
    batch_tokens: int = 0
    batch_ms: float = 0.0
    batch_rows: int = 0
    batch_cancelled: int = 0


DEFAULT_N_SEQ_MAX = 8
"""Sequences a loaded model can decode together (batched samples, :func:`batched_samples`);
1 = none. Every sequence shares one KV cache of ``n_ctx`` cells (llama.cpp's unified cache),
so a batch needs no more memory than one sequence, only room for its continuations."""

GENERATE_DEFAULTS: dict[str, Any] = {
    "top_k": 40,
    "top_p": 0.95,
    "min_p": 0.05,
    "typical_p": 1.0,
    "temp": 0.80,
    "repeat_penalty": 1.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "tfs_z": 1.0,
    "mirostat_mode": 0,
    "mirostat_tau": 5.0,
    "mirostat_eta": 0.1,
    "penalize_nl": True,
}
"""``Llama.generate``'s sampling arguments and their defaults (``_create_completion`` passes
them all)."""


@dataclass
class BatchPlan:
    """A request to decode ``k`` samples of the next completion's prompt together.

    :meth:`DecodingLlama.create_completion` records the completion's ``stop`` and
    ``max_tokens`` (``generate`` does not see them) and whether its other arguments allow a
    batch; the first ``generate`` takes the plan (``started``) and leaves each extra sequence's
    outcome in ``results``.
    """

    k: int
    sample_temp: float | None = None
    """When set, sequence 0 decodes with the completion's own settings (a greedy call) and
    sequences 1..k-1 sample at this temperature, their other settings the same."""
    settle: Callable[[list[bytes | None]], bool] | None = None
    """Called when sequences finish, with each sequence's text (None while it decodes); True
    gives up the sequences after the first that are still decoding (see :class:`SampleBatch`)."""
    seed_offset: int = 0
    """Sequence ``j`` samples with seed ``base + seed_offset + j`` (``base``: the call's seed):
    the rollout index of sequence 0, so a batch opened by a later rollout (the earlier ones
    answered by DSPy's cache) draws the seeds of its own rollouts, not those of the first. The
    engine passes 0 for a call with its own seed, which already holds its rollout's. After an
    early stop the finished samples move up the queue (:class:`SampleBatch`), so a rollout
    answered from a batch may hold a later sequence's seed; a batch opened afterwards can then
    repeat one sample."""
    stop: Any = None
    max_tokens: int | None = 16
    captured: bool = False
    started: bool = False
    results: list[SeqResult] = field(default_factory=list)


@dataclass
class SeqResult:
    """One sequence of a batch: its text as ``create_completion`` would have returned it, and
    its share of the cost (see :class:`CallStats`)."""

    index: int
    tokens: list[int]
    text: bytes
    finish_reason: str
    eval_tokens: int = 0
    decode_steps: int = 0
    eval_ms: float = 0.0


class Completion:
    """A completion's text built token by token as ``Llama._create_completion`` builds it: an
    end-of-generation token ends it (``stop``), a stop string cuts it (``stop``), ``max_tokens``
    completion tokens end it (``length``); a token that leaves a UTF-8 character unfinished
    defers the checks to the next one. ``push`` tells when the completion is over."""

    def __init__(
        self, llama: Any, prompt: list[int], stop: Sequence[bytes], max_tokens: int
    ) -> None:
        self.llama = llama
        self.prompt = prompt
        self.stop = list(stop)
        self.max_tokens = max_tokens
        self.tokens: list[int] = []
        self.text = b""
        self.finish_reason: str | None = None
        self._multibyte_fix = 0

    def end(self, reason: str) -> None:
        """End the completion with all its tokens (a stopping criterion fired)."""
        self.text = self.llama.detokenize(self.tokens, prev_tokens=self.prompt)
        self.finish_reason = reason

    def push(self, token: int) -> bool:
        """Take one sampled token; True when the completion is over."""
        if self.llama._is_eog(token):
            self.end("stop")
            return True
        self.tokens.append(token)
        text = self.llama.detokenize(self.tokens, prev_tokens=self.prompt)
        for k, char in enumerate(text[-3:]):  # upstream's check, verbatim
            k = 3 - k
            for num, pattern in ((2, 192), (3, 224), (4, 240)):
                if num > k and pattern & char == pattern:
                    self._multibyte_fix = num - k
        if self._multibyte_fix > 0:
            self._multibyte_fix -= 1
            return False
        stops = [stop for stop in self.stop if stop in text]
        if stops:
            self.text = text[: text.index(stops[0])]
            self.finish_reason = "stop"
            return True
        if len(self.tokens) >= self.max_tokens:
            self.text = text
            self.finish_reason = "length"
            return True
        return False


@dataclass
class DecodingSequence:
    index: int
    completion: Completion
    sampler: Any
    pending: int = -1
    fed: list[int] = field(default_factory=list)
    sampled: list[int] = field(default_factory=list)
    steps: int = 0
    ms: float = 0.0
    criteria: bool = False
    dropped: bool = False
    cancelled: bool = False


def shared_rows(active: list[DecodingSequence]) -> list[list[DecodingSequence]]:
    """The sequences grouped by the tokens they have fed and the one they feed next, in order
    of first appearance: each group is one batch row. Sequences only ever split (they start as
    one prompt and a row is shared only while every token so far is), so equal tokens mean
    shared KV cells."""
    groups: dict[tuple[int, ...], list[DecodingSequence]] = {}
    for seq in active:
        groups.setdefault((*seq.fed, seq.pending), []).append(seq)
    return list(groups.values())


def close_sampler(sampler: Any) -> None:
    """Free a sequence's sampler chain (llama-cpp-python's have ``close``; test doubles may not)."""
    close = getattr(sampler, "close", None)
    if callable(close):
        close()
