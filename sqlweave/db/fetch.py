"""Fetching rows under the caps and the deadline, the same way on every engine.

A query's deadline covers its fetch as well as its run: PostgreSQL's ``statement_timeout`` times
each ``FETCH`` on its own and DuckDB streams results, so a query that starts quickly can keep
sending rows long after its timeout. :func:`fetch` therefore takes rows in chunks and looks at
the clock between them; a chunk is small enough (at most :data:`CHUNK_ROWS` rows, fewer when
rows are large) that one chunk cannot carry a query far past its deadline.
"""

from __future__ import annotations

import time
from typing import Any

from sqlweave.db.errors import ExecutionError

#: Most rows asked of a cursor at once.
CHUNK_ROWS = 1024
#: Chunks stop growing (and shrink) once one holds this many bytes: big rows come fewer at a time.
CHUNK_BYTES = 4 * 1024 * 1024


def _normalize_row(row: tuple[Any, ...] | Any) -> tuple[Any, ...]:
    """Plain Python values: memoryview → bytes, Decimal → float, so results compare across engines."""
    out = []
    for value in row:
        if isinstance(value, memoryview):
            value = value.tobytes()
        elif type(value).__name__ == "Decimal":
            value = float(value)
        out.append(value)
    return tuple(out)


def _value_bytes(value: Any) -> int:
    if isinstance(value, str | bytes | bytearray):
        return len(value) + 16
    if isinstance(value, list | tuple | dict):  # DuckDB / PostgreSQL arrays and structs
        return len(repr(value)) + 16
    return 16


#: Value types :func:`_normalize_row` keeps as they are and :func:`_value_bytes` sizes at 16 bytes.
_FIXED_SIZE_TYPES = frozenset({int, float, bool, type(None)})
#: Value types it keeps as they are and sizes at 16 bytes plus their length.
_LENGTH_TYPES = frozenset({str, bytes, bytearray})
_PLAIN_TYPES = _FIXED_SIZE_TYPES | _LENGTH_TYPES


def _plain_batch_bytes(batch: list[Any]) -> int | None:
    """The summed :func:`_value_bytes` of a batch of rows that need no normalising, else None.

    Works a column at a time with C-level ``zip``, ``map`` and ``sum``, so plain results (every
    SQLite result: ints, floats, text, blobs, NULL) are sized without a Python call per value.
    A batch holding anything else (a Decimal, a memoryview, an array, a row that is not a tuple)
    gives None and takes the per-value path.
    """
    if set(map(type, batch)) != {tuple}:
        return None
    size = 16 * len(batch) * len(batch[0])
    for column in zip(*batch, strict=True):
        types = set(map(type, column))
        if types <= _FIXED_SIZE_TYPES:
            continue
        if not types <= _PLAIN_TYPES:
            return None
        if types <= _LENGTH_TYPES:
            size += sum(map(len, column))
            continue
        # Text mixed with NULL or numbers (SQLite types each value): str.__instancecheck__ picks
        # the strings without a Python call (the exact types are known, so no subclass slips in).
        for kind in types & _LENGTH_TYPES:
            size += sum(map(len, filter(kind.__instancecheck__, column)))
    return size


def fetch(
    cursor: Any,
    max_rows: int | None,
    max_bytes: int | None = None,
    deadline: float | None = None,
) -> tuple[tuple[tuple[Any, ...], ...], bool]:
    """Rows up to ``max_rows`` and ``max_bytes``; whether a cap cut the result short.

    Rows come in chunks that grow from 1 (so a few huge rows never arrive all at once) up to
    :data:`CHUNK_ROWS` rows or :data:`CHUNK_BYTES` bytes. A chunk of plain values that stays under
    both caps is taken whole (:func:`_plain_batch_bytes`); any other chunk goes row by row, which
    normalises its values and finds the exact row a cap cuts at, so both paths give the same
    rows and the same ``truncated``. Past ``deadline`` (``time.monotonic()``), checked between
    chunks, it raises :class:`ExecutionError` of kind ``timeout``: the query's time is up
    whether the engine or the fetch used it.
    """
    rows: list[tuple[Any, ...]] = []
    size = 0
    batch = 1
    while True:
        if deadline is not None and time.monotonic() >= deadline:
            raise ExecutionError("timeout", "the deadline passed while fetching rows")
        want = batch if max_rows is None else min(batch, max_rows + 1 - len(rows))
        raw = cursor.fetchmany(want)
        plain = _plain_batch_bytes(raw) if raw else 0
        before = size
        if (
            plain is not None
            and (max_rows is None or len(rows) + len(raw) <= max_rows)
            and (max_bytes is None or size + plain <= max_bytes)
        ):
            rows.extend(raw)
            size += plain
        else:
            for r in raw:
                row = _normalize_row(r)
                size += sum(_value_bytes(v) for v in row)
                if (max_rows is not None and len(rows) >= max_rows) or (
                    max_bytes is not None and size > max_bytes
                ):
                    return tuple(rows), True
                rows.append(row)
        if len(raw) < want:
            return tuple(rows), False
        batch = _next_chunk(batch, size - before)


def _next_chunk(rows: int, nbytes: int) -> int:
    """The next chunk's row count: doubling up to :data:`CHUNK_ROWS` while chunks stay small."""
    if nbytes > CHUNK_BYTES:
        return max(1, rows // 2)
    return min(rows * 2, CHUNK_ROWS)
