"""The decoding loop of a loaded model: llama-cpp-python's own, with prompt snapshots, prompt-lookup
verification, batched samples and per-call counters hooked in.

:func:`llama_class` mixes :class:`DecodingLlama` into ``llama_cpp.Llama``. Two decoding aids live
here: a sampled prompt's KV state is kept (:class:`~sqlweave.lm.snapshots.PromptStates`), so the n
samples of one prompt evaluate it once even when other calls come between them; and with
``prompt_lookup=K`` each decode step proposes K tokens copied from the prompt (table, column and
value names) and keeps those the model itself would have chosen, so greedy output is unchanged.
A completion started after :meth:`DecodingLlama.arm_batch` decodes k continuations of its prompt
together, one llama.cpp batch per step with one token per sequence
(:class:`~sqlweave.lm.batching.BatchedDecoding`, mixed in).
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from typing import Any

import numpy as np

from sqlweave.lm.batching import BatchedDecoding
from sqlweave.lm.sequences import BatchPlan, CallStats, SeqResult
from sqlweave.lm.snapshots import RESTORE_MIN_GAIN, PromptStates, common_prefix


class DecodingLlama(BatchedDecoding):
    """Mixed into ``llama_cpp.Llama`` by :func:`llama_class`: prompt snapshots, prompt-lookup
    verification without full-context logits, batched samples, and per-call counters.

    It hooks ``Llama.generate`` (restore the best snapshot before the prefix match, mark the
    first ``eval`` as the prompt's) and ``Llama.eval`` (count, snapshot after the prompt,
    verify drafts). The rest is upstream's own decoding loop, so sampling, stops and greedy
    output are those of ``llama_cpp``. A completion started after :meth:`arm_batch` decodes
    several samples of its prompt together instead (:meth:`_generate_batched`, the loop of
    :class:`~sqlweave.lm.batching.BatchedDecoding`).
    """

    def __init__(self, *args: Any, n_seq_max: int = 1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prompt_states = PromptStates()
        self.call_stats = CallStats()
        self._keep_prompt = False
        self._in_prompt = False
        self._batch_plan: BatchPlan | None = None
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
        seed_offset: int = 0,
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
        give up those after the first that are still decoding.

        ``seed_offset``: how far the completion's own seed is from its rollout's; sequence ``j``
        is seeded ``seed + seed_offset + j``. The engine passes the rollout index for a call
        with no seed of its own, so a batch opened by rollout 8 draws rollouts 8, 9, …, not
        again the samples a batch opened by rollout 0 drew (:attr:`BatchPlan.seed_offset`)."""
        k = min(k, self.n_seq_max)
        if sample_temperature is not None and sample_temperature <= 0:
            raise ValueError(f"sample_temperature must be > 0, not {sample_temperature!r}")
        self._batch_plan = (
            BatchPlan(k, sample_temperature, settle, seed_offset=max(0, int(seed_offset)))
            if k > 1
            else None
        )

    def take_batch(self) -> list[SeqResult]:
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

    def _eval_all_logits(
        self, tokens: Sequence[int], read: Callable[[int, int], None] | None = None
    ) -> None:
        """Evaluate a sampled token and its draft with logits at every position, so the
        sampler can check each drafted token against the model's own choice.

        Upstream does this by building the whole model with ``logits_all=True``, which also
        computes the output layer for every prompt token and copies each position's logits
        into an ``n_ctx x n_vocab`` array (about 5 GB at 8k context for Qwen's vocabulary), or
        fails past ``n_batch`` positions when that array was sized without it. Only these
        short batches need the logits, and nothing reads the copy, so neither happens here.
        A draft is shorter than ``n_batch`` (the engine caps it), so one decode holds them all.
        ``read(start, n)``, when given, is called after each decode while its logits are there:
        output ``i`` holds the logits after ``tokens[start + i]`` (:meth:`score_continuation`).
        """
        self._ctx.kv_cache_seq_rm(-1, self.n_tokens, -1)
        for start in range(0, len(tokens), self.n_batch):
            batch = list(tokens[start : start + self.n_batch])
            self._batch.set_batch(batch=batch, n_past=self.n_tokens, logits_all=True)
            self._ctx.decode(self._batch)
            if read is not None:
                read(start, len(batch))
            self.input_ids[self.n_tokens : self.n_tokens + len(batch)] = batch
            self.n_tokens += len(batch)
        self._requires_eval = False

    def score_continuation(self, prompt: Sequence[int], continuation: Sequence[int]) -> list[float]:
        """The log-probability of each token of ``continuation`` after ``prompt`` (natural log).

        A likelihood, not a completion: nothing is sampled. The prompt reuses the live KV
        cache's common prefix (scoring several continuations of one prompt evaluates it once),
        is evaluated without logits up to its last token, and that token plus the continuation
        are decoded with logits at every row (:meth:`_eval_all_logits`), each row's
        log-softmax read at the next token. Afterwards the cache holds
        ``prompt + continuation[:-1]`` and ``input_ids`` / ``n_tokens`` say so, as after an
        ordinary call, so the next completion or score reuses it.
        """
        import llama_cpp

        prompt, continuation = list(prompt), list(continuation)
        if not prompt or not continuation:
            raise ValueError("scoring needs a non-empty prompt and continuation")
        full = prompt + continuation
        if len(full) > self._n_ctx:
            raise ValueError(
                f"prompt + continuation is {len(full)} tokens; the context holds {self._n_ctx}"
            )
        n_prompt = len(prompt)
        reuse = min(common_prefix(self.input_ids[: self.n_tokens], full), n_prompt - 1)
        self._ctx.kv_cache_seq_rm(-1, reuse, -1)
        self.n_tokens = reuse
        self.draft_model = None  # no drafts here: the upstream eval evaluates the prompt
        head = full[reuse : n_prompt - 1]
        if head:
            super().eval(head)  # type: ignore[misc]
        scored: list[float] = []
        n_vocab = int(self.n_vocab())  # type: ignore[attr-defined]

        def read(start: int, n: int) -> None:
            for i in range(n):
                row = np.ctypeslib.as_array(
                    llama_cpp.llama_get_logits_ith(self._ctx.ctx, i), shape=(n_vocab,)
                ).astype(np.float64)
                top = float(row.max())
                lse = top + float(np.log(np.exp(row - top).sum()))
                scored.append(float(row[continuation[start + i]]) - lse)

        self._eval_all_logits(full[n_prompt - 1 : -1], read)
        return scored

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


def _lookup_draft(tokens: int) -> Any:
    """llama-cpp-python's prompt-lookup drafter proposing up to ``tokens`` tokens a step."""
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    return LlamaPromptLookupDecoding(num_pred_tokens=tokens)


_LLAMA_CLASSES: dict[type, type] = {}


def llama_class(base: type) -> type:
    """``base`` (``llama_cpp.Llama``) with :class:`DecodingLlama` mixed in, built once."""
    cls = _LLAMA_CLASSES.get(base)
    if cls is None:
        cls = type("SqlweaveLlama", (DecodingLlama, base), {"__module__": __name__})
        _LLAMA_CLASSES[base] = cls
    return cls
