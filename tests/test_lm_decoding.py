"""Fast local decoding (issue 15): samples share their evaluated prompt, prompt-lookup decoding
keeps greedy output, and the engine options that switch them.

The decoding tests run llama-cpp-python's own ``Llama.generate`` loop on a toy model: a fake
context whose "logits" at a position name the token that follows the one stored there, and that
fails, as llama.cpp does, when a position without logits is sampled. Real-model checks are
marked ``lm``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dspy
import numpy as np
import pytest
from conftest import fake_llama_cpp, stand_in_llama
from conftest import need_llama_cpp as _need_llama_cpp
from conftest import sqlite_ddl as _ddl
from dspy.lm15 import Config, Message, Request

from sqlweave import lm as sqlweave_lm
from sqlweave.lm import (
    LOOKUP_ENV,
    CallStats,
    LlamaCppEngine,
    LMSpecError,
    PromptStates,
    build_lm,
    common_prefix,
    default_prompt_lookup,
)
from sqlweave.lm.decoding import DecodingLlama, llama_class

llama_cpp = pytest.importorskip("llama_cpp")  # the library only: no model is loaded here

VOCAB = 64


def toy_next(token: int) -> int:
    """The toy model's greedy choice after ``token``."""
    return (7 * int(token) + 3) % VOCAB


def chain(start: int, length: int) -> list[int]:
    """``length`` tokens the toy model would write after ``start``."""
    out = [start]
    while len(out) < length:
        out.append(toy_next(out[-1]))
    return out


class ToyContext:
    """A KV cache of tokens; a decode gives logits at every position of the batch, or only at
    its last, as the batch asks."""

    def __init__(self) -> None:
        self.kv: list[int] = []
        self.outputs: set[int] = set()
        self.decoded = 0
        self.ctx = object()

    def kv_cache_seq_rm(self, seq_id: int, p0: int, p1: int) -> bool:
        del self.kv[p0:]
        return True

    def decode(self, batch: ToyBatch) -> None:
        tokens, n_past, logits_all = batch.last
        assert len(self.kv) == n_past, "a batch must continue the cache"
        self.kv.extend(tokens)
        self.decoded += len(tokens)
        positions = range(n_past, n_past + len(tokens))
        self.outputs = set(positions) if logits_all else {positions[-1]}


class ToyBatch:
    def __init__(self) -> None:
        self.calls: list[tuple[int, bool]] = []
        self.last: tuple[list[int], int, bool] = ([], 0, False)

    def set_batch(self, batch: list[int], n_past: int, logits_all: bool) -> None:
        self.last = (list(batch), n_past, logits_all)
        self.calls.append((len(batch), logits_all))


class ToyLlamaBase:
    """The attributes and methods ``llama_cpp.Llama.generate`` uses, over the toy model."""

    generate = llama_cpp.Llama.generate  # upstream's decoding loop, unchanged

    def __init__(self, n_batch: int = 16, n_ctx: int = 512, **_: Any) -> None:
        self.n_batch = n_batch
        self._n_ctx = n_ctx
        self.n_tokens = 0
        self.input_ids = np.zeros(n_ctx, dtype=np.intc)
        self._ctx = ToyContext()
        self._batch = ToyBatch()
        self._logits_all = False
        self._requires_eval = True
        self.draft_model = None
        self.verbose = False

    @property
    def _input_ids(self) -> np.ndarray:
        return self.input_ids[: self.n_tokens]

    def reset(self) -> None:
        self.n_tokens = 0
        self._requires_eval = True

    def _init_sampler(self, **_: Any) -> None:
        return None

    def eval(self, tokens: list[int]) -> None:  # upstream's eval, minus the logits copy
        self._ctx.kv_cache_seq_rm(-1, self.n_tokens, -1)
        for start in range(0, len(tokens), self.n_batch):
            batch = list(tokens[start : start + self.n_batch])
            self._batch.set_batch(batch=batch, n_past=self.n_tokens, logits_all=self._logits_all)
            self._ctx.decode(self._batch)
            self.input_ids[self.n_tokens : self.n_tokens + len(batch)] = batch
            self.n_tokens += len(batch)
            self._requires_eval = False

    def sample(self, idx: int, **_: Any) -> int:
        if idx not in self._ctx.outputs:
            raise RuntimeError(f"no logits at position {idx}")  # llama.cpp aborts here
        return toy_next(self._ctx.kv[idx])


