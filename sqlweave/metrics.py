"""Execution accuracy (EX) with the official Spider and BIRD semantics, and Spider hardness.

Two benchmarks, two definitions of "the same result", both reproduced exactly:

* ``spider`` — the test-suite evaluation (``taoyds/test-suite-sql-eval``, ``exec_eval.py``): the
  results must be equal as **multisets of rows**, up to a **permutation of columns**; row order
  counts only when the gold query sorts. Like the official script's default (``keep_distinct``
  off), every ``DISTINCT`` keyword is removed from both queries before they run, including the one
  inside ``COUNT(DISTINCT ...)``. Two deliberate differences: the official script decides "gold
  sorts" by the substring ``order by`` anywhere in the gold text, we by a **top-level** ORDER BY in
  the sqlglot AST (an ORDER BY inside a subquery does not order the output); and the official
  script prunes column permutations with 20 randomly sampled rows, we with all rows — pruning only
  drops permutations that cannot match, so the verdict is the same, but ours is deterministic.
* ``bird`` — the BIRD script (``calculate_ex``): ``set(pred_rows) == set(gold_rows)``. Duplicates
  and row order are ignored, column order matters, DISTINCT is kept.

Values are compared as the engine returns them, with Python equality, exactly as both official
scripts do: ``1 == 1.0`` matches, ``'1' != 1``, ``None == None``, and floats are **not** rounded
(``0.1 + 0.2 != 0.3``). We keep this exactness on purpose so our EX is comparable with published
numbers; a result that differs only in float rounding is a miss, as it is officially.

A prediction that fails, times out or is refused scores False; a gold query that fails raises
:class:`GoldQueryError`, because a benchmark whose gold cannot run measures nothing.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from sqlweave.db import Database, ExecutionError, QueryResult

logger = logging.getLogger(__name__)

SEMANTICS = ("spider", "bird")
#: Row cap for EX. Far above any gold result in the bundled data; a prediction that exceeds it
#: while the gold does not cannot match under Spider semantics and is scored a miss under BIRD's.
EX_MAX_ROWS = 100_000
#: The gold query must run; it gets at least this long whatever the prediction's timeout.
GOLD_MIN_TIMEOUT_S = 120.0

Rows = Sequence[Sequence[Any]]


class GoldQueryError(RuntimeError):
    """The gold query could not run: the data or the database is broken, not the prediction."""

    def __init__(self, sql: str, db_name: str, error: ExecutionError) -> None:
        super().__init__(f"gold query failed on {db_name}: {error} -- SQL: {sql}")
        self.sql = sql
        self.db_name = db_name
        self.error = error


# --- comparing results ------------------------------------------------------------------------


def _rows(result: QueryResult | Rows) -> list[tuple[Any, ...]]:
    rows = result.rows if isinstance(result, QueryResult) else result
    return [tuple(r) for r in rows]


def _unorder_row(row: tuple[Any, ...]) -> tuple[Any, ...]:
    # The official canonical form of a row: its values sorted by text and type.
    return tuple(sorted(row, key=lambda x: str(x) + str(type(x))))


def _column_permutations(gold: list[tuple], pred: list[tuple]) -> Iterator[tuple[int, ...]]:
    """Column permutations that could make ``pred`` equal ``gold``; ``perm[i]`` is pred's column
    placed at position ``i``. A pred column is a candidate for gold column ``i`` only if all its
    values occur in gold column ``i``."""
    ncols = len(gold[0])
    gold_sets = [{row[i] for row in gold} for i in range(ncols)]
    pred_sets = [{row[j] for row in pred} for j in range(ncols)]
    candidates = [[j for j in range(ncols) if pred_sets[j] <= gold_sets[i]] for i in range(ncols)]

    def extend(prefix: list[int], used: set[int]) -> Iterator[tuple[int, ...]]:
        i = len(prefix)
        if i == ncols:
            yield tuple(prefix)
            return
        for j in candidates[i]:
            if j not in used:
                prefix.append(j)
                used.add(j)
                yield from extend(prefix, used)
                prefix.pop()
                used.discard(j)

    yield from extend([], set())


def _spider_equal(gold: list[tuple], pred: list[tuple], ordered: bool) -> bool:
    """``result_eq`` of the official test-suite evaluation."""
    if not gold and not pred:
        return True
    if len(gold) != len(pred):
        return False
    ncols = len(gold[0])
    if len(pred[0]) != ncols:
        return False
    g_unordered = [_unorder_row(r) for r in gold]
    p_unordered = [_unorder_row(r) for r in pred]
    if ordered and g_unordered != p_unordered:
        return False
    if not ordered and set(g_unordered) != set(p_unordered):
        return False
    gold_counts = Counter(gold) if not ordered else None
    for perm in _column_permutations(gold, pred):
        permuted = (
            pred if perm == tuple(range(ncols)) else [tuple(r[j] for j in perm) for r in pred]
        )
        if ordered:
            if permuted == gold:
                return True
        elif set(permuted) == set(gold) and Counter(permuted) == gold_counts:
            return True
    return False


def results_match(
    pred: QueryResult | Rows,
    gold: QueryResult | Rows,
    semantics: str = "spider",
    ordered: bool = False,
) -> bool:
    """Whether a predicted result denotes the same answer as the gold one (pure; no database).

    ``ordered`` says the gold query has a top-level ORDER BY; only Spider semantics use it.
    """
    if semantics not in SEMANTICS:
        raise ValueError(f"unknown semantics {semantics!r}; choose from {SEMANTICS}")
    pred_rows, gold_rows = _rows(pred), _rows(gold)
    if semantics == "bird":
        return set(pred_rows) == set(gold_rows)
    return _spider_equal(gold_rows, pred_rows, ordered)


# --- SQL-level helpers ------------------------------------------------------------------------


@functools.lru_cache(maxsize=65536)
def has_top_level_order_by(sql: str, dialect: str = "sqlite") -> bool:
    """True when the outermost query sorts its rows (ORDER BY on the top SELECT or set operation).

    Unparsable SQL falls back to the official substring test.
    """
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except (ParseError, TokenError):
        return "order by" in " ".join(sql.lower().split())
    while isinstance(tree, exp.Subquery) and not tree.args.get("order"):
        tree = tree.this
    return bool(tree.args.get("order"))


@functools.lru_cache(maxsize=65536)
def strip_distinct(sql: str, dialect: str = "sqlite") -> str:
    """``sql`` with every DISTINCT keyword removed, as the official Spider evaluation does by
    default. Works on tokens, not the AST, so the rest of the text runs exactly as written."""
    try:
        tokens = sqlglot.tokenize(sql, read=dialect)
    except TokenError:
        return sql
    spans = [(t.start, t.end) for t in tokens if t.token_type == TokenType.DISTINCT]
    if not spans:
        return sql
    out, last = [], 0
    for start, end in spans:
        out.append(sql[last:start])
        last = end + 1
    out.append(sql[last:])
    return " ".join("".join(out).split())


# --- executing and scoring --------------------------------------------------------------------


@dataclass(frozen=True)
class ExecutionMatch:
    """The verdict on one prediction, with the prediction's error when it did not run."""

    correct: bool
    error: ExecutionError | None = None
    pred_result: QueryResult | None = None
    gold_result: QueryResult | None = None


