"""LM runtime: an offline local default, any served model, and per-call accounting.

Model specs are strings so that a compiled artefact can record which LM it was compiled with and
rebuild it later (``build_lm(spec_of(lm))``):

- ``local:NAME``  a model from :data:`sqlweave.models.REGISTRY`, fetched on first use;
- ``gguf:PATH``   any GGUF file on disk;
- anything else   a LiteLLM model string handed to ``dspy.LM`` (``openai/<model>`` with
                  ``api_base=`` for an OpenAI-compatible server such as vLLM or llama-server).

Local models run in-process through llama-cpp-python, plugged into DSPy 3.4 as a canonical
custom engine (``complete(Request) -> Response``), so DSPy keeps owning its cache, retries, ``n``
fan-out, history and callbacks. One ``Llama`` is loaded per model file and shared by every LM
built on it; a lock serialises calls on it because DSPy evaluates with threads and a llama.cpp
context is single-threaded state. Calls on one instance reuse the KV cache for the longest
common token prefix with the previous call, which is what makes many questions over one
schema-heavy prompt cheap.

Two decoding aids live in the loaded model (:class:`PromptStates` and prompt-lookup decoding, see
:func:`_llama_class`): a sampled prompt's KV state is kept, so the n samples of one prompt
evaluate it once even when other calls come between them; and with ``prompt_lookup=K`` each
decode step proposes K tokens copied from the prompt (table, column and value names) and keeps
those the model itself would have chosen, so greedy output is unchanged.

Inside :func:`batched_samples` (self-consistency's sampled rollouts), the first sampled call of
a prompt decodes k continuations of it together, one llama.cpp batch per step with one token per
sequence; the calls after it that ask for the same prompt and settings are answered from those.
A block opened with ``greedy=True`` lets its first call be the greedy one: it decodes as one
more sequence of the same batch, beside the k samples.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import ctypes
import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import dspy
import numpy as np
from dspy.lm15 import Message, Request, Response, TextPart, response_to_events
from dspy.lm15 import Usage as TokenUsage
from dspy.utils.callback import BaseCallback
from dspy.utils.callback_context import ACTIVE_CALL_ID
from dspy.utils.usage_tracker import UsageTracker

from sqlweave import models
from sqlweave.errors import SqlweaveError

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "local:qwen2.5-coder-1.5b"
"""The default LM spec: the 1.5B coder model, run locally."""

SMALL_MODEL = "local:qwen2.5-coder-0.5b"
"""The small local model CI uses."""

DEFAULT_N_CTX = 8192
"""Context window for local models: a Spider/BIRD schema plus demos fits; Qwen2.5 allows 32k."""

SpecKind = Literal["local", "gguf", "litellm"]


class LMSpecError(SqlweaveError, ValueError):
    """A model spec string that cannot be understood."""


@dataclass(frozen=True)
class LMSpec:
    """A parsed model spec; ``str(spec)`` gives back the string it was parsed from."""

    kind: SpecKind
    target: str

    @classmethod
    def parse(cls, spec: str) -> LMSpec:
        """Parse ``local:NAME``, ``gguf:PATH`` or a LiteLLM model string."""
        if not isinstance(spec, str) or not spec.strip():
            raise LMSpecError("a model spec must be a non-empty string")
        spec = spec.strip()
        prefix, sep, rest = spec.partition(":")
        if sep and prefix == "local":
            if rest not in models.REGISTRY:
                known = ", ".join(f"local:{name}" for name in sorted(models.REGISTRY))
                raise LMSpecError(f"unknown local model {rest!r}; known: {known}, or use gguf:PATH")
            return cls("local", rest)
        if sep and prefix == "gguf":
            if not rest:
                raise LMSpecError("gguf: needs a path, e.g. gguf:/models/model.gguf")
            return cls("gguf", rest)
        return cls("litellm", spec)

    def __str__(self) -> str:
        return self.target if self.kind == "litellm" else f"{self.kind}:{self.target}"

    @property
    def is_local(self) -> bool:
        """Whether the model runs in this process (no server, no cost)."""
        return self.kind in ("local", "gguf")


# ---------------------------------------------------------------------------------------------
# llama.cpp engine


DEFAULT_PROMPT_CACHE_BYTES = 256 * 2**20
"""RAM for KV snapshots of sampled prompts: a handful of schema-sized prompts (about 28 KB per
token for the 1.5B model)."""

RESTORE_MIN_GAIN = 16
"""A snapshot is restored only when it covers this many more prompt tokens than the live KV
cache: copying a state back costs about as much as evaluating a few tokens."""


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    m = min(len(a), len(b))
    if not m:
        return 0
    differ = np.flatnonzero(np.asarray(a[:m]) != np.asarray(b[:m]))
    return int(differ[0]) if differ.size else m


@dataclass
class PromptState:
    """The llama.cpp context state right after ``tokens`` were evaluated (``nbytes`` of
    ``state``)."""

    tokens: Any
    state: Any
    nbytes: int


class PromptStates:
    """KV snapshots of evaluated prompts, the least recently used dropped first past
    ``capacity_bytes``.

    llama.cpp reuses only the previous call's KV cache, so a call in between (another question
    on an evaluation thread, a second stage of a multi-call program) makes the next sample of a
    prompt evaluate it again. A snapshot taken right after the prompt was evaluated is restored
    instead. Not thread-safe: it lives in one loaded model, used under that model's lock.
    """

    def __init__(self, capacity_bytes: int = 0) -> None:
        self.capacity_bytes = capacity_bytes
        self._states: OrderedDict[bytes, PromptState] = OrderedDict()

    def __len__(self) -> int:
        return len(self._states)

    @property
    def nbytes(self) -> int:
        """Bytes held by every snapshot."""
        return sum(state.nbytes for state in self._states.values())

    @staticmethod
    def _key(tokens: Sequence[int]) -> bytes:
        return np.asarray(tokens, dtype=np.int64).tobytes()

    def holds(self, tokens: Sequence[int]) -> bool:
        """Whether a snapshot of exactly ``tokens`` is kept."""
        return self._key(tokens) in self._states

    def best(self, tokens: Sequence[int]) -> tuple[PromptState | None, int]:
        """The snapshot sharing the longest prefix with ``tokens``, and that prefix's length."""
        best: PromptState | None = None
        shared = 0
        for state in self._states.values():
            length = common_prefix(state.tokens, tokens)
            if length > shared:
                best, shared = state, length
        if best is not None:
            self._states.move_to_end(self._key(best.tokens))
        return best, shared

    def add(self, tokens: Sequence[int], state: Any, nbytes: int) -> bool:
        """Keep a snapshot (dropping the oldest to make room); False when it cannot fit."""
        if nbytes > self.capacity_bytes:
            return False
        key = self._key(tokens)
        self._states.pop(key, None)
        self._states[key] = PromptState(np.array(tokens, dtype=np.intc), state, nbytes)
        self.shrink()
        return True

    def shrink(self) -> None:
        """Drop the oldest snapshots until the rest fit ``capacity_bytes``."""
        while self._states and self.nbytes > self.capacity_bytes:
            self._states.popitem(last=False)

    def clear(self) -> None:
        """Forget every snapshot."""
        self._states.clear()


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

