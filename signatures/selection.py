"""Signatures that choose among executed SQL candidates."""

from __future__ import annotations

import dspy


class SelectCandidate(dspy.Signature):
    """Pick the candidate SQL query that answers the question correctly.

    Each candidate is shown with what it returned when executed. Prefer a query whose result
    has the columns and rows the question asks for; a query that failed is never right."""

    dialect: str = dspy.InputField(desc="SQL dialect the queries run on, e.g. sqlite or postgres")
    db_schema: str = dspy.InputField(
        desc="the database schema: tables, columns, keys, maybe sample values"
    )
    question: str = dspy.InputField(desc="the user's question in natural language")
    evidence: str = dspy.InputField(
        desc="external knowledge that explains terms in the question; may be empty"
    )
    candidates: str = dspy.InputField(
        desc="numbered candidate SQL queries, each followed by its execution result or error"
    )
    choice: int = dspy.OutputField(desc="the number of the best candidate, e.g. 1")
