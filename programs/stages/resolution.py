"""Which schema table and column each name of a query denotes, looking through aliases.

The rule passes (:mod:`sqlweave.programs.stages.rules`) and the join completion
(:mod:`sqlweave.programs.stages.joins`) both ask of a parsed query: what does this column mean in its
scope? A name resolves outward through the SELECTs around it (a correlated subquery reads its
outer query's sources); a source the schema cannot describe (a subquery, a CTE, an unknown table)
makes its scope opaque, so an unqualified name there is taken as known rather than wrong.
"""

from __future__ import annotations

from collections.abc import Iterator

from sqlglot import exp

from sqlweave.schema import Column, Schema, Table


def cte_names(root: exp.Expression) -> set[str]:
    return {cte.alias_or_name.lower() for cte in root.find_all(exp.CTE)}


def enclosing_selects(node: exp.Expression) -> Iterator[exp.Select]:
    """The SELECTs around ``node``, innermost first (a correlated name resolves outward)."""
    parent = node.parent
    while parent is not None:
        if isinstance(parent, exp.Select):
            yield parent
        parent = parent.parent


def sources_of(select: exp.Select) -> dict[str, exp.Expression]:
    """``{alias or name (lower-case): Table or Subquery}`` of one SELECT's FROM and JOINs."""
    out: dict[str, exp.Expression] = {}
    items = []
    from_ = select.args.get("from_")
    if from_ is not None:
        items.append(from_.this)
    items += [j.this for j in select.args.get("joins") or []]
    for item in items:
        if isinstance(item, exp.Table | exp.Subquery):
            out[item.alias_or_name.lower()] = item
    return out


class Resolver:
    """Maps tables and columns of one query to the schema, looking through aliases."""

    def __init__(self, root: exp.Expression, schema: Schema) -> None:
        self.root = root
        self.schema = schema
        self.ctes = cte_names(root)

    def table_of(self, source: exp.Expression) -> Table | None:
        """The schema table a FROM/JOIN item reads, or None (subquery, CTE, unknown name)."""
        if not isinstance(source, exp.Table) or source.name.lower() in self.ctes:
            return None
        return self.schema.find_table(source.name)

    def opaque(self, select: exp.Select) -> bool:
        """True when some source of ``select`` has columns the schema cannot tell (subquery, CTE,
        unknown table): an unqualified name might come from it."""
        return any(self.table_of(s) is None for s in sources_of(select).values())

    def source_tables(self, select: exp.Select) -> list[Table]:
        """The schema tables read by ``select``'s FROM and JOINs, in query order."""
        return [t for s in sources_of(select).values() if (t := self.table_of(s)) is not None]

    def resolve(self, col: exp.Column) -> tuple[Table, Column] | None:
        """The schema table and column ``col`` denotes, or None when it is not a schema column
        (unknown name, output alias, column of a subquery or CTE)."""
        qualifier = col.table.lower()
        for select in enclosing_selects(col):
            sources = sources_of(select)
            if qualifier:
                if qualifier in sources:
                    table = self.table_of(sources[qualifier])
                    found = table.column(col.name) if table is not None else None
                    return (table, found) if table is not None and found is not None else None
                continue
            for source in sources.values():
                table = self.table_of(source)
                found = table.column(col.name) if table is not None else None
                if table is not None and found is not None:
                    return table, found
            if self.opaque(select) or is_output_alias(col, select):
                return None
        return None

    def known(self, col: exp.Column) -> bool:
        """True when ``col`` means something: a schema column, an output alias, a column of a
        subquery or CTE, or anything in a scope whose sources we cannot see."""
        if self.resolve(col) is not None:
            return True
        qualifier = col.table.lower()
        selects = list(enclosing_selects(col))
        if not selects:
            return True  # e.g. ORDER BY of a set operation: its names are the output columns
        for select in selects:
            sources = sources_of(select)
            if qualifier:
                if qualifier in sources:
                    return self.table_of(sources[qualifier]) is None
                continue
            if self.opaque(select) or is_output_alias(col, select):
                return True
        # A qualifier naming no source, or a name found in no source: unknown.
        return False


def is_output_alias(col: exp.Column, select: exp.Select) -> bool:
    name = col.name.lower()
    return any(isinstance(e, exp.Alias) and e.alias.lower() == name for e in select.expressions)


def is_sqlite_string(col: exp.Column, resolver: Resolver, dialect: str) -> bool:
    """SQLite reads a ``"double-quoted"`` name that is no column as a string literal; Spider's
    gold SQL writes most values that way. Operands of comparisons count, and what a CASE or
    IIF gives back (``THEN "Aged" ELSE "Young"``: constants someone meant, which a rewrite to
    the nearest column, ``Age``, turned into numbers); a quoted unknown name standing alone in
    the SELECT list is a misspelt column."""
    ident = col.this
    return (
        dialect == "sqlite"
        and not col.table
        and isinstance(ident, exp.Identifier)
        and bool(ident.args.get("quoted"))
        and _value_place(col)
        and resolver.resolve(col) is None
    )


def _value_place(col: exp.Column) -> bool:
    """Whether ``col`` stands where a value does: a comparison's operand, a CASE or IIF
    branch's result (not its condition)."""
    parent = col.parent
    if isinstance(parent, exp.Binary | exp.In | exp.Between):
        return True
    if isinstance(parent, exp.If):
        return col.arg_key in ("true", "false")
    return isinstance(parent, exp.Case) and col.arg_key == "default"


def inside_select_body(col: exp.Column) -> bool:
    """False for names in places that are not column references (aliases, function options)."""
    return next(enclosing_selects(col), None) is not None


__all__ = [
    "Resolver",
    "cte_names",
    "enclosing_selects",
    "inside_select_body",
    "is_output_alias",
    "is_sqlite_string",
    "sources_of",
]
