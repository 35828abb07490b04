"""MageSQL's rule-based SQL corrections (§III-D), as a table of pure sqlglot passes.

MageSQL repairs generated SQL before (and instead of) asking the LM again: literals are aligned
with the values really stored, names that do not exist are replaced by the closest existing ones,
aggregations that cannot mean anything are simplified, and join conditions between keys that
cannot join are replaced by the foreign-key pair. When any rule fires, the prompt-based
correction is skipped; otherwise it runs only on hard cases (:func:`is_hard_case`).

Each rule is ``rule(expr, ctx) -> Expression | None``: it works on a copy, returns the corrected
tree when it changed something and ``None`` otherwise, and never mutates its input. The table
:data:`RULES` is applied in order by :func:`apply_rules`, each rule seeing the previous one's
output (a table name fixed by the schema rule lets the join rule see the real table).

The rules are deliberately conservative: a rule that rewrites correct SQL costs accuracy that
the paper's rules were meant to win. The acceptance check (``tests/test_rules.py``) runs them over
the 827 Spider dev gold queries: only 9 change, all lower-cased literals that match no stored
value (a known Spider annotation defect), which the value rule capitalises. The conservative
choices, each a narrowing of the paper's one-line description:

* string format: only ``=``, ``!=``, ``IN`` and wildcard-free ``LIKE`` against an indexed text
  column; replaced only when the literal is absent from that column and one stored value is the
  same but for letter case, spacing or punctuation, or contains it (literal of at least 4
  characters, one candidate), or is a near spelling (difflib ratio >= 0.85, one candidate).
* schema mismatch: names are replaced only when they resolve nowhere (not a table, CTE, column of
  a source, output alias or outer-query column), and only by a name with difflib ratio >= 0.6.
  SQLite reads an unresolvable ``"double-quoted"`` operand of a comparison as a string, so those
  are left alone.
* invalid aggregation: MIN/MAX is removed only over a text column whose stored values are mostly
  not quantities or dates (``MAX(year)`` on a text year, ``MIN(birth_date)`` on 'May 26, 1986',
  ``MAX(duration)`` on '3:45' are meaningful and kept), i.e. over names and labels, where the
  alphabetical extreme is almost never what the question asks; ``COUNT(a, b)`` (an error in
  SQLite) keeps its first argument. SQLite's two-argument scalar ``MAX(a, b)`` is never touched.
* join condition: a single ``ON a.x = b.y`` is rewritten only when the pair is not a foreign key,
  the two columns' types are incompatible or their names unrelated, and the schema declares a
  foreign key between these two tables to use instead (the only one, or the only one sharing a
  column with the written pair). The paper's other branch (no foreign key: drop the condition)
  is taken only for an inner join whose table is referenced nowhere else in the query and whose
  column types cannot compare (text against number); the join itself is then removed, since
  dropping only its condition would leave a cross join that multiplies rows.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlglot import exp

from sqlweave.db import Database, ExecutionError
from sqlweave.metrics import spider_hardness
from sqlweave.programs.base import resolve_database
from sqlweave.programs.stages.resolution import (
    Resolver,
    cte_names,
    enclosing_selects,
    inside_select_body,
    is_sqlite_string,
    sources_of,
)
from sqlweave.schema import Column, Schema, Table, introspect
from sqlweave.sqltree import parse_sql
from sqlweave.values import ValueIndex

logger = logging.getLogger(__name__)

#: Smallest difflib ratio for replacing an unknown table or column name.
NAME_CUTOFF = 0.6
#: Smallest difflib ratio for replacing a literal by a differently spelled stored value.
VALUE_CUTOFF = 0.85
#: Shortest literal that may be completed to a stored value containing it ('Beatles').
MIN_SUBSTRING_CHARS = 4

#: Text that starts like a quantity: numbers, ISO dates, times ('3:45'), prices ('$12'),
#: measures ('12 kg'). MIN/MAX over such text is rarely alphabetical by intent.
_QUANTITY = re.compile(r"^[-+]?[$€£¥]?\s*\.?\d")
_MONTH = r"(jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_WORDY_DATE = re.compile(
    rf"^\s*({_MONTH}\s+\d{{1,2}}(st|nd|rd|th)?,?\s+\d{{4}}|\d{{1,2}}\s+{_MONTH},?\s+\d{{4}}"
    rf"|{_MONTH}\s+\d{{4}})\s*$",
    re.IGNORECASE,
)
_PLACEHOLDERS = frozenset({"null", "none", "nan", "n/a", "na", "-", "?"})
_FORMAT_NOISE = re.compile(r"[\s\W_]+")
_INCOMPATIBLE_KINDS = frozenset({frozenset({"number", "text"}), frozenset({"date", "number"})})


# --- context and results ---------------------------------------------------------------------------


@dataclass
class RuleContext:
    """What the rules may consult: the schema, and the stored values (built only when needed).

    ``value_index`` is built from ``db`` the first time :meth:`values` is called; without a
    database and without an index, the value rule simply does not run.
    """

    schema: Schema
    value_index: ValueIndex | None = None
    dialect: str = "sqlite"
    db: Database | None = None
    _built: bool = field(default=False, init=False, repr=False)

    def values(self) -> ValueIndex | None:
        """The value index, building it from ``db`` on first use (disk-cached per database)."""
        if self.value_index is None and self.db is not None and not self._built:
            self._built = True
            self.value_index = ValueIndex.build(self.db)
        return self.value_index


@dataclass(frozen=True)
class RuleResult:
    """The corrected SQL, the names of the rules that fired (in order) and the input SQL."""

    sql: str
    fired: list[str]
    original: str

    @property
    def changed(self) -> bool:
        return bool(self.fired)


Rule = Callable[[exp.Expression, RuleContext], exp.Expression | None]


def _closest(name: str, candidates: Sequence[str], cutoff: float = NAME_CUTOFF) -> str | None:
    """The candidate most similar to ``name`` (case-insensitive), or None below ``cutoff``."""
    lower = {c.lower(): c for c in reversed(candidates)}
    found = difflib.get_close_matches(name.lower(), list(lower), n=1, cutoff=cutoff)
    return lower[found[0]] if found else None


# --- rule 1: string format -------------------------------------------------------------------------


def _format_key(text: str) -> str:
    return _FORMAT_NOISE.sub("", text.lower())


def _better_value(
    literal: str, stored: list[str], index: ValueIndex, table: str, column: str
) -> str | None:
    """The one stored value ``literal`` was meant to be, or None when it exists or is unclear."""
    if literal in stored:
        return None
    matches = index.match(literal, table, column, limit=50, cutoff=VALUE_CUTOFF)
    case = [m.value for m in matches if m.kind == "case"]
    if case:
        return case[0] if len(set(case)) == 1 else None
    key = _format_key(literal)
    if key:
        same = {v for v in stored if _format_key(v) == key}
        if len(same) == 1:
            return same.pop()
        if same:
            return None
    if len(literal.strip()) >= MIN_SUBSTRING_CHARS:
        low = literal.strip().lower()
        inside = {m.value for m in matches if m.kind == "substring" and low in m.value.lower()}
        if len(inside) == 1:
            return inside.pop()
    fuzzy = {m.value for m in matches if m.kind == "fuzzy" and m.score >= VALUE_CUTOFF}
    if len(fuzzy) == 1:
        return fuzzy.pop()
    return None


def _literal_text(node: exp.Expression, resolver: Resolver, dialect: str) -> str | None:
    if isinstance(node, exp.Literal) and node.is_string:
        return node.this
    if isinstance(node, exp.Column) and is_sqlite_string(node, resolver, dialect):
        return node.name
    return None


def _comparisons(root: exp.Expression) -> Iterator[tuple[exp.Expression, exp.Expression, list]]:
    """(predicate, column side, literal nodes) for the predicates the value rule understands."""
    for node in root.find_all(exp.EQ, exp.NEQ, exp.In, exp.Like):
        if isinstance(node, exp.In):
            if node.args.get("query") is None and node.expressions:
                yield node, node.this, list(node.expressions)
            continue
        left, right = node.this, node.expression
        if isinstance(left, exp.Column) and not isinstance(right, exp.Column | exp.Literal):
            continue
        yield node, left, [right]
        if isinstance(node, exp.EQ | exp.NEQ):
            yield node, right, [left]


def fix_string_format(expr: exp.Expression, ctx: RuleContext) -> exp.Expression | None:
    """Replace a string literal absent from the column it is compared with by the stored value it
    was meant to be ('male' -> 'Male', 'Beatles' -> 'The Beatles'): an equality against a value
    that does not exist returns nothing, and the LM cannot see the data to know the spelling."""
    tree = expr.copy()
    resolver = Resolver(tree, ctx.schema)
    index: ValueIndex | None = None
    changed = False
    for predicate, side, literals in list(_comparisons(tree)):
        if not isinstance(side, exp.Column):
            continue
        target = resolver.resolve(side)
        if target is None or target[1].kind not in ("text", "unknown"):
            continue
        index = index or ctx.values()
        if index is None:
            return None
        table, column = target
        stored = index.values(table.name, column.name)
        if not stored:
            continue
        is_like = isinstance(predicate, exp.Like)
        for node in literals:
            text = _literal_text(node, resolver, ctx.dialect)
            if text is None or (is_like and ("%" in text or "_" in text)):
                continue
            better = _better_value(text, stored, index, table.name, column.name)
            if better is None or (is_like and better.lower() == text.lower()):
                continue  # LIKE already ignores (ASCII) case
            if _stored(ctx.db, table.name, column.name, text):
                continue  # the index keeps 100,000 values a column: absent there is not absent
            logger.debug("string format: %r -> %r (%s.%s)", text, better, table.name, column.name)
            node.replace(exp.Literal.string(better))
            changed = True
    return tree if changed else None


def _stored(db: Database | None, table: str, column: str, value: str) -> bool:
    """Whether ``db`` stores ``value`` in ``table.column`` exactly (one ``LIMIT 1`` lookup, made
    only before a rewrite); False without a database or when the lookup fails."""
    if db is None:
        return False
    target = exp.Table(this=exp.to_identifier(table, quoted=True))  # a dot is part of a name
    match = exp.column(column, quoted=True).eq(exp.Literal.string(value))
    probe = exp.select("1").from_(target).where(match).limit(1)
    try:
        return bool(db.execute(probe.sql(dialect=db.dialect), timeout_s=2.0, max_rows=1).rows)
    except ExecutionError:
        return False


# --- rule 2: schema mismatch ---------------------------------------------------------------------


def fix_schema_mismatch(expr: exp.Expression, ctx: RuleContext) -> exp.Expression | None:
    """Replace table and column names that exist nowhere by the most similar existing ones
    (columns: first the tables the query reads), because a hallucinated name fails the whole
    query although the intent is usually plain ('singers' -> 'singer', 'nme' -> 'name')."""
    tree = expr.copy()
    schema = ctx.schema
    ctes = cte_names(tree)
    changed = False

    for table in list(tree.find_all(exp.Table)):
        name = table.name
        if not name or name.lower() in ctes or schema.find_table(name) is not None:
            continue
        if table.args.get("db") or not isinstance(table.this, exp.Identifier):
            continue
        better = _closest(name, schema.table_names)
        if better is None:
            continue
        logger.debug("schema: table %r -> %r", name, better)
        if not table.alias:
            # Columns qualified by the old bare name must follow it.
            select = next(enclosing_selects(table), None)
            scope = select if select is not None else tree
            for col in scope.find_all(exp.Column):
                if col.table.lower() == name.lower():
                    col.set("table", exp.to_identifier(better))
        table.set("this", exp.to_identifier(better, quoted=table.this.args.get("quoted")))
        changed = True

    resolver = Resolver(tree, schema)
    for col in list(tree.find_all(exp.Column)):
        if isinstance(col.this, exp.Star) or resolver.known(col):
            continue
        if is_sqlite_string(col, resolver, ctx.dialect):
            continue
        if not inside_select_body(col):
            continue
        replacement = _replacement_column(col, resolver)
        if replacement is None:
            continue
        qualifier, name = replacement
        logger.debug("schema: column %s -> %s.%s", col.sql(), qualifier or "", name)
        # Keep the writer's quoting: a quoted name is case-sensitive outside SQLite.
        old_table = col.args.get("table")
        same = qualifier and qualifier == col.table and isinstance(old_table, exp.Identifier)
        new = exp.column(name, table=old_table.copy() if same else qualifier)
        new.this.set("quoted", bool(col.this.args.get("quoted")))
        col.replace(new)
        changed = True
    return tree if changed else None


def _replacement_column(col: exp.Column, resolver: Resolver) -> tuple[str | None, str] | None:
    """(qualifier, column name) to use instead of an unknown ``col``, or None."""
    select = next(enclosing_selects(col))
    sources = sources_of(select)
    qualifier = col.table.lower()
    if qualifier:
        if qualifier not in sources:
            return None  # an unknown alias: nothing reliable to map it to
        table = resolver.table_of(sources[qualifier])
        if table is None:
            return None
        others = [
            (alias, t)
            for alias, s in sources.items()
            if alias != qualifier and (t := resolver.table_of(s)) is not None
        ]
        # The right name on the wrong alias is the commonest slip: T1.name where T2 has it.
        exact = [(alias, found) for alias, t in others if (found := t.column(col.name))]
        if len(exact) == 1 and _closest(col.name, table.column_names) is None:
            alias, found = exact[0]
            return sources[alias].alias_or_name, found.name
        better = _closest(col.name, table.column_names)
        return (col.table, better) if better is not None else None
    if resolver.opaque(select):
        return None
    candidates = [c.name for t in resolver.source_tables(select) for c in t.columns]
    better = _closest(col.name, candidates)
    return (None, better) if better is not None else None


# --- rule 3: invalid aggregation -------------------------------------------------------------------


def _looks_ordered(values: Sequence[object]) -> bool:
    """True when text values are mostly quantities or dates, so MIN/MAX over them means something.

    Placeholders ('null', 'n/a') are ignored and half the values suffice: Spider's
    ``cars_data.horsepower`` is a text column of numbers with a few 'null' strings.
    """
    texts = [str(v).strip() for v in values if v is not None]
    texts = [t for t in texts if t and t.lower() not in _PLACEHOLDERS]
    if not texts:
        return True  # nothing to judge by: keep the aggregate
    ordered = sum(bool(_QUANTITY.match(t) or _WORDY_DATE.match(t)) for t in texts)
    return ordered * 2 >= len(texts)


def fix_invalid_aggregation(expr: exp.Expression, ctx: RuleContext) -> exp.Expression | None:
    """Drop MIN/MAX over a text column of names or labels, and keep only the first argument of a
    COUNT over several columns: the first picks an alphabetical extreme the question almost never
    asks for, the second is an error in SQLite."""
    tree = expr.copy()
    resolver = Resolver(tree, ctx.schema)
    changed = False
    for node in list(tree.find_all(exp.Count)):
        inner = node.this
        if isinstance(inner, exp.Distinct) and len(inner.expressions) > 1:
            inner.set("expressions", [inner.expressions[0]])
            changed = True
        elif node.expressions and inner is not None:
            node.set("expressions", [])
            changed = True
    for node in list(tree.find_all(exp.Max, exp.Min)):
        arg = node.this
        if node.expressions or not isinstance(arg, exp.Column):
            continue  # MAX(a, b) is SQLite's scalar max: valid and deliberate
        target = resolver.resolve(arg)
        if target is None:
            continue
        table, column = target
        if column.kind != "text" or _looks_ordered(_stored_sample(ctx, table, column)):
            continue
        logger.debug("aggregation: dropping %s over text %s.%s", node.key, table.name, column.name)
        node.replace(arg.copy())
        changed = True
    return tree if changed else None


def _stored_sample(ctx: RuleContext, table: Table, column: Column) -> list[object]:
    """Values to judge a column's content by: every indexed value when an index is at hand,
    else the schema's distinct samples."""
    index = ctx.values()
    if index is not None:
        values = index.values(table.name, column.name)
        if values:
            return list(values)
    return list(column.samples)


