"""SQL text to one sqlglot tree: the parse the rule passes and the guideline picker share.

A query that does not parse is ``None``, never an exception (a generated query often does not
parse, and the callers then leave it alone or call it hard); the error goes to the debug log.
What a text of several statements gives is the caller's to say, because the callers read it
differently: a rewrite must not act on one statement of several (``several="none"``: None),
while the guideline picker reads the whole text as a block (``several="block"``: sqlglot's
``Block`` of them, as :func:`sqlglot.parse_one` gives).

:func:`sqlweave.sqlstruct.parse` is a third reading, for comparing queries rather than rewriting
them: it re-quotes double-quoted strings and caches the tree.
"""

from __future__ import annotations

import logging
from typing import Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

logger = logging.getLogger(__name__)


#: The longest SQL text anything here reads: the executor refuses longer text before it runs
#: (``sqlweave.db.policy`` holds the same figure), and sqlglot would spend most of a minute
#: and ~90 MB on a 1 MB reply from a server that ignores ``max_tokens``, rule by rule.
MAX_SQL_CHARS = 50_000


def parse_sql(
    sql: str, dialect: str = "sqlite", *, several: Literal["none", "block"] = "none"
) -> exp.Expression | None:
    """The statement ``sql`` holds as a new sqlglot tree, or None when it does not parse (or is
    blank). ``several``: what a text of more than one statement gives (module docstring)."""
    if not sql.strip() or len(sql) > MAX_SQL_CHARS:
        return None
    try:
        trees = sqlglot.parse(sql, read=dialect)
    except (ParseError, TokenError, RecursionError) as err:  # nested past Python's stack too
        logger.debug("cannot parse %r: %s", sql, err)
        return None
    if several == "block":
        if not trees or trees[0] is None:
            return None
        return exp.Block(expressions=trees) if len(trees) > 1 else trees[0]
    statements = [t for t in trees if t is not None]
    return statements[0] if len(statements) == 1 else None


__all__ = ["MAX_SQL_CHARS", "parse_sql"]
