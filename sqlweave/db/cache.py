"""Successful results kept per database handle, so the same gold query scored many times runs once."""

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
        self._lock = threading.Lock()

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
