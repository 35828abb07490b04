"""The schema text a generation prompt shows: the database's own DDL, or a rendered layout."""

from __future__ import annotations

from collections.abc import Iterable

from sqlweave.db import Database, ExecutionError
from sqlweave.schema.introspection import introspect
from sqlweave.schema.render import render_ddl
from sqlweave.tablenames import ddl_with_short_names


def native_ddl(db: Database, tables: Iterable[str] | None = None) -> str:
    """The database's own CREATE TABLE statements (where the engine keeps them, as SQLite does),
    else DDL rendered from introspection.

    ``tables`` (e.g. a linker's) keeps only theirs, matched without regard to case; a scoped
    view (:func:`sqlweave.schema_filter.scoped`) shows only its visible tables.
    """
    aliases = db.table_aliases or {}
    display = db.display_names or {}
    # ``tables`` may use a view's short names: compare real names (lower-cased)
    keep = None if tables is None else {aliases.get(t.lower(), t).lower() for t in tables}
    visible = db.visible_tables
    if visible is not None:
        keep = set(visible) if keep is None else keep & visible
    query = db.backend.ddl_query
    if query is not None:
        try:
            result = db.execute(query, use_cache=True)
            statements = [
                str(row[0]).strip()
                for row in result.rows
                if keep is None or str(row[1]).lower() in keep
            ]
            if statements:
                text = "\n".join(statements)
                return ddl_with_short_names(text, display) if display else text
        except ExecutionError:
            pass
    schema = introspect(db)
    if keep is not None:
        shown = {display.get(k, k).lower() for k in keep}
        schema = schema.subset(tables=[t.name for t in schema.tables if t.name.lower() in shown])
    return render_ddl(schema, layout="pretty")


def prompt_schema(db: Database, layout: str = "native", tables: Iterable[str] | None = None) -> str:
    """The schema as a generation prompt shows it: ``native`` (:func:`native_ddl`) or a
    :func:`render_ddl` layout (``compact``, ``pretty``); ``tables`` (a linker's) keeps only
    theirs."""
    if layout == "native":
        return native_ddl(db, tables)
    schema = introspect(db)
    if tables is not None:
        schema = schema.subset(tables=sorted(tables))
    return render_ddl(schema, layout=layout)