class ToyLlama(llama_class(ToyLlamaBase)):  # type: ignore[misc]
    """The engine's model class over the toy base; its state is the toy KV cache."""

    def _save_state(self) -> tuple[Any, int] | None:
        return (list(self._ctx.kv), set(self._ctx.outputs)), 100 * len(self._ctx.kv)

    def _load_state(self, buffer: Any, nbytes: int) -> None:
        self._ctx.kv, self._ctx.outputs = list(buffer[0]), set(buffer[1])


def run(
    llama: ToyLlama,
    prompt: list[int],
    *,
    new_tokens: int = 12,
    lookup: int = 0,
    keep: bool = False,
    cache_bytes: int = 10**6,
) -> tuple[list[int], CallStats]:
    """One completion as the engine makes it: settings, then upstream's loop until
    ``new_tokens`` came out."""
    llama.begin_call(lookup_tokens=lookup, keep_prompt=keep, prompt_cache_bytes=cache_bytes)
    out: list[int] = []
    generator = llama.generate(prompt, temp=0.0)
    for token in generator:
        out.append(int(token))
        if len(out) == new_tokens:
            break
    generator.close()
    return out, llama.call_stats


# --------------------------------------------------------------------------- snapshots


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix(np.array([5, 6], dtype=np.intc), [5, 6]) == 2


def test_prompt_states_keep_the_best_prefix_and_drop_the_oldest() -> None:
    states = PromptStates(capacity_bytes=250)
    assert states.add([1, 2, 3], "a", 100) and states.add([1, 2, 9, 9], "b", 100)
    state, shared = states.best([1, 2, 9, 9, 7])
    assert state is not None and state.state == "b" and shared == 4
    assert states.holds([1, 2, 3]) and not states.holds([1, 2])
    states.best([1, 2, 3])  # a use makes "a" the most recent
    states.add([4], "c", 100)  # 300 bytes > 250: the least recently used ("b") goes
    assert states.holds([1, 2, 3]) and states.holds([4]) and not states.holds([1, 2, 9, 9])
    assert not states.add([5], "d", 251)  # larger than the whole budget
    assert states.best([8]) == (None, 0)
    states.capacity_bytes = 100
    states.shrink()
    assert len(states) == 1 and states.nbytes == 100


def test_consecutive_samples_of_a_prompt_evaluate_it_once() -> None:
    llama = ToyLlama()
    prompt = list(range(1, 41))
    first, stats = run(llama, prompt)
    assert stats.prompt_eval_tokens == 40
    for _ in range(3):
        again, stats = run(llama, prompt, keep=True)
        # llama.cpp keeps the prompt's KV cache; only its last token is replayed for logits.
        assert again == first and stats.prompt_eval_tokens == 1 and stats.restored_tokens == 0


def test_a_call_in_between_does_not_make_samples_evaluate_the_prompt_again() -> None:
    llama = ToyLlama()
    prompt, other = list(range(1, 41)), list(range(41, 61))
    greedy, _ = run(llama, prompt)
    sample, stats = run(llama, prompt, keep=True)  # the first sample keeps a snapshot
    assert stats.prompt_eval_tokens == 1 and len(llama.prompt_states) == 1
    _, stats = run(llama, other)  # another question's call takes the KV cache
    assert stats.prompt_eval_tokens == 20
    again, stats = run(llama, prompt, keep=True)
    assert stats.restored_tokens == 40 and stats.prompt_eval_tokens == 1
    assert again == sample == greedy
    assert len(llama.prompt_states) == 1  # the same prompt is not kept twice


def test_without_a_snapshot_budget_the_prompt_is_evaluated_again() -> None:
    llama = ToyLlama()
    prompt, other = list(range(1, 41)), list(range(41, 61))
    run(llama, prompt, keep=True, cache_bytes=0)
    run(llama, other)
    _, stats = run(llama, prompt, keep=True, cache_bytes=0)
    assert stats.prompt_eval_tokens == 40 and stats.restored_tokens == 0
    assert len(llama.prompt_states) == 0


def test_greedy_calls_keep_no_snapshot_but_use_a_shared_prefix() -> None:
    llama = ToyLlama()
    schema = list(range(1, 61))
    run(llama, schema + [61, 62], keep=True)  # a sample of question 1 keeps its prompt
    run(llama, list(range(100, 120)))  # something else in between
    assert len(llama.prompt_states) == 1
    _, stats = run(llama, schema + [63, 62])  # greedy question 2 on the same schema
    assert stats.restored_tokens == 60 and stats.prompt_eval_tokens == 2
    assert len(llama.prompt_states) == 1


