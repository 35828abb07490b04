"""Building LMs from specs: the local engine for ``local:``/``gguf:`` specs, ``dspy.LM`` for the
rest, and making one DSPy's default."""

from __future__ import annotations

import contextlib
import io
import logging
import os
from typing import Any
from urllib.parse import urlsplit

import dspy

from sqlweave.lm.engine import AsyncLlamaCppEngine, LlamaCppEngine
from sqlweave.lm.spec import DEFAULT_MODEL, LMSpec, LMSpecError

logger = logging.getLogger(__name__)


def _timeout_out_of_cache_keys() -> None:
    """How long a call may wait is no part of its answer: DSPy keys its response cache on every
    LM option but the key and the address, so a ``timeout`` (which served models get, below)
    would re-ask every cached question, paid calls included, whenever it changes."""
    try:
        from dspy.clients import execution
    except ImportError:  # another DSPy release: its keys are its own
        return
    ignored = getattr(execution, "IGNORED_CACHE_KEYS", None)
    if isinstance(ignored, list) and "timeout" not in ignored:
        ignored.append("timeout")


_timeout_out_of_cache_keys()

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
        check_served(str(parsed), options.get("api_base") or options.get("base_url"))
        # A self-hosted OpenAI-compatible server (vLLM, llama.cpp) usually needs no key, but
        # LiteLLM refuses to call one without: every question would be a recorded failure.
        if (
            str(parsed).startswith("openai/")
            and options.get("api_base")
            and "api_key" not in options
            and not os.environ.get("OPENAI_API_KEY")
        ):
            options["api_key"] = "sk-no-key"
        # DSPy's client waits 600 s for a reply and retries a read timeout: a server that hangs
        # held each question about 40 minutes before the run could stop
        options.setdefault("timeout", served_timeout())
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


#: Seconds a served model may take to answer one call (``$SQLWEAVE_LM_TIMEOUT``, read at call
#: time): a 1,024-token reply of a small model on a CPU server fits, a hung server does not.
DEFAULT_SERVED_TIMEOUT_S = 180.0
TIMEOUT_ENV = "SQLWEAVE_LM_TIMEOUT"


def served_timeout() -> float:
    """``$SQLWEAVE_LM_TIMEOUT`` seconds, else :data:`DEFAULT_SERVED_TIMEOUT_S` (``timeout=``
    given to :func:`build_lm` wins)."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_SERVED_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise LMSpecError(f"{TIMEOUT_ENV} must be a positive number of seconds, not {raw!r}")
    return value


def check_served(model: str, api_base: Any = None) -> None:
    """Refuse, before any question is asked, a served model no call can reach: an ``api_base``
    that is no http(s) address (``localhost:8000/v1``), a model string neither DSPy's own
    engine nor LiteLLM (which DSPy falls back to) can route (``foo``, ``nosuch/x``). Each
    would otherwise fail every question alike, recorded as that question's error. What DSPy's
    router resolves (``openai/<model>`` for any OpenAI-compatible server, ``ollama:llama3``,
    ``claude-3-haiku-20240307``) is taken without importing LiteLLM."""
    if api_base is not None:
        parts = urlsplit(str(api_base))
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise LMSpecError(
                f"api_base {api_base!r} is no http:// or https:// address "
                "(e.g. http://localhost:8000/v1)"
            )
    if _routed_by_dspy(model):
        return
    try:
        import litellm
    except ImportError:  # DSPy's own engine decides at the first call
        return
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # LiteLLM prints its provider list
            litellm.get_llm_provider(model, api_base=api_base)
    except Exception as err:  # noqa: BLE001 - LiteLLM's BadRequestError: no provider it knows
        raise LMSpecError(
            f"model {model!r} names no provider DSPy or LiteLLM knows "
            f"({str(err).splitlines()[0]}); write provider/model, e.g. openai/<model> with "
            "--api-base for a served model"
        ) from None


def _routed_by_dspy(model: str) -> bool:
    """Whether DSPy's own engine resolves ``model`` (its router, as DSPy's backend selection
    asks it, without I/O); False where it does not, or where this DSPy has no such router."""
    if model.startswith("openai/"):
        return True
    try:
        from dspy.clients.backend_selection import LM15Engine, RouterConfig
    except ImportError:
        return False
    try:
        LM15Engine(RouterConfig(env={})).resolve(model)
    except Exception:  # noqa: BLE001 - UnknownModelError and kin: LiteLLM decides
        return False
    return True


def configure(model: str = DEFAULT_MODEL, *, set_default: bool = True, **options: Any) -> dspy.LM:
    """Build the LM for ``model`` and, unless ``set_default=False``, make it DSPy's default LM."""
    lm = build_lm(model, **options)
    if set_default:
        dspy.configure(lm=lm)
    logger.info("configured LM %s", model)
    return lm
