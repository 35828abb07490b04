"""Renderers: each prompt layout a pure function ``render_*(schema, ...) -> str``.

Every seed system shows the LM the same facts (tables, columns, keys, descriptions, some values)
in its own layout, and the layout itself is a studied variable (PET-SQL ablates cell values and
foreign keys, SEA-SQL the number of values per column), so each takes a ``subset`` argument for
linked (pruned) schemas.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlweave.schema.model import Column, Schema, SubsetSpec, Table, _apply

#: Longest cell text shown in a prompt; RSL-SQL truncates long values, and a 2 kB comment
#: column would otherwise drown the schema.
VALUE_CHARS = 60


def quote(name: str) -> str:
    """Always double-quote an identifier: valid in SQLite, PostgreSQL and DuckDB alike."""
    return '"' + name.replace('"', '""') + '"'


# --- value formatting ------------------------------------------------------------------------------


def _shorten(text: str, max_chars: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


def _plain(value: Any, max_chars: int = VALUE_CHARS) -> str:
    """A cell as bare text (PET and CSV layouts)."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes | bytearray | memoryview):
        return "<blob>"
    return _shorten(str(value), max_chars)


def _literal(value: Any, max_chars: int = VALUE_CHARS) -> str:
    """A cell as a SQL literal, so the LM sees strings exactly as it must write them."""
    if isinstance(value, str):
        return "'" + _shorten(value, max_chars).replace("'", "''") + "'"
    return _plain(value, max_chars)


_SIMPLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED = frozenset(
    """add all alter and as asc between by case cast check collate column commit constraint create
    cross current_date current_time current_timestamp default delete desc distinct drop else end
    escape except exists foreign from full glob group having in index inner insert intersect into
    is join key left like limit match natural not null offset on or order outer primary references
    regexp right rollback select set table then to transaction union unique update using values
    when where with
    """
    # Also every word that cannot stand bare as a column or table name on SQLite, DuckDB or
    # PostgreSQL (found by tests/test_schema.py's keyword sweep; no Spider or BIRD name is one,
    # so their prompts are unchanged). SQLite reads a bare true or false as the number.
    """analyze anti any array asof autoincrement binary deferrable describe do fetch for grant
    ilike initially isnull lateral nothing notnull only overlaps pivot positional qualify raise
    returning semi show some summarize tablesample unpivot variadic window true false""".split()
    # and every word sqlglot, which reads each query before it runs (the read-only check),
    # cannot take bare as a name in any of the three dialects (the same sweep, through it)
    + "cube if lock partitioned_by revoke rlike rollup uncache xor".split()
)
#: Words only DuckDB's reading cannot take bare (Spider's phone_1 has a column ``map``, which
#: SQLite's prompts keep bare as they always did).
_RESERVED_DUCKDB = frozenset({"force", "install", "map"})


def ident(name: str, dialect: str = "sqlite") -> str:
    """An identifier as it must be written in SQL: bare when it can be, double-quoted otherwise
    (Spider has columns such as ``Home Town`` and ``order``). On PostgreSQL a bare name means
    its lower-case form, so a name with a capital letter (``"FullName"``, as ORMs create them)
    is quoted there too."""
    if (
        _SIMPLE_NAME.match(name)
        and name.lower() not in _RESERVED
        and (dialect != "duckdb" or name.lower() not in _RESERVED_DUCKDB)
        and (dialect != "postgres" or name == name.lower())
    ):
        return name
    return quote(name)


def _namer(schema: Schema) -> Callable[[str], str]:
    """:func:`ident` for the names of ``schema``'s database (its dialect's quoting rules)."""
    return functools.partial(ident, dialect=schema.dialect)


DDL_LAYOUTS = ("compact", "pretty")
DDL_LAYOUT = "compact"


def _check_layout(layout: str) -> None:
    if layout not in DDL_LAYOUTS:
        raise ValueError(f"unknown DDL layout {layout!r}; choose one of {', '.join(DDL_LAYOUTS)}")


def _create_table_compact(schema: Schema, table: Table, include_pk: bool, include_fks: bool) -> str:
    items = [f"{quote(c.name)} {c.type}".rstrip() for c in table.columns]
    if include_pk and table.primary_key:
        items.append(f"PRIMARY KEY ({', '.join(quote(k) for k in table.primary_key)})")
    if include_fks:
        items += [
            f"FOREIGN KEY ({quote(fk.column)}) REFERENCES {quote(fk.ref_table)} "
            f"({quote(fk.ref_column)})"
            for fk in schema.foreign_keys
            if fk.table == table.name
        ]
    return f"CREATE TABLE {quote(table.name)} ({', '.join(items)});"


