"""Batched samples (issue 15): the sampled calls of one prompt decoded together.

The decoding tests run the batch loop of the engine's model class on a toy model whose KV cache
is llama.cpp's unified cache in miniature (sequences sharing cells, positions that must continue
each sequence, a fixed number of cells) and whose samplers are seeded RNGs, so a batched sample
must equal, token for token, the sample an ordinary call with the same seed makes. The engine
tests use a stand-in model; real-model checks are marked ``lm``.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import dspy
import numpy as np
import pytest
from conftest import need_llama_cpp as _need_llama_cpp
from conftest import sqlite_ddl as _ddl
from conftest import stand_in_llama
from dspy.lm15 import Config, Message, Request

from sqlweave import lm as sqlweave_lm
from sqlweave.lm import (
    CallStats,
    EarlyStop,
    LlamaCppEngine,
    LMSpecError,
    SampleBatch,
    batched_samples,
    build_lm,
)
from sqlweave.lm.decoding import llama_class
from sqlweave.lm.sequences import Completion, SeqResult

llama_cpp = pytest.importorskip("llama_cpp")  # the library only: no model is loaded here

EOS = 0
STOP = 1  # detokenizes to ";"
TOP = 30  # a chain ends (EOS) once it reaches this token


def toy_next(token: int) -> int:
    """The toy model's likely next token: counting up, then the end."""
    return EOS if token >= TOP else token + 1


