"""The zero-shot baseline: the full schema as CREATE TABLE statements, the question, one LM call.

Every experiment reports this line first; a pipeline that cannot beat it has not earned its calls.
"""

from __future__ import annotations

import dspy

from sqlweave.db import Database
from sqlweave.programs.base import SQLProgram, predict_sql
from sqlweave.schema import introspect, render_ddl
from sqlweave.signatures import GenerateSQL


class DirectSQL(SQLProgram):
    """Full DDL schema + question (+ evidence) → SQL in one call."""

    name = "direct"
    ABLATIONS = {"full": {}}

    def __init__(self) -> None:
        super().__init__()
        self.generate = dspy.Predict(GenerateSQL)

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        schema_text = render_ddl(introspect(db))
        sql, raw = predict_sql(
            self.generate,
            dialect=db.dialect,
            db_schema=schema_text,
            question=question,
            evidence=evidence,
        )
        return dspy.Prediction(sql=sql, raw=raw, schema=schema_text)