def _describe(column: Column) -> str:
    parts = [p.rstrip(".") for p in (column.description, column.value_description) if p]
    return ". ".join(parts)


# --- renderers ---------------------------------------------------------------------------------------


def render_ddl(
    schema: Schema,
    *,
    subset: SubsetSpec | Schema | None = None,
    include_pk: bool = True,
    include_fks: bool = True,
    descriptions: bool = True,
    layout: str = DDL_LAYOUT,
) -> str:
    """``CREATE TABLE`` statements with types and keys (DAIL-SQL / MageSQL layout, the baseline).

    ``layout="compact"`` (default) writes each table on one line with every identifier
    double-quoted, the shape of SQLite's own ``sqlite_master`` DDL that code models saw in
    text-to-SQL training; ``"pretty"`` writes one column per line. Measured with
    Qwen2.5-Coder-1.5B on 57 Spider dev questions (issue 7 note) the compact layout scored higher.
    BIRD descriptions, when the schema has them, follow each column as a ``--`` comment, which
    needs one column per line: such tables are always written pretty.
    """
    _check_layout(layout)
    schema = _apply(schema, subset)
    sep = "\n" if layout == "compact" else "\n\n"
    return sep.join(
        _create_table(schema, t, include_pk, include_fks, descriptions, layout)
        for t in schema.tables
    )


def _create_table(
    schema: Schema,
    table: Table,
    include_pk: bool,
    include_fks: bool,
    descriptions: bool,
    layout: str = DDL_LAYOUT,
) -> str:
    nm = _namer(schema)
    _check_layout(layout)
    if layout == "compact" and not (descriptions and any(_describe(c) for c in table.columns)):
        return _create_table_compact(schema, table, include_pk, include_fks)
    items: list[tuple[str, str]] = []  # (definition, trailing comment)
    for col in table.columns:
        definition = f"{nm(col.name)} {col.type}".rstrip()
        items.append((definition, _describe(col) if descriptions else ""))
    if include_pk and table.primary_key:
        items.append((f"PRIMARY KEY ({', '.join(nm(k) for k in table.primary_key)})", ""))
    if include_fks:
        for fk in schema.foreign_keys:
            if fk.table == table.name:
                items.append(
                    (
                        f"FOREIGN KEY ({nm(fk.column)}) REFERENCES "
                        f"{nm(fk.ref_table)}({nm(fk.ref_column)})",
                        "",
                    )
                )
    lines = [f"CREATE TABLE {nm(table.name)} ("]
    for i, (definition, comment) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        lines.append(f"  {definition}{comma}" + (f" -- {comment}" if comment else ""))
    lines.append(");")
    return "\n".join(lines)


def render_ddl_with_rows(
    schema: Schema,
    *,
    rows: int = 3,
    subset: SubsetSpec | Schema | None = None,
    include_pk: bool = True,
    include_fks: bool = True,
    descriptions: bool = True,
    max_chars: int = VALUE_CHARS,
    layout: str = DDL_LAYOUT,
) -> str:
    """DDL, each table followed by up to ``rows`` sample rows as CSV in a comment (Dubo-SQL v1,
    which shows up to 5 rows and drops primary keys: ``include_pk=False``). ``layout`` as in
    :func:`render_ddl`."""
    nm = _namer(schema)
    _check_layout(layout)
    schema = _apply(schema, subset)
    blocks = []
    for table in schema.tables:
        block = _create_table(schema, table, include_pk, include_fks, descriptions, layout)
        sample = table.sample_rows[:rows]
        if rows > 0 and sample:
            buffer = io.StringIO()
            writer = csv.writer(buffer, lineterminator="\n")
            writer.writerow(table.column_names)
            for row in sample:
                writer.writerow([_plain(v, max_chars) for v in row])
            block += (
                f"\n/*\n{len(sample)} example rows from table {nm(table.name)}:\n"
                f"{buffer.getvalue()}*/"
            )
        blocks.append(block)
    return "\n\n".join(blocks)


#: How each dialect is named in prompts ("Using valid PostgreSQL, …").
DIALECT_LABELS = {
    "sqlite": "SQLite",
    "postgres": "PostgreSQL",
    "postgresql": "PostgreSQL",
    "duckdb": "DuckDB",
    "mysql": "MySQL",
}


