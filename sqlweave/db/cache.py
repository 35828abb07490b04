"""Successful results kept per database handle, so the same gold query scored many times runs
once; and the queries that ran out of time, so a runaway candidate is not run again in full for
each stage that looks at it (a pool's vote, the confidence, the answer: 150 s on one question)."""

from __future__ import annotations

import threading
from collections import OrderedDict

from sqlweave.db.errors import QueryResult

#: What a result is cached under: (SQL text, row cap, byte cap).
CacheKey = tuple[str, int | None, int | None]


class ResultCache:
    """A small thread-safe LRU of successful results keyed by (sql, max_rows, max_bytes)."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._data: OrderedDict[CacheKey, QueryResult] = OrderedDict()
        self._timed_out: OrderedDict[CacheKey, float] = OrderedDict()
        self._lock = threading.Lock()

    def timed_out(self, key: CacheKey, timeout_s: float) -> bool:
        """Whether the query ran out of a time at least ``timeout_s`` before: it will not
        finish in less."""
        with self._lock:
            spent = self._timed_out.get(key)
            return spent is not None and spent >= timeout_s

    def put_timeout(self, key: CacheKey, timeout_s: float) -> None:
        """Remember that the query did not finish within ``timeout_s`` (the longest such)."""
        with self._lock:
            self._timed_out[key] = max(timeout_s, self._timed_out.get(key, 0.0))
            self._timed_out.move_to_end(key)
            while len(self._timed_out) > self._size:
                self._timed_out.popitem(last=False)

    def get(self, key: CacheKey) -> QueryResult | None:
        with self._lock:
            hit = self._data.get(key)
            if hit is not None:
                self._data.move_to_end(key)
            return hit

    def put(self, key: CacheKey, value: QueryResult) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._timed_out.clear()
