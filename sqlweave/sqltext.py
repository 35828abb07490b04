"""Turning raw LM text into one SQL statement.

Small local models wrap SQL in markdown fences, add an explanation, or prefix "SQL:". Programs clean
their outputs here before executing them so that a formatting slip is not scored as a wrong query.
"""

from __future__ import annotations

import itertools
import re

_FENCE_MARK = "```"
_FENCE_LANGUAGE = re.compile(r"(?:sqlite|sql|postgresql|postgres)?\s*", re.I)
_START = re.compile(r"\b(WITH|SELECT)\b", re.I)
# DSPy's chat format marks fields with "[[ ## name ## ]]"; small models often write the closing
# marker on the same line as the SQL, where the adapter keeps it as part of the value.
_MARKER = re.compile(r"\[\[\s*##\s*(\w+)\s*##\s*\]\]")
_FIELD_MARKER = re.compile(r"\[\[\s*##.*", re.S)
_PROSE = re.compile(r"\s*(This|The|Note|Explanation|Here)\b")
#: What can hide a ``;`` (quotes, comments, bracketed names), and the ``;`` itself.
_MARKS = re.compile(r"['\"`\[;]|--|/\*")
_DOUBLED = ("'", '"', "`")
#: Places a query may start that are tried, and the longest text parsed to tell prose from SQL.
_MAX_STARTS = 8
_SET_OP = re.compile(r"\b(UNION|EXCEPT|INTERSECT)(\s+ALL)?\s*\(?\s*$", re.I)
_MAX_PARSED = 20_000
#: Blanks or a comment: what may stand between the words of a CTE's head.
_GAP = r"(?:\s|--[^\n]*(?:\n|$)|/\*.*?\*/)"
#: A ``WITH`` that opens a query: a name (quoted or not), its column list if any, then ``AS (``
#: (``AS MATERIALIZED (`` too). "I cannot help with that." holds the word and no query.
_CTE_HEAD = re.compile(
    rf"WITH{_GAP}+(?:RECURSIVE{_GAP}+)?(?:\"[^\"]+\"|`[^`]+`|\[[^\]]+\]|\w+){_GAP}*"
    rf"(?:\([^)]*\){_GAP}*)?AS{_GAP}*(?:NOT{_GAP}+)?(?:MATERIALIZED{_GAP}*)?\(",
    re.I | re.S,
)
#: What no query holds and a reply may: lone surrogates (no encoder can write them: every
#: prompt, log or page they reach fails) and control characters but tab and line breaks.
_SURROGATES = re.compile("[\ud800-\udfff]")
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def clean_text(text: str) -> str:
    """``text`` with lone surrogates written as U+FFFD and control characters (NUL and the
    rest, but tab, newline and carriage return) dropped."""
    text = _SURROGATES.sub("\ufffd", text)
    return _CONTROLS.sub("", text)


def field_body(text: str, prefer: str | None = None) -> str:
    """The text of one DSPy-style field when ``text`` holds ``[[ ## name ## ]]`` markers.

    Prefers the field named ``prefer`` (or any ``*sql`` field), then the text before the first
    marker, then the first non-empty field; text without markers is returned unchanged.
    """
    parts = _MARKER.split(text)
    if len(parts) == 1:
        return text
    head, fields = parts[0], list(zip(parts[1::2], parts[2::2], strict=False))
    for name, body in fields:
        if name == prefer or (prefer is None and name.endswith("sql")):
            if body.strip():
                return body
    if head.strip():
        return head
    for name, body in fields:
        if name != "completed" and body.strip():
            return body
    return ""


def _fenced_block(text: str) -> str | None:
    """The body of the first closed markdown fence, without its language tag.

    Plain string searches, not a lazy regex: ```` ```(.*?)``` ```` retried from every backtrack
    point is quadratic, and an answer of a fence and 100 KB of whitespace took minutes.
    """
    start = text.find(_FENCE_MARK)
    if start < 0:
        return None
    end = text.find(_FENCE_MARK, start + len(_FENCE_MARK))
    if end < 0:
        return None
    language = _FENCE_LANGUAGE.match(text, start + len(_FENCE_MARK), end)
    assert language is not None  # the pattern matches the empty string
    return text[language.end() : end]


def extract_sql(text: str | None) -> str:
    """Return the first SQL query found in ``text`` (fenced block first, else from SELECT/WITH on).

    The result has no trailing semicolon and no surrounding whitespace; an empty string means the
    text held no query at all. Where "select" or "with" also stands in the prose before the query
    ("To select the singers, run: SELECT ..."), the first place a query that parses starts wins.
    """
    if not text:
        return ""
    text = field_body(clean_text(text))
    fenced = _fenced_block(text)
    if fenced is not None:
        text = fenced
    text = _FIELD_MARKER.sub("", text)
    text = text.strip().strip("`").strip()
    found = (m for m in _START.finditer(text) if _opens_query(text, m))
    starts = [m.start() for m in itertools.islice(found, _MAX_STARTS)]
    if not starts:
        return ""
    first = _one_statement(text[starts[0] :])
    later = [s for s in starts[1:] if _outside(text, starts[0], s)]
    if later and len(first) <= _MAX_PARSED:
        from sqlweave import sqlstruct

        if sqlstruct.parse(first) is None:  # prose, perhaps: a later query that parses, if any
            for start in later:  # not a subquery of the first (inside none of its brackets)
                sql = _one_statement(text[start:])
                if len(sql) <= _MAX_PARSED and sqlstruct.parse(sql) is not None:
                    return sql
    return first


def _opens_query(text: str, start: re.Match[str]) -> bool:
    """Whether a SELECT, or a WITH with a CTE's head after it, stands at ``start``."""
    return start.group(1).upper() == "SELECT" or bool(_CTE_HEAD.match(text, start.start()))


def _outside(text: str, first: int, start: int) -> bool:
    """Whether a query starting at ``start`` stands apart from the one starting at ``first``:
    inside none of its brackets (a subquery) and not the right side of its UNION, EXCEPT or
    INTERSECT."""
    if text.count("(", first, start) > text.count(")", first, start):
        return False
    return _SET_OP.search(text, first, start) is None


def _one_statement(sql: str) -> str:
    """``sql`` up to its first statement terminator, without trailing prose on later lines that
    starts like an explanation."""
    sql = sql[: statement_end(sql)]
    lines = []
    for line in sql.splitlines():
        if lines and _PROSE.match(line):
            break
        lines.append(line)
    return "\n".join(lines).strip()


def statement_end(sql: str) -> int:
    """Where the first statement of ``sql`` ends: its first ``;`` outside quoted text
    (``'...'``, ``"..."`` and backquoted names, each with its doubled quote as an escape;
    ``[...]``) and comments, or the length of ``sql``. A quote or comment left open runs to the
    end. Linear: a regex jumps from one mark to the next. (A ``;`` inside a value,
    ``name = 'a;b'``, cut the query here until tests/test_properties.py found it.)"""
    pos, n = 0, len(sql)
    while (mark := _MARKS.search(sql, pos)) is not None:
        token = mark.group()
        if token == ";":
            return mark.start()
        close = {"--": "\n", "/*": "*/", "[": "]"}.get(token, token)
        end = sql.find(close, mark.end())
        while end >= 0 and token in _DOUBLED and sql.startswith(close, end + 1):
            end = sql.find(close, end + 2)  # a doubled quote is one quote character
        if end < 0:
            return n
        pos = end + len(close)
    return n