def render_pet(
    schema: Schema,
    *,
    values_per_column: int = 3,
    subset: SubsetSpec | Schema | None = None,
    include_values: bool = True,
    include_fks: bool = True,
    max_chars: int = VALUE_CHARS,
) -> str:
    """PET-SQL's reference-enhanced representation (Listing 2), with its ablatable parts.

    ``# table(col, …);`` lines; then, with ``include_values`` (CV), the first
    ``values_per_column`` rows of each table column-wise as ``# table(col[v1,v2,v3], …);``;
    then, with ``include_fks`` (FK), ``# t(col) REFERENCES t2(col);`` lines.
    """
    nm = _namer(schema)
    schema = _apply(schema, subset)
    label = DIALECT_LABELS.get(schema.dialect, schema.dialect)
    lines = [f"### {label} SQL tables, with their properties:", "#"]
    for table in schema.tables:
        cols = ", ".join(nm(c.name) for c in table.columns)
        lines.append(f"# {nm(table.name)}({cols});")
    lines.append("#")
    if include_values and values_per_column > 0:
        lines += ["### Here is some data information about database references.", "#"]
        for table in schema.tables:
            rows = table.sample_rows[:values_per_column]
            if not rows:
                continue  # an empty table has nothing to show, and `col[]` would only confuse
            cols = ", ".join(
                f"{nm(c.name)}[{','.join(_plain(r[i], max_chars) for r in rows)}]"
                for i, c in enumerate(table.columns)
            )
            lines.append(f"# {nm(table.name)}({cols});")
        lines.append("#")
    if include_fks and schema.foreign_keys:
        lines += [f"### Foreign key information of {label} tables, used for table joins:", "#"]
        lines += [
            f"# {nm(fk.table)}({nm(fk.column)}) REFERENCES {nm(fk.ref_table)}({nm(fk.ref_column)});"
            for fk in schema.foreign_keys
        ]
        lines.append("#")
    return "\n".join(lines)


def render_compact(
    schema: Schema,
    *,
    subset: SubsetSpec | Schema | None = None,
    values: Mapping[tuple[str, str], Sequence[Any]] | None = None,
    max_chars: int = VALUE_CHARS,
) -> str:
    """``# table(col, …)`` lines (SEA-SQL), optionally with retrieved values per column.

    ``values`` maps ``(table, column)`` (case-insensitive) to values, e.g. from
    :meth:`sqlweave.values.ValueIndex.retrieve`; they print as SQL literals after the column:
    ``# singer(name ['Joe Sharp'], age)``.
    """
    nm = _namer(schema)
    schema = _apply(schema, subset)
    lookup = {(t.lower(), c.lower()): v for (t, c), v in (values or {}).items()}
    lines = []
    for table in schema.tables:
        parts = []
        for col in table.columns:
            found = lookup.get((table.name.lower(), col.name.lower()))
            if found:
                shown = ", ".join(_literal(v, max_chars) for v in found)
                parts.append(f"{nm(col.name)} [{shown}]")
            else:
                parts.append(nm(col.name))
        lines.append(f"# {nm(table.name)}({', '.join(parts)})")
    return "\n".join(lines)


def render_columns(
    schema: Schema,
    *,
    subset: SubsetSpec | Schema | None = None,
    examples: int = 5,
    include_fks: bool = True,
    max_chars: int = VALUE_CHARS,
) -> str:
    """One line per column (Dubo-SQL v2, after MAC-SQL), with BIRD descriptions and examples:

    ``table.column (type): description. Value description. Example values: 'a', 'b'``

    Primary keys are marked, and foreign keys follow as ``table.col = table2.col`` lines.
    """
    nm = _namer(schema)
    schema = _apply(schema, subset)
    lines = []
    for table in schema.tables:
        for col in table.columns:
            head = f"{nm(table.name)}.{nm(col.name)}"
            tags = [col.type] if col.type else []
            if col.name in table.primary_key:
                tags.append("primary key")
            if tags:
                head += f" ({', '.join(tags)})"
            text = _describe(col)
            if text and not text.endswith((".", "!", "?", '"')):
                text += "."
            line = f"{head}: {text}" if text else head + "."
            if examples > 0 and col.samples:
                shown = ", ".join(_literal(v, max_chars) for v in col.samples[:examples])
                line += f" Example values: {shown}"
            lines.append(line)
    if include_fks and schema.foreign_keys:
        lines.append("Foreign keys:")
        lines += [
            f"{nm(fk.table)}.{nm(fk.column)} = {nm(fk.ref_table)}.{nm(fk.ref_column)}"
            for fk in schema.foreign_keys
        ]
    return "\n".join(lines)
