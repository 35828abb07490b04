"""LM runtime: an offline local default, any served model, and per-call accounting.

One module per job, each importing only those below it:

- :mod:`~sqlweave.lm.spec`       model spec strings (``local:NAME``, ``gguf:PATH``, LiteLLM) and
                                 the local settings read from the environment;
- :mod:`~sqlweave.lm.snapshots`  KV snapshots of sampled prompts;
- :mod:`~sqlweave.lm.sequences`  a completion as the decoding loop builds it, and its cost;
- :mod:`~sqlweave.lm.batching`   the batch loop: k samples of one prompt decoded together;
- :mod:`~sqlweave.lm.decoding`   llama-cpp-python's decoding loop with snapshots, prompt-lookup
                                 decoding and batched samples hooked in;
- :mod:`~sqlweave.lm.loading`    one loaded model per file and settings, shared and locked;
- :mod:`~sqlweave.lm.chat`       DSPy requests as llama.cpp chat calls, prefilled answers;
- :mod:`~sqlweave.lm.batch`      sample batches and their early-stop contract (:class:`EarlyStop`);
- :mod:`~sqlweave.lm.engine`     the DSPy engine (:class:`LlamaCppEngine`);
- :mod:`~sqlweave.lm.build`      :func:`build_lm` and :func:`configure`;
- :mod:`~sqlweave.lm.usage`      :func:`track_usage`.

Model specs are strings so that a compiled artefact can record which LM it was compiled with and
rebuild it later (``build_lm(spec_of(lm))``). Local models run in-process through
llama-cpp-python as a DSPy 3.4 custom engine, so DSPy keeps owning its cache, retries, ``n``
fan-out, history and callbacks. Everything a caller needs is importable from here.
"""

from __future__ import annotations

from sqlweave.lm.batch import (
    CandidateJudge,
    EarlyStop,
    SampleBatch,
    batched_samples,
    kept_prompts,
)
from sqlweave.lm.build import build_lm, configure
from sqlweave.lm.chat import request_to_messages
from sqlweave.lm.engine import AsyncLlamaCppEngine, LlamaCppEngine, is_local
from sqlweave.lm.loading import close_open_models, unload_all
from sqlweave.lm.sequences import DEFAULT_N_SEQ_MAX, CallStats
from sqlweave.lm.snapshots import (
    DEFAULT_PROMPT_CACHE_BYTES,
    RESTORE_MIN_GAIN,
    PromptState,
    PromptStates,
    common_prefix,
)
from sqlweave.lm.spec import (
    DEFAULT_MODEL,
    DEFAULT_N_CTX,
    LOOKUP_ENV,
    SMALL_MODEL,
    THREADS_ENV,
    LMSpec,
    LMSpecError,
    SpecKind,
    default_prompt_lookup,
    default_threads,
    spec_of,
)
from sqlweave.lm.usage import CallRecord, Usage, track_usage

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_N_CTX",
    "DEFAULT_N_SEQ_MAX",
    "DEFAULT_PROMPT_CACHE_BYTES",
    "LOOKUP_ENV",
    "RESTORE_MIN_GAIN",
    "SMALL_MODEL",
    "THREADS_ENV",
    "AsyncLlamaCppEngine",
    "CallRecord",
    "CallStats",
    "CandidateJudge",
    "EarlyStop",
    "LMSpec",
    "LMSpecError",
    "LlamaCppEngine",
    "PromptState",
    "PromptStates",
    "SampleBatch",
    "SpecKind",
    "Usage",
    "batched_samples",
    "build_lm",
    "close_open_models",
    "common_prefix",
    "configure",
    "default_prompt_lookup",
    "default_threads",
    "is_local",
    "kept_prompts",
    "request_to_messages",
    "spec_of",
    "track_usage",
    "unload_all",
]
