"""The DSPy engine for local models: one chat completion at a time on a shared loaded model.

Local models run in-process through llama-cpp-python, plugged into DSPy 3.4 as a canonical
custom engine (``complete(Request) -> Response``), so DSPy keeps owning its cache, retries, ``n``
fan-out, history and callbacks. Calls on one loaded model reuse the KV cache for the longest
common token prefix with the previous call, which is what makes many questions over one
schema-heavy prompt cheap. Inside a :func:`~sqlweave.lm.batch.batched_samples` block, a sampled
call may decode the block's samples beside its own answer and later calls take them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dspy.lm15 import Message, Request, Response, TextPart, response_to_events
from dspy.lm15 import Usage as TokenUsage
from dspy.utils.exceptions import LMConfigurationError

from sqlweave import models
from sqlweave.lm import loading
from sqlweave.lm.batch import EarlyStop, SampleBatch, current_batch, prompts_kept
from sqlweave.lm.chat import (
    answer_content,
    continue_assistant,
    prefill_of,
    request_to_messages,
    sampling_options,
)
from sqlweave.lm.sequences import DEFAULT_N_SEQ_MAX, CallStats, SeqResult
from sqlweave.lm.snapshots import DEFAULT_PROMPT_CACHE_BYTES
from sqlweave.lm.spec import (
    DEFAULT_N_CTX,
    LMSpec,
    LMSpecError,
    check_lookup,
    default_prompt_lookup,
    default_threads,
)


def _perf(llama: Any) -> dict[str, float]:
    """Prompt/decode counters of the last call: the model's own :class:`CallStats` when it was
    built by :func:`~sqlweave.lm.loading.load_llama`, else llama.cpp's counters (reset before each call)."""
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


