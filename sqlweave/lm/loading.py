"""Loaded models: one ``Llama`` per model file and context settings, shared by every engine.

A lock serialises calls on a loaded model because DSPy evaluates with threads and a llama.cpp
context is single-threaded state. Models are freed at interpreter exit while llama_cpp's
bindings still exist (:func:`close_open_models`).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlweave.lm.decoding import llama_class

logger = logging.getLogger(__name__)


@dataclass
class Loaded:
    """A loaded model, the lock its calls take, and the key it was loaded under."""

    llama: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    key: tuple[Any, ...] = ()


_LOADED: dict[tuple[Any, ...], Loaded] = {}
_LOADED_LOCK = threading.Lock()
_OPEN_MODELS: weakref.WeakSet[Any] = weakref.WeakSet()
"""Every model :func:`load_llama` built that is still alive, unloaded or not (an engine or a
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


def load_llama(
    path: Path,
    *,
    n_ctx: int,
    n_batch: int,
    n_threads: int,
    ram_cache_bytes: int,
    n_seq_max: int = 1,
) -> Loaded:
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
            llama = llama_class(Llama)(
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
            loaded = Loaded(llama, key=key)
            _LOADED[key] = loaded
    return loaded


def unload_all() -> None:
    """Forget every loaded model (frees memory once no engine holds a reference)."""
    with _LOADED_LOCK:
        _LOADED.clear()
