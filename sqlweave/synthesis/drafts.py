"""Template SQL kept only if it is a good label (step 2 of :mod:`sqlweave.synthesis.pairs`).

Every query is executed read-only with a time limit and kept only if it runs, returns rows (at
most :data:`MAX_ROWS`), is deterministic (no tie at an ORDER BY ... LIMIT boundary), is not a
duplicate (same normalised SQL, or same template and result) and is not trivial.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from sqlweave.db import Database, ExecutionError
from sqlweave.errors import SqlweaveError
from sqlweave.hardness import spider_hardness
from sqlweave.schema import introspect
from sqlweave.synthesis.templates import GROUPING, TEMPLATES, Draw, Template

logger = logging.getLogger(__name__)

MAX_ROWS = 50
"""A label whose answer is longer than this is a listing, not a question a user asks."""
TIMEOUT_S = 5.0
MAX_DRAWS_PER_PAIR = 12
#: Draws in a row that give no new query before the schema counts as exhausted: a large n on
#: a small schema otherwise spins through 12 draws a pair asked for, with nothing to show.
MAX_IDLE_DRAWS = 2_000
"""Template draws per wanted pair before giving up (a schema with few usable columns)."""
DIFFICULTY_MIX = {"easy": 0.25, "medium": 0.40, "hard": 0.20, "extra": 0.15}
"""Spider dev's hardness shares, roughly: what the templates are drawn towards."""


class SynthesisError(SqlweaveError, ValueError):
    """The database cannot yield pairs (no tables, no rows) or the arguments are wrong."""


@dataclass(frozen=True)
class Draft:
    """A template SQL that passed the execution checks, with what it returned."""

    template: str
    sql: str
    difficulty: str
    n_rows: int
    result_hash: str
    meaning: str = ""
    """What the SQL returns in plain words (the template's gloss; "" when unknown)."""


def _normal(sql: str) -> str:
    return re.sub(r"\s+", " ", sql.strip().lower())


def _result_hash(rows: Sequence[tuple]) -> str:
    text = json.dumps(sorted(map(repr, rows)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_draft(db: Database, template: str, sql: str, meaning: str = "") -> Draft | str:
    """A :class:`Draft` when ``sql`` is a usable label on ``db``, else the reason it is not."""
    try:
        result = db.execute(sql, timeout_s=TIMEOUT_S, max_rows=MAX_ROWS + 1)
    except ExecutionError as err:
        return f"does not run: {err.kind}"
    rows = list(result.rows)
    if not rows:
        return "returns no rows"
    if len(rows) > MAX_ROWS or result.truncated:
        return f"returns more than {MAX_ROWS} rows"
    if all(v is None for row in rows for v in row):
        return "returns only NULL"
    if template in GROUPING and all(row[-1] == 1 for row in rows):
        return "every group holds one row: the grouping says nothing"
    if " LIMIT " in sql.upper() and not _limit_is_determined(db, sql):
        return "a tie at the LIMIT boundary: the answer is not determined"
    return Draft(template, sql, spider_hardness(sql), len(rows), _result_hash(rows), meaning)


def _limit_is_determined(db: Database, sql: str) -> bool:
    """For ``... ORDER BY key LIMIT k``: the k-th and (k+1)-th rows' order keys differ."""
    match = re.search(r"ORDER BY (.+?) (ASC|DESC) LIMIT (\d+)\s*$", sql, flags=re.IGNORECASE)
    if not match:
        return False
    key, direction, k = match.group(1), match.group(2), int(match.group(3))
    head = sql[: match.start()]
    # The same query asking for the order keys of the first k+1 rows instead of the answer.
    probe = f"{head.rstrip()} ORDER BY {key} {direction} LIMIT {k + 1}"
    probe = re.sub(r"^SELECT .+? FROM", f"SELECT {key} FROM", probe, count=1, flags=re.S)
    try:
        keys = [row[0] for row in db.execute(probe, timeout_s=TIMEOUT_S).rows]
    except ExecutionError:
        return False
    return len(keys) <= k or keys[k - 1] != keys[k]


def draft_queries(
    db: Database, n: int, *, seed: int = 0, skip: set[str] | None = None
) -> Iterator[Draft | tuple[str, str, str]]:
    """Yield checked drafts (and ``(template, sql, reason)`` for rejected ones) until ``n``
    drafts or :data:`MAX_DRAWS_PER_PAIR` ``* n`` draws; levels drawn towards :data:`DIFFICULTY_MIX`.

    ``skip`` holds normalised SQL already tried (a resumed run); duplicates never repeat.
    """
    schema = introspect(db)
    if not schema.tables:
        raise SynthesisError(f"{db.name}: the database has no tables")
    rng = random.Random(f"synthesize:{db.name}:{seed}")
    draw = Draw(schema, rng)
    if not draw.tables:
        raise SynthesisError(f"{db.name}: every table is empty; there is nothing to ask about")
    seen = set(skip or ())
    results: set[tuple[str, str]] = set()
    by_level: dict[str, list[Template]] = {}
    for tpl in TEMPLATES:
        by_level.setdefault(tpl[1], []).append(tpl)
    levels, weights = zip(*DIFFICULTY_MIX.items(), strict=True)
    made = idle = 0
    for _ in range(MAX_DRAWS_PER_PAIR * n):
        if made >= n:
            return
        if idle >= MAX_IDLE_DRAWS:  # the schema offers no more distinct queries
            logger.info("%s: no new query in %d draws; the schema is exhausted", db.name, idle)
            return
        level = rng.choices(levels, weights)[0]
        name, _level, fill = rng.choice(by_level[level])
        filled = fill(draw)
        if filled is None or _normal(filled[0]) in seen:
            idle += 1
            continue
        idle = 0
        sql, meaning = filled
        seen.add(_normal(sql))
        verdict = check_draft(db, name, sql, meaning)
        if isinstance(verdict, str):
            yield (name, sql, verdict)
            continue
        if (name, verdict.result_hash) in results:
            yield (name, sql, "same template and result as a kept query")
            continue
        results.add((name, verdict.result_hash))
        made += 1
        yield verdict