class LlamaCppEngine:
    """DSPy 3.4 custom engine running a GGUF model in-process with llama-cpp-python.

    Stateless apart from its settings: the model is resolved (and fetched) and loaded lazily on
    the first call, so a saved program can be loaded on a machine without weights until it is
    actually run. ``dump_state``/``load_state`` make an LM built on it savable with
    ``allow_unsafe_lm_state``-gated loading, as DSPy does for every custom engine.
    """

    # A saved LM names its engine class by module and name: keep the public path that programs
    # compiled before the engine moved into this package recorded (``sqlweave.lm:LlamaCppEngine``).
    __module__ = "sqlweave.lm"

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
            check_lookup(prompt_lookup, "prompt_lookup")
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
                if path.is_dir():
                    raise models.ModelNotAvailableError(f"{path} is a folder, not a GGUF file")
                if not path.is_file():
                    raise models.ModelNotAvailableError(f"GGUF file not found: {path}")
                _check_gguf(path)
                self._path = path
        return self._path

    def _loaded(self) -> loading.Loaded:
        path = self.model_path()
        try:
            return loading.load_llama(
                path,
                n_ctx=self.n_ctx,
                n_batch=self.n_batch,
                n_threads=self.threads,
                ram_cache_bytes=self.ram_cache_bytes,
                n_seq_max=self.n_seq_max,
            )
        except ValueError as err:  # llama.cpp's "Failed to load model from file"
            # no question can get past it: a configuration error ends the run (failures.py)
            raise LMConfigurationError(f"cannot load {path}: {err}") from err

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
        options = sampling_options(request)
        lookup = self.lookup_tokens
        loaded = self._loaded()
        batch = current_batch()
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
        raw, extra, seconds, perf, prefill = self._decode(
            loaded, messages, options, lookup, batch if batched else None, hosting
        )
        if batched and perf.get("batch_cancelled"):
            batch.gave_up(int(perf["batch_cancelled"]))  # type: ignore[union-attr]
        if extra:
            prompt_tokens = int((raw.get("usage") or {}).get("prompt_tokens", 0))
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
        return self._response(raw, seconds, lookup, perf)

    def _decode(
        self,
        loaded: loading.Loaded,
        messages: list[dict[str, str]],
        options: dict[str, Any],
        lookup: int,
        batch: SampleBatch | None,
        hosting: bool,
    ) -> tuple[dict[str, Any], list[SeqResult], float, dict[str, Any], str | None]:
        """The completion itself, holding the model's lock: ``(raw, extra samples, seconds,
        counters, prefill)``. ``batch`` is the block this call decodes samples for (None: it
        decodes its own answer alone); ``hosting`` when the call is greedy and the samples
        ride along beside it."""
        extra: list[SeqResult] = []
        with loaded.lock:
            started = time.perf_counter()
            _reset_perf(loaded.llama)
            begin = getattr(loaded.llama, "begin_call", None)
            if begin is not None:  # a model built by load_llama (test doubles may lack it)
                # A sampled call is usually one of several on this prompt (self-consistency,
                # n > 1): keep its evaluated prompt so the next sample restores it. So is a
                # greedy call hosting a batch of samples; and a program that alternates prompts
                # (several generators per question) finds the schema prefix of each there for
                # the next question, where the live KV cache holds only the last prompt. A
                # cascade's greedy call is followed by its samples later (kept_prompts).
                begin(
                    lookup_tokens=lookup,
                    keep_prompt=options["temperature"] > 0
                    or (batch is not None and hosting)
                    or prompts_kept(),
                    prompt_cache_bytes=self.prompt_cache_bytes,
                )
            prefill = prefill_of(messages)
            settle = _settle_on(batch.early_stop, prefill) if batch is not None else None
            if batch is not None:
                # Seeded from the rollout that opens the batch: after cache hits it is a later
                # rollout, whose samples must not repeat the seeds of the ones before it. A call
                # with its own seed already carries its rollout's (sample_lm: seed + i).
                offset = 0 if "seed" in options else batch.rollout
                k = batch.k + 1 if hosting else batch.k
                loaded.llama.arm_batch(
                    k,
                    sample_temperature=batch.temperature if hosting else None,
                    settle=settle,
                    seed_offset=offset,
                )
            try:
                if prefill is not None:
                    raw = continue_assistant(loaded.llama, messages, dict(options))
                else:
                    raw = loaded.llama.create_chat_completion(messages=messages, **options)
            finally:
                if batch is not None:
                    extra = loaded.llama.take_batch()
            seconds = time.perf_counter() - started
            perf = _perf(loaded.llama)
        return raw, extra, seconds, perf, prefill

    def _response(
        self, raw: dict[str, Any], seconds: float, lookup: int, perf: dict[str, Any]
    ) -> Response:
        """The call's own answer as DSPy's :class:`Response`, with what it cost."""
        choice = raw["choices"][0]
        usage = raw.get("usage") or {}
        prompt_tokens = int(usage.get("prompt_tokens", 0))
        # Tokens not evaluated this call came from the KV cache (previous prompt or RAM cache).
        reused = max(0, prompt_tokens - perf["prompt_eval_tokens"])
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
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
        result: SeqResult,
        seconds: float,
        prompt_tokens: int,
        prefill: str | None,
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
        return Response(
            id=f"{raw.get('id') or 'batch'}-{result.index}",
            model=self.spec,
            message=Message.assistant([TextPart(answer_content(prefill, result.text))]),
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


def _check_gguf(path: Path) -> None:
    """Refuse a file that does not start as a GGUF file does, before any question is asked
    (a text file named ``.gguf``). What llama.cpp still cannot load past that (a truncated
    file) is its load error, which ends the run (:meth:`LlamaCppEngine._loaded`)."""
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except OSError as err:
        raise models.ModelIntegrityError(f"{path} cannot be loaded: {err}") from err
    if magic != b"GGUF":
        raise models.ModelIntegrityError(f"{path} cannot be loaded: it is not a GGUF file")


class AsyncLlamaCppEngine:
    """Async counterpart for ``dspy.asyncify``/``acall``: runs the sync engine in a worker thread."""

    __module__ = "sqlweave.lm"  # as LlamaCppEngine's: the path saved programs record

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


def _settle_on(
    early_stop: EarlyStop | None, prefill: str | None
) -> Callable[[list[bytes | None]], bool] | None:
    """A block's :class:`~sqlweave.lm.batch.EarlyStop` as the loaded model asks it: each
    sequence's text so far becomes what its call would answer with (:func:`answer_content`,
    the same reading the call's own answer and the stashed samples get), and the caller's
    reader and judge take it from there."""
    if early_stop is None:
        return None

    def settle(texts: list[bytes | None]) -> bool:
        return early_stop.settled(
            [None if text is None else answer_content(prefill, text) for text in texts]
        )

    return settle


def is_local(lm: Any) -> bool:
    """Whether ``lm`` runs on the in-process llama.cpp engine."""
    return isinstance(getattr(lm, "engine", None), LlamaCppEngine)
