"""Signatures for synthesizing training pairs: SQL to the question it answers."""

from __future__ import annotations

import dspy


class DescribeSQL(dspy.Signature):
    """Write the one question, in plain English, that this SQL query answers for the database
    described by the schema. The meaning says what the query returns: ask for exactly that (the
    same things counted, the same values, the same direction), in the words a user would use.
    Name the values exactly as in the query, say what to count, compare, order or limit, and do
    not mention SQL, tables or columns by their technical names when a plain word will do."""

    db_schema: str = dspy.InputField(desc="CREATE TABLE statements of the tables the query reads")
    sql: str = dspy.InputField(desc="the SQL query to describe")
    meaning: str = dspy.InputField(desc="what the query returns, in plain words")
    question: str = dspy.OutputField(desc="the question, one sentence")
