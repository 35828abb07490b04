"""Signatures that write SQL from a question and a rendered schema."""

from __future__ import annotations

import dspy


class GenerateSQL(dspy.Signature):
    """Write one read-only SQL query that answers the question over the given database schema.

    Use only tables and columns that appear in the schema, join through the listed foreign keys,
    and return exactly the columns the question asks for. Reply with the SQL only."""

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
    sql: str = dspy.OutputField(desc="a single SQL query, no explanation and no markdown")


class GenerateSQLWithHints(GenerateSQL):
    """Write one read-only SQL query that answers the question over the given database schema.

    Hints from earlier steps (relevant columns, conditions, keywords) are advisory: follow them when
    they fit the question, ignore them when they contradict the schema. Reply with the SQL only."""

    hints: str = dspy.InputField(
        desc="advice from earlier steps: likely columns, conditions, SQL keywords; may be empty"
    )
