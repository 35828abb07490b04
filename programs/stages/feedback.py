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
    hints: bool = False,
) -> tuple[QueryResult | None, str]:
    """Execute ``sql`` on ``db`` and return ``(result or None, prompt-friendly summary)``.

    The summary is the error's :meth:`~sqlweave.db.ExecutionError.feedback` when the query fails,
    "Empty result ..." when it returns no rows, else the row count and the first ``max_rows`` rows.
    With ``hints`` an unknown table or column is followed by :func:`schema_hint`.
    """
    outcome = execute_quietly(db, sql, timeout_s=timeout_s)
    text = render_outcome(outcome, max_rows=max_rows)
    if isinstance(outcome, ExecutionError):
        logger.debug("feedback run failed: %s -- %s", outcome.feedback(), sql[:200])
        hint = schema_hint(db, sql, outcome) if hints else ""
        return None, f"{text}\n{hint}" if hint else text
    return outcome, text


def schema_hint(db: Database, sql: str, error: ExecutionError) -> str:
    """Where the schema holds what a failed query named but could not find, in a sentence or
    two; empty when there is nothing to say.

    The database's own message ("no such column: T2.power_name") names the symptom; a small
    model shown only that tends to return the same query. It needs the fix's ingredients: the
    columns the table it used really has, the table where the column lives, and the keys that
    join it to the query's tables (``hero_power.power_id = superpower.id``). Names are compared
    case-insensitively; a misspelt name finds its closest real ones.
    """
    import difflib
    import re

    from sqlweave.schema import introspect

    if error.kind not in ("unknown_column", "unknown_table"):
        return ""
    found = re.search(
        r'(?:no such column|no such table|column|relation)[: ]+"?(?:(\w+)\.)?"?(\w+)"?',
        error.message,
        flags=re.IGNORECASE,
    )
    if found is None:
        return ""
    qualifier, name = found.group(1), found.group(2)
    try:
        schema = introspect(db)
    except Exception:  # noqa: BLE001 - a hint is optional; the error stands on its own
        return ""
    lower = {t.name.lower(): t for t in schema.tables}
    if error.kind == "unknown_table":
        close = difflib.get_close_matches(name.lower(), list(lower), n=3, cutoff=0.5)
        return (
            f"There is no table {name}; the closest: {', '.join(lower[c].name for c in close)}."
            if close
            else ""
        )
    used = [lower[t] for t in _tables_of(sql, qualifier, db.dialect) if t in lower]
    hints = []
    for table in used[:1] if qualifier else []:
        hints.append(
            f"Table {table.name} has no column {name}; its columns: {', '.join(table.column_names)}."
        )
    holders = [t for t in schema.tables if t.column(name) is not None]
    if not holders:
        columns = {c.lower(): f"{t.name}.{c}" for t in schema.tables for c in t.column_names}
        close = difflib.get_close_matches(name.lower(), list(columns), n=3, cutoff=0.6)
        if close:
            hints.append(
                f"No table has a column {name}; the closest: {', '.join(columns[c] for c in close)}."
            )
        return " ".join(hints)
    hints.append(f"{name} is a column of {', '.join(t.name for t in holders[:3])}.")
    if used and not any(t in holders for t in used):
        from sqlweave.programs.stages.joins import fk_path

        found = fk_path(schema, [t.name for t in used], [t.name for t in holders], max_hops=3)
        if found is not None:
            steps = (f"{a}.{b} = {c}.{d}" for a, b, c, d in found[1])
            hints.append("Join " + ", ".join(steps) + ".")
    return " ".join(hints)


def _tables_of(sql: str, qualifier: str | None, dialect: str) -> list[str]:
    """The tables ``sql`` reads (lower-cased), or only the one ``qualifier`` (an alias or a
    table's own name) stands for; via sqlglot, none when it does not parse."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except Exception:  # noqa: BLE001 - unparsable SQL: no hint
        return []
    tables = list(tree.find_all(exp.Table))
    if qualifier is not None:
        key = qualifier.lower()
        tables = [t for t in tables if key in {t.alias_or_name.lower(), t.name.lower()}]
    return list(dict.fromkeys(t.name.lower() for t in tables))
