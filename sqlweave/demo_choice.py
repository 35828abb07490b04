"""Which pool items may be a question's demonstrations: the filters every retriever applies
(the similarity retrievers of :mod:`sqlweave.programs.stages.retrieval` and MageSQL's graph
retriever, :mod:`sqlweave.gnn.retriever`) to its own ranking, kept in one place so that the two
cannot drift apart."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator


def pick_demos(
    ranking: Iterable[int],
    db_of: Callable[[int], str],
    own_db: str,
    k: int,
    *,
    is_query: Callable[[int], bool],
    exclude_same_db: bool = False,
    one_per_db: bool = False,
    same_db_first: bool = False,
) -> list[int]:
    """The first ``k`` pool positions of ``ranking`` that may be a demo for a question on
    ``own_db``: every retriever's filters, in one place. Skips the question itself
    (``is_query``), ``own_db``'s items with ``exclude_same_db``, and a database already used with
    ``one_per_db``; with ``same_db_first`` (and own items allowed) ``own_db``'s items come first,
    each group in its ranking order (:func:`_own_first`)."""
    if k <= 0:
        return []
    if same_db_first and not exclude_same_db:
        ranking = _own_first(ranking, db_of, own_db)
    chosen: list[int] = []
    used_dbs: set[str] = set()
    for i in ranking:
        db_id = db_of(i)
        if is_query(i) or (exclude_same_db and db_id == own_db):
            continue
        if one_per_db and db_id in used_dbs:
            continue
        chosen.append(i)
        used_dbs.add(db_id)
        if len(chosen) >= k:  # stop here: the ranking may be lazy (_own_first holds the rest)
            break
    return chosen


def _own_first(ranking: Iterable[int], db_of: Callable[[int], str], own_db: str) -> Iterator[int]:
    """``ranking`` with the positions on ``own_db`` moved ahead of the rest, each group in its
    order. The own database's positions are yielded as they come (a top-k walk that fills up on
    them stops early); the others wait until the ranking is exhausted."""
    others: list[int] = []
    for i in ranking:
        if db_of(i) == own_db:
            yield i
        else:
            others.append(i)
    yield from others
