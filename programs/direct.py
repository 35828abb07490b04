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
    """Full DDL schema + question (+ evidence) → SQL in one call.

    ``schema_layout``: ``native`` (the database's own CREATE TABLE statements; chosen on the
    ``spider-train-val`` slice, see README), ``compact`` or ``pretty`` (sqlweave's renderings).
    """

    name = "direct"
    ABLATIONS = {"full": {}, "compact_schema": {"schema_layout": "compact"}}
    SCHEMA_LAYOUTS = ("native", "compact", "pretty")

    def __init__(self, schema_layout: str = "native") -> None:
        if schema_layout not in self.SCHEMA_LAYOUTS:
            raise ValueError(
                f"unknown schema_layout {schema_layout!r}; "
                f"choose one of {', '.join(self.SCHEMA_LAYOUTS)}"
            )
        super().__init__(schema_layout=schema_layout)
        self.schema_layout = schema_layout
        self.generate = dspy.Predict(GenerateSQL)

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        if self.schema_layout == "native":
            from sqlweave.programs.naive import native_ddl

            schema_text = native_ddl(db)
        else:
            schema_text = render_ddl(introspect(db), layout=self.schema_layout)
        sql, raw = predict_sql(
            self.generate,
            dialect=db.dialect,
            db_schema=schema_text,
            question=question,
            evidence=evidence,
        )
        return dspy.Prediction(sql=sql, raw=raw, schema=schema_text)
