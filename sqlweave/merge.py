"""Merged databases: the tables of many databases in one file, and gold SQL rewritten to match.

Spider's and BIRD's schemas are small, so a program that sends the LM the whole schema never meets
one that does not fit its context window. A merged database is how we make one from real data: every
table of every source database is copied, constraints and rows included, under the name
``<db_id>__<table>`` (so tables of different databases never collide), and each question's gold
SQL is rewritten to the new names with sqlglot. A rewrite counts only if it returns exactly the rows
the original query returns on its own database (:func:`check_rewrite`); a question whose rewrite
does not is dropped from a merged slice and listed as dropped, never silently kept.

BIRD's column descriptions (``database_description/<table>.csv``) are copied under the new table
names, so description-aware programs see them on the merged file too.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from sqlweave.errors import SqlweaveError

SEPARATOR = "__"
"""Between a source database's id and its table's name in a merged table name."""


class MergeError(SqlweaveError, ValueError):
    """A source database cannot be merged (missing, unreadable, or holds what we cannot rename)."""


def _read_only_uri(path: str | Path) -> str:
    """A SQLite URI opening ``path`` read-only: the path escaped (a ``#`` or ``?`` in a folder
    name had cut the URI short, opening an empty database and writing stray files)."""
    return Path(path).resolve().as_uri() + "?mode=ro"


def merged_name(db_id: str, table: str) -> str:
    """The merged name of ``table`` of database ``db_id``."""
    return f"{db_id}{SEPARATOR}{table}"


@dataclass(frozen=True)
class MergedDatabase:
    """A merged file and, per source database, its tables' new names (keys lower-cased)."""

    path: Path
    renames: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def n_tables(self) -> int:
        return sum(len(tables) for tables in self.renames.values())


def _tables(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
        "ORDER BY rowid"
    ).fetchall()
    return [r[0] for r in rows]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _renamed_copy(db_id: str, source: Path, folder: Path) -> tuple[Path, dict[str, str]]:
    """A copy of ``source`` whose tables (and named indexes) carry their merged names.

    SQLite's own ``ALTER TABLE ... RENAME`` rewrites foreign-key references, so the copy's
    ``CREATE TABLE`` statements name the merged tables everywhere.
    """
    if not source.is_file():
        raise MergeError(f"{db_id}: no database file at {source}")
    # in a folder of their own: an id "merged" had named the copy as the file being built
    (folder / "sources").mkdir(exist_ok=True)
    copy = folder / "sources" / f"{db_id}.sqlite"
    src = sqlite3.connect(_read_only_uri(source), uri=True)
    dst = sqlite3.connect(copy)
    try:
        src.backup(dst)
    finally:
        src.close()
    try:
        views = dst.execute("SELECT name FROM sqlite_master WHERE type = 'view'").fetchall()
        if views:
            raise MergeError(f"{db_id}: views cannot be merged ({', '.join(v[0] for v in views)})")
        dst.execute("PRAGMA foreign_keys = OFF")
        dst.execute("PRAGMA legacy_alter_table = OFF")
        renames: dict[str, str] = {}
        for table in _tables(dst):
            new = merged_name(db_id, table)
            dst.execute(f"ALTER TABLE {_quote(table)} RENAME TO {_quote(new)}")
            renames[table.lower()] = new
        indexes = dst.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        ).fetchall()
        for name, sql in indexes:
            dst.execute(f"DROP INDEX {_quote(name)}")
            new_name = _quote(merged_name(db_id, name)).replace("\\", "\\\\")
            new_sql = re.sub(
                r"(INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?)(\"[^\"]+\"|`[^`]+`|\[[^\]]+\]|\S+)",
                rf"\g<1>{new_name}",
                sql,
                count=1,
                flags=re.IGNORECASE,
            )
            dst.execute(new_sql)
        # a read-only merged database runs no trigger, and two sources' triggers may share a name
        triggers = dst.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall()
        for (name,) in triggers:
            dst.execute(f"DROP TRIGGER {_quote(name)}")
        dst.commit()
    finally:
        dst.close()
    return copy, renames