_GENERATE_DEFAULTS: dict[str, Any] = {
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
class _BatchPlan:
    """A request to decode ``k`` samples of the next completion's prompt together.

    :meth:`_DecodingLlama.create_completion` records the completion's ``stop`` and
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
    stop: Any = None
    max_tokens: int | None = 16
    captured: bool = False
    started: bool = False
    results: list[_SeqResult] = field(default_factory=list)


@dataclass
class _SeqResult:
    """One sequence of a batch: its text as ``create_completion`` would have returned it, and
    its share of the cost (see :class:`CallStats`)."""

    index: int
    tokens: list[int]
    text: bytes
    finish_reason: str
    eval_tokens: int = 0
    decode_steps: int = 0
    eval_ms: float = 0.0


class _Completion:
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
class _Sequence:
    index: int
    completion: _Completion
    sampler: Any
    pending: int = -1
    fed: list[int] = field(default_factory=list)
    sampled: list[int] = field(default_factory=list)
    steps: int = 0
    ms: float = 0.0
    criteria: bool = False
    dropped: bool = False
    cancelled: bool = False


def _shared_rows(active: list[_Sequence]) -> list[list[_Sequence]]:
    """The sequences grouped by the tokens they have fed and the one they feed next, in order
    of first appearance: each group is one batch row. Sequences only ever split (they start as
    one prompt and a row is shared only while every token so far is), so equal tokens mean
    shared KV cells."""
    groups: dict[tuple[int, ...], list[_Sequence]] = {}
    for seq in active:
        groups.setdefault((*seq.fed, seq.pending), []).append(seq)
    return list(groups.values())


class _DecodingLlama:
    """Mixed into ``llama_cpp.Llama`` by :func:`_llama_class`: prompt snapshots, prompt-lookup
    verification without full-context logits, batched samples, and per-call counters.

    It hooks ``Llama.generate`` (restore the best snapshot before the prefix match, mark the
    first ``eval`` as the prompt's) and ``Llama.eval`` (count, snapshot after the prompt,
    verify drafts). The rest is upstream's own decoding loop, so sampling, stops and greedy
    output are those of ``llama_cpp``. A completion started after :meth:`arm_batch` decodes
    several samples of its prompt together instead (:meth:`_generate_batched`).
    """

    def __init__(self, *args: Any, n_seq_max: int = 1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prompt_states = PromptStates()
        self.call_stats = CallStats()
        self._keep_prompt = False
        self._in_prompt = False
        self._batch_plan: _BatchPlan | None = None
        self.n_seq_max = 1
        if n_seq_max > 1:
            self._allow_sequences(n_seq_max)

    def _allow_sequences(self, n_seq_max: int) -> None:
        """Rebuild the context for ``n_seq_max`` sequences sharing one KV cache.

        ``Llama`` has no argument for it, and a non-unified cache would give each sequence
        ``n_ctx / n_seq_max`` cells, shrinking every ordinary call's context. The context just
        built holds nothing yet; it is freed before the new one is made.
        """
        params = getattr(self, "context_params", None)
        if params is None:  # a stand-in without a llama.cpp context (tests)
            self.n_seq_max = n_seq_max
            return
        from llama_cpp import _internals

        params.n_seq_max = n_seq_max
        params.kv_unified = True
        self._ctx.close()
        self._ctx = self._stack.enter_context(
            closing(_internals.LlamaContext(model=self._model, params=params, verbose=self.verbose))
        )
        self.n_seq_max = n_seq_max

    def begin_call(self, *, lookup_tokens: int, keep_prompt: bool, prompt_cache_bytes: int) -> None:
        """Settings for the next completion (the model is shared; every call sets its own)."""
        self.draft_model = _lookup_draft(lookup_tokens) if lookup_tokens > 0 else None
        self.prompt_states.capacity_bytes = max(0, prompt_cache_bytes)
        self.prompt_states.shrink()
        self._keep_prompt = keep_prompt and prompt_cache_bytes > 0
        self._in_prompt = False
        self._batch_plan = None
        self.call_stats = CallStats()

    def arm_batch(
        self,
        k: int,
        *,
        sample_temperature: float | None = None,
        settle: Callable[[list[bytes | None]], bool] | None = None,
    ) -> None:
        """Decode ``k`` sequences of the next completion's prompt together (at most
        ``n_seq_max``); :meth:`take_batch` then returns the sequences after the first. Call
        after :meth:`begin_call`. Without room for a batch the completion runs as usual.

        By default every sequence is a sample with the completion's own settings. With
        ``sample_temperature`` the completion itself (sequence 0, typically greedy) keeps its
        settings and the others sample at that temperature: a greedy answer and its samples
        in one batch.

        ``settle`` is asked, each step in which a sequence finishes, whether the rest are still
        wanted: it gets every sequence's text so far (None while decoding) and returns True to
        give up those after the first that are still decoding."""
        k = min(k, self.n_seq_max)
        if sample_temperature is not None and sample_temperature <= 0:
            raise ValueError(f"sample_temperature must be > 0, not {sample_temperature!r}")
        self._batch_plan = _BatchPlan(k, sample_temperature, settle) if k > 1 else None

    def take_batch(self) -> list[_SeqResult]:
        """The extra samples of the completion just made (empty when it was not batched), and
        the plan is dropped."""
        plan, self._batch_plan = self._batch_plan, None
        return list(plan.results) if plan is not None else []

    def create_completion(self, prompt: Any, *args: Any, **kwargs: Any) -> Any:
        plan = self._batch_plan
        if plan is not None and not plan.started:
            # generate() sees neither the stop strings nor max_tokens; keep them for the batch.
            plan.stop = kwargs.get("stop", [])
            plan.max_tokens = kwargs.get("max_tokens", 16)
            plan.captured = not args and not (
                kwargs.get("stream")
                or kwargs.get("echo")
                or kwargs.get("logprobs") is not None
                or kwargs.get("suffix") is not None
                or kwargs.get("logit_bias")
            )
        return super().create_completion(prompt, *args, **kwargs)

    def generate(self, tokens: Sequence[int], *args: Any, **kwargs: Any) -> Any:
        tokens = list(tokens)
        plan = self._batch_plan
        if plan is not None and plan.captured and not plan.started:
            plan.started = True
            if not args and self._can_batch(plan, tokens, kwargs):
                return self._generate_batched(tokens, plan, kwargs)
        self._restore_prompt(tokens)
        self._in_prompt = True
        return super().generate(tokens, *args, **kwargs)

    def _can_batch(self, plan: _BatchPlan, tokens: list[int], kwargs: dict[str, Any]) -> bool:
        """Plain temperature sampling (no grammar, mirostat or logits processor) of a prompt
        that leaves room for the first token of every sequence; with ``plan.sample_temp`` the
        completion's own call may be greedy."""
        return (
            plan.k > 1
            and plan.k <= min(self.n_seq_max, self.n_batch)
            and (plan.sample_temp is not None or kwargs.get("temp", _GENERATE_DEFAULTS["temp"]) > 0)
            and not kwargs.get("mirostat_mode")
            and kwargs.get("grammar") is None
            and kwargs.get("logits_processor") is None
            and kwargs.get("reset", True)
            and 0 < len(tokens)
            and len(tokens) + plan.k <= self._n_ctx
        )

    def _generate_batched(
        self, tokens: list[int], plan: _BatchPlan, kwargs: dict[str, Any]
    ) -> Iterator[int]:
        """``generate`` for ``plan.k`` samples at once: the prompt is evaluated once (as
        upstream: a snapshot or the live KV cache's prefix, then the rest), copied to k - 1
        more sequences of the shared KV cache, and each decode step feeds one token per
        unfinished sequence in one batch. Each sequence has its own sampler (upstream's chain
        with the same settings, seeded ``seed + j``) and stops where ``_create_completion``
        would stop it. The first sequence's tokens are yielded (``_create_completion`` turns
        them into the call's answer); the others are left in ``plan.results``.

        Sequences that have sampled the same tokens so far are fed as one batch row holding all
        their sequence ids: they share that token's KV cell and its logits, from which each
        sequence's own sampler draws. Samples of SQL agree on long stretches (the same SELECT
        list, table and key names), so a step often evaluates fewer rows than sequences; the
        distribution of each sample is unchanged, since a sequence's logits depend on its
        tokens alone.

        With ``plan.sample_temp`` the first sequence keeps the call's own settings (greedy: the
        most likely token at each step) and the others sample at that temperature; the greedy
        sequence shares rows with the samples while they agree. Its tokens are those of an
        ordinary greedy call except where a batch's floating-point sums (several rows at once)
        tip a near-tie.

        Afterwards only the first sequence is left in the KV cache and ``input_ids`` /
        ``n_tokens`` describe it, as after an ordinary call, so the next call reuses the
        prompt. When the cache runs out of cells the last sequences are given up (their samples
        are then made by ordinary calls); the first always fits, since ``max_tokens`` was cut
        to the context. Should llama.cpp refuse a batch, the call decodes its one sample as usual.
        """
        stats = self.call_stats
        criteria = kwargs.get("stopping_criteria")
        sampling = {name: kwargs.get(name, default) for name, default in _GENERATE_DEFAULTS.items()}
        samples = sampling if plan.sample_temp is None else {**sampling, "temp": plan.sample_temp}
        n_prompt = len(tokens)
        max_tokens = plan.max_tokens
        if max_tokens is None or max_tokens <= 0:
            max_tokens = self._n_ctx - n_prompt
        if max_tokens + n_prompt >= self._n_ctx:
            max_tokens = self._n_ctx - n_prompt
        stop = plan.stop if isinstance(plan.stop, list) else [plan.stop] if plan.stop else []
        stop_bytes = [text.encode("utf-8") for text in stop]

        # The prompt, in sequence 0: a snapshot or the live cache's prefix, then the rest. At
        # least its last token is evaluated, so its logits are this context's last output.
        for seq in range(1, self.n_seq_max):
            self._seq_rm(seq)
        self._restore_prompt(tokens)
        reuse = min(common_prefix(self.input_ids[: self.n_tokens], tokens), n_prompt - 1)
        if reuse <= 0 or not self._seq_rm(0, reuse):
            reuse = 0
        self.n_tokens = reuse
        self._in_prompt = True
        self.eval(tokens[reuse:])
        self._in_prompt = False

        base_seed = int(self._seed)
        seqs = [
            _Sequence(
                j,
                _Completion(self, tokens, stop_bytes, max_tokens),
                self._sequence_sampler(
                    base_seed if j == 0 else (base_seed + j) % 2**32,
                    sampling if j == 0 else samples,
                ),
            )
            for j in range(plan.k)
        ]
        started = time.perf_counter()
        ok = False
        try:
            for seq in seqs[1:]:
                self._seq_cp(0, seq.index)
            step_started = time.perf_counter()
            for seq in seqs:
                seq.pending = self._sample_at(seq.sampler, -1)
            active = list(seqs)
            rows = 0
            while True:
                still = []
                for seq in active:
                    if criteria is not None and criteria(
                        np.asarray(tokens + seq.fed, dtype=np.intc), self.scores[0, :]
                    ):
                        seq.criteria = True  # upstream's generate returns before the token
                        seq.completion.end("stop")
                        done = True
                    else:
                        seq.sampled.append(seq.pending)
                        done = seq.completion.push(seq.pending)
                    if not done:
                        still.append(seq)
                    elif seq.index:  # its cells are free for the others
                        self._seq_rm(seq.index)
                if (
                    plan.settle is not None
                    and len(still) < len(active)
                    and any(seq.index for seq in still)
                ):
                    still = self._settle(plan, seqs, still)
                active = still
                while active:
                    groups = _shared_rows(active)
                    code = self._decode_multi(
                        [
                            (
                                group[0].pending,
                                n_prompt + len(group[0].fed),
                                [s.index for s in group],
                            )
                            for group in groups
                        ]
                    )
                    if code == 0:
                        rows += len(groups)
                        break
                    if code != 1 or active == [seqs[0]]:
                        raise RuntimeError(f"llama_decode returned {code}")
                    # No free KV cell: give up the last sequence (sequence 0 always fits).
                    dropped = active.pop()
                    dropped.dropped = True
                    self._seq_rm(dropped.index)
                if not active:
                    break
                for i, group in enumerate(groups):
                    for seq in group:
                        seq.fed.append(seq.pending)
                        seq.pending = self._sample_at(seq.sampler, i)
                now = time.perf_counter()
                share = (now - step_started) * 1000 / len(active)
                step_started = now
                for seq in active:
                    seq.steps += 1
                    seq.ms += share
            ok = True
        except RuntimeError as exc:  # llama.cpp refused a batch: this call decodes alone
            logger.warning("batched samples failed (%s); decoding one sample", exc)
        finally:
            # Leave only sequence 0 (prompt + the tokens it fed), as an ordinary call does.
            for seq in seqs[1:]:
                self._seq_rm(seq.index)
            if ok:
                fed = seqs[0].fed
                self.input_ids[n_prompt : n_prompt + len(fed)] = fed
                self.n_tokens = n_prompt + len(fed)
            else:
                self._seq_rm(0)
                self.n_tokens = 0
            self._requires_eval = True
        if not ok:
            self._restore_prompt(tokens)
            self._in_prompt = True
            yield from super().generate(tokens, **kwargs)
            return
        for seq in seqs[1:]:
            if seq.dropped or seq.cancelled:
                _close_sampler(seq.sampler)
                continue
            if (
                criteria is not None
                and not seq.criteria
                and criteria(np.asarray(tokens + seq.fed, dtype=np.intc), self.scores[0, :])
            ):
                seq.completion.end("stop")  # upstream's check after the loop
            plan.results.append(
                _SeqResult(
                    index=seq.index,
                    tokens=list(seq.completion.tokens),
                    text=seq.completion.text,
                    finish_reason=seq.completion.finish_reason or "length",
                    eval_tokens=len(seq.fed),
                    decode_steps=seq.steps,
                    eval_ms=seq.ms,
                )
            )
            _close_sampler(seq.sampler)
        first = seqs[0]
        stats.eval_tokens += len(first.fed)
        stats.decode_steps += first.steps
        stats.eval_ms += first.ms
        stats.batch_size = sum(not seq.dropped for seq in seqs)
        stats.batch_cancelled = sum(seq.cancelled for seq in seqs)
        stats.batch_tokens = sum(len(seq.fed) for seq in seqs)
        stats.batch_rows = rows
        stats.batch_ms = (time.perf_counter() - started) * 1000

        yield from first.sampled
        if first.criteria:
            return
        # The caller wants more than the batch decoded for it (it stops where the batch
        # stopped, so this is a safeguard): go on alone, as upstream's loop would.
        last = first.sampled[-1]
        while True:
            self.eval([last])
            token = self._sample_at(first.sampler, -1)
            if criteria is not None and criteria(self._input_ids, self.scores[0, :]):
                return
            yield token
            last = token

    def _settle(
        self, plan: _BatchPlan, seqs: list[_Sequence], still: list[_Sequence]
    ) -> list[_Sequence]:
        """``still`` (the sequences decoding on), less those after the first if ``plan.settle``
        says the answers so far are enough; a failing callback is logged and then ignored."""
        decoding = {id(seq) for seq in still}
        texts = [
            None if id(seq) in decoding or seq.dropped else seq.completion.text for seq in seqs
        ]
        try:
            settled = plan.settle(texts)  # type: ignore[misc]
        except Exception:
            logger.warning("a batch's settle callback failed; decoding on", exc_info=True)
            plan.settle = None
            return still
        if not settled:
            return still
        plan.settle = None
        for seq in still:
            if seq.index:
                seq.cancelled = True
                self._seq_rm(seq.index)
        return [seq for seq in still if not seq.index]

    # The llama.cpp calls of a batch; tests replace these.
    def _seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> bool:
        """Remove sequence ``seq``'s cells at positions [p0, p1) (all by default)."""
        import llama_cpp

        return bool(llama_cpp.llama_memory_seq_rm(self._ctx.memory, seq, p0, p1))

    def _seq_cp(self, src: int, dst: int) -> None:
        """Make sequence ``dst`` share all of ``src``'s cells (no copy in a unified cache)."""
        import llama_cpp

        llama_cpp.llama_memory_seq_cp(self._ctx.memory, src, dst, -1, -1)

    def _decode_multi(self, entries: Sequence[tuple[int, int, Sequence[int]]]) -> int:
        """One ``llama_decode`` of ``(token, position, sequences)`` entries, logits for each
        (entry i's at output i); llama.cpp's return code (1: no free KV cell). An entry with
        several sequences is one KV cell they all hold (the batch's ``seq_id`` list)."""
        import llama_cpp

        batch = self._batch.batch
        batch.n_tokens = len(entries)
        for i, (token, pos, seqs) in enumerate(entries):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = len(seqs)
            for m, seq in enumerate(seqs):
                batch.seq_id[i][m] = seq
            batch.logits[i] = True
        return int(llama_cpp.llama_decode(self._ctx.ctx, batch))

    def _sequence_sampler(self, seed: int, sampling: dict[str, Any]) -> Any:
        """Upstream's sampler chain for these settings, seeded ``seed``."""
        saved = self._seed
        self._seed = seed
        try:
            return self._init_sampler(**sampling)
        finally:
            self._seed = saved

    def _sample_at(self, sampler: Any, index: int) -> int:
        """Sample (and accept) a token from the logits of output ``index`` (-1: the last)."""
        return int(sampler.sample(self._ctx, index))

    def _is_eog(self, token: int) -> bool:
        import llama_cpp

        return bool(llama_cpp.llama_vocab_is_eog(self._model.vocab, token))

    def eval(self, tokens: Sequence[int]) -> None:
        stats = self.call_stats
        started = time.perf_counter()
        if self._in_prompt:
            # The first eval of a completion is its prompt (or the part the cache lacks).
            self._in_prompt = False
            super().eval(tokens)
            stats.prompt_eval_tokens += len(tokens)
            stats.prompt_eval_ms += (time.perf_counter() - started) * 1000
            if self._keep_prompt:
                self._snapshot_prompt()
            return
        if self.draft_model is not None and len(tokens) > 1:
            self._eval_all_logits(tokens)
        else:
            super().eval(tokens)
        stats.decode_steps += 1
        stats.eval_tokens += len(tokens)
        stats.draft_tokens += len(tokens) - 1
        stats.eval_ms += (time.perf_counter() - started) * 1000

    def _eval_all_logits(self, tokens: Sequence[int]) -> None:
        """Evaluate a sampled token and its draft with logits at every position, so the
        sampler can check each drafted token against the model's own choice.

        Upstream does this by building the whole model with ``logits_all=True``, which also
        computes the output layer for every prompt token and copies each position's logits
        into an ``n_ctx x n_vocab`` array (about 5 GB at 8k context for Qwen's vocabulary), or
        fails past ``n_batch`` positions when that array was sized without it. Only these
        short batches need the logits, and nothing reads the copy, so neither happens here.
        A draft is shorter than ``n_batch`` (the engine caps it), so one decode holds them all.
        """
        self._ctx.kv_cache_seq_rm(-1, self.n_tokens, -1)
        for start in range(0, len(tokens), self.n_batch):
            batch = list(tokens[start : start + self.n_batch])
            self._batch.set_batch(batch=batch, n_past=self.n_tokens, logits_all=True)
            self._ctx.decode(self._batch)
            self.input_ids[self.n_tokens : self.n_tokens + len(batch)] = batch
            self.n_tokens += len(batch)
        self._requires_eval = False

    def _snapshot_prompt(self) -> None:
        tokens = self.input_ids[: self.n_tokens]
        if not len(tokens) or self.prompt_states.holds(tokens):
            return
        started = time.perf_counter()
        saved = self._save_state()
        if saved is not None:
            self.prompt_states.add(tokens, *saved)
        self.call_stats.snapshot_ms += (time.perf_counter() - started) * 1000

    def _restore_prompt(self, tokens: list[int]) -> None:
        if not len(self.prompt_states):
            return
        state, shared = self.prompt_states.best(tokens)
        live = common_prefix(self.input_ids[: self.n_tokens], tokens)
        if state is None or shared < live + RESTORE_MIN_GAIN:
            return
        started = time.perf_counter()
        self._load_state(state.state, state.nbytes)
        count = len(state.tokens)
        self.input_ids[:count] = state.tokens
        self.n_tokens = count
        # As upstream after load_state: replay the last shared token before sampling.
        self._requires_eval = True
        self.call_stats.restored_tokens = shared
        self.call_stats.snapshot_ms += (time.perf_counter() - started) * 1000

    # The llama.cpp state calls; tests replace these two.
    def _save_state(self) -> tuple[Any, int] | None:
        """The context's state (KV cache and last logits) as ``(buffer, nbytes)``, or None
        when it does not fit the snapshot budget."""
        import llama_cpp

        size = int(llama_cpp.llama_state_get_size(self._ctx.ctx))
        if size > self.prompt_states.capacity_bytes:
            return None
        buffer = (ctypes.c_uint8 * size)()
        nbytes = int(llama_cpp.llama_state_get_data(self._ctx.ctx, buffer, size))
        if nbytes > size:
            raise RuntimeError("llama.cpp wrote more state than it announced")
        return buffer, nbytes

    def _load_state(self, buffer: Any, nbytes: int) -> None:
        import llama_cpp

        if int(llama_cpp.llama_state_set_data(self._ctx.ctx, buffer, nbytes)) != nbytes:
            raise RuntimeError("llama.cpp could not restore a prompt snapshot")


