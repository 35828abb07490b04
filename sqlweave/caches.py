"""One object for the process-wide caches: derived data that is expensive and read-only.

Introspected schemas, rendered schema texts, value indexes, demo pools, retrievers and open
database handles are built once per process and shared by every program and every copy of a
program (DSPy optimizers deep-copy programs; a copy must not rebuild a 7k-example retriever nor
copy it). Before this module each seed kept a private cache class with a ``__deepcopy__`` trick,
with its own key layout; now they all go through :data:`CACHE`:

- ``CACHE.memo(namespace, key, build)`` returns the value for ``(namespace, key)``, calling
  ``build()`` once (concurrent callers of one key wait for the first build);
- ``CACHE.put(value)`` stores an object (a user's pool, retriever or encoder) and returns a small
  token; programs keep the token, so deep copies share the object instead of copying it;
- ``CACHE.register(clear)`` adds a module's own cache (an ``lru_cache``, a dict) to
  ``CACHE.clear()``, which forgets everything, e.g. after a database file changed in place.

:func:`open_database` is the one handle cache: every part of sqlweave that opens a database by
path or URL gets the same :class:`~sqlweave.db.Database` (and so its result cache).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from sqlweave.db import Database

T = TypeVar("T")


class ProcessCache:
    """Keyed, thread-safe memo of derived data, plus the ``clear()`` hooks of module caches."""

    def __init__(self) -> None:
        self._values: dict[tuple[str, Hashable], Any] = {}
        self._building: dict[tuple[str, Hashable], threading.Lock] = {}
        self._objects: dict[str, Any] = {}
        self._clearers: list[Callable[[], Any]] = []
        self._counter = itertools.count(1)
        self._lock = threading.Lock()

    def memo(self, namespace: str, key: Hashable, build: Callable[[], T]) -> T:
        """The value cached under ``(namespace, key)``, built by ``build()`` on first use."""
        full = (namespace, key)
        with self._lock:
            if full in self._values:
                return self._values[full]
            building = self._building.setdefault(full, threading.Lock())
        with building:
            with self._lock:
                if full in self._values:
                    return self._values[full]
            value = build()
            with self._lock:
                self._values[full] = value
                self._building.pop(full, None)
        return value

    def forget(self, namespace: str) -> None:
        """Forget the values cached under ``namespace`` alone (a module's own ``clear``)."""
        with self._lock:
            for full in [k for k in self._values if k[0] == namespace]:
                del self._values[full]

    def cached(self, namespace: str) -> int:
        """How many values ``namespace`` holds now."""
        with self._lock:
            return sum(1 for k in self._values if k[0] == namespace)

    def put(self, value: Any) -> str:
        """Keep ``value`` for the life of the process (until :meth:`clear`); return its token."""
        with self._lock:
            for token, held in self._objects.items():
                if held is value:
                    return token
            token = f"obj{next(self._counter)}"
            self._objects[token] = value
            return token

    def get(self, token: str) -> Any:
        """The object :meth:`put` stored under ``token``; a ``KeyError`` says it was cleared."""
        with self._lock:
            try:
                return self._objects[token]
            except KeyError:
                raise KeyError(
                    f"{token!r} is no longer cached (CACHE.clear() was called): pass the object "
                    "to the program again"
                ) from None

    def register(self, clear: Callable[[], Any]) -> Callable[[], Any]:
        """Add a module cache's ``clear`` function to :meth:`clear` (returns it, for decorating)."""
        with self._lock:
            if clear not in self._clearers:
                self._clearers.append(clear)
        return clear

    def clear(self) -> None:
        """Forget every cached value and call every registered module cache's ``clear``.

        Objects stored with :meth:`put` are kept: a program holding a token still needs them.
        """
        with self._lock:
            self._values.clear()
            clearers = list(self._clearers)
        for clear in clearers:
            clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)


#: The process-wide cache.
CACHE = ProcessCache()


def db_key(db: Database) -> tuple[str, str, str]:
    """What identifies a database's content for caching: name, dialect and fingerprint."""
    return (db.name, db.dialect, db.fingerprint)


def open_database(target: str | Path) -> Database:
    """An open, shared :class:`~sqlweave.db.Database` for a SQLite path or a SQLAlchemy URL.

    One handle per target for the whole process (paths are resolved, so two spellings of one
    file share it), so its result cache is shared too: a gold query runs once per database
    however many times it is scored, and every program reuses one connection pool.
    """
    from sqlweave.db import Database

    text = _handle_key(target)
    return CACHE.memo("database", text, lambda: Database.open(text))


def share_database(target: str | Path, db: Database) -> None:
    """Make :func:`open_database` give ``db`` for ``target`` in this process: questions that
    name a database by a reference which cannot reopen it alone (a URL written without its
    password) reach the handle already open."""
    CACHE.memo("database", _handle_key(target), lambda: db)


def _handle_key(target: str | Path) -> str:
    """The one key of a database's shared handle: a URL as given, a file path resolved (two
    spellings of one file are one database)."""
    text = str(target)
    return text if "://" in text else str(Path(text).expanduser().resolve())


__all__ = ["CACHE", "ProcessCache", "db_key", "open_database", "share_database"]
