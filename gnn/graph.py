"""SQL → graph: the structure MageSQL embeds to find demonstrations with a similar shape.

A query becomes a small directed acyclic graph with five node types:

* ``root`` – one dummy node (index 0) every query hangs from;
* ``keyword`` – one node per occurrence of an operator or clause (``SELECT``, ``JOIN``, ``WHERE``,
  ``=``, ``AND``, ``COUNT``, ``DESC``, ``UNION``, …); keywords are never merged;
* ``table`` / ``column`` – one node per distinct (lower-cased) name, so every clause touching the
  same column meets at the same node; column text is ``table.column`` when the table is known;
* ``value`` – one node per literal.

Edges point from an operator to what it uses (clause → column/table, comparison → column and
value, ``SELECT`` → ``GROUP BY``/``HAVING``/``ORDER BY``), plus a *membership* edge from each table
to its columns (``edge_type`` 1; structural edges are 0). Membership edges are kept apart because
augmentations prune the graph by reachability over structural edges only.

Node features are the one-hot node type followed by the sentence embedding of the node text
(:mod:`sqlweave.embeddings`). Texts repeat a lot across a pool (``=``, ``SELECT``, common column
names), so :class:`GraphBuilder` embeds each distinct text once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import sqlglot
import torch
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from torch_geometric.data import Data

from sqlweave.errors import SqlweaveError
from sqlweave.sqlsymbols import ARITHMETIC, COMPARISONS

logger = logging.getLogger(__name__)

ROOT, KEYWORD, TABLE, COLUMN, VALUE = range(5)
NODE_TYPES = ("root", "keyword", "table", "column", "value")
NUM_NODE_TYPES = len(NODE_TYPES)
STRUCTURAL, MEMBERSHIP = 0, 1
MASK_TEXT = "[MASK]"

# Operator tokens used as keyword node texts; anything else falls back to its sqlglot key.
_TOKENS: dict[type[exp.Expression], str] = {
    **COMPARISONS,
    exp.And: "AND",
    exp.Or: "OR",
    exp.Not: "NOT",
    exp.Like: "LIKE",
    exp.ILike: "ILIKE",
    exp.In: "IN",
    exp.Between: "BETWEEN",
    exp.Is: "IS",
    exp.Exists: "EXISTS",
    **ARITHMETIC,
    exp.Mod: "%",
    exp.DPipe: "||",
    exp.Count: "COUNT",
    exp.Sum: "SUM",
    exp.Avg: "AVG",
    exp.Min: "MIN",
    exp.Max: "MAX",
    exp.Distinct: "DISTINCT",
    exp.Union: "UNION",
    exp.Intersect: "INTERSECT",
    exp.Except: "EXCEPT",
    exp.Case: "CASE",
    exp.If: "IF",
    exp.Cast: "CAST",
}

# Select arguments handled explicitly, in the order their nodes are created.
_SELECT_ARGS = ("distinct", "expressions", "from_", "joins", "where", "group", "having", "order")


class GraphError(SqlweaveError, ValueError):
    """The SQL could not be parsed into a graph."""


class TextEncoder(Protocol):
    """Anything that embeds texts as unit-norm rows (``sqlweave.embeddings.Encoder`` does)."""

    def encode(self, texts: Sequence[str], progress: bool = False) -> np.ndarray: ...


# --- catalog: table/column names and kinds per database --------------------------------------


@dataclass
class Catalog:
    """Tables → columns → coarse kind (``number``, ``text``, …) for a set of databases.

    The builder uses it to attach unqualified columns to the right table of a join; database
    replacement uses it to map a query onto another database's names, preferring columns of the
    same kind. Names are lower-cased.
    """

    databases: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)

    def add(self, db_id: str, tables: Mapping[str, Mapping[str, str]]) -> None:
        """Register ``db_id`` from ``{table: {column: kind}}`` (e.g. a test fixture)."""
        self.databases[db_id] = {
            t.lower(): {c.lower(): k for c, k in cols.items()} for t, cols in tables.items()
        }

    def add_database(self, db_id: str, db_path: str | Path) -> None:
        """Introspect a database file once (no sample rows) and register it under ``db_id``."""
        if db_id in self.databases:
            return
        from sqlweave.db import Database
        from sqlweave.schema import introspect

        db = Database.open(db_path)
        try:
            schema = introspect(db, sample_rows=0, distinct_values=0)
        finally:
            db.close()
        self.add(db_id, {t.name: {c.name: c.kind for c in t.columns} for t in schema.tables})

    @classmethod
    def from_examples(cls, examples: Iterable[Any]) -> Catalog:
        """The catalog of every database the examples point at (``db_id`` + ``db_path``)."""
        catalog = cls()
        for ex in examples:
            db_path = getattr(ex, "db_path", None) if not isinstance(ex, Mapping) else None
            db_id = ex["db_id"] if isinstance(ex, Mapping) else ex.db_id
            if db_path and db_id not in catalog.databases:
                catalog.add_database(db_id, db_path)
        return catalog

    def tables(self, db_id: str | None) -> dict[str, dict[str, str]]:
        """``{table: {column: kind}}`` of ``db_id`` (empty when unknown)."""
        return self.databases.get(db_id or "", {})

    def column_kind(self, db_id: str | None, table: str, column: str) -> str | None:
        """The kind of ``table.column`` in ``db_id``, or None when unknown."""
        return self.tables(db_id).get(table, {}).get(column)


# --- parsing ---------------------------------------------------------------------------------


@dataclass
class SQLGraph:
    """A query graph before featurisation: plain Python lists, cheap to edit and to test."""

    texts: list[str] = field(default_factory=list)
    types: list[int] = field(default_factory=list)
    # per node: value kind (int/float/string/bool/null) for values, "" otherwise
    infos: list[str] = field(default_factory=list)
    edges: list[tuple[int, int, int]] = field(default_factory=list)  # (src, dst, edge_type)

    def add_node(self, text: str, kind: int, info: str = "") -> int:
        self.texts.append(text)
        self.types.append(kind)
        self.infos.append(info)
        return len(self.texts) - 1


class _Walker:
    """Turns one parsed statement into an :class:`SQLGraph` (one instance per query)."""

    def __init__(self, catalog_tables: Mapping[str, Mapping[str, str]]) -> None:
        self.g = SQLGraph()
        self.catalog_tables = catalog_tables
        self.named: dict[tuple[int, str], int] = {}  # merged table/column nodes
        self.edge_set: set[tuple[int, int, int]] = set()
        self.root = self.g.add_node("ROOT", ROOT)

    def edge(self, src: int, dst: int, etype: int = STRUCTURAL) -> None:
        key = (src, dst, etype)
        if src != dst and key not in self.edge_set:
            self.edge_set.add(key)
            self.g.edges.append(key)

    def keyword(self, text: str, parent: int) -> int:
        node = self.g.add_node(text, KEYWORD)
        self.edge(parent, node)
        return node

    def table_node(self, name: str) -> int:
        key = (TABLE, name.lower())
        if key not in self.named:
            self.named[key] = self.g.add_node(name.lower(), TABLE)
        return self.named[key]

    def column_node(self, table: str | None, column: str) -> int:
        text = f"{table}.{column.lower()}" if table else column.lower()
        key = (COLUMN, text)
        if key not in self.named:
            self.named[key] = self.g.add_node(text, COLUMN)
            if table:
                self.edge(self.table_node(table), self.named[key], MEMBERSHIP)
        return self.named[key]

    # scopes: list of {alias_or_name: table}, innermost first
    def resolve(self, col: exp.Column, scopes: list[dict[str, str]]) -> str | None:
        qualifier = col.table.lower() if col.table else ""
        if qualifier:
            for scope in scopes:
                if qualifier in scope:
                    return scope[qualifier]
            return None  # alias of a derived table: the column has no base table
        name = col.name.lower()
        for scope in scopes:
            tables = list(dict.fromkeys(scope.values()))
            owners = [t for t in tables if name in self.catalog_tables.get(t, {})]
            if len(owners) == 1:
                return owners[0]
            if len(owners) > 1:
                return None  # ambiguous even with the schema
            if len(tables) == 1 and tables[0] not in self.catalog_tables:
                return tables[0]  # no schema to check against: the only table in scope
            # not found here: an outer query's column (correlated subquery) or an output alias
        return None

    def walk(self, node: exp.Expression, parent: int, scopes: list[dict[str, str]]) -> None:
        if isinstance(node, exp.Select):
            self.select(node, parent, scopes)
        elif isinstance(node, exp.SetOperation):
            op = _TOKENS.get(type(node), node.key.upper())
            if isinstance(node, exp.Union) and not node.args.get("distinct", True):
                op = "UNION ALL"
            kw = self.keyword(op, parent)
            self.walk(node.this, kw, scopes)
            self.walk(node.expression, kw, scopes)
            self.modifiers(node, kw, scopes)
        elif isinstance(node, exp.Subquery | exp.Paren | exp.Alias):
            if isinstance(node.this, exp.Expression):
                self.walk(node.this, parent, scopes)
        elif isinstance(node, exp.TableAlias):
            return
        elif isinstance(node, exp.Column):
            if isinstance(node.this, exp.Star):
                self.edge(parent, self.column_node(None, "*"))
            else:
                self.edge(parent, self.column_node(self.resolve(node, scopes), node.name))
        elif isinstance(node, exp.Star):
            self.edge(parent, self.column_node(None, "*"))
        elif isinstance(node, exp.Table):
            self.edge(parent, self.table_node(node.name))
        elif isinstance(node, exp.Literal):
            self.value(str(node.this), _literal_kind(node), parent)
        elif isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
            self.value("-" + str(node.this.this), _literal_kind(node.this), parent)
        elif isinstance(node, exp.Boolean):
            self.value("TRUE" if node.this else "FALSE", "bool", parent)
        elif isinstance(node, exp.Null):
            self.value("NULL", "null", parent)
        elif isinstance(node, exp.Identifier | exp.Var):
            self.edge(parent, self.column_node(None, node.name))
        elif isinstance(node, exp.Ordered):
            kw = self.keyword("DESC" if node.args.get("desc") else "ASC", parent)
            self.walk(node.this, kw, scopes)
        else:
            kw = self.keyword(_token(node), parent)
            for child in _children(node):
                self.walk(child, kw, scopes)

    def value(self, text: str, kind: str, parent: int) -> None:
        self.edge(parent, self.g.add_node(text, VALUE, kind))

    def select(self, node: exp.Select, parent: int, scopes: list[dict[str, str]]) -> None:
        kw = self.keyword("SELECT", parent)
        scope: dict[str, str] = {}
        sources = [node.args.get("from_")] + list(node.args.get("joins") or [])
        for src in sources:
            table = src.this if src is not None else None
            if isinstance(table, exp.Table):
                name = table.name.lower()
                scope[name] = name
                if table.alias:
                    scope[table.alias.lower()] = name
        inner = [scope, *scopes]
        if node.args.get("distinct"):
            self.keyword("DISTINCT", kw)
        for e in node.expressions:
            self.walk(e, kw, inner)
        from_ = node.args.get("from_")
        if from_ is not None:
            self.walk(from_.this, kw, inner)
        for join in node.args.get("joins") or []:
            jkw = self.keyword("JOIN", kw)
            self.walk(join.this, jkw, inner)
            for arg in ("on", "using"):
                val = join.args.get(arg)
                for child in val if isinstance(val, list) else [val]:
                    if isinstance(child, exp.Expression):
                        self.walk(child, jkw, inner)
        where = node.args.get("where")
        if where is not None:
            self.walk(where.this, self.keyword("WHERE", kw), inner)
        group = node.args.get("group")
        if group is not None:
            gkw = self.keyword("GROUP BY", kw)
            for e in group.expressions:
                self.walk(e, gkw, inner)
        having = node.args.get("having")
        if having is not None:
            self.walk(having.this, self.keyword("HAVING", kw), inner)
        self.modifiers(node, kw, inner)
        for key, val in node.args.items():
            if key in _SELECT_ARGS or key in ("limit", "offset", "order"):
                continue
            for child in val if isinstance(val, list) else [val]:
                if isinstance(child, exp.Expression):
                    self.walk(child, kw, inner)

    def modifiers(self, node: exp.Expression, kw: int, scopes: list[dict[str, str]]) -> None:
        order = node.args.get("order")
        if order is not None:
            okw = self.keyword("ORDER BY", kw)
            for e in order.expressions:
                self.walk(e, okw, scopes)
        for arg, text in (("limit", "LIMIT"), ("offset", "OFFSET")):
            mod = node.args.get(arg)
            if mod is not None:
                target = mod.args.get("expression") or mod.this
                lkw = self.keyword(text, kw)
                if isinstance(target, exp.Expression):
                    self.walk(target, lkw, scopes)


def _literal_kind(lit: exp.Literal) -> str:
    if lit.is_string:
        return "string"
    text = str(lit.this)
    try:
        int(text)
        return "int"
    except ValueError:
        return "float"


def _token(node: exp.Expression) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).upper()
    return _TOKENS.get(type(node), node.key.upper())


def _children(node: exp.Expression) -> list[exp.Expression]:
    out: list[exp.Expression] = []
    for val in node.args.values():
        for child in val if isinstance(val, list) else [val]:
            if isinstance(child, exp.Expression):
                out.append(child)
    return out


def parse_graph(
    sql: str, dialect: str | None = "sqlite", catalog_tables: Mapping[str, Any] | None = None
) -> SQLGraph:
    """Parse ``sql`` into an :class:`SQLGraph`; raises :class:`GraphError` on unparseable SQL.

    ``catalog_tables`` (``{table: {column: kind}}`` of the query's database) lets unqualified
    columns in a join be attached to the one table that has them; without it such columns get
    no table (their text is the bare column name).
    """
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except (ParseError, TokenError, RecursionError) as err:
        raise GraphError(f"cannot parse SQL into a graph: {type(err).__name__}") from err
    if tree is None:
        raise GraphError(f"empty SQL: {sql!r}")
    walker = _Walker(catalog_tables or {})
    try:
        walker.walk(tree, walker.root, [])
    except RecursionError as err:  # a thousand ORs: skipped in a pool, zero-shot as a draft
        raise GraphError("SQL nested too deeply to read as a graph") from err
    return walker.g


# --- featurisation -----------------------------------------------------------------------------


def to_data(g: SQLGraph, x: torch.Tensor, **attrs: Any) -> Data:
    """Wrap an :class:`SQLGraph` and its feature matrix as a PyG ``Data`` (texts kept for tests)."""
    if g.edges:
        ei = torch.tensor(
            [[s for s, _, _ in g.edges], [d for _, d, _ in g.edges]], dtype=torch.long
        )
        et = torch.tensor([t for _, _, t in g.edges], dtype=torch.long)
    else:
        ei = torch.zeros((2, 0), dtype=torch.long)
        et = torch.zeros((0,), dtype=torch.long)
    return Data(
        x=x,
        edge_index=ei,
        edge_type=et,
        node_type=torch.tensor(g.types, dtype=torch.long),
        node_text=list(g.texts),
        node_info=list(g.infos),
        num_nodes=len(g.texts),
        **attrs,
    )


def from_data(data: Data) -> SQLGraph:
    """The editable :class:`SQLGraph` view of a ``Data`` built by :func:`to_data`."""
    src, dst = data.edge_index.tolist()
    return SQLGraph(
        texts=list(data.node_text),
        types=data.node_type.tolist(),
        infos=list(data.node_info),
        edges=list(zip(src, dst, data.edge_type.tolist(), strict=True)),
    )


class GraphBuilder:
    """Builds featurised query graphs, embedding each distinct node text once.

    ``encoder`` defaults to the offline all-MiniLM-L6-v2 encoder; ``catalog`` (optional) resolves
    unqualified columns and is extended on the fly from examples' ``db_path``.
    """

    def __init__(
        self,
        encoder: TextEncoder | None = None,
        dialect: str | None = "sqlite",
        catalog: Catalog | None = None,
    ) -> None:
        self._encoder = encoder
        self.dialect = dialect
        self.catalog = catalog if catalog is not None else Catalog()
        self._vectors: dict[str, torch.Tensor] = {}
        self._dim: int | None = None

    @property
    def encoder(self) -> TextEncoder:
        if self._encoder is None:
            from sqlweave.embeddings import default_encoder

            self._encoder = default_encoder()
        return self._encoder

    @property
    def text_dim(self) -> int:
        """Width of the text part of a node feature (384 for all-MiniLM-L6-v2)."""
        if self._dim is None:
            self._dim = int(self.encoder.encode(["SELECT"]).shape[1])
        return self._dim

    @property
    def cache_size(self) -> int:
        """How many distinct node texts have been embedded so far."""
        return len(self._vectors)

    @property
    def feature_dim(self) -> int:
        """Width of a node feature: one-hot type ⊕ text embedding."""
        return NUM_NODE_TYPES + self.text_dim

    def prepare(self, texts: Iterable[str], progress: bool = False) -> None:
        """Embed every not-yet-seen text in one batch (call before featurising many graphs)."""
        todo = [t for t in dict.fromkeys(texts) if t not in self._vectors and t != MASK_TEXT]
        if not todo:
            return
        vecs = np.asarray(self.encoder.encode(todo, progress=progress), dtype=np.float32)
        self._dim = vecs.shape[1]
        for text, vec in zip(todo, torch.from_numpy(vecs), strict=True):
            self._vectors[text] = vec

    def featurize(self, texts: Sequence[str], types: Sequence[int]) -> torch.Tensor:
        """Node features for parallel lists of texts and types; ``[MASK]`` texts embed as zeros."""
        self.prepare(texts)
        dim = self.text_dim
        onehot = torch.nn.functional.one_hot(
            torch.tensor(list(types), dtype=torch.long), NUM_NODE_TYPES
        ).float()
        zero = torch.zeros(dim)
        text = [zero if t == MASK_TEXT else self._vectors[t] for t in texts]
        emb = torch.stack(text) if text else torch.zeros((0, dim))
        return torch.cat([onehot, emb], dim=1)

    def parse(
        self, sql: str, db_id: str | None = None, db_path: str | Path | None = None
    ) -> SQLGraph:
        """Parse ``sql`` (registering ``db_path`` in the catalog first, when given)."""
        if db_id and db_path:
            self.catalog.add_database(db_id, db_path)
        return parse_graph(sql, self.dialect, self.catalog.tables(db_id))

    def build(
        self, sql: str, db_id: str | None = None, db_path: str | Path | None = None, **attrs: Any
    ) -> Data:
        """One featurised graph; raises :class:`GraphError` on unparseable SQL."""
        g = self.parse(sql, db_id, db_path)
        return to_data(g, self.featurize(g.texts, g.types), sql=sql, db_id=db_id or "", **attrs)

    def build_many(
        self,
        items: Sequence[tuple[str, str | None]],
        progress: bool = False,
        on_error: Callable[[int, str, GraphError], None] | None = None,
    ) -> list[Data | None]:
        """Graphs for ``(sql, db_id)`` pairs, embedding all their texts in one batch.

        Unparseable SQL gives ``None`` in its slot (and calls ``on_error``) rather than failing
        the whole pool: a handful of benchmark queries do not parse in every dialect.
        """
        parsed: list[SQLGraph | None] = []
        for i, (sql, db_id) in enumerate(items):
            try:
                parsed.append(self.parse(sql, db_id))
            except GraphError as err:
                logger.warning("skipping unparseable SQL #%d: %s", i, err)
                if on_error is not None:
                    on_error(i, sql, err)
                parsed.append(None)
        self.prepare((t for g in parsed if g is not None for t in g.texts), progress=progress)
        out: list[Data | None] = []
        for g, (sql, db_id) in zip(parsed, items, strict=True):
            if g is None:
                out.append(None)
            else:
                x = self.featurize(g.texts, g.types)
                out.append(to_data(g, x, sql=sql, db_id=db_id or ""))
        return out

    def build_pool(
        self, examples: Sequence[Any], sql_field: str = "gold_sql", progress: bool = False
    ) -> list[Data | None]:
        """Graphs for ``dspy.Example`` items (``sql_field`` + ``db_id`` + ``db_path``)."""
        for ex in examples:
            db_path = ex.get("db_path") if hasattr(ex, "get") else None
            if db_path and ex["db_id"] not in self.catalog.databases:
                self.catalog.add_database(ex["db_id"], db_path)
        items = [(str(ex[sql_field]), ex["db_id"]) for ex in examples]
        return self.build_many(items, progress=progress)


def node_counts(data: Data) -> dict[str, int]:
    """How many nodes of each type a graph has (for tests, logs and sanity checks)."""
    counts = torch.bincount(data.node_type, minlength=NUM_NODE_TYPES).tolist()
    return dict(zip(NODE_TYPES, counts, strict=True))
