"""Stopping queries: the wall-clock watchdog, and the set of queries a handle's ``close`` stops.

Both exist because an engine's own clock is not enough. A SQLite progress handler runs only
every few instructions and a Python callback cannot run while another thread holds the GIL; a
streaming DuckDB or PostgreSQL fetch is outside any statement timeout. ``interrupt()`` (or a
cancel request) sent from another thread reaches the query even then.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator

from sqlweave.db.errors import ExecutionError

logger = logging.getLogger(__name__)


class _Watchdog:
    """One daemon thread that calls ``interrupt`` callbacks when their deadlines pass.

    A SQLite progress handler only runs every :data:`SQLITE_PROGRESS_STEPS` instructions and a
    Python callback cannot run while another thread holds the GIL; ``interrupt()`` from here
    reaches the query even then. Each callback runs in a thread of its own, outside the lock:
    one that blocks (a PostgreSQL cancel to a server that does not answer) delays neither the
    other deadlines nor any query's ``arm`` / ``disarm``. ``disarm`` of a token whose callback
    is running waits for that callback alone, so once it returns the callback is over: no
    stale interrupt can hit the connection's next query.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, Callable[[], None]] = {}
        self._firing: dict[int, threading.Event] = {}  # set when the callback has returned
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        # When the waiting thread looks at the heap next (inf: it waits for work).
        self._wake_at = math.inf

    def arm(self, deadline: float, callback: Callable[[], None]) -> int:
        with self._cond:
            token = next(self._ids)
            self._armed[token] = callback
            # Entries disarmed since the thread last looked go now, so the heap stays small.
            while self._heap and self._heap[0][1] not in self._armed:
                heapq.heappop(self._heap)
            heapq.heappush(self._heap, (deadline, token))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="sqlweave-watchdog", daemon=True
                )
                self._thread.start()
            elif deadline < self._wake_at:
                # Only an earlier deadline needs the thread now: waking it costs every query a
                # thread switch, and it wakes by _wake_at anyway and then sees this entry.
                self._cond.notify()
            return token

    def disarm(self, token: int) -> bool:
        """Cancel; True when the callback had already fired (it has returned by now)."""
        with self._cond:
            if self._armed.pop(token, None) is not None:
                return False
            firing = self._firing.get(token)
        if firing is not None:
            firing.wait()
        return True

    def _loop(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][1] not in self._armed:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._wake_at = math.inf
                    self._cond.wait(timeout=60)
                    if not self._heap:
                        self._thread = None
                        return
                    continue
                deadline, token = self._heap[0]
                now = time.monotonic()
                if now < deadline:
                    self._wake_at = deadline
                    self._cond.wait(timeout=deadline - now)
                    continue
                heapq.heappop(self._heap)
                callback = self._armed.pop(token)
                self._firing[token] = done = threading.Event()
                threading.Thread(
                    target=self._fire, args=(token, callback, done), daemon=True
                ).start()

    def _fire(self, token: int, callback: Callable[[], None], done: threading.Event) -> None:
        try:
            callback()
        except Exception:  # a connection closed meanwhile: nothing left to stop
            logger.debug("watchdog callback failed", exc_info=True)
        finally:
            with self._cond:
                self._firing.pop(token, None)
            done.set()


#: The one watchdog thread of the process.
WATCHDOG = _Watchdog()


class RunningQueries:
    """The queries running on one engine, each with the call that stops it, so ``stop_all``
    (the engine's ``interrupt``, called by ``Database.close``) can stop them.

    A stop call runs only while its query's block does (both under one lock), so it never
    reaches the connection's next query; a query stopped this way raises "closed".
    """

    def __init__(self) -> None:
        self._running: dict[int, Callable[[], None]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._stops = 0

    @contextlib.contextmanager
    def stoppable(self, stop: Callable[[], None], sql: str) -> Iterator[None]:
        """Run the block as a query that :meth:`stop_all` stops by calling ``stop`` (interrupt
        for DuckDB, a cancel request for PostgreSQL); the engine's error then becomes "closed"."""
        with self._lock:
            token = next(self._ids)
            self._running[token] = stop
            stops = self._stops
        try:
            yield
        except Exception as err:
            if self._stops != stops:
                raise ExecutionError(
                    "connection", "the database was closed while the query ran", sql
                ) from err
            raise
        finally:
            with self._lock:
                self._running.pop(token, None)

    def stop_all(self) -> None:
        """Stop every query running now."""
        with self._lock:
            self._stops += 1
            for stop in self._running.values():
                try:
                    stop()
                except Exception:  # the query ended meanwhile, or the server is gone
                    logger.debug("could not stop a running query", exc_info=True)
