"""Spider's difficulty levels: the official ``eval_hardness`` rules over the sqlglot AST.

A pure function of SQL text, below both the loaders (:mod:`sqlweave.data` labels every Spider
question with the hardness of its gold query) and the metrics (:mod:`sqlweave.metrics` re-exports
it), so neither needs the other to grade a query.
"""

from __future__ import annotations

from collections.abc import Iterator

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

HARDNESS_LEVELS = ("easy", "medium", "hard", "extra")
_QUERY_NODES = (exp.Select, exp.Subquery, exp.SetOperation)


def _flatten_conditions(node: exp.Expression | None) -> tuple[list[exp.Expression], int]:
    """Leaf conditions of an AND/OR tree and the number of ORs joining them."""
    if node is None:
        return [], 0
    if isinstance(node, exp.Paren) and not isinstance(node.this, _QUERY_NODES):
        return _flatten_conditions(node.this)
    if isinstance(node, exp.Connector):
        left, lo = _flatten_conditions(node.this)
        right, ro = _flatten_conditions(node.expression)
        return left + right, lo + ro + isinstance(node, exp.Or)
    return [node], 0


def _walk_outer(node: exp.Expression) -> Iterator[exp.Expression]:
    """Nodes under ``node`` without entering nested queries (those are yielded, not walked)."""
    stack = list(node.iter_expressions())
    while stack:
        child = stack.pop()
        yield child
        if not isinstance(child, _QUERY_NODES):
            stack.extend(child.iter_expressions())


def _agg_count(node: exp.Expression) -> int:
    nodes = [node, *_walk_outer(node)]
    return sum(isinstance(n, exp.AggFunc) for n in nodes)


def _nested_queries(node: exp.Expression | None) -> int:
    if node is None:
        return 0
    if isinstance(node, _QUERY_NODES):
        return 1
    return sum(isinstance(n, _QUERY_NODES) for n in _walk_outer(node))


def _unwrap_alias(node: exp.Expression) -> exp.Expression:
    return node.this if isinstance(node, exp.Alias) else node


def spider_hardness(sql: str, dialect: str = "sqlite") -> str:
    """Spider's difficulty level (easy/medium/hard/extra) of a query, over the sqlglot AST.

    Reproduces ``Evaluator.eval_hardness`` of the official evaluation, quirks included: only the
    first query of a set operation is scored (the rest counts as one nested query); a NOT
    condition in WHERE or HAVING and every AND/OR inside HAVING count as an aggregation, because
    the official ``count_agg`` reads the first element of those tuples. Raises ``ValueError`` on
    SQL that sqlglot cannot parse.
    """
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except (ParseError, TokenError) as err:
        raise ValueError(f"cannot parse SQL for hardness: {sql!r}") from err
    nested = 0
    while isinstance(tree, exp.Subquery | exp.SetOperation):
        if isinstance(tree, exp.SetOperation):
            nested = 1
        tree = tree.this
    if not isinstance(tree, exp.Select):
        raise ValueError(f"not a SELECT query: {sql!r}")
    comp1, comp2, others = _hardness_counts(tree)
    comp2 += nested
    if comp1 <= 1 and others == 0 and comp2 == 0:
        return "easy"
    if (others <= 2 and comp1 <= 1 and comp2 == 0) or (comp1 <= 2 and others < 2 and comp2 == 0):
        return "medium"
    if (
        (others > 2 and comp1 <= 2 and comp2 == 0)
        or (2 < comp1 <= 3 and others <= 2 and comp2 == 0)
        or (comp1 <= 1 and others == 0 and comp2 <= 1)
    ):
        return "hard"
    return "extra"


def _hardness_counts(select: exp.Select) -> tuple[int, int, int]:
    """(count_component1, count_component2, count_others) of the official rules."""
    joins = select.args.get("joins") or []
    where = select.args.get("where")
    having = select.args.get("having")
    group = select.args.get("group")
    order = select.args.get("order")
    on_leaves, on_ors = [], 0
    for join in joins:
        leaves, ors = _flatten_conditions(join.args.get("on"))
        on_leaves += leaves
        on_ors += ors
    where_leaves, where_ors = _flatten_conditions(where.this if where else None)
    having_leaves, having_ors = _flatten_conditions(having.this if having else None)
    cond_leaves = on_leaves + where_leaves + having_leaves

    def is_like(leaf: exp.Expression) -> bool:
        inner = leaf.this if isinstance(leaf, exp.Not) else leaf
        return isinstance(inner, exp.Like | exp.ILike)

    group_items = group.expressions if group else []
    order_items = order.expressions if order else []
    comp1 = (
        bool(where)
        + bool(group_items)
        + bool(order_items)
        + bool(select.args.get("limit"))
        + len(joins)
        + on_ors
        + where_ors
        + having_ors
        + sum(is_like(leaf) for leaf in cond_leaves)
    )
    comp2 = sum(_nested_queries(leaf) for leaf in cond_leaves)

    aggs = sum(_agg_count(_unwrap_alias(e)) > 0 for e in select.expressions)
    aggs += sum(isinstance(leaf, exp.Not) for leaf in where_leaves)
    aggs += sum(_agg_count(g) > 0 for g in group_items)
    aggs += sum(min(_agg_count(o), 2) for o in order_items)
    aggs += max(len(having_leaves) - 1, 0) + sum(isinstance(x, exp.Not) for x in having_leaves)
    others = (
        (aggs > 1)
        + (len(select.expressions) > 1)
        + (len(where_leaves) > 1)
        + (len(group_items) > 1)
    )
    return comp1, comp2, others


__all__ = ["HARDNESS_LEVELS", "spider_hardness"]
