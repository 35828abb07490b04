"""Signatures for execution-guided repair: explain a failure, then fix the query."""

from __future__ import annotations

import dspy


class CorrectSQL(dspy.Signature):
    """Fix the SQL query so that it runs and answers the question.

    The feedback says what went wrong when it was executed, and may list earlier attempts that
    also failed; do not repeat them. Reply with the corrected SQL only."""

    dialect: str = dspy.InputField(
        desc="SQL dialect the query must run on, e.g. sqlite or postgres"
    )
    db_schema: str = dspy.InputField(
        desc="the database schema: tables, columns, keys, maybe sample values"
    )
    question: str = dspy.InputField(desc="the user's question in natural language")
    evidence: str = dspy.InputField(
        desc="external knowledge that explains terms in the question; may be empty"
    )
    sql: str = dspy.InputField(desc="the SQL query that needs fixing")
    feedback: str = dspy.InputField(
        desc="the execution error or result summary, plus earlier attempts and their errors"
    )
    corrected_sql: str = dspy.OutputField(desc="a single corrected SQL query, no explanation")


class ReflectOnError(dspy.Signature):
    """Explain in one or two sentences why the SQL query failed or gave a wrong result,
    and what must change. Do not write the SQL."""

    dialect: str = dspy.InputField(desc="SQL dialect the query runs on, e.g. sqlite or postgres")
    db_schema: str = dspy.InputField(
        desc="the database schema: tables, columns, keys, maybe sample values"
    )
    question: str = dspy.InputField(desc="the user's question in natural language")
    sql: str = dspy.InputField(desc="the SQL query that failed")
    feedback: str = dspy.InputField(
        desc="the execution error or result summary, plus earlier attempts and their errors"
    )
    reason: str = dspy.OutputField(desc="the cause of the failure and the change it calls for")
