"""Batched samples: a completion that decodes k continuations of its prompt together.

A completion started after :meth:`~sqlweave.lm.decoding.DecodingLlama.arm_batch` evaluates its
prompt once, shares that KV state with k - 1 more sequences of the one (unified) KV cache, and
feeds one token per unfinished sequence in each llama.cpp batch; sequences that have sampled
the same tokens so far share one batch row. Each sequence has its own sampler with upstream's
settings, so each sample's distribution is that of an ordinary call. This is the batch half of
the decoding loop; :mod:`sqlweave.lm.decoding` hooks it into ``llama_cpp.Llama``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
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
from sqlweave.lm.snapshots import common_prefix

logger = logging.getLogger(__name__)

#: A completion's stopping criteria as upstream calls them: (tokens so far, last logits).
Criteria = Callable[[Any, Any], bool]


class BatchedDecoding:
    """The batch loop of :class:`~sqlweave.lm.decoding.DecodingLlama`, mixed in with it.

    It runs on a ``llama_cpp.Llama`` (the model, its context, ``input_ids`` / ``n_tokens``,
    ``eval`` and the sampler chain) and on the decoding hooks of ``DecodingLlama``
    (``_restore_prompt``, ``_in_prompt``, ``call_stats``); ``generate`` enters it through
    :meth:`_generate_batched` when :meth:`_can_batch` allows. The llama.cpp calls it makes are
    methods at the end, so tests can run the loop on a toy model.
    """

    n_seq_max: int
    call_stats: CallStats

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
        max_tokens, stop_bytes = self._batch_limits(plan, len(tokens))
        self._eval_batch_prompt(tokens)
        seqs = self._batch_sequences(plan, tokens, stop_bytes, max_tokens, sampling, samples)
        started = time.perf_counter()
        rows = self._decode_batch(plan, seqs, tokens, criteria)
        if rows is None:
            self._restore_prompt(tokens)
            self._in_prompt = True
            yield from super().generate(tokens, **kwargs)  # type: ignore[misc]
            return
        self._keep_samples(plan, seqs, tokens, criteria)
        self._count_batch(stats, seqs, rows, started)

        first = seqs[0]
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

    def _batch_limits(self, plan: BatchPlan, n_prompt: int) -> tuple[int, list[bytes]]:
        """``(max_tokens, stop strings as bytes)`` of the batch, as ``_create_completion``
        would set them for the call (``generate`` itself sees neither)."""
        max_tokens = plan.max_tokens
        if max_tokens is None or max_tokens <= 0:
            max_tokens = self._n_ctx - n_prompt
        if max_tokens + n_prompt >= self._n_ctx:
            max_tokens = self._n_ctx - n_prompt
        stop = plan.stop if isinstance(plan.stop, list) else [plan.stop] if plan.stop else []
        stop_bytes = [text.encode("utf-8") for text in stop]
        return max_tokens, stop_bytes

    def _eval_batch_prompt(self, tokens: list[int]) -> None:
        """The prompt, in sequence 0: a snapshot or the live cache's prefix, then the rest. At
        least its last token is evaluated, so its logits are this context's last output."""
        n_prompt = len(tokens)
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

    def _batch_sequences(
        self,
        plan: BatchPlan,
        tokens: list[int],
        stop_bytes: list[bytes],
        max_tokens: int,
        sampling: dict[str, Any],
        samples: dict[str, Any],
    ) -> list[DecodingSequence]:
        """The batch's sequences, each with its completion and its own seeded sampler.

        Sequence j is rollout seed_offset + j: seeded past the rollouts before the batch.
        With no offset, sequence 0 keeps the call's own seed exactly (upstream's default
        seed there means "random"), as an ordinary call would."""
        base_seed = int(self._seed)
        return [
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

    def _decode_batch(
        self,
        plan: BatchPlan,
        seqs: list[DecodingSequence],
        tokens: list[int],
        criteria: Criteria | None,
    ) -> int | None:
        """Decode ``seqs`` step by step until each has stopped (or was given up); the number
        of batch rows evaluated, or None when llama.cpp refused a batch (the call then decodes
        alone). Afterwards only sequence 0 is left in the KV cache."""
        n_prompt = len(tokens)
        ok = False
        rows = 0
        try:
            for seq in seqs[1:]:
                self._seq_cp(0, seq.index)
            step_started = time.perf_counter()
            for seq in seqs:
                seq.pending = self._sample_at(seq.sampler, -1)
            active = list(seqs)
            while True:
                active = self._push_pending(plan, seqs, active, tokens, criteria)
                groups, decoded = self._decode_rows(active, seqs, n_prompt)
                rows += decoded
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
            self._keep_first(seqs, n_prompt, ok)
        return rows if ok else None

    def _push_pending(
        self,
        plan: BatchPlan,
        seqs: list[DecodingSequence],
        active: list[DecodingSequence],
        tokens: list[int],
        criteria: Criteria | None,
    ) -> list[DecodingSequence]:
        """Each active sequence takes its pending token, or stops where the stopping criteria
        say; the sequences still decoding, less those ``plan.settle`` gives up. A finished
        sequence after the first frees its cells for the others."""
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
        if plan.settle is not None and len(still) < len(active) and any(seq.index for seq in still):
            still = self._settle(plan, seqs, still)
        return still

    def _decode_rows(
        self, active: list[DecodingSequence], seqs: list[DecodingSequence], n_prompt: int
    ) -> tuple[list[list[DecodingSequence]], int]:
        """One decode step of ``active``, one batch row per group of sequences that share
        their tokens: ``(groups, rows decoded)``. With no free KV cell, the last sequences are
        given up (taken off ``active``) until the step fits; sequence 0 always fits, so a
        refusal with it alone is a llama.cpp error (``RuntimeError``)."""
        groups: list[list[DecodingSequence]] = []
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
                return groups, len(groups)
            if code != 1 or active == [seqs[0]]:
                raise RuntimeError(f"llama_decode returned {code}")
            # No free KV cell: give up the last sequence (sequence 0 always fits).
            dropped = active.pop()
            dropped.dropped = True
            self._seq_rm(dropped.index)
        return groups, 0

    def _keep_first(self, seqs: list[DecodingSequence], n_prompt: int, ok: bool) -> None:
        """Leave only sequence 0 (prompt + the tokens it fed), as an ordinary call does; after
        a failed batch, nothing (the call decodes its prompt again)."""
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

    def _keep_samples(
        self,
        plan: BatchPlan,
        seqs: list[DecodingSequence],
        tokens: list[int],
        criteria: Criteria | None,
    ) -> None:
        """The finished sequences after the first, as ``plan.results``; given-up ones are
        dropped. Every sequence's sampler is freed here but the first's (the call may decode
        on with it)."""
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

    @staticmethod
    def _count_batch(
        stats: CallStats, seqs: list[DecodingSequence], rows: int, started: float
    ) -> None:
        """The call's counters: the first sequence's own share, and the whole batch's."""
        first = seqs[0]
        stats.eval_tokens += len(first.fed)
        stats.decode_steps += first.steps
        stats.eval_ms += first.ms
        stats.batch_size = sum(not seq.dropped for seq in seqs)
        stats.batch_cancelled = sum(seq.cancelled for seq in seqs)
        stats.batch_tokens = sum(len(seq.fed) for seq in seqs)
        stats.batch_rows = rows
        stats.batch_ms = (time.perf_counter() - started) * 1000

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