def _close_sampler(sampler: Any) -> None:
    close = getattr(sampler, "close", None)
    if callable(close):
        close()


def _lookup_draft(tokens: int) -> Any:
    """llama-cpp-python's prompt-lookup drafter proposing up to ``tokens`` tokens a step."""
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    return LlamaPromptLookupDecoding(num_pred_tokens=tokens)


_LLAMA_CLASSES: dict[type, type] = {}


def _llama_class(base: type) -> type:
    """``base`` (``llama_cpp.Llama``) with :class:`_DecodingLlama` mixed in, built once."""
    cls = _LLAMA_CLASSES.get(base)
    if cls is None:
        cls = type("SqlweaveLlama", (_DecodingLlama, base), {"__module__": __name__})
        _LLAMA_CLASSES[base] = cls
    return cls


@dataclass
class _Loaded:
    llama: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    key: tuple[Any, ...] = ()


_LOADED: dict[tuple[Any, ...], _Loaded] = {}
_LOADED_LOCK = threading.Lock()
_OPEN_MODELS: weakref.WeakSet[Any] = weakref.WeakSet()
"""Every model :func:`_load_llama` built that is still alive, unloaded or not (an engine or a
test may still hold one after :func:`unload_all`), for :func:`close_open_models`."""


def close_open_models() -> None:
    """Free every model this process loaded; run at interpreter exit.

    llama-cpp-python frees a model in ``Llama.__del__``. A model still referenced when the
    interpreter shuts down is collected after llama_cpp's ctypes bindings are torn down, and the
    free prints ``Exception ignored in: Llama.__del__ … 'NoneType' object is not callable``.
    Closing first, while the bindings exist, frees the memory cleanly; ``close`` is idempotent,
    so the later ``__del__`` does nothing.
    """
    for llama in list(_OPEN_MODELS):
        with suppress(Exception):  # at exit, a model that will not close must not stop the rest
            llama.close()