def check_execution(
    pred_sql: str,
    gold_sql: str,
    db: Database,
    semantics: str = "spider",
    *,
    timeout_s: float = 30.0,
    keep_distinct: bool | None = None,
    max_rows: int = EX_MAX_ROWS,
) -> ExecutionMatch:
    """Run gold and prediction on ``db`` and compare them under ``semantics``.

    ``keep_distinct=None`` follows each benchmark's official default (Spider strips DISTINCT,
    BIRD keeps it). Gold results come from ``db``'s own cache (keyed by SQL and row cap; one cache
    per :class:`Database`, so per database file), so a gold query runs once per handle.
    """
    if semantics not in SEMANTICS:
        raise ValueError(f"unknown semantics {semantics!r}; choose from {SEMANTICS}")
    strip = (semantics == "spider") if keep_distinct is None else not keep_distinct
    gold_run = strip_distinct(gold_sql, db.dialect) if strip else gold_sql
    try:
        gold = db.execute(gold_run, timeout_s=max(timeout_s, GOLD_MIN_TIMEOUT_S), max_rows=max_rows)
    except ExecutionError as err:
        raise GoldQueryError(gold_sql, db.name, err) from err
    if gold.truncated:
        logger.warning("gold result cut at %d rows on %s: %s", max_rows, db.name, gold_sql)

    if not pred_sql or not pred_sql.strip():
        return ExecutionMatch(False, ExecutionError("syntax", "empty query"), None, gold)
    pred_run = strip_distinct(pred_sql, db.dialect) if strip else pred_sql
    try:
        pred = db.execute(pred_run, timeout_s=timeout_s, max_rows=max_rows)
    except ExecutionError as err:
        return ExecutionMatch(False, err, None, gold)
    if pred.truncated and not gold.truncated:
        return ExecutionMatch(False, None, pred, gold)
    ordered = semantics == "spider" and has_top_level_order_by(gold_sql, db.dialect)
    return ExecutionMatch(results_match(pred, gold, semantics, ordered), None, pred, gold)


def execution_match(
    pred_sql: str,
    gold_sql: str,
    db: Database,
    semantics: str = "spider",
    timeout_s: float = 30.0,
    *,
    keep_distinct: bool | None = None,
) -> bool:
    """EX of one prediction: True when it returns the gold answer under ``semantics``.

    A failing or timed-out prediction is False; a failing gold raises :class:`GoldQueryError`.
    """
    return check_execution(
        pred_sql, gold_sql, db, semantics, timeout_s=timeout_s, keep_distinct=keep_distinct
    ).correct


def semantics_for(example: Any) -> str:
    """The official semantics for an example: BIRD's for BIRD questions, Spider's otherwise."""
    return "bird" if getattr(example, "source", "") == "bird" else "spider"


def pred_sql_of(pred: Any) -> str:
    """The SQL of a program output: a ``dspy.Prediction`` (``.sql``), a dict or a string."""
    if pred is None:
        return ""
    if isinstance(pred, str):
        return pred
    sql = pred.get("sql") if isinstance(pred, dict) else getattr(pred, "sql", None)
    return sql if isinstance(sql, str) else ""


def ex_metric(example: Any, pred: Any, trace: Any = None) -> float | bool:
    """DSPy metric: execution match of ``pred.sql`` against ``example.gold_sql``.

    Returns a bool while bootstrapping (``trace`` set), a float otherwise, per DSPy's contract.
    """
    from sqlweave.data import open_database

    db = open_database(example)
    ok = execution_match(pred_sql_of(pred), example.gold_sql, db, semantics_for(example))
    return ok if trace is not None else float(ok)


# --- Spider hardness --------------------------------------------------------------------------

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
