"""Two query results compared as the official Spider evaluator compares them
(:func:`spider_equal`): multisets of rows up to a permutation of columns (as lists when the gold
is ordered). :func:`sqlweave.metrics.results_match` is the entry point (it adds BIRD's sets of
rows); this module holds the column-arrangement search behind it."""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlweave.db import QueryResult
from sqlweave.errors import SqlweaveError

logger = logging.getLogger(__name__)

Rows = Sequence[Sequence[Any]]


def as_rows(result: QueryResult | Rows) -> list[tuple[Any, ...]]:
    rows = result.rows if isinstance(result, QueryResult) else result
    return [tuple(_hashable(v) for v in row) for row in rows]


def _hashable(value: Any) -> Any:
    """A value rows can be counted and compared by: DuckDB's lists and structs and
    PostgreSQL's arrays (list, dict) as tuples, element by element."""
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in value.items())
    return value


def _unorder_row(row: tuple[Any, ...]) -> tuple[Any, ...]:
    # The official canonical form of a row: its values sorted by text and type.
    return tuple(sorted(row, key=lambda x: str(x) + str(type(x))))


#: Column arrangements past which the official pre-check runs before the search: columns whose
#: values all look alike (flags of 0 and 1) make every arrangement a candidate, and ten such
#: columns are 3.6 million of them (seconds to hours), where the pre-check answers at once.
MANY_ARRANGEMENTS = 120


#: Column placements the search makes at most: past it the two results are called unequal
#: (with a warning). Pruned by the rows of the columns placed so far (:func:`_prefix_check`),
#: the search of twelve interchangeable 0/1 columns that ran for hours ends at once; the cap is
#: a last bound no measured result reaches.
MAX_ARRANGEMENT_STEPS = 200_000


class _SearchTooLong(SqlweaveError):
    """The arrangement search passed :data:`MAX_ARRANGEMENT_STEPS`."""


def _column_candidates(
    gold_cols: list[tuple], pred_cols: list[tuple], ordered: bool = False
) -> list[list[int]]:
    """For each gold column, the pred columns that could stand in its place: a pred column is a
    candidate for gold column ``i`` only if it holds the same values as many times (as a
    sequence when rows are ordered), a necessary condition, so pruning never changes the
    verdict."""
    ncols = len(gold_cols)
    if ordered:
        return [[j for j in range(ncols) if pred_cols[j] == gold_cols[i]] for i in range(ncols)]
    gold_counts = [Counter(c) for c in gold_cols]
    pred_counts = [Counter(c) for c in pred_cols]
    return [[j for j in range(ncols) if pred_counts[j] == gold_counts[i]] for i in range(ncols)]


def _column_permutations(
    candidates: list[list[int]], viable: Callable[[list[int]], bool] | None = None
) -> Iterator[tuple[int, ...]]:
    """Column permutations that could make pred equal gold; ``perm[i]`` is pred's column placed
    at position ``i``, chosen among ``candidates[i]`` (:func:`_column_candidates`). Depth-first
    with a stack of its own (a thousand columns passed Python's recursion limit); raises
    :class:`_SearchTooLong` past :data:`MAX_ARRANGEMENT_STEPS` placements."""
    ncols = len(candidates)
    if not ncols:
        yield ()
        return
    prefix: list[int] = []
    used: set[int] = set()
    stack = [iter(candidates[0])]
    steps = 0
    while stack:
        for j in stack[-1]:
            if j in used:
                continue
            steps += 1
            if steps > MAX_ARRANGEMENT_STEPS:
                raise _SearchTooLong
            prefix.append(j)
            used.add(j)
            if viable is not None and len(prefix) < ncols and not viable(prefix):
                used.discard(prefix.pop())  # no arrangement that starts so can match
                continue
            if len(prefix) == ncols:
                yield tuple(prefix)
                used.discard(prefix.pop())
                continue
            stack.append(iter(candidates[len(prefix)]))
            break
        else:  # this position has no candidate left: back to the one before
            stack.pop()
            if prefix:
                used.discard(prefix.pop())


