"""The decoding loop of a loaded model: llama-cpp-python's own, with prompt snapshots, prompt-lookup
verification, batched samples and per-call counters hooked in.

:func:`llama_class` mixes :class:`DecodingLlama` into ``llama_cpp.Llama``. Two decoding aids live
here: a sampled prompt's KV state is kept (:class:`~sqlweave.lm.snapshots.PromptStates`), so the n
samples of one prompt evaluate it once even when other calls come between them; and with
``prompt_lookup=K`` each decode step proposes K tokens copied from the prompt (table, column and
value names) and keeps those the model itself would have chosen, so greedy output is unchanged.
A completion started after :meth:`DecodingLlama.arm_batch` decodes k continuations of its prompt
together, one llama.cpp batch per step with one token per sequence.
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from typing import Any

import numpy as np

from sqlweave.lm.sequences import (
    GENERATE_DEFAULTS,
    BatchPlan,
    CallStats,
    Completion,
    DecodingSequence,
    SeqResult,
    close_sampler,
    shared_rows,
)
from sqlweave.lm.snapshots import RESTORE_MIN_GAIN, PromptStates, common_prefix

logger = logging.getLogger(__name__)


class DecodingLlama:
    """Mixed into ``llama_cpp.Llama`` by :func:`llama_class`: prompt snapshots, prompt-lookup
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

    def _can_batch(self, plan: BatchPlan, tokens: list[int], kwargs: dict[str, Any]) -> bool:
        """Plain temperature sampling (no grammar, mirostat or logits processor) of a prompt
        that leaves room for the first token of every sequence; with ``plan.sample_temp`` the
        completion's own call may be greedy."""
        return (
            plan.k > 1
            and plan.k <= min(self.n_seq_max, self.n_batch)
            and (plan.sample_temp is not None or kwargs.get("temp", GENERATE_DEFAULTS["temp"]) > 0)
            and not kwargs.get("mirostat_mode")
            and kwargs.get("grammar") is None
            and kwargs.get("logits_processor") is None
            and kwargs.get("reset", True)
            and 0 < len(tokens)
            and len(tokens) + plan.k <= self._n_ctx
        )

    def _generate_batched(
        self, tokens: list[int], plan: BatchPlan, kwargs: dict[str, Any]
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
        sampling = {name: kwargs.get(name, default) for name, default in GENERATE_DEFAULTS.items()}
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

        # Sequence j is rollout seed_offset + j: seeded past the rollouts before the batch.
        # With no offset, sequence 0 keeps the call's own seed exactly (upstream's default
        # seed there means "random"), as an ordinary call would.
        base_seed = int(self._seed)
        seqs = [
            DecodingSequence(
                j,
                Completion(self, tokens, stop_bytes, max_tokens),
                self._sequence_sampler(
                    base_seed
                    if j + plan.seed_offset == 0
                    else (base_seed + plan.seed_offset + j) % 2**32,
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
                    groups = shared_rows(active)
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
                close_sampler(seq.sampler)
                continue
            if (
                criteria is not None
                and not seq.criteria
                and criteria(np.asarray(tokens + seq.fed, dtype=np.intc), self.scores[0, :])
            ):
                seq.completion.end("stop")  # upstream's check after the loop
            plan.results.append(
                SeqResult(
                    index=seq.index,
                    tokens=list(seq.completion.tokens),
                    text=seq.completion.text,
                    finish_reason=seq.completion.finish_reason or "length",
                    eval_tokens=len(seq.fed),
                    decode_steps=seq.steps,
                    eval_ms=seq.ms,
                )
            )
            close_sampler(seq.sampler)
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
        self, plan: BatchPlan, seqs: list[DecodingSequence], still: list[DecodingSequence]
    ) -> list[DecodingSequence]:
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
