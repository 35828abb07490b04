"""Default demonstration pools: train examples only, loaded once per process.

Retrieval-based programs (PET, MageSQL, Dubo v2, RSL) need a pool of solved train questions. Dev
or test examples must never enter it, so the only way to get a default pool is from a ``train``
split. BIRD ships no train set with sqlweave, so BIRD questions borrow the Spider train pool unless
the caller passes its own (``pool=`` on each program).
"""

from __future__ import annotations

import functools
import logging
import threading
from pathlib import Path
from typing import Any

import dspy

from sqlweave.caches import CACHE

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=8)
def _load(source: str, root: str | None) -> tuple[dspy.Example, ...]:
    from sqlweave.data import demo_pool_exclusions, load_bird, load_spider

    loader = load_bird if source == "bird" else load_spider
    held_out = demo_pool_exclusions()
    examples = [ex for ex in loader(split="train", root=root) if ex.db_id not in held_out]
    logger.info(
        "demo pool: %d %s train examples (%d validation databases held out)",
        len(examples),
        source,
        len(held_out),
    )
    return tuple(examples)


def default_pool(source: str = "spider", root: str | Path | None = None) -> list[dspy.Example]:
    """The train examples of ``source`` (``spider`` or ``bird``) from the resolved data root.

    The databases of the ``spider-train-val`` slice are left out, so a choice validated on that
    slice was made on databases the demos never saw, as dev's are.

    Falls back to the Spider train pool when no BIRD train set is available.
    """
    if source not in ("spider", "bird"):
        raise ValueError(f"unknown pool source {source!r}; choose spider or bird")
    from sqlweave.data import DataError

    try:
        return list(_load(source, str(root) if root else None))
    except DataError as err:
        if source == "bird":
            logger.warning("no BIRD train pool (%s); using the Spider train pool", err)
            return list(_load("spider", None))
        raise


_RETRIEVERS: dict[tuple[Any, ...], Any] = {}
_RETRIEVERS_LOCK = threading.Lock()


def default_retriever(name: str, source: str = "spider", **options: Any) -> Any:
    """A :func:`~sqlweave.programs.stages.retrieval.make_retriever` retriever over :func:`default_pool`,
    built once per process for each (name, source, options).

    Programs that were given no pool of their own share it, so every configuration of an
    experiment (and every program using the same strategy) pays for masking, parsing and the
    pool's embedding matrix once.
    """
    from sqlweave.programs.stages.retrieval import make_retriever

    key = (name, source, tuple(sorted(options.items())))
    with _RETRIEVERS_LOCK:
        if key not in _RETRIEVERS:
            _RETRIEVERS[key] = make_retriever(name, default_pool(source), **options)
        return _RETRIEVERS[key]


@CACHE.register
def clear() -> None:
    """Forget the loaded pools and their retrievers (part of ``CACHE.clear()``)."""
    _load.cache_clear()
    with _RETRIEVERS_LOCK:
        _RETRIEVERS.clear()
