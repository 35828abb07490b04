"""``naive``: the 20-line reference prompt every table reports first.

A framework that cannot beat what a user writes in five minutes has not earned its calls, so this
reproduces that prompt exactly and goes through the same LM, cache and usage tracking as every
other program (the comparison is then prompt against prompt, not runtime against runtime):

* system: ``You write one SQLite query that answers the question. Reply with the SQL only.``
* user: the database's own ``CREATE TABLE`` statements (SQLite's ``sqlite_master``, in creation
  order, one per line), a blank line, ``Question: <question>`` and, with evidence,
  ``\\nHint: <evidence>``;
* greedy, 256 new tokens; the SQL is the fenced block if there is one, else the whole reply.

On PostgreSQL or DuckDB, which keep no DDL text, the statements are rendered from introspection and
the system message names the dialect.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import dspy

from sqlweave.db import Database, ExecutionError
from sqlweave.programs.base import SQLProgram
from sqlweave.schema import DIALECT_LABELS, introspect, render_ddl

_FENCE = re.compile(r"```[A-Za-z]*\s*(.*?)```", re.S)

SYSTEM = "You write one {dialect} query that answers the question. Reply with the SQL only."
MAX_TOKENS = 256


def native_ddl(db: Database, tables: Iterable[str] | None = None) -> str:
    """The database's own CREATE TABLE statements (SQLite), else DDL rendered from introspection.

    ``tables`` (e.g. a linker's) keeps only theirs, matched without regard to case.
    """
    keep = None if tables is None else {t.lower() for t in tables}
    if db.dialect == "sqlite":
        try:
            result = db.execute(
                "SELECT sql, name FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL "
                "AND name NOT LIKE 'sqlite_%' ORDER BY rowid",
                use_cache=True,
            )
            statements = [
                str(row[0]).strip()
                for row in result.rows
                if keep is None or str(row[1]).lower() in keep
            ]
            if statements:
                return "\n".join(statements)
        except ExecutionError:
            pass
    schema = introspect(db)
    if keep is not None:
        schema = schema.subset(tables=[t.name for t in schema.tables if t.name.lower() in keep])
    return render_ddl(schema, layout="pretty")


def prompt_schema(db: Database, layout: str = "native", tables: Iterable[str] | None = None) -> str:
    """The schema as a generation prompt shows it: ``native`` (:func:`native_ddl`) or a
    :func:`~sqlweave.schema.render_ddl` layout (``compact``, ``pretty``); ``tables`` (a linker's)
    keeps only theirs."""
    if layout == "native":
        return native_ddl(db, tables)
    schema = introspect(db)
    if tables is not None:
        schema = schema.subset(tables=sorted(tables))
    return render_ddl(schema, layout=layout)


def reply_sql(reply: str) -> str:
    """The reference script's extraction: the first fenced block, else the whole reply."""
    fenced = _FENCE.search(reply)
    return (fenced.group(1) if fenced else reply).strip()


def naive_messages(db: Database, question: str, evidence: str = "") -> list[dict[str, str]]:
    """The reference chat messages for one question."""
    dialect = DIALECT_LABELS.get(db.dialect, db.dialect)
    user = f"{native_ddl(db)}\n\nQuestion: {question}"
    if evidence:
        user += f"\nHint: {evidence}"
    return [
        {"role": "system", "content": SYSTEM.format(dialect=dialect)},
        {"role": "user", "content": user},
    ]


class NaiveSQL(SQLProgram):
    """The reference prompt (see the module docstring): one greedy call, no demos, no repair.

    It has no DSPy predictor, so optimizers leave it as it is: it is the fixed line others are
    measured against.
    """

    name = "naive"
    ABLATIONS = {"full": {}}

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        lm = dspy.settings.lm
        if lm is None:
            raise RuntimeError(
                "no LM configured: call sqlweave.configure() or dspy.configure(lm=...)"
            )
        from dspy.clients._deprecation import adapter_message_call

        messages = naive_messages(db, question, evidence)
        # The same raw-messages path DSPy's own adapters take (and sqlweave's SQLAdapter).
        with adapter_message_call(lm, messages):
            outputs = lm(messages=messages, temperature=0.0, max_tokens=MAX_TOKENS)
        first = outputs[0] if outputs else ""
        raw = first.get("text", "") if isinstance(first, dict) else str(first or "")
        return dspy.Prediction(sql=reply_sql(raw), raw=raw, stages=["generate"])
