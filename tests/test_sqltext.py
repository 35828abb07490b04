"""Extraction of one SQL query from raw LM text."""

from __future__ import annotations

import time

import pytest

from sqlweave.sqltext import extract_sql


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("SELECT count(*) FROM singer", "SELECT count(*) FROM singer"),
        ("```sql\nSELECT name FROM singer;\n```\nThis lists names.", "SELECT name FROM singer"),
        ("SQL: SELECT 1;", "SELECT 1"),
        (
            "Here you go:\nWITH a AS (SELECT 1) SELECT * FROM a",
            "WITH a AS (SELECT 1) SELECT * FROM a",
        ),
        ("SELECT a\nFROM t\nThis query returns a.", "SELECT a\nFROM t"),
        ("SELECT a FROM t WHERE b > 1 [[ ## completed ## ]]", "SELECT a FROM t WHERE b > 1"),
        ("SELECT a FROM t[[ ## completed ## ]]", "SELECT a FROM t"),
        ("I cannot answer that.", ""),
        # prose that says "select" or "with" before the query (found by tests/test_properties.py)
        ("To select the singers, run:\nSELECT name FROM singer", "SELECT name FROM singer"),
        ("Answer with this query: SELECT 1;", "SELECT 1"),
        ("SELECT a FROM t WHERE b = 'x;y'; SELECT 2", "SELECT a FROM t WHERE b = 'x;y'"),
        # a query sqlglot cannot parse keeps its subqueries and its UNION's right side
        (
            "SELECT a FROM t WHERE x === 1 UNION SELECT b FROM u",
            "SELECT a FROM t WHERE x === 1 UNION SELECT b FROM u",
        ),
        (
            "SELECT a FROM t WHERE x === (SELECT b FROM u)",
            "SELECT a FROM t WHERE x === (SELECT b FROM u)",
        ),
        # found by review: a refusal that says "with" is no query; a NUL, a control character
        # or a lone surrogate in a reply does not reach the prompt, the log or the page
        ("I am sorry, I cannot help with that.", ""),
        ("I cannot answer this with the given schema.", ""),
        (
            "WITH RECURSIVE c(n) AS (SELECT 1) SELECT n FROM c",
            "WITH RECURSIVE c(n) AS (SELECT 1) SELECT n FROM c",
        ),
        (
            'with "x y" as materialized (select 1) select 2',
            'with "x y" as materialized (select 1) select 2',
        ),
        # a comment in the CTE's head keeps it a query (found by reviewing the check above)
        (
            "WITH -- per singer\n t AS (SELECT 1 AS n) SELECT n FROM t",
            "WITH -- per singer\n t AS (SELECT 1 AS n) SELECT n FROM t",
        ),
        (
            "WITH t /* c */ AS (SELECT 1) SELECT * FROM t",
            "WITH t /* c */ AS (SELECT 1) SELECT * FROM t",
        ),
        ("SELECT count(*) FROM singer\x00", "SELECT count(*) FROM singer"),
        ("SELECT name\x1b FROM singer", "SELECT name FROM singer"),
        ("SELECT '\ud800' FROM singer", "SELECT '\ufffd' FROM singer"),
        ("", ""),
        (None, ""),
    ],
)
def test_extract_sql(raw: str | None, expected: str) -> None:
    assert extract_sql(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("```sqlite\nSELECT 1\n```", "SELECT 1"),
        ("```postgresql\nSELECT 2;\n```", "SELECT 2"),
        ("```\nSELECT 3\n```", "SELECT 3"),
        ("```sql\nSELECT 4", "SELECT 4"),  # an unclosed fence: the text after it
        ("Text ```sql SELECT 5``` then ```sql SELECT 6```", "SELECT 5"),
    ],
)
def test_fences(raw: str, expected: str) -> None:
    assert extract_sql(raw) == expected


_MB = 1_000_000


@pytest.mark.parametrize(
    "raw",
    [
        "```" + " " * _MB,
        "```sql" + "\n" * _MB + "SELECT 1",
        "```sql\n" + " " * _MB + "SELECT 1\n```",
        "``` ```" * (_MB // 7),
        "[[ ## " + "a" * _MB,
        "[[" + " " * _MB + "##",
        "SELECT " + "x " * (_MB // 2),
        "SELECT 1\n" + "This line.\n" * (_MB // 11),
        "WITH" + " " * _MB,
        "`" * _MB,
    ],
    ids=[
        "open_fence_whitespace",
        "open_fence_newlines",
        "closed_fence_whitespace",
        "many_fences",
        "open_marker_word",
        "open_marker_whitespace",
        "long_select",
        "long_prose",
        "with_whitespace",
        "backticks",
    ],
)
def test_extraction_is_linear_on_1mb_answers(raw: str) -> None:
    """Each 1 MB answer is handled in well under a second (the old fence regex took minutes)."""
    start = time.perf_counter()
    extract_sql(raw)
    assert time.perf_counter() - start < 1.0


def test_extraction_time_grows_linearly() -> None:
    def cost(n: int) -> float:
        raw = "```sql" + " " * n
        start = time.perf_counter()
        for _ in range(3):
            extract_sql(raw)
        return time.perf_counter() - start

    small, large = cost(100_000), cost(1_000_000)
    # 10x the text; quadratic would be 100x. Generous for a loaded machine.
    assert large < 30 * small + 0.05


def test_a_reply_too_long_to_run_is_not_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that ignores max_tokens sent 1 MB of SQL: the rules and the grounded check
    parsed it in full (a minute, ~90 MB kept in the parse cache) before the executor refused
    it unread. Text over the executor's limit is now no query to read anywhere."""
    import sqlglot

    from sqlweave import sqlstruct
    from sqlweave.sqltree import MAX_SQL_CHARS, parse_sql

    huge = "SELECT " + "1+" * MAX_SQL_CHARS + "1"

    def no_parse(*_args, **_kwargs):
        raise AssertionError("parsed a text no engine would run")

    monkeypatch.setattr(sqlglot, "parse", no_parse)
    assert parse_sql(huge) is None
    assert sqlstruct.parse(huge) is None
