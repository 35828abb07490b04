"""The zero-shot baseline: the full schema as CREATE TABLE statements, the question, one LM call.

Every experiment reports this line first; a pipeline that cannot beat it has not earned its calls.
"""

from __future__ import annotations

import logging

import dspy
from dspy.utils.exceptions import AdapterParseError

from sqlweave.db import Database
from sqlweave.programs.base import SQLProgram
from sqlweave.schema import introspect, render_ddl
from sqlweave.signatures import GenerateSQL
from sqlweave.sqltext import extract_sql

logger = logging.getLogger(__name__)


class DirectSQL(SQLProgram):
    """Full DDL schema + question (+ evidence) → SQL in one call."""

    name = "direct"

    def __init__(self) -> None:
        super().__init__()
        self.generate = dspy.Predict(GenerateSQL)

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        schema_text = render_ddl(introspect(db))
        try:
            out = self.generate(
                dialect=db.dialect, db_schema=schema_text, question=question, evidence=evidence
            )
            raw = out.sql
        except AdapterParseError as err:
            # A small model that ignores the output format still often wrote a query: keep it.
            raw = err.lm_response or ""
            logger.debug("unparsed LM output kept as raw text: %s", raw[:200])
        return dspy.Prediction(sql=extract_sql(raw), raw=raw, schema=schema_text)