atexit.register(close_open_models)


def _load_llama(
    path: Path,
    *,
    n_ctx: int,
    n_batch: int,
    n_threads: int,
    ram_cache_bytes: int,
    n_seq_max: int = 1,
) -> _Loaded:
    """The shared ``Llama`` for this file and context settings, loaded at most once."""
    key = (str(path.resolve()), n_ctx, n_batch, n_threads, ram_cache_bytes, n_seq_max)
    with _LOADED_LOCK:
        loaded = _LOADED.get(key)
        if loaded is None:
            try:
                from llama_cpp import Llama, LlamaRAMCache
            except ImportError as exc:  # optional dependency: pip install 'sqlweave[local]'
                raise ImportError(
                    "local models need llama-cpp-python: pip install 'sqlweave[local]'"
                ) from exc
            started = time.perf_counter()
            llama = _llama_class(Llama)(
                model_path=str(path),
                n_ctx=n_ctx,
                n_batch=n_batch,
                n_threads=n_threads,
                n_threads_batch=n_threads,
                verbose=False,
                n_seq_max=n_seq_max,
            )
            if ram_cache_bytes > 0:
                # Keeps the KV state of past prompts so alternating prefixes (several schemas in
                # one evaluation) are restored instead of recomputed; the single-slot reuse in
                # Llama.generate only knows the previous call.
                llama.set_cache(LlamaRAMCache(capacity_bytes=ram_cache_bytes))
            logger.info(
                "loaded %s in %.1fs (n_ctx=%d, threads=%d)",
                path.name,
                time.perf_counter() - started,
                n_ctx,
                n_threads,
            )
            _OPEN_MODELS.add(llama)
            loaded = _Loaded(llama, key=key)
            _LOADED[key] = loaded
    return loaded


def unload_all() -> None:
    """Forget every loaded model (frees memory once no engine holds a reference)."""
    with _LOADED_LOCK:
        _LOADED.clear()


