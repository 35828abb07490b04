"""Signatures for schema linking: which columns a question needs."""

from __future__ import annotations

import dspy


class LinkSchema(dspy.Signature):
    """List the database columns needed to write the SQL query that answers the question.

    Name every column the query would select, filter, join, group or sort on, as table.column,
    using only names that appear in the schema."""

    dialect: str = dspy.InputField(desc="SQL dialect of the database, e.g. sqlite or postgres")
    db_schema: str = dspy.InputField(
        desc="the database schema: tables, columns, keys, maybe sample values"
    )
    question: str = dspy.InputField(desc="the user's question in natural language")
    evidence: str = dspy.InputField(
        desc="external knowledge that explains terms in the question; may be empty"
    )
    columns: list[str] = dspy.OutputField(desc="the needed columns, each written as table.column")