def _keyed_rows(cols: Sequence[tuple]) -> list[tuple]:
    """Each row as the text and type of its values (the official sort key), built column-wise."""
    return list(
        zip(*[tuple(map(str, c)) for c in cols], *[tuple(map(type, c)) for c in cols], strict=True)
    )


def _quick_rej(gold: list[tuple], pred: list[tuple], ordered: bool) -> bool:
    """The official pre-check: rows with their values sorted must agree (as lists or sets)."""
    g = [_unorder_row(r) for r in gold]
    p = [_unorder_row(r) for r in pred]
    return g == p if ordered else set(g) == set(p)


def spider_equal(gold: list[tuple], pred: list[tuple], ordered: bool) -> bool:
    """``result_eq`` of the official test-suite evaluation, verdict for verdict.

    The official order is: a pre-check on rows with sorted values, then a search for a column
    permutation under which the rows are equal. We search first (column-wise, no loop over
    values in Python) and run the pre-check only on a match, where it almost always passes on
    the fast test that the matched values have the same text and type; only values that are
    equal but print differently (``1`` and ``1.0``, ``0.0`` and ``-0.0``) take the official row
    loop. Where the columns allow more than :data:`MANY_ARRANGEMENTS` arrangements, the
    pre-check comes first, as officially, and the search prunes partial arrangements.
    """
    if not gold and not pred:
        return True
    if len(gold) != len(pred):
        return False
    ncols = len(gold[0])
    if len(pred[0]) != ncols:
        return False
    gold_cols, pred_cols = list(zip(*gold, strict=True)), list(zip(*pred, strict=True))
    candidates = _column_candidates(gold_cols, pred_cols, ordered)
    many = math.prod(len(options) for options in candidates) > MANY_ARRANGEMENTS
    if many and not _quick_rej(gold, pred, ordered):
        return False  # the official order runs this first: the verdict is the same
    try:
        return _search(gold, pred, gold_cols, pred_cols, candidates, ordered, prune=many)
    except _SearchTooLong:
        logger.warning(
            "results of %d interchangeable columns: no arrangement found within %d steps; "
            "scored unequal",
            ncols,
            MAX_ARRANGEMENT_STEPS,
        )
        return False


def _prefix_check(gold_cols: list[tuple], pred_cols: list[tuple]) -> Callable[[list[int]], bool]:
    """Whether pred's columns placed so far hold gold's first columns' rows as many times: a
    necessary condition (the rows must match as multisets in the end), so pruning by it never
    changes a verdict, and interchangeable columns no longer exhaust the step cap."""
    gold_prefix: dict[int, Counter] = {}

    def viable(prefix: list[int]) -> bool:
        k = len(prefix)
        if k not in gold_prefix:
            gold_prefix[k] = Counter(zip(*gold_cols[:k], strict=True))
        return Counter(zip(*(pred_cols[j] for j in prefix), strict=True)) == gold_prefix[k]

    return viable


def _search(
    gold: list[tuple],
    pred: list[tuple],
    gold_cols: list[tuple],
    pred_cols: list[tuple],
    candidates: list[list[int]],
    ordered: bool,
    *,
    prune: bool,
) -> bool:
    """Whether some arrangement of pred's columns makes its rows gold's (:func:`spider_equal`);
    with ``prune`` (many arrangements, unordered rows) partial ones are pruned as they grow."""
    ncols = len(gold_cols)
    gold_counts: Counter | None = None
    viable = _prefix_check(gold_cols, pred_cols) if prune and not ordered else None
    for perm in _column_permutations(candidates, viable):
        cols = [pred_cols[j] for j in perm]
        permuted = pred if perm == tuple(range(ncols)) else list(zip(*cols, strict=True))
        if ordered:
            if permuted != gold:
                continue
        else:
            if gold_counts is None:
                gold_counts = Counter(gold)
            if Counter(permuted) != gold_counts:
                continue
        keyed_gold, keyed_pred = _keyed_rows(gold_cols), _keyed_rows(cols)
        same_keys = keyed_gold == keyed_pred if ordered else set(keyed_gold) == set(keyed_pred)
        return same_keys or _quick_rej(gold, pred, ordered)
    return False