# --- rule 4: join condition ------------------------------------------------------------------------


def _fk_pairs(schema: Schema, a: str, b: str) -> list[tuple[str, str]]:
    """Foreign-key column pairs ``(column of a, column of b)`` between tables ``a`` and ``b``."""
    out = []
    for fk in schema.foreign_keys:
        if fk.table.lower() == a.lower() and fk.ref_table.lower() == b.lower():
            out.append((fk.column, fk.ref_column))
        elif fk.table.lower() == b.lower() and fk.ref_table.lower() == a.lower():
            out.append((fk.ref_column, fk.column))
    return out


def _names_related(a: str, b: str) -> bool:
    a, b = a.lower(), b.lower()
    if a == b or a in b or b in a:
        return True
    return difflib.SequenceMatcher(None, a, b).ratio() >= 0.8


def _joinable(schema: Schema, ta: Table, ca: Column, tb: Table, cb: Column) -> bool:
    pair = (ca.name.lower(), cb.name.lower())
    if pair in {(x.lower(), y.lower()) for x, y in _fk_pairs(schema, ta.name, tb.name)}:
        return True
    if frozenset({ca.kind, cb.kind}) in _INCOMPATIBLE_KINDS:
        return False
    return _names_related(ca.name, cb.name)


def fix_join_condition(expr: exp.Expression, ctx: RuleContext) -> exp.Expression | None:
    """Rewrite ``JOIN ... ON a.x = b.y`` between keys that cannot join to the declared foreign
    key of the two tables, because a join on the wrong key silently pairs unrelated rows; drop a
    join that cannot be repaired only when nothing else in the query uses its table."""
    tree = expr.copy()
    resolver = Resolver(tree, ctx.schema)
    changed = False
    for join in list(tree.find_all(exp.Join)):
        cond = join.args.get("on")
        if not isinstance(cond, exp.EQ):
            continue
        left, right = cond.this, cond.expression
        if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
            continue
        a, b = resolver.resolve(left), resolver.resolve(right)
        if a is None or b is None or a[0].name == b[0].name:
            continue
        (ta, ca), (tb, cb) = a, b
        if _joinable(ctx.schema, ta, ca, tb, cb):
            continue
        pairs = _fk_pairs(ctx.schema, ta.name, tb.name)
        choice = _choose_fk(pairs, ca.name, cb.name)
        if choice is not None:
            fa, fb = choice
            logger.debug("join: %s -> %s.%s = %s.%s", cond.sql(), ta.name, fa, tb.name, fb)
            # an unqualified key names its source: both tables may hold a column of that name
            cond.replace(
                exp.EQ(
                    this=exp.column(fa, table=left.table or _source_name(join, resolver, ta)),
                    expression=exp.column(
                        fb, table=right.table or _source_name(join, resolver, tb)
                    ),
                )
            )
            changed = True
        elif not pairs and _droppable(join, cond, resolver, ca, cb):
            logger.debug("join: dropping %s", join.sql())
            join.pop()
            changed = True
    return tree if changed else None


