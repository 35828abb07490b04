"""Extraction of one SQL query from raw LM text."""

from __future__ import annotations

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
        ("", ""),
        (None, ""),
    ],
)
def test_extract_sql(raw: str | None, expected: str) -> None:
    assert extract_sql(raw) == expected
