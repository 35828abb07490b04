"""Reading a database's catalog into plain tuples (:data:`RawTable`).

The generic path is SQLAlchemy's inspector; an engine whose dialect package reflects badly
(DuckDB) overrides :meth:`Engine.reflect` with its own catalog queries and uses
:func:`kind_from_text` for the coarse kinds.
"""

from __future__ import annotations

import warnings
from typing import Any

import sqlalchemy as sa
from sqlalchemy import types as sat

#: A reflected table: name, [(column, type text, kind)], primary key,
#: [(columns, referenced table, referenced columns)].
RawTable = tuple[str, list[tuple[str, str, str]], list[str], list[tuple[list[str], str, list[str]]]]


def reflect_sqlalchemy(engine: sa.Engine) -> list[RawTable]:
    """Every table of ``engine``'s database through SQLAlchemy's inspector."""
    out: list[RawTable] = []
    with warnings.catch_warnings():
        # Spider's MySQL-style types (INTEGER(11)) make SQLAlchemy warn once per column.
        warnings.simplefilter("ignore", sa.exc.SAWarning)
        inspector = sa.inspect(engine)
        for name in inspector.get_table_names():
            columns = [
                (c["name"], _type_text(c["type"], engine.dialect), _kind(c["type"]))
                for c in inspector.get_columns(name)
            ]
            pk = inspector.get_pk_constraint(name).get("constrained_columns") or []
            fks = [
                (fk["constrained_columns"], fk["referred_table"], fk.get("referred_columns") or [])
                for fk in inspector.get_foreign_keys(name)
            ]
            out.append((name, columns, list(pk), fks))
    return out


def kind_from_text(type_text: str) -> str:
    """The coarse kind of a type given by name (DuckDB's information_schema)."""
    t = type_text.upper()
    if t.startswith("BOOL"):
        return "boolean"
    if any(k in t for k in ("DATE", "TIME", "INTERVAL")):  # before INT: INTERVAL contains it
        return "date"
    if any(k in t for k in ("INT", "DECIMAL", "NUMERIC", "DOUBLE", "FLOAT", "REAL")):
        return "number"
    if any(k in t for k in ("CHAR", "TEXT", "STRING", "VARCHAR")):
        return "text"
    if any(k in t for k in ("BLOB", "BYTEA", "BINARY")):
        return "blob"
    return "other"


def _type_text(col_type: Any, dialect: sa.Dialect) -> str:
    if isinstance(col_type, sat.NullType):
        return ""
    try:
        return str(col_type.compile(dialect=dialect))
    except Exception:  # exotic reflected types (DuckDB, PG extensions) may not compile
        return type(col_type).__name__.upper()


def _kind(col_type: Any) -> str:
    if isinstance(col_type, sat.NullType):
        return "unknown"
    if isinstance(col_type, sat.Boolean):
        return "boolean"
    if isinstance(col_type, sat.Integer | sat.Numeric | sat.Float):
        return "number"
    if isinstance(col_type, sat.Date | sat.DateTime | sat.Time):
        return "date"
    if isinstance(col_type, sat.String):
        return "text"
    if isinstance(col_type, sat.LargeBinary | sat.BINARY | sat.VARBINARY):
        return "blob"
    return "other"