def _perf(llama: Any) -> dict[str, float]:
    """Prompt/decode counters of the last call: the model's own :class:`CallStats` when it was
    built by :func:`_load_llama`, else llama.cpp's counters (reset before each call)."""
    stats = getattr(llama, "call_stats", None)
    if isinstance(stats, CallStats):
        return asdict(stats)
    import llama_cpp

    data = llama_cpp.llama_perf_context(llama._ctx.ctx)
    return {
        "prompt_eval_ms": float(data.t_p_eval_ms),
        "prompt_eval_tokens": int(data.n_p_eval),
        "eval_ms": float(data.t_eval_ms),
        "eval_tokens": int(data.n_eval),
    }


def _reset_perf(llama: Any) -> None:
    import llama_cpp

    llama_cpp.llama_perf_context_reset(llama._ctx.ctx)


def _part_text(parts: Any) -> str:
    if isinstance(parts, str):
        return parts
    return "".join(getattr(part, "text", "") or "" for part in parts)


def request_to_messages(request: Request) -> list[dict[str, str]]:
    """OpenAI-style chat messages for llama-cpp, whose chat template (from the GGUF) renders them.

    Developer messages become system messages (Qwen's template knows no developer role); tool
    traffic is not supported by the local engine and is refused rather than dropped.
    """
    messages: list[dict[str, str]] = []
    if request.system is not None:
        messages.append({"role": "system", "content": _part_text(request.system)})
    for message in request.messages:
        if message.role not in ("user", "assistant", "developer"):
            raise ValueError(f"the local engine does not support {message.role!r} messages")
        text = message.text
        if text is None:
            raise ValueError("the local engine supports text-only messages")
        role = "system" if message.role == "developer" else message.role
        messages.append({"role": role, "content": text})
    return messages


def _sampling(request: Request) -> dict[str, Any]:
    config = request.config
    options: dict[str, Any] = {
        "temperature": 0.0 if config.temperature is None else float(config.temperature),
        "max_tokens": config.max_tokens,
    }
    if config.top_p is not None:
        options["top_p"] = config.top_p
    if config.top_k is not None:
        options["top_k"] = config.top_k
    if config.stop:
        options["stop"] = list(config.stop)
    if config.seed is not None:
        options["seed"] = config.seed
    if config.frequency_penalty is not None:
        options["frequency_penalty"] = config.frequency_penalty
    if config.presence_penalty is not None:
        options["presence_penalty"] = config.presence_penalty
    if config.response_format is not None:
        schema = config.response_format.get("schema")
        # llama-cpp turns a JSON schema into a grammar; json_object alone means "any JSON".
        options["response_format"] = {
            "type": "json_object",
            **({"schema": schema} if schema else {}),
        }
    return options


def _continue_assistant(
    llama: Any, messages: list[dict[str, str]], options: dict[str, Any]
) -> dict[str, Any]:
    """Complete a conversation whose last turn is a partial assistant message (a prefill).

    Chat APIs end every message with an end-of-turn token, so a prefilled answer (say
    ``SELECT``) cannot be sent as a message. Instead the earlier turns are rendered with the
    GGUF's own chat template plus the generation prompt, the prefill is appended as plain text,
    and the model continues it. The returned message holds prefill + continuation, so callers
    see one whole answer. Small models follow a prefilled ``SELECT`` far more reliably than an
    instruction to "reply with SQL only".
    """
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    template = llama.metadata.get("tokenizer.chat_template")
    if not template:
        raise ValueError("this GGUF file has no chat template; prefilled answers need one")
    model = llama._model
    formatter = Jinja2ChatFormatter(
        template=template,
        eos_token=model.token_get_text(llama.token_eos()),
        bos_token=model.token_get_text(llama.token_bos()),
    )
    prefill = messages[-1]["content"]
    rendered = formatter(messages=messages[:-1])
    stop = list(options.pop("stop", None) or [])
    template_stop = rendered.stop if isinstance(rendered.stop, list) else [rendered.stop]
    stop.extend(token for token in template_stop if token and token not in stop)
    options.pop("response_format", None)
    raw = llama.create_completion(rendered.prompt + prefill, stop=stop, **options)
    choice = raw["choices"][0]
    return {
        "id": raw.get("id"),
        "choices": [
            {
                "message": {"role": "assistant", "content": prefill + choice.get("text", "")},
                "finish_reason": choice.get("finish_reason"),
            }
        ],
        "usage": raw.get("usage") or {},
    }


THREADS_ENV = "SQLWEAVE_N_THREADS"