class ToySampler:
    """A seeded sampler: mostly the likely token, sometimes ``;`` or a jump."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def draw(self, last: int) -> int:
        r = self.rng.random()
        return STOP if r < 0.1 else self.rng.randrange(2, TOP) if r < 0.3 else toy_next(last)


class GreedyToySampler(ToySampler):
    """Temperature 0: always the likely token."""

    def draw(self, last: int) -> int:
        return toy_next(last)


class ToyKV:
    """A unified KV cache: sequences are lists of cell ids, copies share cells, and a decode
    fails (1) when the cells in use plus the new ones exceed ``n_ctx``."""

    def __init__(self, n_ctx: int) -> None:
        self.n_ctx = n_ctx
        self.seqs: dict[int, list[int]] = {}
        self.cells: dict[int, int] = {}  # cell id -> token
        self.next_id = 0
        self.out: list[int] = []  # the token whose logits each output holds
        self.decodes: list[int] = []  # tokens per successful decode

    def used(self) -> int:
        return len({cell for cells in self.seqs.values() for cell in cells})

    def rm(self, seq: int, p0: int = 0) -> bool:
        if seq in self.seqs:
            del self.seqs[seq][max(p0, 0) :]
        return True

    def cp(self, src: int, dst: int) -> None:
        self.seqs[dst] = list(self.seqs.get(src, []))

    def tokens(self, seq: int) -> list[int]:
        return [self.cells[cell] for cell in self.seqs.get(seq, [])]

    def decode(self, entries: list[tuple[int, int, Any]], all_outputs: bool) -> int:
        """Each entry is one new cell, held by one sequence or by a list of them."""
        if self.used() + len(entries) > self.n_ctx:
            return 1
        for token, pos, seqs in entries:
            cell = self.next_id
            self.cells[cell] = token
            self.next_id += 1
            for seq in [seqs] if isinstance(seqs, int) else seqs:
                cells = self.seqs.setdefault(seq, [])
                assert pos == len(cells), f"sequence {seq}: position {pos} after {len(cells)} cells"
                cells.append(cell)
        self.out = [token for token, _, _ in entries] if all_outputs else [entries[-1][0]]
        self.decodes.append(len(entries))
        return 0


class ToyBase:
    """What ``llama_cpp.Llama.generate`` (upstream's loop, unchanged) uses, over the toy."""

    generate = llama_cpp.Llama.generate

    def __init__(self, n_ctx: int = 256, n_batch: int = 16, **_: Any) -> None:
        self.n_batch = n_batch
        self._n_ctx = n_ctx
        self.n_tokens = 0
        self.input_ids = np.zeros(n_ctx, dtype=np.intc)
        self.kv = ToyKV(n_ctx)
        self._ctx = self  # upstream calls self._ctx.kv_cache_seq_rm
        self._requires_eval = True
        self._logits_all = False
        self._seed = 1234
        self._sampler: ToySampler | None = None
        self.scores = np.zeros((1, 4), dtype=np.single)
        self.draft_model = None
        self.verbose = False

    @property
    def _input_ids(self) -> np.ndarray:
        return self.input_ids[: self.n_tokens]

    def reset(self) -> None:
        self.n_tokens = 0
        self._requires_eval = True

    def kv_cache_seq_rm(self, seq_id: int, p0: int, p1: int) -> bool:
        return self.kv.rm(max(seq_id, 0), p0)

    def eval(self, tokens: list[int]) -> None:
        self.kv.rm(0, self.n_tokens)
        for start in range(0, len(tokens), self.n_batch):
            batch = list(tokens[start : start + self.n_batch])
            entries = [(token, self.n_tokens + i, 0) for i, token in enumerate(batch)]
            assert self.kv.decode(entries, all_outputs=False) == 0
            self.input_ids[self.n_tokens : self.n_tokens + len(batch)] = batch
            self.n_tokens += len(batch)
        self._requires_eval = False

    def _init_sampler(self, temp: float = 0.8, **_: Any) -> ToySampler:
        return GreedyToySampler(self._seed) if temp == 0 else ToySampler(self._seed)

    def sample(self, idx: int | None = None, **_: Any) -> int:
        assert idx == self.n_tokens - 1, "only the last position has logits"
        assert self._sampler is not None
        return self._sampler.draw(self.kv.out[-1])

    def detokenize(self, tokens: list[int], prev_tokens: Any = None, **_: Any) -> bytes:
        return b"".join(b";" if t == STOP else bytes([96 + t % 27]) for t in tokens)


class ToyLlama(llama_class(ToyBase)):  # type: ignore[misc]
    """The engine's model class over the toy, with ``n_seq_max`` sequences."""

    def __init__(self, n_seq_max: int = 8, **kwargs: Any) -> None:
        super().__init__(n_seq_max=n_seq_max, **kwargs)

    def _seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> bool:
        return self.kv.rm(seq, p0)

    def _seq_cp(self, src: int, dst: int) -> None:
        self.kv.cp(src, dst)

    def _decode_multi(self, entries: Any) -> int:
        return self.kv.decode(list(entries), all_outputs=True)

    def _sample_at(self, sampler: ToySampler, index: int) -> int:
        return sampler.draw(self.kv.out[index])

    def _is_eog(self, token: int) -> bool:
        return token == EOS

    def _save_state(self) -> tuple[Any, int] | None:
        state = ({seq: list(cells) for seq, cells in self.kv.seqs.items()}, list(self.kv.out))
        return state, 100 * self.kv.used()

    def _load_state(self, buffer: Any, nbytes: int) -> None:
        self.kv.seqs = {seq: list(cells) for seq, cells in buffer[0].items()}
        self.kv.out = list(buffer[1])


def complete(
    llama: ToyLlama,
    prompt: list[int],
    *,
    seed: int,
    batch: int = 0,
    stop: tuple[str, ...] = (),
    max_tokens: int = 64,
    keep: bool = True,
    ask_more: int = 0,
    temp: float = 0.8,
    sample_temp: float | None = None,
    settle: Any = None,
    seed_offset: int = 0,
) -> tuple[Completion, list[SeqResult], CallStats]:
    """One completion (sampled unless ``temp`` is 0) as the engine makes it: settings, a batch
    plan as ``create_completion`` fills it, then the completion read off ``generate`` as
    ``_create_completion`` reads it (``ask_more``: a reader that stops that much later)."""
    llama.begin_call(lookup_tokens=0, keep_prompt=keep, prompt_cache_bytes=10**6)
    if batch:
        llama.arm_batch(
            batch, sample_temperature=sample_temp, settle=settle, seed_offset=seed_offset
        )
        plan = llama._batch_plan
        if plan is not None:  # as create_completion fills it
            plan.stop, plan.max_tokens, plan.captured = list(stop), max_tokens, True
    llama._seed = seed
    reader = Completion(llama, prompt, [s.encode() for s in stop], max_tokens + ask_more)
    generator = llama.generate(prompt, temp=temp)
    for token in generator:
        if reader.push(int(token)):
            break
    generator.close()
    return reader, llama.take_batch(), llama.call_stats


def reference(prompt: list[int], seed: int, **options: Any) -> Completion:
    """The completion an ordinary call with this seed makes on a fresh model."""
    reader, extra, _ = complete(ToyLlama(), prompt, seed=seed, **options)
    assert not extra
    return reader


def same(result: SeqResult, expected: Completion) -> bool:
    return (result.tokens, result.text, result.finish_reason) == (
        expected.tokens,
        expected.text,
        expected.finish_reason,
    )


PROMPT = list(range(2, 14))


def assert_only_sequence_zero(llama: ToyLlama) -> None:
    """The bookkeeping an ordinary call leaves: one sequence, described by input_ids."""
    assert all(not cells for seq, cells in llama.kv.seqs.items() if seq != 0)
    assert llama.kv.tokens(0) == list(llama.input_ids[: llama.n_tokens])


# --------------------------------------------------------------------------- the batch loop


@pytest.mark.parametrize("stop", [(), (";",)])
def test_batched_samples_are_the_samples_of_ordinary_calls(stop: tuple[str, ...]) -> None:
    llama = ToyLlama()
    first, extra, stats = complete(llama, PROMPT, seed=100, batch=5, stop=stop, max_tokens=20)
    expected = [reference(PROMPT, 100 + j, stop=stop, max_tokens=20) for j in range(5)]
    assert (first.tokens, first.text, first.finish_reason) == (
        expected[0].tokens,
        expected[0].text,
        expected[0].finish_reason,
    )
    assert [result.index for result in extra] == [1, 2, 3, 4]
    for result in extra:
        assert same(result, expected[result.index]), result.index
    assert len({bytes(e.text) for e in expected}) > 1  # the seeds do give different samples
    # The prompt was evaluated once; every later decode fed one row per distinct history among
    # the unfinished sequences (sequences that sampled the same tokens so far share a row).
    assert stats.prompt_eval_tokens == len(PROMPT) and llama.kv.decodes[0] == len(PROMPT)
    steps = llama.kv.decodes[1:]
    fed = [first.tokens[: stats.eval_tokens]] + [r.tokens[: r.eval_tokens] for r in extra]
    assert [len(f) for f in fed] == [stats.eval_tokens] + [r.eval_tokens for r in extra]
    longest = max(len(f) for f in fed)
    assert steps == [len({tuple(f[: i + 1]) for f in fed if len(f) > i}) for i in range(longest)]
    assert steps[0] > 1 and stats.batch_size == 5 and stats.batch_rows == sum(steps)
    assert stats.batch_tokens == sum(len(f) for f in fed) >= sum(steps)
    assert stats.decode_steps == stats.eval_tokens == llama.n_tokens - len(PROMPT)
    assert_only_sequence_zero(llama)


def test_a_batch_opened_by_a_later_rollout_draws_that_rollouts_seeds() -> None:
    # Rollouts 0-7 came from DSPy's cache; rollout 8 opens the batch. Its sequences must be
    # rollouts 8, 9, ... (seeds base + 8 + j), not again the samples of rollouts 1, 2, ...
    llama = ToyLlama()
    first, extra, _ = complete(llama, PROMPT, seed=100, batch=4, seed_offset=8, max_tokens=20)
    expected = [reference(PROMPT, 108 + j, max_tokens=20) for j in range(4)]
    assert same_completion(first, expected[0])
    for result in extra:
        assert same(result, expected[result.index]), result.index
    earlier = [reference(PROMPT, 100 + j, max_tokens=20) for j in range(1, 4)]
    assert {bytes(r.text) for r in extra} != {bytes(e.text) for e in earlier}


def same_completion(got: Completion, expected: Completion) -> bool:
    return (got.tokens, got.text, got.finish_reason) == (
        expected.tokens,
        expected.text,
        expected.finish_reason,
    )


def test_stop_strings_and_max_tokens_end_each_sequence_where_an_ordinary_call_would() -> None:
    llama = ToyLlama()
    _, extra, _ = complete(llama, PROMPT, seed=7, batch=8, stop=(";",), max_tokens=6)
    reasons = set()
    for result in extra:
        expected = reference(PROMPT, 7 + result.index, stop=(";",), max_tokens=6)
        assert same(result, expected)
        assert b";" not in result.text and len(result.tokens) <= 6
        reasons.add(result.finish_reason)
    assert reasons == {"stop", "length"}


def test_after_a_batch_the_next_call_reuses_the_prompt_and_answers_as_on_a_fresh_model() -> None:
    llama = ToyLlama()
    complete(llama, PROMPT, seed=3, batch=4)
    again, extra, stats = complete(llama, PROMPT, seed=11)
    assert not extra and stats.batch_size == 0
    assert stats.prompt_eval_tokens == 1  # only the last prompt token is replayed
    assert again.tokens == reference(PROMPT, 11).tokens
    other = [40 + t % 7 for t in range(9)]
    _, _, stats = complete(llama, other, seed=5)
    assert stats.prompt_eval_tokens == len(other)
    assert_only_sequence_zero(llama)


def test_a_batch_restores_the_prompt_snapshot_of_an_earlier_sample() -> None:
    llama = ToyLlama()
    long = list(range(2, 26))  # long enough to be worth a restore
    complete(llama, long, seed=1)  # an ordinary sample keeps a snapshot of the prompt
    complete(llama, [50, 51, 52], seed=1)  # another prompt takes the KV cache
    first, extra, stats = complete(llama, long, seed=20, batch=3)
    assert stats.restored_tokens == len(long) and stats.prompt_eval_tokens == 1
    assert first.tokens == reference(long, 20).tokens
    assert [same(r, reference(long, 20 + r.index)) for r in extra] == [True, True]
    assert_only_sequence_zero(llama)


def test_a_full_cache_gives_up_the_last_sequences_never_the_first() -> None:
    # 12 prompt cells + 8 sequences of up to 30 tokens cannot fit 40 cells.
    llama = ToyLlama(n_ctx=40)
    first, extra, stats = complete(llama, PROMPT, seed=9, batch=8, max_tokens=25)
    assert first.tokens == reference(PROMPT, 9, max_tokens=25).tokens
    assert len(extra) < 7 and stats.batch_size == 1 + len(extra)
    for result in extra:  # the survivors are whole, correct samples
        assert same(result, reference(PROMPT, 9 + result.index, max_tokens=25))
    # all eight started together: one row for each distinct first token
    refs = [reference(PROMPT, 9 + j, max_tokens=25) for j in range(8)]
    assert llama.kv.decodes[1] == len({tuple(r.tokens[:1]) for r in refs if r.tokens})
    assert_only_sequence_zero(llama)


def test_the_first_sequence_goes_on_alone_when_its_reader_wants_more() -> None:
    llama = ToyLlama()
    longer = reference(PROMPT, 4, max_tokens=12)
    # The batch stops every sequence after 4 tokens, the reader only after 12.
    first, extra, _ = complete(llama, PROMPT, seed=4, batch=3, max_tokens=4, ask_more=8)
    assert first.tokens == longer.tokens and len(extra) == 2
    assert all(len(result.tokens) <= 4 for result in extra)
    assert_only_sequence_zero(llama)


def test_a_refused_batch_falls_back_to_one_ordinary_sample(monkeypatch) -> None:
    decodes: list[int] = []

    def refuse_the_third(self: ToyLlama, entries: Any) -> int:
        decodes.append(len(entries))
        return -1 if len(decodes) == 3 else self.kv.decode(list(entries), all_outputs=True)

    monkeypatch.setattr(ToyLlama, "_decode_multi", refuse_the_third)
    llama = ToyLlama()
    first, extra, stats = complete(llama, PROMPT, seed=6, batch=4)
    assert len(decodes) == 3 and extra == [] and stats.batch_size == 0
    assert first.tokens == reference(PROMPT, 6).tokens
    assert_only_sequence_zero(llama)


def test_no_batch_for_greedy_calls_without_a_plan_or_without_sequences() -> None:
    llama = ToyLlama()
    llama.begin_call(lookup_tokens=0, keep_prompt=False, prompt_cache_bytes=0)
    llama.arm_batch(4)
    llama._batch_plan.captured = True
    out = list(zip(range(5), llama.generate(PROMPT, temp=0.0), strict=False))
    assert out and llama.take_batch() == [] and max(llama.kv.decodes) > 1  # the prompt only
    assert max(llama.kv.decodes[1:]) == 1  # one sequence decoded
    _, extra, stats = complete(llama, PROMPT, seed=1)  # armed by nobody
    assert extra == [] and stats.batch_size == 0
    single = ToyLlama(n_seq_max=1)
    _, extra, stats = complete(single, PROMPT, seed=1, batch=4)
    assert extra == [] and stats.batch_size == 0 and single._batch_plan is None


def test_a_prompt_without_room_for_every_first_token_is_not_batched() -> None:
    llama = ToyLlama(n_ctx=15)
    _, extra, stats = complete(llama, PROMPT, seed=1, batch=4, max_tokens=2)
    assert extra == [] and stats.batch_size == 0


def test_completion_reader_matches_upstream_rules() -> None:
    llama = ToyLlama()
    reader = Completion(llama, PROMPT, [b";"], max_tokens=3)
    assert not reader.push(2) and not reader.push(3)
    assert reader.push(STOP) and reader.text == b"bc" and reader.finish_reason == "stop"
    reader = Completion(llama, PROMPT, [], max_tokens=2)
    assert not reader.push(2) and reader.push(3) and reader.finish_reason == "length"
    reader = Completion(llama, PROMPT, [], max_tokens=5)
    assert reader.push(EOS) and reader.tokens == [] and reader.finish_reason == "stop"


# --------------------------------------------------------------------------- the engine


class BatchingLlama:
    """Stands in for the loaded model: each completion answers "SELECT 0"; an armed one also
    leaves k - 1 samples "SELECT j"."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.armed: list[int] = []
        self.sample_temperatures: list[float | None] = []
        self.settles: list[Any] = []
        self.seed_offsets: list[int] = []
        self.cancel = 0  # sequences the next armed batch reports as given up
        self._k = 0
        self.call_stats = CallStats()
        self.kept: list[Any] = []  # keep_prompt of each call

    def begin_call(self, **options: Any) -> None:
        self._k = 0
        self.call_stats = CallStats(prompt_eval_tokens=7, eval_tokens=3)
        self.kept.append(options.get("keep_prompt"))

    def arm_batch(
        self,
        k: int,
        sample_temperature: float | None = None,
        settle: Any = None,
        seed_offset: int = 0,
    ) -> None:
        self._k = k
        self.seed_offsets.append(seed_offset)
        self.armed.append(k)
        self.sample_temperatures.append(sample_temperature)
        self.settles.append(settle)

    def take_batch(self) -> list[SeqResult]:
        k, self._k = self._k, 0
        kept = k - self.cancel if k else 0
        if k:
            self.call_stats.batch_size = k
            self.call_stats.batch_tokens = 3 + 2 * (k - 1)
            self.call_stats.batch_cancelled = self.cancel
        return [
            SeqResult(j, [5, 6], f"SELECT {j}".encode(), "stop", 2, 2, 10.0) for j in range(1, kept)
        ]

    def create_chat_completion(self, messages: list[dict[str, str]], **options: Any) -> Any:
        self.calls.append({"messages": messages, **options})
        return {
            "id": "x",
            "choices": [{"message": {"content": "SELECT 0"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3},
        }


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[str, BatchingLlama]:
    llama = BatchingLlama()
    return stand_in_llama(monkeypatch, tmp_path, llama, key=("fake",)), llama


def _request(
    spec: str,
    temperature: float = 0.7,
    seed: int | None = None,
    question: str = "How many singers?",
    max_tokens: int = 8,
) -> Request:
    return Request(
        model=spec,
        messages=(Message.user(question),),
        config=Config(temperature=temperature, max_tokens=max_tokens, seed=seed),
    )


def test_outside_a_block_every_sample_is_a_call(fake) -> None:
    spec, llama = fake
    engine = LlamaCppEngine(spec)
    texts = [engine.complete(_request(spec, seed=i)).text for i in range(3)]
    assert texts == ["SELECT 0"] * 3 and len(llama.calls) == 3 and llama.armed == []


def test_a_block_decodes_once_and_answers_the_next_samples_from_the_batch(fake) -> None:
    spec, llama = fake
    engine = LlamaCppEngine(spec)
    with batched_samples(4) as batch:
        responses = [engine.complete(_request(spec, seed=10 + i)) for i in range(4)]
    assert [r.text for r in responses] == ["SELECT 0", "SELECT 1", "SELECT 2", "SELECT 3"]
    assert len(llama.calls) == 1 and llama.armed == [4]
    assert batch is not None and batch.decoded == 4 and batch.served == 3 and len(batch) == 0
    first, later = responses[0], responses[1:]
    assert first.usage.input_tokens == 7 and first.usage.output_tokens == 3
    for response in later:  # their own tokens, the whole prompt from the cache
        data = response.provider_data or {}
        assert response.usage.input_tokens == 7 and response.usage.output_tokens == 2
        assert response.usage.cache_read_tokens == 7 and data["prompt_eval_tokens"] == 0
        assert data["seconds"] == pytest.approx(0.01) and data["eval_tokens"] == 2
        assert data["batch_size"] == 4 and data["batch_tokens"] == 9
    assert [(r.provider_data or {}).get("batch_index") for r in later] == [1, 2, 3]
    assert (first.provider_data or {})["batch_size"] == 4


def test_greedy_calls_in_a_block_are_ordinary_calls(fake) -> None:
    spec, llama = fake
    engine = LlamaCppEngine(spec)
    with batched_samples(4):
        texts = [engine.complete(_request(spec, temperature=0.0)).text for _ in range(2)]
    assert texts == ["SELECT 0"] * 2 and len(llama.calls) == 2 and llama.armed == []


def test_a_greedy_block_decodes_the_samples_beside_its_greedy_call(fake) -> None:
    spec, llama = fake
    engine = LlamaCppEngine(spec)
    with batched_samples(3, temperature=0.7, greedy=True) as batch:
        greedy = engine.complete(_request(spec, temperature=0.0))
        assert llama.armed == [4] and llama.sample_temperatures == [0.7]
        assert batch is not None and batch.decoded == 3 and len(batch) == 3
        # another greedy call, or samples at another temperature or on another prompt: their own
        assert engine.complete(_request(spec, temperature=0.0)).text == "SELECT 0"
        assert engine.complete(_request(spec, temperature=0.9)).text == "SELECT 0"
        assert engine.complete(_request(spec, question="Other?")).text == "SELECT 0"
        samples = [engine.complete(_request(spec, seed=i)) for i in range(4)]
    assert greedy.text == "SELECT 0" and (greedy.provider_data or {}).get("batch_index") is None
    assert [r.text for r in samples] == ["SELECT 1", "SELECT 2", "SELECT 3", "SELECT 0"]
    assert batch.served == 3 and len(llama.calls) == 5 and llama.armed == [4]
    # The greedy call hosting the batch keeps its prompt (a program alternating prompts
    # restores it for the next question); a greedy call outside any batch does not.
    assert llama.kept == [True, False, True, True, True]


def test_a_kept_prompts_block_keeps_the_prompt_of_a_lone_greedy_call(fake) -> None:
    """Rule 27's cascade asks each prompt greedily, then the samples of the first prompt after
    the second's: inside ``kept_prompts`` a greedy call keeps its prompt for them."""
    spec, llama = fake
    engine = LlamaCppEngine(spec)
    engine.complete(_request(spec, temperature=0.0))
    with sqlweave_lm.kept_prompts():
        engine.complete(_request(spec, temperature=0.0))
    engine.complete(_request(spec, temperature=0.0))
    assert llama.kept == [False, True, False]


def test_a_greedy_block_whose_greedy_call_never_comes_batches_its_first_sample(fake) -> None:
    spec, llama = fake
    engine = LlamaCppEngine(spec)
    with batched_samples(3, temperature=0.7, greedy=True) as batch:  # the greedy call was cached
        texts = [engine.complete(_request(spec)).text for _ in range(3)]
    assert texts == ["SELECT 0", "SELECT 1", "SELECT 2"] and llama.armed == [3]
    assert llama.sample_temperatures == [None] and batch is not None and batch.served == 2
    with batched_samples(1, temperature=0.7, greedy=True) as one:  # greedy + one sample
        assert one is not None
        engine.complete(_request(spec, temperature=0.0))
        assert engine.complete(_request(spec)).text == "SELECT 1"
    assert llama.armed == [3, 2]
    with pytest.raises(ValueError, match="temperature"):
        with batched_samples(3, greedy=True):
            pass


def test_only_the_same_prompt_and_settings_take_a_batched_sample(fake) -> None:
    spec, llama = fake
    engine = LlamaCppEngine(spec)
    with batched_samples(4):
        engine.complete(_request(spec, seed=1))
        assert engine.complete(_request(spec, question="Other?")).text == "SELECT 0"
        assert engine.complete(_request(spec, temperature=0.9)).text == "SELECT 0"
        assert engine.complete(_request(spec, max_tokens=9)).text == "SELECT 0"
        assert len(llama.calls) == 4 and llama.armed == [4]  # one batch per block
        assert engine.complete(_request(spec, seed=99)).text == "SELECT 1"  # any seed
    assert len(llama.calls) == 4


def test_leftovers_are_dropped_when_the_block_ends(fake) -> None:
    spec, llama = fake
    engine = LlamaCppEngine(spec)
    with batched_samples(4) as batch:
        engine.complete(_request(spec))
        engine.complete(_request(spec))
    assert batch is not None and len(batch) == 0
    assert engine.complete(_request(spec)).text == "SELECT 0" and len(llama.calls) == 2
    with batched_samples(3):
        assert engine.complete(_request(spec)).text == "SELECT 0"
        assert engine.complete(_request(spec)).text == "SELECT 1"
    assert llama.armed == [4, 3]


def test_a_dry_stash_falls_back_to_ordinary_calls(fake) -> None:
    spec, llama = fake
    engine = LlamaCppEngine(spec)
    with batched_samples(2):
        texts = [engine.complete(_request(spec)).text for _ in range(3)]
    assert texts == ["SELECT 0", "SELECT 1", "SELECT 0"] and llama.armed == [2]


def test_a_block_for_one_temperature_leaves_others_alone(fake) -> None:
    spec, llama = fake
    engine = LlamaCppEngine(spec)
    with batched_samples(3, temperature=0.7):
        engine.complete(_request(spec, temperature=0.9))
        assert llama.armed == []
        engine.complete(_request(spec, temperature=0.7))
        assert llama.armed == [3]


def test_a_block_of_one_is_no_block(fake) -> None:
    spec, llama = fake
    engine = LlamaCppEngine(spec)
    with batched_samples(1) as batch:
        assert batch is None
        engine.complete(_request(spec))
        engine.complete(_request(spec))
    assert len(llama.calls) == 2 and llama.armed == []


def test_blocks_nest_and_threads_do_not_share_them(fake) -> None:
    import threading

    spec, llama = fake
    engine = LlamaCppEngine(spec)
    seen: list[str] = []
    with batched_samples(3):
        engine.complete(_request(spec))
        worker = threading.Thread(target=lambda: seen.append(engine.complete(_request(spec)).text))
        worker.start()
        worker.join()
        with batched_samples(2):
            assert engine.complete(_request(spec)).text == "SELECT 0"  # the inner block's batch
        assert engine.complete(_request(spec)).text == "SELECT 1"  # the outer's again
    assert seen == ["SELECT 0"] and llama.armed == [3, 2]


def test_the_batch_is_seeded_from_the_rollout_that_opens_it(fake) -> None:
    spec, llama = fake
    engine = LlamaCppEngine(spec)
    with batched_samples(4) as batch:
        batch.rollout = 5  # as the Sampler sets it: rollouts 0-4 were cache hits
        engine.complete(_request(spec))
    with batched_samples(2, temperature=0.7, greedy=True):
        engine.complete(_request(spec, temperature=0.0))  # a cold greedy rollout hosts it
    with batched_samples(4) as batch:
        batch.rollout = 5  # an LM with a seed: sample_lm gave rollout 5 the seed S + 5 already
        engine.complete(_request(spec, seed=105))
    assert llama.seed_offsets == [5, 0, 0]


def test_stash_keys_leave_out_the_seed_only() -> None:
    messages = [{"role": "user", "content": "q"}]
    a = SampleBatch.key("m", messages, {"temperature": 0.7, "seed": 1, "max_tokens": 8})
    b = SampleBatch.key("m", messages, {"max_tokens": 8, "seed": 2, "temperature": 0.7})
    assert a == b
    assert a != SampleBatch.key("m2", messages, {"temperature": 0.7, "max_tokens": 8})
    assert a != SampleBatch.key("m", messages, {"temperature": 0.7, "max_tokens": 9})


@pytest.mark.parametrize("wrapped", [True, False])
def test_self_consistency_decodes_its_samples_in_one_batch(fake, demo_concert_db, wrapped) -> None:
    from sqlweave.adapter import SQLAdapter
    from sqlweave.programs.direct import DirectSQL
    from sqlweave.programs.stages.sampling import SelfConsistency

    spec, llama = fake
    lm = dspy.LM(spec, engine=LlamaCppEngine(spec), cache=False, num_retries=0, seed=5)
    program = (
        SelfConsistency(DirectSQL(), n=5, temperature=0.7)
        if wrapped
        else DirectSQL(samples=5, temperature=0.7)
    )
    with dspy.context(lm=lm, adapter=SQLAdapter(prefill=False)):
        pred = program(db=demo_concert_db, question="How many singers are there?")
    assert pred.candidates == ["SELECT 0", "SELECT 1", "SELECT 2", "SELECT 3", "SELECT 4"]
    # One call: the greedy answer, decoded beside the four samples.
    assert len(llama.calls) == 1 and llama.armed == [5] and llama.sample_temperatures == [0.7]
    assert [call["temperature"] for call in llama.calls] == [0.0]


def test_engine_option_n_seq_max(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert LlamaCppEngine(f"gguf:{gguf}").n_seq_max == sqlweave_lm.DEFAULT_N_SEQ_MAX
    lm = build_lm(f"gguf:{gguf}", n_seq_max=1)
    state = lm.engine.dump_state()
    assert state["n_seq_max"] == 1 and LlamaCppEngine.load_state(state).n_seq_max == 1
    for bad in (0, -1, True, 2.0):
        with pytest.raises(LMSpecError, match="n_seq_max"):
            LlamaCppEngine(f"gguf:{gguf}", n_seq_max=bad)


# --------------------------------------------------------------------------- real model


def _sql_request(
    spec: str, schema: str, question: str, temperature: float = 0.0, **config: Any
) -> Request:
    return Request(
        model=spec,
        messages=(
            Message.user(f"{schema}\n\n-- Using valid SQLite, answer: {question}"),
            Message.assistant("SELECT"),
        ),
        config=Config(temperature=temperature, max_tokens=48, **config),
    )


QUESTION = "How many singers are there?"
OTHER = "List the names of singers older than 30."


def _fresh(engine: LlamaCppEngine) -> Any:
    """The engine's shared model with an empty KV cache and no prompt snapshots."""
    llama = engine._loaded().llama
    llama.reset()
    llama.prompt_states.clear()
    return llama


@pytest.mark.lm
def test_small_model_batch_evaluates_the_prompt_once(demo_concert_db: Path) -> None:
    _need_llama_cpp()
    schema = _ddl(demo_concert_db)
    engine = LlamaCppEngine(sqlweave_lm.SMALL_MODEL)
    _fresh(engine)
    with batched_samples(4) as batch:
        responses = [
            engine.complete(_sql_request(engine.spec, schema, QUESTION, 1.0, seed=3 + i))
            for i in range(4)
        ]
    data = [r.provider_data or {} for r in responses]
    prompt = responses[0].usage.input_tokens
    assert data[0]["prompt_eval_tokens"] == prompt > 100 and data[0]["batch_size"] == 4
    assert [d["prompt_eval_tokens"] for d in data[1:]] == [0, 0, 0]
    assert [r.usage.cache_read_tokens for r in responses[1:]] == [prompt] * 3
    assert [d.get("batch_index") for d in data[1:]] == [1, 2, 3]
    assert data[0]["batch_tokens"] == sum(d["eval_tokens"] for d in data)
    assert batch is not None and batch.served == 3
    texts = [r.text for r in responses]
    assert all(text.startswith("SELECT") and len(text) > len("SELECT") for text in texts)
    assert len(set(texts)) > 1, texts  # four samples at temperature 1 are not one answer


@pytest.mark.lm
def test_small_model_batched_samples_answer_the_same_prompt(demo_concert_db: Path) -> None:
    # With top_k = 1 a sample is the greedy answer: every sequence must decode the very
    # prompt, positions and stops of an ordinary greedy call.
    _need_llama_cpp()
    schema = _ddl(demo_concert_db)
    engine = LlamaCppEngine(sqlweave_lm.SMALL_MODEL)
    _fresh(engine)
    greedy = engine.complete(_sql_request(engine.spec, schema, OTHER)).text
    _fresh(engine)
    with batched_samples(4):
        sampled = [
            engine.complete(_sql_request(engine.spec, schema, OTHER, 0.7, top_k=1))
            for _ in range(4)
        ]
    assert (sampled[0].provider_data or {})["batch_size"] == 4
    assert [r.text for r in sampled] == [greedy] * 4
    assert {r.finish_reason for r in sampled} == {"stop"}


@pytest.mark.lm
def test_small_model_greedy_output_is_unchanged(demo_concert_db: Path) -> None:
    _need_llama_cpp()
    schema = _ddl(demo_concert_db)
    engine = LlamaCppEngine(sqlweave_lm.SMALL_MODEL)
    # A model loaded for one sequence only (as before batched samples existed).
    single = LlamaCppEngine(sqlweave_lm.SMALL_MODEL, n_seq_max=1)
    assert single._loaded().llama is not engine._loaded().llama
    for question in (QUESTION, OTHER):
        _fresh(engine)
        outside = engine.complete(_sql_request(engine.spec, schema, question))
        _fresh(engine)
        with batched_samples(4):
            inside = engine.complete(_sql_request(engine.spec, schema, question))
        assert inside.text == outside.text and (inside.provider_data or {})["batch_size"] == 0
        _fresh(single)
        assert single.complete(_sql_request(single.spec, schema, question)).text == outside.text


@pytest.mark.lm
def test_small_model_greedy_call_decodes_its_samples_beside_it(demo_concert_db: Path) -> None:
    # The greedy answer decoded as sequence 0 of its samples' batch is the ordinary greedy
    # answer (on these prompts no near-tie is close enough for the batch's sums to tip it),
    # and the samples answer the sampled calls that follow, with no prompt of their own.
    _need_llama_cpp()
    schema = _ddl(demo_concert_db)
    engine = LlamaCppEngine(sqlweave_lm.SMALL_MODEL)
    for question in (QUESTION, OTHER):
        _fresh(engine)
        expected = engine.complete(_sql_request(engine.spec, schema, question)).text
        _fresh(engine)
        with batched_samples(3, temperature=1.0, greedy=True) as batch:
            greedy = engine.complete(_sql_request(engine.spec, schema, question))
            samples = [
                engine.complete(_sql_request(engine.spec, schema, question, 1.0, seed=i))
                for i in range(3)
            ]
        data = greedy.provider_data or {}
        assert greedy.text == expected and data["batch_size"] == 4
        assert data["prompt_eval_tokens"] == greedy.usage.input_tokens
        assert batch is not None and batch.served == 3
        assert [(r.provider_data or {}).get("batch_index") for r in samples] == [1, 2, 3]
        assert [(r.provider_data or {})["prompt_eval_tokens"] for r in samples] == [0, 0, 0]
        assert all(r.text.startswith("SELECT") and len(r.text) > 6 for r in samples)


@pytest.mark.lm
def test_small_model_after_a_batch_the_next_call_is_as_after_an_ordinary_sample(
    demo_concert_db: Path,
) -> None:
    _need_llama_cpp()
    schema = _ddl(demo_concert_db)
    engine = LlamaCppEngine(sqlweave_lm.SMALL_MODEL)
    llama = _fresh(engine)
    engine.complete(_sql_request(engine.spec, schema, QUESTION, 0.8, seed=1))
    expected = engine.complete(_sql_request(engine.spec, schema, OTHER)).text
    llama = _fresh(engine)
    with batched_samples(4):
        first = engine.complete(_sql_request(engine.spec, schema, QUESTION, 0.8, seed=1))
    assert (first.provider_data or {})["batch_size"] == 4
    memory = llama._ctx.memory
    for seq in range(1, llama.n_seq_max):  # only sequence 0 is left, as input_ids say
        assert llama_cpp.llama_memory_seq_pos_max(memory, seq) == -1
    assert llama_cpp.llama_memory_seq_pos_max(memory, 0) == llama.n_tokens - 1
    after = engine.complete(_sql_request(engine.spec, schema, OTHER))
    assert after.text == expected
    # The shared schema prefix came from the KV cache.
    assert (after.provider_data or {})["prompt_eval_tokens"] < after.usage.input_tokens / 2


@pytest.mark.lm
def test_small_model_each_sample_continues_its_own_sequence(
    demo_concert_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each token a batched sample holds must be one its own sampler could pick (min_p 0.05:
    # a logit within log(0.05) of the best) when prompt + that sample alone are evaluated
    # afresh; tokens mixed up between sequences or logits rows would not be.
    _need_llama_cpp()
    schema = _ddl(demo_concert_db)
    engine = LlamaCppEngine(sqlweave_lm.SMALL_MODEL)
    llama = _fresh(engine)
    placed: list[bool] = []
    decode = llama._decode_multi

    def checked(entries: Any) -> int:  # llama.cpp put each token where the batch said
        code = decode(entries)
        memory = llama._ctx.memory
        placed.extend(
            llama_cpp.llama_memory_seq_pos_max(memory, seq) == pos
            for _, pos, seqs in entries
            for seq in seqs
        )
        return code

    monkeypatch.setattr(llama, "_decode_multi", checked)
    text = f"{schema}\n\n-- Using valid SQLite, answer: {OTHER}\nSELECT"
    llama.begin_call(lookup_tokens=0, keep_prompt=False, prompt_cache_bytes=0)
    llama.arm_batch(6)
    first = llama.create_completion(text, max_tokens=24, temperature=1.0, seed=11, stop=[";"])
    extra = llama.take_batch()
    assert llama.call_stats.batch_size == 6 and len(extra) == 5
    assert placed and all(placed)
    assert len({tuple(result.tokens) for result in extra}) > 1
    prompt = [int(t) for t in llama.input_ids[: first["usage"]["prompt_tokens"]]]
    n_vocab = llama.n_vocab()
    for result in extra:
        assert result.tokens and len(result.tokens) <= 24
        llama.reset()
        llama.eval(prompt)
        for token in result.tokens:
            logits = np.ctypeslib.as_array(llama._ctx.get_logits_ith(-1), shape=(n_vocab,))
            assert logits[token] >= logits.max() + np.log(0.05) - 1.0, (result.index, token)
            llama.eval([token])
    llama.reset()


class LikelySampler(ToySampler):
    """Always the likely token, whatever the seed: every sample has the same tokens."""

    def draw(self, last: int) -> int:
        self.rng.random()
        return toy_next(last)


def test_sequences_with_the_same_tokens_share_one_row_per_step(monkeypatch) -> None:
    monkeypatch.setattr(ToyBase, "_init_sampler", lambda self, **_: LikelySampler(self._seed))
    llama = ToyLlama()
    first, extra, stats = complete(llama, PROMPT, seed=2, batch=6, max_tokens=40)
    assert len(extra) == 5 and all(r.tokens == first.tokens for r in extra)
    assert first.tokens == list(range(PROMPT[-1] + 1, TOP + 1))  # counted up to TOP, then EOS
    # one row per step for all six, one KV cell per token
    assert llama.kv.decodes[1:] == [1] * stats.eval_tokens
    assert stats.batch_rows == stats.eval_tokens and stats.batch_tokens == 6 * stats.eval_tokens
    assert_only_sequence_zero(llama)


def test_a_shared_row_splits_when_the_samples_differ_and_each_keeps_its_own_history() -> None:
    llama = ToyLlama()
    _, extra, stats = complete(llama, PROMPT, seed=40, batch=8, max_tokens=24)
    for result in extra:
        assert same(result, reference(PROMPT, 40 + result.index, max_tokens=24)), result.index
    assert stats.batch_rows < stats.batch_tokens  # some rows were shared
    assert_only_sequence_zero(llama)


# --------------------------------------------------------------------------- a greedy host


def test_a_greedy_call_decodes_beside_its_samples_each_as_an_ordinary_call_would() -> None:
    llama = ToyLlama()
    first, extra, stats = complete(
        llama, PROMPT, seed=30, batch=6, temp=0.0, sample_temp=0.8, max_tokens=24
    )
    greedy = reference(PROMPT, 30, temp=0.0, max_tokens=24)
    assert first.tokens == greedy.tokens == list(range(PROMPT[-1] + 1, TOP + 1))
    assert [r.index for r in extra] == [1, 2, 3, 4, 5]
    for result in extra:  # the samples of ordinary sampled calls, seeds 31..35
        assert same(result, reference(PROMPT, 30 + result.index, max_tokens=24)), result.index
        assert result.tokens != greedy.tokens  # sampled, not greedy
    assert stats.batch_size == 6 and stats.prompt_eval_tokens == len(PROMPT)
    # While a sample follows the greedy path it shares the greedy row.
    fed = [first.tokens[: stats.eval_tokens]] + [r.tokens[: r.eval_tokens] for r in extra]
    longest = max(len(f) for f in fed)
    rows = [len({tuple(f[: i + 1]) for f in fed if len(f) > i}) for i in range(longest)]
    assert llama.kv.decodes[1:] == rows and stats.batch_rows == sum(rows)
    assert_only_sequence_zero(llama)


def test_greedy_calls_are_batched_only_with_a_sample_temperature() -> None:
    llama = ToyLlama()
    _, extra, stats = complete(llama, PROMPT, seed=1, batch=4, temp=0.0)
    assert extra == [] and stats.batch_size == 0
    with pytest.raises(ValueError, match="sample_temperature"):
        llama.arm_batch(4, sample_temperature=0.0)


# --------------------------------------------------------------------------- settling early


def test_a_settled_batch_gives_up_its_unfinished_samples_and_keeps_the_finished_whole() -> None:
    seen: list[list[bytes | None]] = []

    def settle(texts: list[bytes | None]) -> bool:
        seen.append(list(texts))
        return sum(text is not None for text in texts[1:]) >= 2  # two samples are enough

    llama = ToyLlama()
    # Seed 66: the samples end after 24, 8, 12, 7 and 24 tokens.
    first, extra, stats = complete(llama, PROMPT, seed=66, batch=6, max_tokens=24, settle=settle)
    refs = [reference(PROMPT, 66 + j, max_tokens=24) for j in range(6)]
    assert (first.tokens, first.text) == (refs[0].tokens, refs[0].text)
    # Asked only when a sequence finished; each time with one entry per sequence.
    assert seen and all(len(texts) == 6 for texts in seen)
    assert sum(text is not None for text in seen[-1][1:]) >= 2
    kept = {result.index for result in extra}
    assert kept == {j for j in range(1, 6) if seen[-1][j] is not None}
    assert kept == {2, 4} and stats.batch_cancelled == 3
    for result in extra:  # what was kept is what an ordinary call with its seed makes
        assert same(result, refs[result.index]), result.index
        assert seen[-1][result.index] == result.text
    # Fewer rows than the whole batch would have cost.
    full = ToyLlama()
    _, all_extra, full_stats = complete(full, PROMPT, seed=66, batch=6, max_tokens=24)
    assert len(all_extra) == 5 and stats.batch_rows < full_stats.batch_rows
    assert_only_sequence_zero(llama)


def test_a_settled_batch_decodes_its_first_sequence_to_the_end() -> None:
    # Greedy host: its answer counts up to TOP (long); the samples often stop early (";").
    llama = ToyLlama()
    first, extra, stats = complete(
        llama,
        PROMPT,
        seed=7,
        batch=6,
        temp=0.0,
        sample_temp=0.8,
        max_tokens=24,
        settle=lambda texts: texts[0] is None and any(texts[1:]),
    )
    greedy = reference(PROMPT, 7, temp=0.0, max_tokens=24)
    assert first.tokens == greedy.tokens and first.finish_reason == greedy.finish_reason
    assert stats.batch_cancelled == 5 - len(extra) and len(extra) < 5
    assert_only_sequence_zero(llama)


def test_a_failing_settle_callback_is_ignored(caplog) -> None:
    def settle(texts: list[bytes | None]) -> bool:
        raise RuntimeError("boom")

    llama = ToyLlama()
    _, extra, stats = complete(llama, PROMPT, seed=50, batch=6, max_tokens=24, settle=settle)
    assert len(extra) == 5 and stats.batch_cancelled == 0
    assert "settle callback failed" in caplog.text


def test_a_block_passes_its_early_stop_to_the_batch_as_a_judge_of_candidates(fake) -> None:
    spec, llama = fake
    engine = LlamaCppEngine(spec)
    judged: list[list[str | None]] = []

    def judge(candidates: Any) -> bool:
        judged.append(list(candidates))
        return len(candidates) > 3

    # The reader is the caller's: the engine hands it each answer, never a candidate of its own.
    early = EarlyStop(judge, candidate_of=lambda answer: f"<{answer}>")
    llama.cancel = 2  # the stand-in gives up two of its four sequences
    with batched_samples(3, temperature=0.7, greedy=True, early_stop=early) as batch:
        engine.complete(_request(spec, temperature=0.0))
        assert batch is not None and llama.armed == [4]
        ask = llama.settles[0]
        # bytes as the model holds them; an unfinished UTF-8 character is dropped, as in answers
        assert ask([b"SELECT 1", None, "é".encode()[:1], b" x"]) is True
        assert judged == [["<SELECT 1>", None, "<>", "< x>"]]
        assert ask([b"SELECT 1", None, None]) is False
        assert batch.cancelled == 2 and len(batch) == 1
    with batched_samples(3, temperature=0.7, greedy=True):
        engine.complete(_request(spec, temperature=0.0))
    assert llama.settles[-1] is None


def test_a_prefilled_call_is_judged_on_what_it_answers_with() -> None:
    from sqlweave.lm.engine import _settle_on

    read: list[str] = []
    early = EarlyStop(lambda c: None, candidate_of=lambda answer: read.append(answer) or answer)
    settle = _settle_on(early, "SELECT")
    assert settle is not None and settle([b" 1", None, b" name FROM t"]) is False  # None: decode on
    assert read == ["SELECT 1", "SELECT name FROM t"]
    assert _settle_on(None, "SELECT") is None


@pytest.mark.lm
def test_small_model_a_settled_batch_keeps_the_samples_it_finished(demo_concert_db: Path) -> None:
    # The same greedy-hosted batch twice: whole, then stopped once two samples are done. The
    # samples that finished before the stop are those of the whole batch (same rows, same
    # sums up to there); the others are given up and never stashed.
    _need_llama_cpp()
    schema = _ddl(demo_concert_db)
    engine = LlamaCppEngine(sqlweave_lm.SMALL_MODEL)

    def run(settle: Any) -> tuple[Any, list[Any], Any]:
        _fresh(engine)
        early = None if settle is None else EarlyStop(settle, candidate_of=lambda answer: answer)
        with batched_samples(7, temperature=1.0, greedy=True, early_stop=early) as batch:
            greedy = engine.complete(_sql_request(engine.spec, schema, OTHER, seed=11))
            assert batch is not None
            stashed = len(batch)
            samples = [
                engine.complete(_sql_request(engine.spec, schema, OTHER, 1.0, seed=12 + i))
                for i in range(stashed)
            ]
        return greedy, samples, batch

    whole_greedy, whole, whole_batch = run(None)
    assert len(whole) == 7 and whole_batch.cancelled == 0
    asked: list[list[str | None]] = []

    def two_samples(answers: list[str | None]) -> bool:
        asked.append(list(answers))
        return sum(answer is not None for answer in answers[1:]) >= 2

    greedy, kept, batch = run(two_samples)
    data = greedy.provider_data or {}
    assert asked and all(len(answers) == 8 for answers in asked)
    assert all(a.startswith("SELECT") for a in asked[-1] if a is not None)  # prefill included
    assert 2 <= len(kept) < 7 and batch.cancelled == data["batch_cancelled"] == 7 - len(kept)
    indices = [(r.provider_data or {})["batch_index"] for r in kept]
    assert [r.text for r in kept] == [whole[i - 1].text for i in indices]
    assert data["batch_rows"] < (whole_greedy.provider_data or {})["batch_rows"]


@pytest.mark.lm
def test_small_model_direct_stops_sampling_once_its_vote_is_settled(demo_concert_db: Path) -> None:
    # direct with 8 candidates on the real model: the batch is cut once the vote is settled,
    # and every sample the sampler then asks for comes from the batch (none decoded again).
    _need_llama_cpp()
    from sqlweave.programs.base import resolve_database
    from sqlweave.programs.direct import DirectSQL
    from sqlweave.programs.stages.voting import VoteTally, vote

    engine = LlamaCppEngine(sqlweave_lm.SMALL_MODEL)
    _fresh(engine)
    seen: list[dict[str, Any]] = []
    complete = engine.complete

    def recording(request: Request) -> Any:
        response = complete(request)
        seen.append(dict(response.provider_data or {}))
        return response

    engine.complete = recording  # type: ignore[method-assign]
    lm = dspy.LM(engine.spec, engine=engine, cache=False, num_retries=0)
    with dspy.context(lm=lm):
        pred = DirectSQL(samples=8, temperature=0.7, corrector="none")(
            db=demo_concert_db, question=QUESTION
        )
    candidates = list(pred.candidates)
    assert 2 <= len(candidates) == len(seen) <= 8
    assert seen[0]["batch_size"] == 8 and all("batch_index" in d for d in seen[1:])
    assert seen[0]["batch_cancelled"] <= 8 - len(candidates)
    db = resolve_database(demo_concert_db)
    assert VoteTally(db).settled(candidates, 8 - len(candidates))
    assert pred.sql == vote(candidates, db).sql