def _source_name(join: exp.Join, resolver: Resolver, table: Table) -> str | None:
    """The alias (or name) through which ``join``'s SELECT reads ``table``; None when no one
    source does (then the key stays unqualified, as written)."""
    select = next(enclosing_selects(join), None)
    if select is None:
        return None
    names = [
        alias for alias, source in sources_of(select).items() if resolver.table_of(source) is table
    ]
    return names[0] if len(names) == 1 else None


def _choose_fk(pairs: list[tuple[str, str]], ca: str, cb: str) -> tuple[str, str] | None:
    """The foreign-key pair to use: the only one, or the only one sharing a column with the
    written condition."""
    if len(pairs) == 1:
        return pairs[0]
    sharing = [p for p in pairs if p[0].lower() == ca.lower() or p[1].lower() == cb.lower()]
    return sharing[0] if len(sharing) == 1 else None


def _droppable(
    join: exp.Join, cond: exp.Expression, resolver: Resolver, ca: Column, cb: Column
) -> bool:
    """A join may go only when its types cannot compare and its table serves nothing else."""
    if frozenset({ca.kind, cb.kind}) not in _INCOMPATIBLE_KINDS:
        return False
    if join.args.get("kind") or join.args.get("side"):
        return False  # LEFT/CROSS/... joins: keep the writer's explicit choice
    joined = join.this
    if not isinstance(joined, exp.Table):
        return False
    select = join.parent
    if not isinstance(select, exp.Select):
        return False
    alias = joined.alias_or_name.lower()
    table = resolver.table_of(joined)
    if table is None:
        return False
    for col in select.find_all(exp.Column):
        if _under(col, cond):
            continue
        if col.table.lower() == alias:
            return False
        if not col.table:
            hit = resolver.resolve(col)
            if hit is not None and hit[0].name == table.name:
                return False
    return True


