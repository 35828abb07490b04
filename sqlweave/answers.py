"""An answer as JSON, one shape wherever it leaves the library (``sqlweave ask --json``, the
server's ``POST /ask``): database values made JSON-safe (a ``Decimal`` a number, bytes a size,
a date its ISO text), rows cut to a cap, a confidence that is not a finite number null."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import date, datetime
from datetime import time as dtime
from decimal import Decimal
from typing import Any

from sqlweave.db import ExecutionError


def _cell(value: Any) -> Any:
    """A database value as JSON: numbers, text and null as they are; the rest as text."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Decimal):
        return float(value) if value.is_finite() else str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(bytes(value))} bytes>"
    if isinstance(value, datetime | date | dtime):
        return value.isoformat()
    return str(value)


def _rows(rows: Any, limit: int) -> tuple[list[list[Any]], bool]:
    listed = list(rows or ())
    return [[_cell(v) for v in row] for row in listed[:limit]], len(listed) > limit


def _confidence(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _low(result: Any) -> bool | None:
    """The program's own verdict that its confidence is under the shipped threshold (what
    ``sqlweave ask`` marks "not sure"); null where it gives no confidence."""
    if _confidence(result.get("confidence")) is None:
        return None
    low = result.get("low_confidence")
    return low if isinstance(low, bool) else None


def _alternative(alt: Any, limit: int) -> dict[str, Any]:
    alt = alt if isinstance(alt, Mapping) else {"sql": str(alt)}
    rows, cut = _rows(alt.get("rows"), limit)
    return {
        "sql": str(alt.get("sql") or ""),
        "columns": [str(c) for c in alt.get("columns") or ()],
        "rows": rows,
        "truncated": cut or bool(alt.get("truncated")),
        "share": _confidence(alt.get("share")),
    }


def _error_json(error: Any) -> dict[str, str]:
    # As `sqlweave ask --json` says it: the kind, and the line a person reads.
    message = error.feedback() if isinstance(error, ExecutionError) else str(error)
    return {"kind": str(getattr(error, "kind", "error")), "message": message}


def answer_body(result: Any, max_rows: int) -> dict[str, Any]:
    """An answer (a :class:`~sqlweave.api.Result`) as JSON, rows cut to ``max_rows``: what
    ``sqlweave ask --json`` prints and ``POST /ask`` returns (with its timing). ``confidence``,
    ``low_confidence``, ``alternatives`` and ``caveats`` are the program's own (null, null, []
    and [] where it gives none)."""
    error = result.get("error")
    rows, cut = _rows(result.get("rows"), max_rows)
    alternatives = result.get("alternatives") or []
    return {
        "sql": result.get("sql") or "",
        "columns": [str(c) for c in result.get("columns") or ()],
        "rows": rows,
        "truncated": bool(result.get("truncated")) or cut,
        "error": None if error is None else _error_json(error),
        "confidence": _confidence(result.get("confidence")),
        "low_confidence": _low(result),
        "alternatives": [_alternative(a, max_rows) for a in alternatives],
        "caveats": [str(c) for c in result.get("caveats") or []],
    }
