"""Independent references of the two official execution scorers, to check
:mod:`sqlweave.metrics` against: ``experiments/bench_eval.py`` runs them on every recorded
prediction, ``tests/test_properties.py`` on made-up ones. sqlweave scores with
:mod:`sqlweave.metrics`, never with these.

They are written from the documented algorithms of the official evaluators, not copied from
them (neither is published on PyPI):

* Spider, ``eval_exec_match`` of test-suite-sql-eval with ``plug_value`` and ``keep_distinct``
  off (:func:`spider_verdict`): repair ``> =``/``< =``/``! =``; ``sqlparse.parse(q)[0]`` with
  every token spelled ``distinct`` dropped (sqlparse is the official script's own dependency:
  ``pip install sqlparse``); gold ordered when ``'order by' in gold.lower()``; each query run on a
  fresh ``sqlite3`` connection (``text_factory`` decoding with ``errors="ignore"``,
  ``YEAR(CURDATE())`` replaced by 2020) inside ``asyncio.run``; :func:`result_eq`.
* BIRD, ``evaluation.py`` (:func:`bird_verdict`): on one fresh connection, the prediction then
  the gold, ``fetchall``, ``set(pred) == set(gold)``, under a 30 s thread timeout; any exception
  scores 0.
"""

from __future__ import annotations

import asyncio
import random
import re
import sqlite3
import threading
from collections import defaultdict
from itertools import product
from typing import Any


def remove_distinct(sql: str) -> str:
    """``sqlparse.parse(sql)[0]`` without its tokens spelled ``distinct``. An all-whitespace
    query, on which ``sqlparse.parse(q)[0]`` raises, is run as the empty string."""
    import sqlparse

    statements = sqlparse.parse(sql)
    if not statements:
        return ""
    return "".join(t.value for t in statements[0].flatten() if t.value.lower() != "distinct")


def _spider_run(path: str, sql: str) -> tuple[bool, Any]:
    sql = re.sub(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", "2020", sql, flags=re.IGNORECASE)

    async def run() -> tuple[bool, Any]:
        conn = sqlite3.connect(path)
        conn.text_factory = lambda b: b.decode(errors="ignore")
        try:
            return True, conn.execute(sql).fetchall()
        except Exception as err:  # the official script scores any failure
            return False, err
        finally:
            conn.close()

    return asyncio.run(run())


def _sorted_row(row: tuple) -> tuple:
    return tuple(sorted(row, key=lambda v: str(v) + str(type(v))))


def result_eq(a: list, b: list, ordered: bool, rng: random.Random) -> bool:
    """test-suite-sql-eval's ``result_eq`` (gold ``a`` first): empty equals empty; the same
    length and width; rows with their values sorted agree (as lists when ordered, as sets
    otherwise); then a column permutation, pruned by 20 rows of ``b`` drawn with ``rng`` when
    there are more than 3 columns, under which the rows are equal (lists when ordered, multisets
    otherwise)."""
    if not a and not b:
        return True
    if len(a) != len(b) or len(a[0]) != len(b[0]):
        return False
    sa, sb = [_sorted_row(r) for r in a], [_sorted_row(r) for r in b]
    if (sa != sb) if ordered else (set(sa) != set(sb)):
        return False
    n = len(a[0])
    a_cols = [{r[i] for r in a} for i in range(n)]
    allowed = [set(range(n)) for _ in range(n)]
    if n > 3:
        for _ in range(20):
            row = rng.choice(b)
            for i in range(n):
                allowed[i] = {j for j in allowed[i] if row[j] in a_cols[i]}
    for perm in product(*allowed):
        if len(set(perm)) != n:
            continue
        bp = b if n == 1 else [tuple(r[j] for j in perm) for r in b]
        if ordered:
            if a == bp:
                return True
        elif set(a) == set(bp):
            counts: dict = defaultdict(int)
            for r in a:
                counts[r] += 1
            for r in bp:
                counts[r] -= 1
            if all(c == 0 for c in counts.values()):
                return True
    return False


def spider_verdict(pred: str, gold: str, path: str, rng: random.Random) -> tuple[bool, bool]:
    """(verdict, gold failed) of the Spider procedure on the SQLite file at ``path``."""
    fix = ("> =", ">="), ("< =", "<="), ("! =", "!=")
    for old, new in fix:
        pred, gold = pred.replace(old, new), gold.replace(old, new)
    pred, gold = remove_distinct(pred), remove_distinct(gold)
    ordered = "order by" in gold.lower()
    g_ok, g_rows = _spider_run(path, gold)
    if not g_ok:
        return False, True
    p_ok, p_rows = _spider_run(path, pred)
    return p_ok and result_eq(g_rows, p_rows, ordered, rng), False


def bird_verdict(pred: str, gold: str, path: str, timeout_s: float = 30.0) -> tuple[bool, bool]:
    """(verdict, gold failed): the official script cannot tell a failing gold from a failing
    prediction, so the flag is computed apart, for the report only."""
    out: list[int] = []

    def work() -> None:
        conn = sqlite3.connect(path)
        try:
            p = conn.execute(pred).fetchall()
            g = conn.execute(gold).fetchall()
            out.append(int(set(p) == set(g)))
        except Exception:  # noqa: BLE001 - the official script scores any failure 0
            out.append(0)
        finally:
            conn.close()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout_s)
    verdict = bool(out and out[0])
    gold_failed = False
    if not verdict:
        try:
            conn = sqlite3.connect(path)
            conn.execute(gold).fetchall()
        except Exception:  # noqa: BLE001 - any gold failure is the flag
            gold_failed = True
        finally:
            conn.close()
    return verdict, gold_failed


__all__ = ["bird_verdict", "remove_distinct", "result_eq", "spider_verdict"]