def merge_databases(sources: Mapping[str, str | Path], out: str | Path) -> MergedDatabase:
    """Copy every table of ``sources`` (``db_id -> SQLite file``) into one new file ``out``.

    The file is written beside ``out`` and moved into place only when complete, so an interrupted
    build never leaves a half-merged database behind. Rows, primary and foreign keys (pointing at
    the merged names) and named indexes are kept.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    renames: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        folder = Path(tmp)
        partial = folder / "merged.sqlite"
        merged = sqlite3.connect(partial)
        try:
            merged.execute("PRAGMA foreign_keys = OFF")
            for db_id, source in sources.items():
                if SEPARATOR in db_id:
                    raise MergeError(f"{db_id}: a database id may not contain {SEPARATOR!r}")
                copy, renames[db_id] = _renamed_copy(db_id, Path(source), folder)
                merged.execute("ATTACH DATABASE ? AS src", (str(copy),))
                objects = merged.execute(
                    "SELECT type, name, sql FROM src.sqlite_master "
                    "WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid"
                ).fetchall()
                for kind, name, sql in objects:
                    if kind == "table":
                        merged.execute(sql)
                        merged.execute(
                            f"INSERT INTO main.{_quote(name)} SELECT * FROM src.{_quote(name)}"
                        )
                for kind, _name, sql in objects:
                    if kind in ("index", "trigger"):
                        merged.execute(sql)
                merged.commit()
                merged.execute("DETACH DATABASE src")
                _copy_descriptions(db_id, Path(source), out.parent / "database_description")
            merged.commit()
        finally:
            merged.close()
        partial.replace(out)
    return MergedDatabase(path=out, renames=renames)


def _copy_descriptions(db_id: str, source: Path, target: Path) -> None:
    """BIRD's per-table description CSVs, under the merged table names."""
    folder = source.parent / "database_description"
    if not folder.is_dir():
        return
    target.mkdir(parents=True, exist_ok=True)
    for csv in sorted(folder.glob("*.csv")):
        shutil.copyfile(csv, target / f"{merged_name(db_id, csv.stem)}.csv")


def rewrite_sql(sql: str, renames: Mapping[str, str], dialect: str = "sqlite") -> str:
    """``sql`` with every table of ``renames`` (lower-cased name -> new name) renamed.

    Table references and column qualifiers that name a table are renamed; aliases (``T1``) and
    CTE names are left alone. Raises :class:`sqlglot.errors.SqlglotError` when ``sql`` does not
    parse; whether the rewrite means the same is for :func:`check_rewrite` to say.
    """
    tree = sqlglot.parse_one(sql, read=dialect)
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    aliases = {alias.name.lower() for alias in tree.find_all(exp.TableAlias)}
    for table in tree.find_all(exp.Table):
        new = renames.get(table.name.lower())
        if new and table.name.lower() not in ctes:
            table.set("this", exp.to_identifier(new, quoted=True))
    for column in tree.find_all(exp.Column):
        qualifier = column.table
        if not qualifier:
            continue
        key = qualifier.lower()
        if key in renames and key not in aliases and key not in ctes:
            column.set("table", exp.to_identifier(renames[key], quoted=True))
    return tree.sql(dialect=dialect)


def _rows(path: Path, sql: str, timeout_s: float) -> list[tuple] | None:
    conn = sqlite3.connect(_read_only_uri(path), uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", errors="replace")
    start = time.monotonic()
    conn.set_progress_handler(lambda: int(time.monotonic() - start > timeout_s), 10_000)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def check_rewrite(
    original: str,
    source: str | Path,
    rewritten: str,
    merged: str | Path,
    *,
    timeout_s: float = 30.0,
) -> bool:
    """Whether ``rewritten`` on ``merged`` returns exactly the rows ``original`` returns on
    ``source``: the same multiset, and the same order too (a stricter test than EX needs).

    Both are gold queries from the benchmark's own files, run read-only (``mode=ro``).
    """
    before = _rows(Path(source), original, timeout_s)
    after = _rows(Path(merged), rewritten, timeout_s)
    if before is None or after is None:
        return False
    return before == after or (Counter(before) == Counter(after) and not _ordered(original))


def _ordered(sql: str) -> bool:
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except SqlglotError:
        return True
    return tree.args.get("order") is not None


def table_renames(db_id: str, source: str | Path) -> dict[str, str]:
    """``source``'s tables (lower-cased) -> their merged names, read without merging."""
    conn = sqlite3.connect(_read_only_uri(source), uri=True)
    try:
        return {t.lower(): merged_name(db_id, t) for t in _tables(conn)}
    finally:
        conn.close()