def test_a_short_shared_prefix_is_not_worth_a_restore() -> None:
    llama = ToyLlama()
    run(llama, list(range(1, 41)), keep=True)
    run(llama, list(range(1, 31)) + [99])  # shares 30 tokens live
    _, stats = run(llama, list(range(1, 41)) + [7])  # the snapshot adds 10 (< 16) more
    assert stats.restored_tokens == 0 and stats.prompt_eval_tokens == 11


# --------------------------------------------------------------------------- prompt lookup


@pytest.mark.parametrize("lookup", [1, 4, 10])
def test_prompt_lookup_keeps_greedy_output_and_saves_decode_steps(lookup: int) -> None:
    # The prompt holds the very path the model will take, so drafts are mostly accepted.
    prompt = chain(5, 30)
    plain, plain_stats = run(ToyLlama(), prompt, new_tokens=20)
    llama = ToyLlama()
    drafted, stats = run(llama, prompt, new_tokens=20, lookup=lookup)
    assert drafted == plain
    assert stats.draft_tokens > 0 and stats.decode_steps < plain_stats.decode_steps
    # The prompt (longer than n_batch) was evaluated with the last position's logits only;
    # every batch that carried a draft asked for logits at all its positions.
    prompt_batches = llama._batch.calls[: -stats.decode_steps]
    assert sum(size for size, _ in prompt_batches) == 30
    assert not any(all_logits for _, all_logits in prompt_batches)
    decode_batches = llama._batch.calls[-stats.decode_steps :]
    assert all(all_logits for size, all_logits in decode_batches if size > 1)


def test_prompt_lookup_with_rejected_drafts_keeps_greedy_output() -> None:
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(0, VOCAB, 80)]  # bigrams with the wrong sequels
    for start in range(3):
        case = prompt + [start]
        plain, _ = run(ToyLlama(), case, new_tokens=25)
        drafted, stats = run(ToyLlama(), case, new_tokens=25, lookup=5)
        assert drafted == plain
        assert stats.draft_tokens > 0


def test_prompt_lookup_and_snapshots_together() -> None:
    llama = ToyLlama()
    prompt, other = chain(9, 40), list(range(41, 61))
    greedy, _ = run(llama, prompt, lookup=6)
    run(llama, prompt, lookup=6, keep=True)
    run(llama, other, lookup=6)
    again, stats = run(llama, prompt, lookup=6, keep=True)
    assert again == greedy and stats.restored_tokens == 40 and stats.prompt_eval_tokens == 1


def test_begin_call_sets_the_drafter_per_call() -> None:
    llama = ToyLlama()
    llama.begin_call(lookup_tokens=7, keep_prompt=False, prompt_cache_bytes=0)
    assert isinstance(llama.draft_model, llama_cpp.llama_speculative.LlamaPromptLookupDecoding)
    assert llama.draft_model.num_pred_tokens == 7
    llama.begin_call(lookup_tokens=0, keep_prompt=False, prompt_cache_bytes=0)
    assert llama.draft_model is None


# --------------------------------------------------------------------------- engine options


