"""Signatures that review a query that ran, against what it returned."""

from __future__ import annotations

import dspy


class ReviewSQL(dspy.Signature):
    """Check whether the SQL query answers the question, given what it returned when executed.

    If it does, return it unchanged. If it selects the wrong columns, misses a condition, or
    uses the wrong table or value, return a corrected query. Reply with the SQL only."""

    dialect: str = dspy.InputField(desc="SQL dialect the query runs on, e.g. sqlite or postgres")
    db_schema: str = dspy.InputField(
        desc="the database schema: tables, columns, keys, maybe sample values"
    )
    question: str = dspy.InputField(desc="the user's question in natural language")
    evidence: str = dspy.InputField(
        desc="external knowledge that explains terms in the question; may be empty"
    )
    sql: str = dspy.InputField(desc="the SQL query to review")
    execution_result: str = dspy.InputField(
        desc="the query's result (columns, first rows, row count) or its error"
    )
    reviewed_sql: str = dspy.OutputField(
        desc="the same query if it is right, else a corrected single SQL query"
    )
