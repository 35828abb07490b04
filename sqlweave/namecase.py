"""Names as a case-folding engine reads them.

PostgreSQL reads an unquoted name as its lower-case form: ``SELECT ShopName FROM Shop`` asks for
column ``shopname`` of table ``shop``. Tables an ORM makes are often ``"Shop"("ShopName")``, and
a small model that reads ``"Shop"`` in its prompt still writes ``Shop`` (Spider's SQLite, where
case never matters, taught it so), so every query it writes there fails with "relation shop does
not exist". Before a query runs on such an engine, :func:`fit_case` writes each unquoted name
that exists only with capitals as the one name it can mean; it changes nothing else, and nothing
on an engine that matches names regardless of case (SQLite, DuckDB).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from sqlweave.sqltree import parse_sql


def _only_spelling(names: Iterable[str]) -> dict[str, str]:
    """Lower-cased name -> the one real spelling, for names with a capital letter whose lower
    case form is no other name (``"Name"`` beside ``"name"`` is left alone: a bare ``name``
    already means the second)."""
    spellings: dict[str, set[str]] = {}
    for name in names:
        spellings.setdefault(name.lower(), set()).add(name)
    return {
        low: next(iter(real))
        for low, real in spellings.items()
        if len(real) == 1 and low not in real
    }


@dataclass(frozen=True)
class CaseNames:
    """The names a bare (folded) spelling cannot reach: lower-cased -> real, tables and columns."""

    tables: Mapping[str, str] = field(default_factory=dict)
    columns: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, tables: Iterable[Sequence[Any]]) -> CaseNames:
        """From an engine's catalog (:meth:`~sqlweave.db.engine.Engine.reflect`: each table's
        name, then its ``(column, type, kind)`` list; the keys that follow are not read)."""
        tables = list(tables)
        return cls(
            tables=_only_spelling(t[0] for t in tables),
            columns=_only_spelling(c[0] for t in tables for c in t[1]),
        )

    def __bool__(self) -> bool:
        return bool(self.tables or self.columns)


def fit_case(sql: str, names: CaseNames, dialect: str = "postgres") -> str:
    """``sql`` with each unquoted table, column or table qualifier that only ``names`` can mean
    written as that name, quoted. A table renamed without an alias keeps its bare spelling as
    alias, so columns qualified by it still resolve. Names of the query's own (CTEs, aliases,
    output columns) are never touched; SQL that needs nothing, or does not parse, comes back
    unchanged."""
    lowered = sql.lower()
    if not names or not any(low in lowered for low in (*names.tables, *names.columns)):
        return sql
    tree = parse_sql(sql, dialect)
    if tree is None:
        return sql
    own = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    changed = _fit_tables(tree, names.tables, own)
    own |= {t.alias.lower() for t in tree.find_all(exp.Table, exp.Subquery) if t.alias}
    aliases = [a for a in tree.find_all(exp.Alias) if a.alias]
    for col in list(tree.find_all(exp.Column)):
        column = _bare(col.this, names.columns, _reachable(col, aliases))
        if column is not None:
            col.set("this", column)
            changed = True
        qualifier = _bare(col.args.get("table"), names.tables, own)
        if qualifier is not None:
            col.set("table", qualifier)
            changed = True
    return tree.sql(dialect=dialect) if changed else sql


def _reachable(col: exp.Column, aliases: list[exp.Alias]) -> set[str]:
    """The output names ``col`` may mean, left as written: every alias of the query (a
    subquery's or a CTE's is a column to an outer SELECT), except one its own SELECT gives,
    which that SELECT reaches from ORDER BY and GROUP BY alone: in ``ShopName AS shopname`` the
    name is the column being aliased, to be fitted like any other."""
    names = {a.alias.lower() for a in aliases}
    select = col.find_ancestor(exp.Select)
    if select is None or col.find_ancestor(exp.Order, exp.Group) is not None:
        return names
    return {a.alias.lower() for a in aliases if a.parent is not select}


def _fit_tables(tree: exp.Expression, tables: Mapping[str, str], own: set[str]) -> bool:
    changed = False
    for table in list(tree.find_all(exp.Table)):
        if table.args.get("db"):
            continue
        real = _bare(table.this, tables, own)
        if real is None:
            continue
        if not table.alias:
            table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name)))
        table.set("this", real)
        changed = True
    return changed


def _bare(node: object, real: Mapping[str, str], own: set[str]) -> exp.Identifier | None:
    """The quoted real name for an unquoted identifier only ``real`` can mean, else None."""
    if not isinstance(node, exp.Identifier) or node.quoted:
        return None
    low = node.name.lower()
    if low in own or low not in real:
        return None
    return exp.to_identifier(real[low], quoted=True)


__all__ = ["CaseNames", "fit_case"]
