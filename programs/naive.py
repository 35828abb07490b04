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

import dspy

from sqlweave.db import Database
from sqlweave.programs import stages as stage_registry
from sqlweave.programs.base import SQLProgram
from sqlweave.schema import DIALECT_LABELS, native_ddl, prompt_schema

#: Re-exported: the schema renderers live in :mod:`sqlweave.schema` (``direct`` and ``weave`` use
#: them too); older code imports them from here.
__all__ = ["NaiveSQL", "naive_messages", "native_ddl", "prompt_schema", "reply_sql"]

_FENCE = re.compile(r"```[A-Za-z]*\s*(.*?)```", re.S)

SYSTEM = "You write one {dialect} query that answers the question. Reply with the SQL only."
MAX_TOKENS = 256


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

    def __init__(self) -> None:
        """No switches: the reference prompt is fixed, so ``--set sampels=4`` (or any other) is
        an unknown-switch error rather than a value stored and never read."""
        super().__init__()

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
        ran = stage_registry.Ran()
        ran.record("generator")
        return stage_registry.result(reply_sql(raw), stages=ran, raw=raw)