def _under(node: exp.Expression, ancestor: exp.Expression) -> bool:
    parent = node
    while parent is not None:
        if parent is ancestor:
            return True
        parent = parent.parent
    return False


# --- the table ---------------------------------------------------------------------------------------

RULES: tuple[Rule, ...] = (
    fix_string_format,
    fix_schema_mismatch,
    fix_invalid_aggregation,
    fix_join_condition,
)


def apply_rules(
    sql: str,
    db_or_schema: Database | Schema | str | Path,
    *,
    dialect: str = "sqlite",
    rules: Sequence[Rule] = RULES,
    value_index: ValueIndex | None = None,
) -> RuleResult:
    """Run ``rules`` in order over ``sql`` and return the corrected SQL with the rules that fired.

    ``db_or_schema`` is an open database, a path/URL to one, or a bare :class:`Schema` (then
    only ``value_index`` can feed the value rule). SQL that does not parse, and SQL no rule
    changed, come back exactly as given; changed SQL is written by sqlglot in ``dialect``.
    """
    if isinstance(db_or_schema, Schema):
        db, schema = None, db_or_schema
    else:
        db = resolve_database(db_or_schema)
        schema = introspect(db)
    tree = parse_sql(sql, dialect)
    if tree is None:
        return RuleResult(sql, [], sql)
    ctx = RuleContext(schema=schema, value_index=value_index, dialect=dialect, db=db)
    fired: list[str] = []
    for rule in rules:
        new = rule(tree, ctx)
        if new is not None:
            tree = new
            fired.append(getattr(rule, "__name__", repr(rule)))
    if not fired:
        return RuleResult(sql, [], sql)
    return RuleResult(tree.sql(dialect=dialect), fired, sql)


def is_hard_case(sql: str, dialect: str = "sqlite") -> bool:
    """Whether MageSQL's prompt-based correction should look at ``sql``: Spider hard/extra, more
    than two tables joined in one SELECT, or a set operator. The LM pass is expensive and meant
    for complicated errors, so simple queries skip it. SQL that does not parse counts as hard:
    no rule can repair it and only the LM pass can."""
    tree = parse_sql(sql, dialect)
    if tree is None:
        return True
    if tree.find(exp.SetOperation) is not None:
        return True
    for select in tree.find_all(exp.Select):
        if 1 + len(select.args.get("joins") or []) > 2:
            return True
    try:
        return spider_hardness(sql, dialect) in ("hard", "extra")
    except ValueError:
        return True


__all__ = [
    "RULES",
    "Rule",
    "RuleContext",
    "RuleResult",
    "apply_rules",
    "fix_invalid_aggregation",
    "fix_join_condition",
    "fix_schema_mismatch",
    "fix_string_format",
    "is_hard_case",
]