def default_threads() -> int:
    """llama.cpp threads when none are given: ``$SQLWEAVE_N_THREADS`` (read at call time), else
    every core but one (at least one).

    llama.cpp's threads meet at a barrier after every layer, so one thread that loses its core to
    another busy process stalls all of them: with as many threads as cores, one competing process
    cut throughput about tenfold on a 2-core machine (issue 15), while with one core left free
    the same job kept its pace. The cost when the machine is idle is the last core's share.
    """
    raw = os.environ.get(THREADS_ENV, "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise LMSpecError(f"{THREADS_ENV} must be a positive integer, not {raw!r}") from None
        if value < 1:
            raise LMSpecError(f"{THREADS_ENV} must be a positive integer, not {raw!r}")
        return value
    return max(1, (os.cpu_count() or 1) - 1)


LOOKUP_ENV = "SQLWEAVE_PROMPT_LOOKUP"


def _check_lookup(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LMSpecError(f"{where} must be a number of draft tokens (0 = off), not {value!r}")
    return value


def default_prompt_lookup() -> int:
    """Draft tokens of prompt-lookup decoding when none are given: ``$SQLWEAVE_PROMPT_LOOKUP``
    (read at call time), else 0 (off).

    Off by default until ``experiments/bench_lm.py`` shows it pays on the default model: each
    decode step then evaluates the draft too, which on a CPU costs more than one token unless
    most drafted tokens are kept.
    """
    raw = os.environ.get(LOOKUP_ENV, "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise LMSpecError(f"{LOOKUP_ENV} must be a number of draft tokens, not {raw!r}") from None
    return _check_lookup(value, LOOKUP_ENV)


class SampleBatch:
    """What a :func:`batched_samples` block holds: how many samples to decode together, and
    the samples decoded ahead for the calls still to come.

    The first sampled call the local engine receives in the block (at ``temperature``, when
    given) decodes ``k`` continuations of its prompt together and answers with the first; the
    others wait here under the call's prompt and settings (its seed left out: rollouts vary
    it) until calls asking the same take them. A block makes one batch: a sampled call on
    another prompt, or one after the stash ran dry, runs as usual. Thread-safe.

    With ``greedy`` the block's first call may instead be a greedy one (temperature 0): it
    then decodes as one more sequence beside the ``k`` samples, answers with the greedy
    completion, and all ``k`` samples wait for the calls that follow with the same prompt and
    settings at ``temperature``.

    ``settle``, when given, is asked by the local engine during the batch, whenever a sequence
    finishes, whether the answers so far are enough: it gets one entry per sequence of the batch,
    the call that made the batch first and the samples in the order they were started (each the
    text its call would return, None while still decoding or when it was given up for lack of
    KV cells), and returns True to stop. Sequences still decoding are then given up (never
    stashed); the finished samples wait in that order, so a caller that stops asking once its
    answers suffice never pays for them: self-consistency uses it to stop once its vote is
    decided (:class:`sqlweave.programs.voting.Sampler`). A sample given up and asked for all
    the same is decoded by an ordinary call.
    """

    def __init__(
        self,
        k: int,
        temperature: float | None = None,
        greedy: bool = False,
        settle: Callable[[list[str | None]], bool] | None = None,
    ) -> None:
        if greedy and (temperature is None or temperature <= 0):
            raise ValueError("a block hosting its greedy call needs the samples' temperature > 0")
        self.k = k
        self.temperature = None if temperature is None else float(temperature)
        self.greedy = greedy
        self.settle = settle
        self.cancelled = 0
        self.spent = False
        self.decoded = 0
        self.served = 0
        self._stash: dict[tuple[Any, ...], list[Response]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Samples waiting to be taken."""
        with self._lock:
            return sum(len(responses) for responses in self._stash.values())

    def wants(self, temperature: float) -> bool:
        """Whether a call at ``temperature`` is one of the block's samples."""
        if temperature <= 0:
            return False
        return self.temperature is None or temperature == self.temperature

    def hosts(self, temperature: float) -> bool:
        """Whether a call at ``temperature`` is the greedy call that may decode the samples
        beside its own answer (a ``greedy`` block whose batch is not made yet)."""
        return self.greedy and temperature <= 0 and not self.spent

    @staticmethod
    def key(model: Any, messages: list[dict[str, str]], options: dict[str, Any]) -> tuple:
        """The stash key of a call: the loaded model, the messages its prompt is rendered from,
        and its settings but the seed."""
        settings = sorted((name, repr(value)) for name, value in options.items() if name != "seed")
        return (model, repr(messages), tuple(settings))

    def take(self, key: tuple[Any, ...]) -> Response | None:
        """A waiting sample for ``key``, or None."""
        with self._lock:
            waiting = self._stash.get(key)
            if not waiting:
                return None
            self.served += 1
            response = waiting.pop(0)
            if not waiting:
                del self._stash[key]
            return response

    def claim(self) -> bool:
        """True once: the call that makes the block's batch."""
        with self._lock:
            if self.spent:
                return False
            self.spent = True
            return True

    def put(self, key: tuple[Any, ...], responses: list[Response], *, caller: bool = True) -> None:
        """Keep ``responses`` for the next calls on ``key`` (``caller``: the call that made the
        batch took one more sample; a hosting greedy call took none)."""
        with self._lock:
            self.decoded += len(responses) + int(caller)
            self._stash.setdefault(key, []).extend(responses)

    def gave_up(self, n: int) -> None:
        """Count ``n`` samples the batch stopped decoding once ``settle`` said so."""
        with self._lock:
            self.cancelled += n

    def clear(self) -> None:
        """Drop the samples nobody took."""
        with self._lock:
            self._stash.clear()


_SAMPLE_BATCH: contextvars.ContextVar[SampleBatch | None] = contextvars.ContextVar(
    "sqlweave_sample_batch", default=None
)


@contextmanager
def batched_samples(
    k: int,
    *,
    temperature: float | None = None,
    greedy: bool = False,
    settle: Callable[[list[str | None]], bool] | None = None,
) -> Iterator[SampleBatch | None]:
    """Decode the next ``k`` sampled calls on one prompt together (local models only).

    Self-consistency asks the same prompt for several samples; one at a time, each costs a
    full decode. One llama.cpp batch holding one token of each of k sequences reads the
    weights once; where decoding is memory-bound that costs little more than one token, on a
    2-vCPU machine (compute-bound) about 1.5x less than k separate steps (docs/lm.md). Inside
    the block, the first sampled (temperature > 0; ``temperature`` only, when given) call the
    local engine receives decodes ``min(k, n_seq_max)`` continuations of its prompt that way
    and the next calls with the same messages and settings (the seed may differ) are answered
    from them; samples nobody asked for are dropped when the block ends (a DSPy cache hit
    never reaches the engine). Greedy calls, served models and calls outside a block are not
    affected. ``k < 2`` makes the block a no-op (yields None).

    ``greedy=True`` (``temperature`` required) is for a greedy answer and its samples, as
    self-consistency asks them: the block's first call, when it is greedy (temperature 0),
    decodes its answer as one more sequence of the batch, sharing rows with the samples while
    they agree, so the greedy answer costs no decode of its own; the k samples then answer the
    calls that follow with the same messages and settings at ``temperature``. The greedy answer
    is that of an ordinary greedy call except where the batch's floating-point sums tip a
    near-tie. Such a block is worth making for one sample too (``k >= 1``).

    ``settle`` lets the caller stop the batch early (see :class:`SampleBatch`).
    """
    if k < (1 if greedy else 2):
        yield None
        return
    batch = SampleBatch(k, temperature, greedy, settle)
    token = _SAMPLE_BATCH.set(batch)
    try:
        yield batch
    finally:
        _SAMPLE_BATCH.reset(token)
        batch.clear()


def _engine_settle(
    settle: Callable[[list[str | None]], bool] | None, prefill: str
) -> Callable[[list[bytes | None]], bool] | None:
    """A block's ``settle`` as the loaded model asks it: each sequence's bytes so far become
    the content its call would return (the prefill, then the text decoded as
    ``create_completion`` decodes it)."""
    if settle is None:
        return None

    def ask(texts: list[bytes | None]) -> bool:
        return settle(
            [None if t is None else prefill + t.decode("utf-8", errors="ignore") for t in texts]
        )

    return ask


class LlamaCppEngine:
    """DSPy 3.4 custom engine running a GGUF model in-process with llama-cpp-python.

    Stateless apart from its settings: the model is resolved (and fetched) and loaded lazily on
    the first call, so a saved program can be loaded on a machine without weights until it is
    actually run. ``dump_state``/``load_state`` make an LM built on it savable with
    ``allow_unsafe_lm_state``-gated loading, as DSPy does for every custom engine.
    """

    def __init__(
        self,
        spec: str,
        *,
        n_ctx: int = DEFAULT_N_CTX,
        n_batch: int = 512,
        n_threads: int | None = None,
        ram_cache_bytes: int = 0,
        prompt_lookup: int | None = None,
        prompt_cache_bytes: int = DEFAULT_PROMPT_CACHE_BYTES,
        n_seq_max: int = DEFAULT_N_SEQ_MAX,
        cache_dir: str | None = None,
        auto_fetch: bool = True,
    ) -> None:
        parsed = LMSpec.parse(spec)
        if not parsed.is_local:
            raise LMSpecError(f"{spec!r} is not a local model spec (local:NAME or gguf:PATH)")
        if prompt_lookup is not None:
            _check_lookup(prompt_lookup, "prompt_lookup")
        if (
            isinstance(prompt_cache_bytes, bool)
            or not isinstance(prompt_cache_bytes, int)
            or prompt_cache_bytes < 0
        ):
            raise LMSpecError(
                f"prompt_cache_bytes must be a number of bytes (0 = none), not {prompt_cache_bytes!r}"
            )
        if isinstance(n_seq_max, bool) or not isinstance(n_seq_max, int) or n_seq_max < 1:
            raise LMSpecError(
                f"n_seq_max must be a number of sequences (1 = no batched samples), not {n_seq_max!r}"
            )
        self.spec = str(parsed)
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.n_threads = n_threads
        self.ram_cache_bytes = ram_cache_bytes
        self.prompt_lookup = prompt_lookup
        self.prompt_cache_bytes = prompt_cache_bytes
        self.n_seq_max = n_seq_max
        self.cache_dir = cache_dir
        self.auto_fetch = auto_fetch
        self._path: Path | None = None

    def __repr__(self) -> str:
        return (
            f"LlamaCppEngine({self.spec!r}, n_ctx={self.n_ctx}, n_threads={self.threads}, "
            f"prompt_lookup={self.lookup_tokens})"
        )

    @property
    def threads(self) -> int:
        """Threads for prompt processing and decoding: ``n_threads``, else
        :func:`default_threads` (``SQLWEAVE_N_THREADS`` or one core left free)."""
        return self.n_threads or default_threads()

    @property
    def lookup_tokens(self) -> int:
        """Draft tokens of prompt-lookup decoding (0 = off): ``prompt_lookup``, else
        :func:`default_prompt_lookup`; at most ``n_batch - 1``, so a draft is verified in one
        batch."""
        tokens = default_prompt_lookup() if self.prompt_lookup is None else self.prompt_lookup
        return min(tokens, max(0, self.n_batch - 1))

    def model_path(self) -> Path:
        """The GGUF file behind the spec, fetching a registry model on first use."""
        if self._path is None:
            parsed = LMSpec.parse(self.spec)
            if parsed.kind == "local":
                self._path = models.ensure_model(
                    parsed.target, self.cache_dir, auto_fetch=self.auto_fetch
                )
            else:
                path = Path(parsed.target).expanduser()
                if not path.is_file():
                    raise models.ModelNotAvailableError(f"GGUF file not found: {path}")
                self._path = path
        return self._path

    def _loaded(self) -> _Loaded:
        return _load_llama(
            self.model_path(),
            n_ctx=self.n_ctx,
            n_batch=self.n_batch,
            n_threads=self.threads,
            ram_cache_bytes=self.ram_cache_bytes,
            n_seq_max=self.n_seq_max,
        )

    def complete(self, request: Request) -> Response:
        """Run one chat completion; DSPy loops for ``n`` and owns caching and retries.

        The ``n`` calls of one prompt evaluate it once: each later call finds the prompt in the
        KV cache (llama.cpp keeps the longest common prefix with the previous call and replays
        only the last prompt token), or, when other calls came between, in the snapshot kept
        for a sampled (temperature > 0) call. Inside :func:`batched_samples` a sampled call
        may be answered by a sample decoded together with an earlier call's.
        """
        from dspy.clients.engines.base import validate_request

        validate_request(request)
        if request.tools:
            raise ValueError("the local engine does not support tools")
        messages = request_to_messages(request)
        options = _sampling(request)
        lookup = self.lookup_tokens
        loaded = self._loaded()
        batch = _SAMPLE_BATCH.get()
        key: tuple[Any, ...] | None = None
        hosting = False  # a greedy call decoding the block's samples beside its answer
        if batch is not None and batch.wants(options["temperature"]):
            key = batch.key(loaded.key, messages, options)
            waiting = batch.take(key)
            if waiting is not None:
                return waiting
        elif batch is not None and batch.hosts(options["temperature"]):
            hosting = True  # the samples' key: this call's, at the block's temperature
            key = batch.key(loaded.key, messages, {**options, "temperature": batch.temperature})
        arm = getattr(loaded.llama, "arm_batch", None)
        batched = key is not None and batch is not None and arm is not None and batch.claim()
        extra: list[_SeqResult] = []
        with loaded.lock:
            started = time.perf_counter()
            _reset_perf(loaded.llama)
            begin = getattr(loaded.llama, "begin_call", None)
            if begin is not None:  # a model built by _load_llama (test doubles may lack it)
                # A sampled call is usually one of several on this prompt (self-consistency,
                # n > 1): keep its evaluated prompt so the next sample restores it.
                begin(
                    lookup_tokens=lookup,
                    keep_prompt=options["temperature"] > 0,
                    prompt_cache_bytes=self.prompt_cache_bytes,
                )
            prefill = (
                messages[-1]["content"] if messages and messages[-1]["role"] == "assistant" else ""
            )
            settle = _engine_settle(batch.settle, prefill) if batched else None  # type: ignore[union-attr]
            if batched and hosting:
                arm(batch.k + 1, sample_temperature=batch.temperature, settle=settle)  # type: ignore[union-attr]
            elif batched:
                arm(batch.k, settle=settle)  # type: ignore[union-attr]
            try:
                if messages and messages[-1]["role"] == "assistant":
                    raw = _continue_assistant(loaded.llama, messages, dict(options))
                else:
                    raw = loaded.llama.create_chat_completion(messages=messages, **options)
            finally:
                if batched:
                    extra = loaded.llama.take_batch()
            seconds = time.perf_counter() - started
            perf = _perf(loaded.llama)
        if batched and perf.get("batch_cancelled"):
            batch.gave_up(int(perf["batch_cancelled"]))  # type: ignore[union-attr]
        choice = raw["choices"][0]
        usage = raw.get("usage") or {}
        prompt_tokens = int(usage.get("prompt_tokens", 0))
        # Tokens not evaluated this call came from the KV cache (previous prompt or RAM cache).
        reused = max(0, prompt_tokens - perf["prompt_eval_tokens"])
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        if extra:
            # Each sample pays for its own decode steps; the first keeps the rest of the call.
            shares = [result.eval_ms / 1000 for result in extra]
            seconds = max(0.0, seconds - sum(shares))
            batch.put(  # type: ignore[union-attr]
                key,  # type: ignore[arg-type]
                [
                    self._batched_response(raw, result, share, prompt_tokens, prefill, perf)
                    for result, share in zip(extra, shares, strict=True)
                ],
                caller=not hosting,
            )
        return Response(
            id=raw.get("id"),
            model=self.spec,
            message=Message.assistant([TextPart(choice["message"].get("content") or "")]),
            finish_reason=finish,
            usage=TokenUsage(
                input_tokens=prompt_tokens,
                output_tokens=int(usage.get("completion_tokens", 0)),
                cache_read_tokens=reused,
            ),
            provider_data={
                "seconds": seconds,
                "reused_prompt_tokens": reused,
                "prompt_lookup": lookup,
                **perf,
            },
        )

    def _batched_response(
        self,
        raw: dict[str, Any],
        result: _SeqResult,
        seconds: float,
        prompt_tokens: int,
        prefill: str,
        perf: dict[str, Any],
    ) -> Response:
        """The answer a later call gets from sequence ``result.index`` of a batch: its own
        tokens and decode share; its whole prompt came from the KV cache."""
        stats = CallStats(
            eval_tokens=result.eval_tokens,
            eval_ms=result.eval_ms,
            decode_steps=result.decode_steps,
            batch_size=int(perf.get("batch_size", 0)),
            batch_tokens=int(perf.get("batch_tokens", 0)),
            batch_ms=float(perf.get("batch_ms", 0.0)),
            batch_rows=int(perf.get("batch_rows", 0)),
        )
        text = result.text.decode("utf-8", errors="ignore")
        return Response(
            id=f"{raw.get('id') or 'batch'}-{result.index}",
            model=self.spec,
            message=Message.assistant([TextPart(prefill + text)]),
            finish_reason="length" if result.finish_reason == "length" else "stop",
            usage=TokenUsage(
                input_tokens=prompt_tokens,
                output_tokens=len(result.tokens),
                cache_read_tokens=prompt_tokens,
            ),
            provider_data={
                "seconds": seconds,
                "reused_prompt_tokens": prompt_tokens,
                "prompt_lookup": self.lookup_tokens,
                **asdict(stats),
                "batch_index": result.index,
            },
        )

    def stream(self, request: Request) -> Iterator[Any]:
        """Streams the finished response as events; token streaming is not needed here."""
        return response_to_events(self.complete(request))

    def close(self) -> None:
        """Engines are borrowed by DSPy; the shared model stays loaded (see :func:`unload_all`)."""

    def dump_state(self) -> dict[str, Any]:
        """Settings only: the spec, not the resolved path, so a load elsewhere re-resolves it."""
        return {
            "spec": self.spec,
            "n_ctx": self.n_ctx,
            "n_batch": self.n_batch,
            "n_threads": self.n_threads,
            "ram_cache_bytes": self.ram_cache_bytes,
            "prompt_lookup": self.prompt_lookup,
            "prompt_cache_bytes": self.prompt_cache_bytes,
            "n_seq_max": self.n_seq_max,
            "cache_dir": self.cache_dir,
            "auto_fetch": self.auto_fetch,
        }

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> LlamaCppEngine:
        """Inverse of :meth:`dump_state`."""
        state = dict(state)
        return cls(state.pop("spec"), **state)


class AsyncLlamaCppEngine:
    """Async counterpart for ``dspy.asyncify``/``acall``: runs the sync engine in a worker thread."""

    def __init__(self, sync: LlamaCppEngine) -> None:
        self.sync = sync

    async def complete(self, request: Request) -> Response:
        """Same as :meth:`LlamaCppEngine.complete`, off the event loop."""
        return await asyncio.to_thread(self.sync.complete, request)

    async def stream(self, request: Request) -> Any:
        """The finished response as events."""
        for event in response_to_events(await self.complete(request)):
            yield event

    async def aclose(self) -> None:
        """Nothing to release; the model is shared."""

    def dump_state(self) -> dict[str, Any]:
        """The sync engine's settings."""
        return self.sync.dump_state()

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> AsyncLlamaCppEngine:
        """Inverse of :meth:`dump_state`."""
        return cls(LlamaCppEngine.load_state(state))


# ---------------------------------------------------------------------------------------------
# building and configuring LMs

_ENGINE_OPTIONS = (
    "n_ctx",
    "n_batch",
    "n_threads",
    "ram_cache_bytes",
    "prompt_lookup",
    "prompt_cache_bytes",
    "n_seq_max",
    "cache_dir",
    "auto_fetch",
)


def build_lm(
    spec: str = DEFAULT_MODEL,
    *,
    temperature: float | None = 0.0,
    max_tokens: int | None = 1024,
    cache: bool = True,
    prefetch: bool = True,
    **options: Any,
) -> dspy.LM:
    """A ``dspy.LM`` for ``spec`` without touching DSPy's global configuration.

    Local specs accept the engine options ``n_ctx``, ``n_batch``, ``n_threads``,
    ``ram_cache_bytes``, ``prompt_lookup`` (draft tokens of prompt-lookup decoding, default
    ``$SQLWEAVE_PROMPT_LOOKUP`` else off), ``prompt_cache_bytes`` (KV snapshots of sampled
    prompts; 0 = none), ``n_seq_max`` (samples decoded together inside
    :func:`batched_samples`; 1 = one at a time), ``cache_dir`` and ``auto_fetch``; with ``prefetch`` the weights are
    resolved (and fetched) now, so a missing model fails here with a clear message instead of
    inside the first call. Other specs pass ``options`` (``api_base``, ``api_key``, ...) to
    ``dspy.LM``. ``temperature=0`` keeps calls deterministic, which is what makes DSPy's
    response cache (on by default) safe to reuse.
    """
    parsed = LMSpec.parse(spec)
    if not parsed.is_local:
        # A self-hosted OpenAI-compatible server (vLLM, llama.cpp) usually needs no key, but
        # LiteLLM refuses to call one without: every question would be a recorded failure.
        if (
            str(parsed).startswith("openai/")
            and options.get("api_base")
            and "api_key" not in options
            and not os.environ.get("OPENAI_API_KEY")
        ):
            options["api_key"] = "sk-no-key"
        return dspy.LM(
            str(parsed), temperature=temperature, max_tokens=max_tokens, cache=cache, **options
        )
    engine_options = {key: options.pop(key) for key in _ENGINE_OPTIONS if key in options}
    if "cache_dir" in engine_options and engine_options["cache_dir"] is not None:
        engine_options["cache_dir"] = str(engine_options["cache_dir"])
    unknown = set(options) - {"num_retries", "callbacks", "top_p", "top_k", "seed", "stop"}
    if unknown:
        raise TypeError(f"unsupported options for a local model: {sorted(unknown)}")
    options.setdefault("num_retries", 0)  # local failures are not transient
    engine = LlamaCppEngine(str(parsed), **engine_options)
    if prefetch:
        engine.model_path()
    return dspy.LM(
        str(parsed),
        temperature=temperature,
        max_tokens=max_tokens,
        cache=cache,
        engine=engine,
        async_engine=AsyncLlamaCppEngine(engine),
        **options,
    )


def configure(model: str = DEFAULT_MODEL, *, set_default: bool = True, **options: Any) -> dspy.LM:
    """Build the LM for ``model`` and, unless ``set_default=False``, make it DSPy's default LM."""
    lm = build_lm(model, **options)
    if set_default:
        dspy.configure(lm=lm)
    logger.info("configured LM %s", model)
    return lm


def spec_of(lm: Any) -> str:
    """The spec string that rebuilds ``lm`` with :func:`build_lm` (its model string)."""
    return str(LMSpec.parse(lm.model))


def is_local(lm: Any) -> bool:
    """Whether ``lm`` runs on the in-process llama.cpp engine."""
    return isinstance(getattr(lm, "engine", None), LlamaCppEngine)


# ---------------------------------------------------------------------------------------------
# accounting


@dataclass
class CallRecord:
    """One LM call: tokens, wall seconds (lock waits included) and cost when known.

    ``cost`` is 0 for local models, DSPy's estimate for priced API models, and None when unknown
    (e.g. a self-hosted server). ``cached`` marks a DSPy cache hit, which costs no tokens.
    """

    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cost: float | None = None
    cached: bool = False
    cached_prompt_tokens: int = 0
    error: str | None = None


@dataclass
class _Pending:
    model: str
    instance: Any
    started: float
    local: bool
    usage: dict[str, Any] | None = None


class Usage(UsageTracker, BaseCallback):
    """Accumulated LM usage inside :func:`track_usage`; thread-safe.

    It is both DSPy's usage tracker (DSPy hands it each call's token usage, on the calling
    thread, except on cache hits) and a DSPy callback (start/end of every ``LM.__call__``, which
    gives the seconds). The two are joined by DSPy's active call id, so concurrent calls from
    DSPy's worker threads, or from coroutines, never mix.
    """

    def __init__(self, parent: UsageTracker | None = None) -> None:
        super().__init__()
        self._parent = parent
        self._lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}
        self.records: list[CallRecord] = []

    # DSPy usage-tracker side
    def add_usage(self, lm: str, usage_entry: dict[str, Any]) -> None:
        """Record ``usage_entry`` for the call in flight on this thread/context."""
        call_id = ACTIVE_CALL_ID.get()
        with self._lock:
            super().add_usage(lm, usage_entry)
            pending = self._pending.get(call_id) if call_id else None
            if pending is not None:
                pending.usage = usage_entry
        if self._parent is not None:
            self._parent.add_usage(lm, usage_entry)

    # DSPy callback side
    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        """Start the clock for ``call_id``."""
        pending = _Pending(
            model=getattr(instance, "model", "?"),
            instance=instance,
            started=time.perf_counter(),
            local=is_local(instance),
        )
        with self._lock:
            self._pending[call_id] = pending

    def on_lm_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
        """Close ``call_id`` into a :class:`CallRecord`."""
        with self._lock:
            pending = self._pending.pop(call_id, None)
        if pending is None:
            return
        seconds = time.perf_counter() - pending.started
        usage = pending.usage or {}
        details = usage.get("prompt_tokens_details") or {}
        record = CallRecord(
            model=pending.model,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            seconds=seconds,
            cost=0.0 if pending.local else _history_cost(pending.instance, pending.usage),
            cached=pending.usage is None and exception is None,
            cached_prompt_tokens=int(details.get("cached_tokens") or 0)
            if isinstance(details, dict)
            else 0,
            error=None if exception is None else f"{type(exception).__name__}: {exception}",
        )
        with self._lock:
            self.records.append(record)

    # summaries
    @property
    def calls(self) -> int:
        """Number of LM calls, cache hits included."""
        return len(self.records)

    @property
    def cached_calls(self) -> int:
        """Calls answered from DSPy's cache."""
        return sum(record.cached for record in self.records)

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens over all calls."""
        return sum(record.prompt_tokens for record in self.records)

    @property
    def completion_tokens(self) -> int:
        """Completion tokens over all calls."""
        return sum(record.completion_tokens for record in self.records)

    @property
    def seconds(self) -> float:
        """Wall seconds spent inside LM calls (summed, so parallel calls add up)."""
        return sum(record.seconds for record in self.records)

    @property
    def cost(self) -> float:
        """Known cost in USD; calls of unknown price count as 0 (see ``cost_known``)."""
        return sum(record.cost or 0.0 for record in self.records)

    @property
    def cost_known(self) -> bool:
        """Whether every non-cached call had a known price."""
        return all(record.cost is not None for record in self.records if not record.cached)

    def as_dict(self, *, records: bool = False) -> dict[str, Any]:
        """Totals as plain data for JSONL logs; ``records=True`` adds every call."""
        data: dict[str, Any] = {
            "calls": self.calls,
            "cached_calls": self.cached_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "seconds": round(self.seconds, 4),
            "cost": self.cost,
            "cost_known": self.cost_known,
        }
        if records:
            data["records"] = [asdict(record) for record in self.records]
        return data


def _history_cost(instance: Any, usage: dict[str, Any] | None) -> float | None:
    """DSPy's own cost estimate for this call, found by identity of its usage dict.

    DSPy writes the same usage object it gave the tracker into the LM's history entry, next to
    the cost; matching by identity is exact even when threads interleave history entries.
    """
    if usage is None:
        return None
    for entry in reversed(list(getattr(instance, "history", [])[-64:])):
        if entry.get("usage") is usage:
            cost = entry.get("cost")
            return float(cost) if isinstance(cost, (int, float)) else None
    return None


@contextmanager
def track_usage() -> Iterator[Usage]:
    """Account every LM call made inside the block (this thread and DSPy workers it starts).

    Nested blocks each see their own calls and pass usage up, as ``dspy.track_usage`` does.
    Usage: ``with track_usage() as usage: program(question=...)`` then ``usage.as_dict()``.
    """
    parent = dspy.settings.usage_tracker
    usage = Usage(parent=parent)
    callbacks = [*(dspy.settings.get("callbacks") or []), usage]
    with dspy.settings.context(usage_tracker=usage, callbacks=callbacks):
        yield usage
