"""Do Spider's gold queries mean the same on PostgreSQL? EX(SQLite gold, transpiled PG gold).

For each database: copy the bundled SQLite file into PostgreSQL (``sqlweave.transfer``), run every
gold query of the split on SQLite and its sqlglot transpilation (``to_postgres_sql``) on
PostgreSQL, and compare the results with Spider's EX semantics (``sqlweave.metrics.results_match``:
multiset of rows, order only when the gold sorts, exact values). A second, tolerant comparison
rounds floats to 6 places, so float noise is told apart from real disagreement; each mismatch is
given a kind: float_rounding, string_case, row_order, row_count, values (e.g. ties under LIMIT),
pg_error:<class> (group_by_strict, text_vs_number, aggregate_on_text, or the error kind),
transpile_error.

Default databases: every database the split uses (16 for the bundled dev subset).

    eval "$(.ci/postgres.sh)"
    python experiments/pg_gold.py                      # all dev databases
    python experiments/pg_gold.py --dbs concert_singer pets_1
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from sqlglot.errors import ParseError, TokenError

from sqlweave.data import resolve_data_root
from sqlweave.db import Database, ExecutionError, QueryResult
from sqlweave.metrics import has_top_level_order_by, results_match
from sqlweave.transfer import (
    column_names,
    copy_sqlite_to_postgres,
    plan_tables,
    to_postgres_sql,
)

logger = logging.getLogger("pg_gold")


#: PostgreSQL error texts that stand for a known SQLite/PostgreSQL difference.
PG_ERROR_CLASSES = (
    ("group_by_strict", re.compile(r"must appear in the GROUP BY clause")),
    ("text_vs_number", re.compile(r"operator does not exist: (text|bigint|double precision) ")),
    ("aggregate_on_text", re.compile(r"function \w+\(text\) does not exist")),
)


def pg_error_class(err: ExecutionError) -> str:
    for name, pattern in PG_ERROR_CLASSES:
        if pattern.search(err.message):
            return name
    return err.kind


def _rounded(rows: tuple[tuple[Any, ...], ...], places: int = 6) -> list[tuple[Any, ...]]:
    return [tuple(round(v, places) if isinstance(v, float) else v for v in r) for r in rows]


def _folded(rows: tuple[tuple[Any, ...], ...]) -> list[tuple[Any, ...]]:
    return [tuple(v.lower() if isinstance(v, str) else v for v in r) for r in _rounded(rows)]


def mismatch_kind(lite: QueryResult, pg: QueryResult, ordered: bool) -> str:
    """Why two results differ, as far as the results alone can tell."""
    if results_match(_rounded(pg.rows), _rounded(lite.rows), ordered=ordered):
        return "float_rounding"
    if ordered and results_match(_rounded(pg.rows), _rounded(lite.rows), ordered=False):
        return "row_order"  # same rows, ties sorted differently (or collation)
    if results_match(_folded(pg.rows), _folded(lite.rows), ordered=False):
        return "string_case"
    if len(pg.rows) != len(lite.rows):
        return "row_count"
    return "values"


def compare_database(
    db_id: str, sqlite_path: Path, examples: list[dict[str, Any]], pg_url: str, timeout_s: float
) -> list[dict[str, Any]]:
    """Copy one database and compare every gold query on both engines."""
    url = copy_sqlite_to_postgres(sqlite_path, pg_url, schema_name=db_id.lower())
    columns = column_names(plan_tables(sqlite_path))
    records = []
    with Database.open(sqlite_path) as lite, Database.open(url, name=db_id) as pg:
        for i, example in enumerate(examples):
            gold = example["query"]
            record: dict[str, Any] = {"db_id": db_id, "index": i, "gold": gold}
            try:
                lite_result = lite.execute(gold, timeout_s=timeout_s, max_rows=None)
            except ExecutionError as err:
                records.append({**record, "match": None, "kind": f"sqlite_error:{err.kind}"})
                continue
            try:
                pg_sql = to_postgres_sql(gold, columns=columns)
            except (ParseError, TokenError) as err:
                records.append(
                    {**record, "match": False, "kind": "transpile_error", "error": str(err)}
                )
                continue
            record["pg_sql"] = pg_sql
            try:
                pg_result = pg.execute(pg_sql, timeout_s=timeout_s, max_rows=None)
            except ExecutionError as err:
                records.append(
                    {
                        **record,
                        "match": False,
                        "kind": f"pg_error:{pg_error_class(err)}",
                        "error": err.message,
                    }
                )
                continue
            ordered = has_top_level_order_by(gold)
            strict = results_match(pg_result, lite_result, ordered=ordered)
            record.update(match=strict, tolerant_match=strict, kind="match" if strict else None)
            if not strict:
                kind = mismatch_kind(lite_result, pg_result, ordered)
                record.update(
                    kind=kind,
                    tolerant_match=kind == "float_rounding",
                    sqlite_rows=[list(map(repr, r)) for r in lite_result.rows[:5]],
                    pg_rows=[list(map(repr, r)) for r in pg_result.rows[:5]],
                )
            records.append(record)
    return records


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    by_db: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_db[r["db_id"]].append(r)

    def stats(rs: list[dict[str, Any]]) -> dict[str, Any]:
        scored = [r for r in rs if r["match"] is not None]
        n = len(scored)
        ex = sum(bool(r["match"]) for r in scored)
        tol = sum(bool(r.get("tolerant_match")) for r in scored)
        kinds = Counter(r["kind"] for r in rs if r["kind"] != "match")
        return {
            "n": n,
            "ex": ex / n if n else 0.0,
            "ex_tolerant": tol / n if n else 0.0,
            "matched": ex,
            "mismatch_kinds": dict(kinds.most_common()),
        }

    return {
        "overall": stats(records),
        "per_database": {db: stats(rs) for db, rs in sorted(by_db.items())},
    }


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = [
        "# Spider gold SQL: SQLite vs PostgreSQL (sqlglot-transpiled)",
        "",
        f"Split `{meta['split']}`, PostgreSQL {meta['pg_version']}, sqlglot {meta['sqlglot']}. "
        "EX = Spider semantics (multiset of rows, order when the gold sorts, exact values); "
        "tolerant = floats rounded to 6 places.",
        "",
        "| database | n | EX | EX tolerant | mismatches |",
        "|---|---:|---:|---:|---|",
    ]

    def row(name: str, s: dict[str, Any]) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in s["mismatch_kinds"].items()) or "-"
        return f"| {name} | {s['n']} | {s['ex']:.3f} | {s['ex_tolerant']:.3f} | {kinds} |"

    for db, s in summary["per_database"].items():
        lines.append(row(db, s))
    lines.append(row("**all**", summary["overall"]))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-root", default=None, help="folder holding spider/ (default: shared)"
    )
    parser.add_argument("--split", default="dev", help="dev.json (default) or train_spider.json")
    parser.add_argument("--dbs", nargs="*", help="database ids (default: every one the split uses)")
    parser.add_argument("--pg-url", default=None, help="owner URL (default: $SQLWEAVE_PG_URL)")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--out-dir", type=Path, default=Path("experiments/results"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    pg_url = args.pg_url or os.environ.get("SQLWEAVE_PG_URL")
    if not pg_url:
        parser.error('no PostgreSQL: pass --pg-url or run eval "$(.ci/postgres.sh)"')
    spider = resolve_data_root(args.data_root) / "spider"
    split_file = spider / (args.split if args.split.endswith(".json") else f"{args.split}.json")
    examples = json.loads(split_file.read_text())
    by_db: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in examples:
        by_db[e["db_id"]].append(e)
    dbs = args.dbs or sorted(by_db)

    start = time.perf_counter()
    records: list[dict[str, Any]] = []
    for db_id in dbs:
        path = spider / "database" / db_id / f"{db_id}.sqlite"
        got = compare_database(db_id, path, by_db[db_id], pg_url, args.timeout)
        logger.info("%s: %d/%d match", db_id, sum(bool(r["match"]) for r in got), len(got))
        records.extend(got)

    import sqlglot

    with Database.open(pg_url) as pg:
        pg_version = pg.execute("SELECT current_setting('server_version')").rows[0][0]
    meta = {
        "split": split_file.name,
        "databases": dbs,
        "pg_version": pg_version,
        "sqlglot": sqlglot.__version__,
        "elapsed_s": round(time.perf_counter() - start, 1),
    }
    summary = summarize(records)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = {"meta": meta, "summary": summary, "records": records}
    (args.out_dir / "pg_gold.json").write_text(json.dumps(out, indent=1, default=str))
    table = markdown(summary, meta)
    (args.out_dir / "pg_gold.md").write_text(table)
    print(table)
    return out


if __name__ == "__main__":
    main()
