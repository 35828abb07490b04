"""Signatures that write SQL from a question and a rendered schema."""

from __future__ import annotations

import dspy


class GenerateSQL(dspy.Signature):
    """Reply with one read-only SQL query that answers the question, and nothing else."""

    # Kept this short on purpose. With Qwen2.5-Coder-1.5B on 27 Spider dev questions the plain
    # prompt scored 14 with no instruction, 12 with this one and 9 with a longer one that told
    # the model to "join through the listed foreign keys" (it then joined tables the question
    # does not need). Optimizers (MIPROv2, GEPA) may still rewrite it.

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
    """Reply with one read-only SQL query that answers the question, and nothing else. The hints
    (likely columns, conditions, SQL keywords) are advice: ignore any that contradict the schema."""

    hints: str = dspy.InputField(
        desc="advice from earlier steps: likely columns, conditions, SQL keywords; may be empty"
    )


class GenerateSQLFromExamples(GenerateSQL):
    """Reply with one read-only SQL query that answers the question, and nothing else."""

    # The examples and values are plain text, not DSPy demos, so the SQL-script layout keeps the
    # schema first: every call on one database (greedy, samples, the next question) then shares
    # the schema's KV cache, and only the short tail differs.

    examples: str = dspy.InputField(
        desc="solved questions from other databases with their SQL, as patterns; may be empty"
    )
    value_hints: str = dspy.InputField(
        desc="stored values of this database that the question mentions, as column = value; "
        "may be empty"
    )
