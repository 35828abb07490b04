"""Execution feedback: run a candidate query and describe its outcome in a few prompt lines.

Correction, selection and review all show an LM what a query did. They share one rendering so an
optimizer sees the same feedback format everywhere, and so "empty result" is said in words: small
models read a header with no rows as success.
"""

from __future__ import annotations

import logging

from sqlweave.db import Database, ExecutionError, QueryResult

logger = logging.getLogger(__name__)

#: Rows fetched to count a result. Enough to tell "a few" from "many" without pulling a table.
COUNT_CAP = 1000

#: Default timeout for feedback runs; a query that needs longer is itself worth reporting.
FEEDBACK_TIMEOUT_S = 30.0


def is_empty(result: QueryResult | None) -> bool:
    """True when a query ran but answered nothing: no rows, or only NULLs.

    ``SELECT MAX(x) ... WHERE <nothing matches>`` returns one all-NULL row; RSL-SQL's "empty
    result" retry is meant for exactly that case as well as for zero rows.
    """
    if result is None:
        return False
    return all(value is None for row in result.rows for value in row)


def execute_quietly(
    db: Database, sql: str, *, timeout_s: float = FEEDBACK_TIMEOUT_S, max_rows: int = COUNT_CAP
) -> QueryResult | ExecutionError:
    """Run ``sql`` read-only and return its result or its error, never raising on bad SQL."""
    if not sql or not sql.strip():
        return ExecutionError("syntax", "empty query: no SQL was produced", sql or "")
    return db.try_execute(sql, timeout_s=timeout_s, max_rows=max_rows)


def render_outcome(outcome: QueryResult | ExecutionError, max_rows: int = 5) -> str:
    """Short text for an execution outcome: the error's feedback, or count, columns and rows."""
    if isinstance(outcome, ExecutionError):
        return outcome.feedback()
    n = len(outcome.rows)
    count = f"{n}+" if outcome.truncated else str(n)
    if n == 0:
        return f"Empty result: the query ran but returned 0 rows (columns: {', '.join(outcome.columns)})."
    head = f"{count} row{'s' if n != 1 else ''}"
    if is_empty(outcome):
        head += " holding only NULL values (an empty result)"
    return f"{head}:\n{outcome.preview(max_rows=max_rows)}"


def describe_execution(
    db: Database,
    sql: str,
    max_rows: int = 5,
    timeout_s: float = FEEDBACK_TIMEOUT_S,
) -> tuple[QueryResult | None, str]:
    """Execute ``sql`` on ``db`` and return ``(result or None, prompt-friendly summary)``.

    The summary is the error's :meth:`~sqlweave.db.ExecutionError.feedback` when the query fails,
    "Empty result ..." when it returns no rows, else the row count and the first ``max_rows`` rows.
    """
    outcome = execute_quietly(db, sql, timeout_s=timeout_s)
    text = render_outcome(outcome, max_rows=max_rows)
    if isinstance(outcome, ExecutionError):
        logger.debug("feedback run failed: %s -- %s", outcome.feedback(), sql[:200])
        return None, text
    return outcome, text
