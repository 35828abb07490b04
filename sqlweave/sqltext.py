"""Turning raw LM text into one SQL statement.

Small local models wrap SQL in markdown fences, add an explanation, or prefix "SQL:". Programs clean
their outputs here before executing them so that a formatting slip is not scored as a wrong query.
"""

from __future__ import annotations

import re

_FENCE_MARK = "```"
_FENCE_LANGUAGE = re.compile(r"(?:sqlite|sql|postgresql|postgres)?\s*", re.I)
_START = re.compile(r"\b(WITH|SELECT)\b", re.I)
# DSPy's chat format marks fields with "[[ ## name ## ]]"; small models often write the closing
# marker on the same line as the SQL, where the adapter keeps it as part of the value.
_MARKER = re.compile(r"\[\[\s*##\s*(\w+)\s*##\s*\]\]")
_FIELD_MARKER = re.compile(r"\[\[\s*##.*", re.S)


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
    text held no query at all.
    """
    if not text:
        return ""
    text = field_body(text)
    fenced = _fenced_block(text)
    if fenced is not None:
        text = fenced
    text = _FIELD_MARKER.sub("", text)
    text = text.strip().strip("`").strip()
    match = _START.search(text)
    if match is None:
        return ""
    sql = text[match.start() :]
    # Drop anything after the first statement terminator, and trailing prose on later lines that
    # starts like an explanation.
    sql = sql.split(";")[0]
    lines = []
    for line in sql.splitlines():
        if lines and re.match(r"\s*(This|The|Note|Explanation|Here)\b", line):
            break
        lines.append(line)
    return "\n".join(lines).strip()
