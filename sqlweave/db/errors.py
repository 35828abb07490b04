"""What a query gives back: :class:`QueryResult`, or an :class:`ExecutionError` an LM can act on.

Every engine maps its own failures onto the same few kinds (:func:`classify_error`), so programs
that correct SQL from execution feedback never ask which engine ran it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlweave.errors import SqlweaveError


class ExecutionError(SqlweaveError):
    """A query that could not run, with a message fit to show an LM as feedback.

    ``kind`` is one of ``syntax``, ``unknown_table``, ``unknown_column``, ``not_read_only``,
    ``timeout``, ``runtime`` or ``connection``.
    """

    def __init__(self, kind: str, message: str, sql: str = "") -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.sql = sql

    def feedback(self) -> str:
        """Short text describing the failure, for execution-guided correction prompts."""
        labels = {
            "syntax": "Syntax error",
            "unknown_table": "Unknown table",
            "unknown_column": "Unknown column",
            "not_read_only": "Refused (only read-only queries are allowed)",
            "timeout": "Timed out",
            "runtime": "Execution error",
            "connection": "Database unavailable",
        }
        return f"{labels.get(self.kind, 'Error')}: {self.message}"

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "message": self.message}


@dataclass(frozen=True)
class QueryResult:
    """Columns and rows of a finished query. ``truncated`` is set when a row or byte cap cut it."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    truncated: bool = False
    elapsed_s: float = field(default=0.0, compare=False)

    def __len__(self) -> int:
        return len(self.rows)

    def preview(self, max_rows: int = 5, max_chars: int = 600) -> str:
        """Compact text rendering of the first rows, for prompts that show execution results."""
        lines = [" | ".join(self.columns)]
        lines += [" | ".join(_cell_text(v) for v in row) for row in self.rows[:max_rows]]
        more = len(self.rows) - max_rows
        if more > 0 or self.truncated:
            lines.append(f"... ({len(self.rows)}{'+' if self.truncated else ''} rows in total)")
        if not self.rows:
            lines.append("(no rows)")
        text = "\n".join(lines)
        return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


def _cell_text(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def refuse(message: str, sql: str) -> ExecutionError:
    """The error for a query the read-only policy refuses."""
    return ExecutionError("not_read_only", message, sql)


def first_line(text: str) -> str:
    """The first line of an engine's (often multi-line) message."""
    return text.strip().splitlines()[0] if text.strip() else text


#: ``scheme://user:password@``: the user's part (group 1) and the password after it.
_PASSWORD = re.compile(r"(://[^:/@]*):[^@]*@")


def masked(url: str) -> str:
    """A URL fit for an error message: any password replaced by ***."""
    return _PASSWORD.sub(r"\1:***@", url)


def without_password(url: str) -> str:
    """``url`` with no password in it at all, as a file may keep it (the password then comes
    from the environment); a URL SQLAlchemy cannot read loses ``:secret@`` by pattern."""
    import sqlalchemy as sa

    try:
        parsed = sa.engine.make_url(url)
    except Exception:  # noqa: BLE001 - any URL still loses its password
        return _PASSWORD.sub(r"\1@", url)
    return parsed._replace(password=None).render_as_string(hide_password=False)


_ERROR_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("timeout", re.compile(r"interrupt|statement timeout|canceling statement", re.I)),
    (
        "not_read_only",
        re.compile(
            r"not authorized|authorization denied|readonly database|read-only transaction"
            r"|read_only|read-only|read-write mode|permission denied|must be superuser"
            r"|Permission Error|only one SELECT|data-modifying|INTO is not allowed"
            r"|multiple commands",
            re.I,
        ),
    ),
    (
        "unknown_column",
        re.compile(r"no such column|column .* does not exist|Referenced column", re.I),
    ),
    (
        "unknown_table",
        re.compile(
            r"no such table|relation .* does not exist|Table with name .* does not exist", re.I
        ),
    ),
    ("syntax", re.compile(r"syntax error|parser error|incomplete input", re.I)),
    # The server went away (a restart, a crash, the network): not the query's fault.
    (
        "connection",
        re.compile(
            r"connection (?:is lost|failed|refused|to server .* failed)|server closed the"
            r" connection|terminating connection|the database system is (?:starting|shutting)",
            re.I,
        ),
    ),
)


def not_found(engine: str, path: Path, scheme: str = "") -> ExecutionError:
    """``<engine> database not found: <path>``, a ``connection`` error. A URL's path after
    ``scheme:///`` is relative to the working directory; where the same path from the root
    exists, the message says to write four slashes, the mistake that hides behind it."""
    if path.is_dir():
        return ExecutionError("connection", f"{path} is a folder, not a {engine} database file")
    message = f"{engine} database not found: {path}"
    if scheme and not path.is_absolute() and (Path("/") / path).is_file():
        message += (
            f" (after '{scheme}:///' a path is relative to the working directory; "
            f"for /{path} write four slashes: {scheme}:////{path})"
        )
    return ExecutionError("connection", message)


def classify_error(message: str) -> str:
    """Map an engine's error text onto an :class:`ExecutionError` kind."""
    for kind, pattern in _ERROR_PATTERNS:
        if pattern.search(message):
            return kind
    return "runtime"


def timed_out(sql: str) -> ExecutionError:
    """The error for a query whose deadline passed (the caller restates it with the timeout)."""
    return ExecutionError("timeout", "the deadline passed", sql)


__all__ = ["ExecutionError", "QueryResult", "classify_error"]
