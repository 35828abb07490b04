"""Database schemas: introspection into a small model, and the renderers the seed prompts use.

Every seed system shows the LM the same facts (tables, columns, keys, descriptions, some values)
in its own layout, and the layout itself is a studied variable (PET-SQL ablates cell values and
foreign keys, SEA-SQL the number of values per column). So the model is introspected once per
database and each layout is a pure function ``render_*(schema, ...) -> str`` over it, with a
``subset`` argument for linked (pruned) schemas.

One job per module: :mod:`~sqlweave.schema.model` (``Schema``, ``Table``, ``Column``,
``ForeignKey``, subsets), :mod:`~sqlweave.schema.introspection` (the catalog through the
database's engine, sampled values through :meth:`Database.execute`, so they obey the same
read-only guard and timeouts as generated SQL), :mod:`~sqlweave.schema.descriptions` (BIRD's
``database_description/<table>.csv`` files), :mod:`~sqlweave.schema.render` (the layouts) and
:mod:`~sqlweave.schema.prompt` (what a generation prompt shows).
"""

from __future__ import annotations

from sqlweave.schema.introspection import _CACHE, clear_cache, introspect, unscoped
from sqlweave.schema.model import Column, ForeignKey, Schema, SubsetSpec, Table
from sqlweave.schema.prompt import native_ddl, prompt_schema
from sqlweave.schema.render import (
    DDL_LAYOUT,
    DDL_LAYOUTS,
    DIALECT_LABELS,
    VALUE_CHARS,
    ident,
    quote,
    render_columns,
    render_compact,
    render_ddl,
    render_ddl_with_rows,
    render_pet,
)

__all__ = [
    "DDL_LAYOUT",
    "DDL_LAYOUTS",
    "DIALECT_LABELS",
    "VALUE_CHARS",
    "Column",
    "ForeignKey",
    "Schema",
    "SubsetSpec",
    "Table",
    "_CACHE",
    "clear_cache",
    "ident",
    "introspect",
    "native_ddl",
    "prompt_schema",
    "quote",
    "render_columns",
    "render_compact",
    "render_ddl",
    "render_ddl_with_rows",
    "render_pet",
    "unscoped",
]
