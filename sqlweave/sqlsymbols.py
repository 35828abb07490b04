"""The SQL symbol of each sqlglot comparison and arithmetic expression.

The query graphs of :mod:`sqlweave.gnn.graph` and the keyword sets of :mod:`sqlweave.sqlstruct`
both name an operator node by its symbol: one table keeps the two from spelling one differently.
"""

from __future__ import annotations

from sqlglot import exp

COMPARISONS: dict[type[exp.Expression], str] = {
    exp.EQ: "=",
    exp.NEQ: "!=",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.LT: "<",
    exp.LTE: "<=",
}
"""``=``, ``!=``, ``>``, ``>=``, ``<``, ``<=`` by expression class."""

ARITHMETIC: dict[type[exp.Expression], str] = {
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
}
"""``+``, ``-``, ``*``, ``/`` by expression class."""
