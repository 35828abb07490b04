"""Signatures that decompose a question into the parts a SQL query is built from."""

from __future__ import annotations

import dspy


class ExtractElements(dspy.Signature):
    """Break the question down into the pieces of its SQL answer.

    Name the tables and columns it involves, the filter conditions it states, and the SQL
    keywords the answer will need. Use only names from the schema."""

    db_schema: str = dspy.InputField(
        desc="the (possibly pruned) database schema: tables, columns, keys, sample values"
    )
    question: str = dspy.InputField(desc="the user's question in natural language")
    evidence: str = dspy.InputField(
        desc="external knowledge that explains terms in the question; may be empty"
    )
    elements: list[str] = dspy.OutputField(
        desc="tables and columns the query uses, as table or table.column"
    )
    conditions: list[str] = dspy.OutputField(
        desc="filter conditions from the question, e.g. singer.age > 30; empty if none"
    )
    keywords: list[str] = dspy.OutputField(
        desc="SQL keywords the query needs, e.g. DISTINCT, GROUP BY, ORDER BY ... DESC, MIN"
    )
