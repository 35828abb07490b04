"""The demo-source stage: which solved train questions a prompt shows, retrieved per question.

Replaces the private pool/retriever caches each seed kept: the pool and the retriever live in
:data:`sqlweave.caches.CACHE` (or, for the default train pool, in
:mod:`sqlweave.programs.stages.pools`), so every program and every copy of one shares them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import dspy

from sqlweave.caches import CACHE
from sqlweave.programs.stages.pools import default_pool, default_retriever
from sqlweave.programs.stages.retrieval import DemoRetriever, make_retriever


class DemoSource:
    """The demo-source stage: a pool, a retriever over it, and the query for one question.

    ``strategy`` is a :func:`make_retriever` name (or ``"none"``); ``k`` demos are returned, best
    first. Without ``pool`` the default train pool of ``source`` is used
    (:func:`sqlweave.programs.stages.pools.default_retriever`, shared by every program of the process);
    a ``pool`` or a ready ``retriever`` is kept in :data:`sqlweave.caches.CACHE` and this object
    holds only its token, so the copies DSPy optimizers make share it instead of copying a
    7k-example pool and its embedding matrix. ``options`` go to the retriever; an ``encoder`` (a
    model object, for the embedding retrievers) is kept by token the same way. A ``pool`` of the
    caller's own (pairs synthesized for several databases, say) ranks the question's own
    database's items first (the retrievers' ``same_db_first``) unless ``options`` say otherwise
    or exclude that database; the default train pool never holds the question's database at
    evaluation time, so it keeps the plain ranking.

    Not a ``dspy.Module``: it has no LM call and nothing an optimizer could tune; programs hold
    one as a plain attribute and say in their switches how it was built.
    """

    def __init__(
        self,
        strategy: str = "masked_question",
        k: int = 4,
        *,
        source: str = "spider",
        pool: Iterable[Any] | None = None,
        retriever: DemoRetriever | None = None,
        options: Mapping[str, Any] | None = None,
        encoder: Any = None,
    ) -> None:
        if k < 0:
            raise ValueError(f"the number of demos must be >= 0, got {k}")
        self.strategy = strategy
        self.k = k
        self.source = source
        self.options = dict(options or {})
        if pool is not None and not self.options.get("exclude_same_db"):
            self.options.setdefault("same_db_first", True)
        if pool is not None and not isinstance(pool, list):
            pool = list(pool)
        # The list itself is the cache entry: programs given one pool share it and its retriever.
        self._pool = CACHE.put(pool) if pool is not None else None
        self._retriever = CACHE.put(retriever) if retriever is not None else None
        self._encoder = CACHE.put(encoder) if encoder is not None else None

    def _options(self) -> dict[str, Any]:
        if self._encoder is None:
            return self.options
        return {**self.options, "encoder": CACHE.get(self._encoder)}

    @property
    def active(self) -> bool:
        """Whether :meth:`retrieve` can return anything."""
        return self.k > 0 and self.strategy != "none"

    @property
    def is_noop(self) -> bool:
        """The stage capability (:data:`sqlweave.programs.stages.CAPABILITIES`): a source that
        retrieves nothing did not run."""
        return not self.active

    def pool(self) -> list[Any]:
        """The pool demos come from (the default train pool is loaded on first use)."""
        if self._pool is not None:
            return CACHE.get(self._pool)
        return default_pool(self.source)

    def retriever(self) -> DemoRetriever:
        """The retriever, built on first use and shared process-wide."""
        if self._retriever is not None:
            return CACHE.get(self._retriever)
        if self._pool is None:
            return default_retriever(self.strategy, self.source, **self._options())
        key = (self.strategy, self._pool, tuple(sorted(self.options.items())), self._encoder)
        return CACHE.memo(
            "retriever", key, lambda: make_retriever(self.strategy, self.pool(), **self._options())
        )

    def retrieve(
        self, question: str, db: Any, evidence: str = "", draft_sql: str = ""
    ) -> list[dspy.Example]:
        """The ``k`` pool examples nearest this question (and draft), best first."""
        if not self.active:
            return []
        query: dict[str, Any] = {"question": question, "db_id": db.name, "evidence": evidence}
        if draft_sql:
            query["draft_sql"] = draft_sql
        if getattr(db, "path", None):
            query["db_path"] = str(db.path)
        return list(self.retriever().retrieve(query, self.k))


__all__ = ["DemoSource"]