class RecordingLlama:
    """Stands in for the loaded model: records each call's settings and messages."""

    def __init__(self) -> None:
        self.begins: list[dict[str, Any]] = []
        self.messages: list[list[dict[str, str]]] = []
        self.call_stats = CallStats(prompt_eval_tokens=3, eval_tokens=2)

    def begin_call(self, **settings: Any) -> None:
        self.begins.append(settings)

    def create_chat_completion(self, messages: list[dict[str, str]], **_: Any) -> dict[str, Any]:
        self.messages.append(messages)
        return {
            "id": "x",
            "choices": [{"message": {"content": "SELECT 1"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2},
        }


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[str, RecordingLlama]:
    fake = RecordingLlama()
    spec = stand_in_llama(monkeypatch, tmp_path, fake)
    monkeypatch.delenv(LOOKUP_ENV, raising=False)
    return spec, fake


def _request(spec: str, temperature: float = 0.0) -> Request:
    return Request(
        model=spec,
        messages=(Message.user("How many singers?"),),
        config=Config(temperature=temperature, max_tokens=8),
    )


def test_engine_passes_lookup_and_keeps_sampled_prompts(recording) -> None:
    spec, fake = recording
    engine = LlamaCppEngine(spec, prompt_lookup=6, prompt_cache_bytes=1000)
    response = engine.complete(_request(spec))
    engine.complete(_request(spec, temperature=0.7))
    assert fake.begins == [
        {"lookup_tokens": 6, "keep_prompt": False, "prompt_cache_bytes": 1000},
        {"lookup_tokens": 6, "keep_prompt": True, "prompt_cache_bytes": 1000},
    ]
    data = response.provider_data or {}
    assert data["prompt_lookup"] == 6 and data["prompt_eval_tokens"] == 3
    assert response.usage.cache_read_tokens == 4  # 7 prompt tokens, 3 evaluated


def test_lookup_default_comes_from_the_environment(recording, monkeypatch) -> None:
    spec, fake = recording
    assert default_prompt_lookup() == 0 and LlamaCppEngine(spec).lookup_tokens == 0
    monkeypatch.setenv(LOOKUP_ENV, "4")
    engine = LlamaCppEngine(spec)
    assert default_prompt_lookup() == 4 and engine.lookup_tokens == 4
    assert LlamaCppEngine(spec, prompt_lookup=0).lookup_tokens == 0  # an explicit 0 wins
    assert LlamaCppEngine(spec, n_batch=3).lookup_tokens == 2  # one batch verifies a draft
    engine.complete(_request(spec))
    assert fake.begins[-1]["lookup_tokens"] == 4
    for bad in ("-1", "many"):
        monkeypatch.setenv(LOOKUP_ENV, bad)
        with pytest.raises(LMSpecError, match=LOOKUP_ENV):
            default_prompt_lookup()


@pytest.mark.parametrize(
    "options",
    [{"prompt_lookup": -1}, {"prompt_lookup": True}, {"prompt_cache_bytes": -5}],
)
def test_bad_engine_options(options: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(LMSpecError):
        LlamaCppEngine(f"gguf:{tmp_path / 'm.gguf'}", **options)


def test_build_lm_and_state_carry_the_decoding_options(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    lm = build_lm(f"gguf:{gguf}", prompt_lookup=8, prompt_cache_bytes=0)
    assert lm.engine.lookup_tokens == 8 and lm.engine.prompt_cache_bytes == 0
    state = lm.engine.dump_state()
    assert state["prompt_lookup"] == 8 and state["prompt_cache_bytes"] == 0
    assert LlamaCppEngine.load_state(state).dump_state() == state
    default = build_lm(f"gguf:{gguf}").engine
    assert default.prompt_lookup is None
    assert default.prompt_cache_bytes == sqlweave_lm.DEFAULT_PROMPT_CACHE_BYTES


def test_n_samples_through_dspy_keep_their_prompt(recording) -> None:
    spec, fake = recording
    lm = dspy.LM(spec, engine=LlamaCppEngine(spec), cache=False, num_retries=0)
    outputs = lm("How many singers?", n=3, temperature=0.8)
    assert len(outputs) == 3
    assert [b["keep_prompt"] for b in fake.begins] == [True, True, True]
    assert len({repr(m) for m in fake.messages}) == 1  # one prompt, three continuations


@pytest.mark.parametrize("wrapped", [True, False])
def test_self_consistency_samples_share_one_prompt(recording, demo_concert_db, wrapped) -> None:
    from sqlweave.adapter import SQLAdapter
    from sqlweave.programs.direct import DirectSQL
    from sqlweave.programs.stages.sampling import SelfConsistency

    spec, fake = recording
    lm = dspy.LM(spec, engine=LlamaCppEngine(spec), cache=False, num_retries=0)
    program = (
        SelfConsistency(DirectSQL(), n=4, temperature=0.7)
        if wrapped
        else DirectSQL(samples=4, temperature=0.7)
    )
    with dspy.context(lm=lm, adapter=SQLAdapter(prefill=False)):
        pred = program(db=demo_concert_db, question="How many singers are there?")
    # direct's vote settles once two equal answers of four can no longer be outvoted (a tie
    # would go to the greedy one); SelfConsistency draws all four.
    calls = 4 if wrapped else 2
    assert pred.sql == "SELECT 1" and len(fake.messages) == calls
    assert len({repr(m) for m in fake.messages}) == 1
    # The greedy candidate runs as direct does; the samples keep the prompt they share.
    assert [b["keep_prompt"] for b in fake.begins] == [False] + [True] * (calls - 1)


def test_loaded_model_is_the_decoding_class(monkeypatch, tmp_path: Path) -> None:
    class Llama:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

    spec = fake_llama_cpp(monkeypatch, tmp_path, Llama)
    llama = LlamaCppEngine(spec, n_ctx=512)._loaded().llama
    assert isinstance(llama, Llama) and isinstance(llama, DecodingLlama)
    assert llama.kwargs["n_ctx"] == 512 and len(llama.prompt_states) == 0


def test_cli_passes_prompt_lookup_to_local_models_only(monkeypatch) -> None:
    import typer

    from sqlweave import cli

    seen: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(sqlweave_lm, "configure", lambda model, **o: seen.append((model, o)))
    cli._configure_lm("local:qwen2.5-coder-0.5b", None, prompt_lookup=10)
    cli._configure_lm("openai/x", "http://127.0.0.1:9/v1", prompt_lookup=10)
    cli._configure_lm("local:qwen2.5-coder-0.5b", None)
    assert seen == [
        ("local:qwen2.5-coder-0.5b", {"prompt_lookup": 10}),
        ("openai/x", {"api_base": "http://127.0.0.1:9/v1"}),
        ("local:qwen2.5-coder-0.5b", {}),
    ]
    with pytest.raises(typer.Exit) as caught:
        cli._configure_lm("local:qwen2.5-coder-0.5b", None, prompt_lookup=-2)
    assert caught.value.exit_code == 2


# --------------------------------------------------------------------------- real model


QUESTIONS = (
    "How many singers are there?",
    "List the names of singers older than 30, oldest first.",
    "What is the name and capacity of the stadium with the most concerts?",
)


def _sql_request(spec: str, schema: str, question: str, temperature: float = 0.0) -> Request:
    return Request(
        model=spec,
        messages=(
            Message.user(f"{schema}\n\n-- Using valid SQLite, answer: {question}"),
            Message.assistant("SELECT"),
        ),
        config=Config(temperature=temperature, max_tokens=64),
    )


@pytest.mark.lm
def test_small_model_prompt_lookup_keeps_greedy_output(demo_concert_db: Path) -> None:
    _need_llama_cpp()
    schema = _ddl(demo_concert_db)
    plain = LlamaCppEngine(sqlweave_lm.SMALL_MODEL, prompt_lookup=0)
    lookup = LlamaCppEngine(sqlweave_lm.SMALL_MODEL, prompt_lookup=10)
    drafted = 0
    llama = plain._loaded().llama  # one model for both engines
    for question in QUESTIONS:
        # Each call from an empty KV cache, so both evaluate the prompt alike and only the
        # drafts differ (a replayed last token may round differently from a batched one).
        llama.reset()
        expected = plain.complete(_sql_request(plain.spec, schema, question))
        llama.reset()
        got = lookup.complete(_sql_request(lookup.spec, schema, question))
        assert got.text == expected.text, question
        drafted += (got.provider_data or {})["draft_tokens"]
    assert drafted > 0  # SQL copies names from the schema: the drafter had something to offer


@pytest.mark.lm
def test_small_model_samples_evaluate_the_prompt_once(demo_concert_db: Path) -> None:
    _need_llama_cpp()
    schema = _ddl(demo_concert_db)
    engine = LlamaCppEngine(sqlweave_lm.SMALL_MODEL)
    # The model is shared process-wide: another test may have left this very prompt in its KV
    # cache, so start from an empty one (the first call must evaluate the whole prompt).
    llama = engine._loaded().llama
    llama.reset()
    llama.prompt_states.clear()  # and no snapshot of it from an earlier sampled call
    first = engine.complete(_sql_request(engine.spec, schema, QUESTIONS[0], temperature=0.8))
    prompt_tokens = first.usage.input_tokens
    assert (first.provider_data or {})["prompt_eval_tokens"] > 100
    for i in range(3):
        if i == 1:  # another question on other text in between takes the KV cache
            engine.complete(
                Request(
                    model=engine.spec,
                    messages=(Message.user("Name a colour."),),
                    config=Config(max_tokens=4),
                )
            )
        sample = engine.complete(
            _sql_request(engine.spec, schema, QUESTIONS[0], temperature=0.8)
        ).provider_data
        assert sample is not None and sample["prompt_eval_tokens"] <= 1, sample
        if i == 1:  # brought back from the snapshot the first sample kept
            assert sample["restored_tokens"] == prompt_tokens, sample


@pytest.mark.lm
def test_small_model_self_consistency_greedy_candidate_is_direct(demo_concert_db: Path) -> None:
    _need_llama_cpp()
    from sqlweave.programs.direct import DirectSQL
    from sqlweave.programs.stages.sampling import SelfConsistency

    lm = build_lm(sqlweave_lm.SMALL_MODEL, max_tokens=128, cache=False)
    with dspy.context(lm=lm):
        direct = DirectSQL()(db=demo_concert_db, question=QUESTIONS[1]).sql
        wrapped = SelfConsistency(DirectSQL(), n=3, temperature=0.8)(
            db=demo_concert_db, question=QUESTIONS[1]
        )
        sampled = DirectSQL(samples=3, temperature=0.8)(db=demo_concert_db, question=QUESTIONS[1])
    assert wrapped.candidates[0] == direct and sampled.candidates[0] == direct
