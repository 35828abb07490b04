"""Short table names for a narrowed view of a namespaced schema, and the way back.

A database that holds several applications often namespaces its tables (``shop__orders``,
``hr__employee``; our merged benchmark names them ``<db_id>__<table>``). When schema filtering
narrows such a database to the tables of *one* namespace, the prefix says nothing the LM needs,
and it costs: on the 59 spider-dev-200-merged questions whose view was exactly their own
database's tables, the best program scored 35 with the prefixed names against 46 on the
database itself. So a view of one namespace shows its tables under their short names, and SQL
written with those names is mapped back before it runs (:func:`to_real`) and before a program
returns it.

Only a prefix ending in ``__`` shared by every table of the view is dropped (a single ``_`` is
too often part of a name: ``student_course``), and only when the short names stay distinct.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from sqlglot import exp

from sqlweave.sqltree import parse_sql

SEPARATOR = "__"


def short_names(tables: Iterable[str]) -> dict[str, str]:
    """``{real: short}`` for a view whose tables share one ``<namespace>__`` prefix, else ``{}``."""
    names = list(tables)
    if not names or any(SEPARATOR not in n for n in names):
        return {}
    prefixes = {n.split(SEPARATOR, 1)[0].lower() for n in names}
    if len(prefixes) != 1:
        return {}
    short = {n: n.split(SEPARATOR, 1)[1] for n in names}
    lowered = [s.lower() for s in short.values()]
    if len(set(lowered)) != len(lowered) or not all(re.match(r"[A-Za-z_]", s) for s in lowered):
        return {}
    return short


def to_real(sql: str, aliases: Mapping[str, str], dialect: str = "sqlite") -> str:
    """``sql`` with every table named by a short name (``aliases``: short, lower-cased -> real)
    renamed to its real name; an unaliased table keeps its short name as alias, so columns
    qualified by it still resolve. SQL naming no short name, or that does not parse, comes back
    unchanged (it then fails, or runs, as written)."""
    lowered = sql.lower()
    if not aliases or not any(s in lowered for s in aliases):
        return sql
    tree = parse_sql(sql, dialect)
    if tree is None:
        return sql
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    changed = False
    for table in list(tree.find_all(exp.Table)):
        name = table.name.lower()
        if table.args.get("db") or name in ctes or name not in aliases:
            continue
        if not table.alias:
            # the short name as written, quotes kept: `"order"` must not become `AS order`
            table.set("alias", exp.TableAlias(this=table.this.copy()))
        table.set("this", exp.to_identifier(aliases[name], quoted=True))
        changed = True
    return tree.sql(dialect=dialect) if changed else sql


def ddl_with_short_names(ddl: str, display: Mapping[str, str], dialect: str = "sqlite") -> str:
    """CREATE TABLE text with each real table name (``display``: real, lower-cased -> short)
    written as its short name, quoted as the original was; a bare original whose short name
    cannot stand bare (``shop__order`` shown as ``order``) is quoted as SQL must write it."""
    from sqlweave.schema.render import ident

    for real, short in display.items():
        pattern = re.compile(
            r"(?<![\w\"`\[])([\"`\[]?)" + re.escape(real) + r"([\"`\]]?)(?![\w])", re.IGNORECASE
        )

        def written(m: re.Match[str], s: str = short) -> str:
            if not m.group(1) and not m.group(2):
                return ident(s, dialect)
            return f"{m.group(1)}{s}{m.group(2)}"

        ddl = pattern.sub(written, ddl)
    return ddl
