"""Plain inputs: your own questions as train or validation examples, checked before any work.

Programs, metrics and optimizers read the fields the benchmark loaders write
(:mod:`sqlweave.data`): ``question``, ``gold_sql``, ``db_id``, ``db_path``, ``evidence``,
``question_id``, ``difficulty``, ``source``, ``split``, with the first four of
:data:`~sqlweave.data.INPUT_FIELDS` marked as inputs. A hand-made ``dspy.Example`` rarely has
them all, and each missing one used to surface alone, deep in a run (``gold_sql``, then
``question_id``, then ``db_id`` only after the optimizer had run). Here a person writes

```python
sqlweave.Example(question="How many singers?", sql="SELECT count(*) FROM singer", db="concert.sqlite")
```

or a dict with the same keys, or a ``dspy.Example`` with any of the accepted spellings, and
:func:`as_examples` fills the rest and names *every* missing field of *every* item in one
:class:`~sqlweave.data.DataError` before an optimizer starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import dspy

from sqlweave.benchmarks import file_exists, is_url, url_name
from sqlweave.data import INPUT_FIELDS, DataError, database_path
from sqlweave.hardness import spider_hardness

__all__ = ["Example", "as_examples"]

#: Accepted spellings of each field, the canonical name first.
ALIASES: dict[str, tuple[str, ...]] = {
    "question": ("question",),
    "gold_sql": ("gold_sql", "sql", "SQL", "query"),
    "db_path": ("db_path", "db"),
}


def Example(  # noqa: N802 - reads as a class, as dspy.Example does
    question: str,
    sql: str = "",
    db: str | Path | None = None,
    *,
    db_id: str | None = None,
    evidence: str = "",
    question_id: str | None = None,
    difficulty: str | None = None,
) -> dspy.Example:
    """One question with its gold SQL and database (a SQLite path, or a bundled ``db_id``), as
    the ``dspy.Example`` every sqlweave program, metric and optimizer reads.

    Raises :class:`~sqlweave.data.DataError` naming each field that is missing or unusable.
    """
    item: dict[str, Any] = {"question": question, "sql": sql, "evidence": evidence}
    if db is not None:
        item["db"] = db
    if db_id is not None:
        item["db_id"] = db_id
    if question_id is not None:
        item["question_id"] = question_id
    if difficulty is not None:
        item["difficulty"] = difficulty
    return as_examples([item], what="Example", need_sql=False)[0]


def _get(item: Mapping[str, Any], field: str) -> Any:
    for name in ALIASES.get(field, (field,)):
        value = item.get(name)
        if value not in (None, ""):
            return value
    return None


def _fields(item: Any) -> Mapping[str, Any] | None:
    if isinstance(item, dspy.Example):
        return dict(item.items())
    if isinstance(item, Mapping):
        return item
    return None


def _prepare(i: int, item: Mapping[str, Any], need_sql: bool) -> tuple[dict[str, Any], list[str]]:
    """The full field set of one item, and what is missing or wrong with it."""
    problems: list[str] = []
    question = _get(item, "question")
    if not isinstance(question, str) or not question.strip():
        problems.append("question")
    gold = _get(item, "gold_sql")
    if gold is not None and not isinstance(gold, str):
        problems.append("sql (must be a string)")
        gold = None
    if need_sql and not gold:
        problems.append("sql (gold query; also read from gold_sql, SQL or query)")
    db_path = _get(item, "db_path")
    db_id = item.get("db_id")
    if db_id is not None and not isinstance(db_id, str):
        problems.append(f"db_id (must be a string, not {type(db_id).__name__})")
        db_id = None
    if db_path is not None and not isinstance(db_path, str | Path):
        problems.append("db (a SQLite file path)")
        db_path = None
    if db_path is None and db_id:
        try:
            db_path = database_path(str(db_id))
        except DataError:
            problems.append(f"db (database {db_id!r} not found; give db=PATH)")
    elif db_path is None:
        problems.append("db (a SQLite file path, or db_id of a bundled database)")
    elif not is_url(db_path) and not file_exists(Path(db_path).expanduser()):
        problems.append(f"db (no SQLite file at {db_path})")
    if problems:
        return {}, problems
    # A URL (a synthesized pair's PostgreSQL or DuckDB database) is opened as given.
    db_file = Path(db_path).expanduser() if not is_url(db_path) else None
    difficulty = item.get("difficulty")
    if not difficulty:
        try:
            difficulty = spider_hardness(gold) if gold else "unknown"
        except ValueError:
            difficulty = "unknown"
    fields = {
        **{k: v for k, v in item.items() if k not in ("sql", "SQL", "query", "db")},
        "question": question,
        "gold_sql": gold or "",
        "db_path": str(db_file) if db_file is not None else str(db_path),
        "db_id": str(db_id or (db_file.stem if db_file is not None else url_name(str(db_path)))),
        "evidence": str(item.get("evidence") or ""),
        "question_id": str(item.get("question_id") or f"q{i}"),
        "difficulty": str(difficulty),
        "source": str(item.get("source") or "user"),
        "split": str(item.get("split") or "user"),
    }
    return fields, []


def as_examples(
    items: Iterable[Any], *, what: str = "trainset", need_sql: bool = True
) -> list[dspy.Example]:
    """``items`` (``dspy.Example``\\ s, dicts or :func:`Example`\\ s) as complete examples.

    Accepted spellings: ``sql``/``SQL``/``query`` for ``gold_sql``, ``db`` for ``db_path``;
    ``db_id`` alone finds a bundled database. Filled when absent: ``db_id`` (the file's stem),
    ``evidence`` (``""``), ``question_id`` (``q<i>``), ``difficulty`` (Spider's rules on the
    gold SQL), ``source`` and ``split`` (``"user"``). Examples that already have every field
    (the benchmark loaders') keep every field they have. One :class:`~sqlweave.data.DataError`
    lists every problem of every item, so a person fixes them all at once.
    """
    if isinstance(items, str | bytes | dict) or not hasattr(items, "__iter__"):
        # "spider" would otherwise be read as six one-letter items
        raise ValueError(
            f"{what} must be a list of examples (dspy.Example, dict or sqlweave.Example), "
            f"not {type(items).__name__}"
        )
    out: list[dspy.Example] = []
    problems: list[str] = []
    seen_ids: dict[str, int] = {}
    for i, item in enumerate(items):
        fields = _fields(item)
        if fields is None:
            problems.append(f"item {i}: a {type(item).__name__}, not an Example or dict")
            continue
        prepared, missing = _prepare(i, fields, need_sql)
        if missing:
            problems.append(f"item {i}: {', '.join(missing)}")
            continue
        qid = prepared["question_id"]
        if qid in seen_ids:
            problems.append(f"item {i}: question_id {qid!r} repeats item {seen_ids[qid]}")
            continue
        seen_ids[qid] = i
        out.append(dspy.Example(**prepared).with_inputs(*INPUT_FIELDS))
    if problems:
        shown = "; ".join(problems[:20]) + (
            f"; ... {len(problems) - 20} more" if len(problems) > 20 else ""
        )
        raise DataError(None, f"{what}: {len(problems)} of the examples cannot be used ({shown})")
    return out
