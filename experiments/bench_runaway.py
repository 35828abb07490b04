"""How far past its timeout, and how much memory, the known runaway queries take (issue 35).

docs/security.md promises timeout + 1 s and < 1.5 GB of growth for untrusted SQL, and names two
residuals that no guard inside the process closes: SQLite's quadratic substring search on values
near its 1 MB cap (one ``instr``/``replace`` call is never interrupted midway), and DuckDB rows of
100 MB (its memory limit does not cover string heaps; a vector of such rows is built before the
first row reaches sqlweave). This script measures them, each case in a fresh process: seconds
from the call to its return (against ``--timeout``) and growth of the peak resident set over the
process after opening the database. Figures belong here, not in tests.

    python experiments/bench_runaway.py                  # every case, timeout 2 s
    python experiments/bench_runaway.py --cases sqlite_instr_1mb duckdb_repeat_100mb_x20

Writes ``experiments/results/bench_runaway.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"

#: name -> (engine, SQL). ``printf('%.*c', n, 'a')`` is n copies of 'a' in SQLite.
CASES: dict[str, tuple[str, str]] = {
    # a control: the same 1 MB value searched for a short needle is linear and quick
    "sqlite_instr_short_needle": (
        "sqlite",
        "SELECT instr(printf('%.*c', 999000, 'a'), 'b')",
    ),
    "sqlite_instr_1mb": (
        "sqlite",
        "SELECT instr(printf('%.*c', 999000, 'a'), printf('%.*c', 499000, 'a') || 'b')",
    ),
    "sqlite_replace_1mb": (
        "sqlite",
        "SELECT length(replace(printf('%.*c', 999000, 'a'), printf('%.*c', 499000, 'a') || 'b',"
        " 'c'))",
    ),
    "sqlite_instr_1mb_x3": (
        "sqlite",
        "SELECT "
        + ", ".join(
            f"instr(printf('%.*c', 999000, 'a'), printf('%.*c', 49900{i}, 'a') || 'b')"
            for i in range(3)
        ),
    ),
    "duckdb_repeat_100mb_x20": ("duckdb", "SELECT repeat('x', 100000000) FROM range(20)"),
    "duckdb_repeat_100mb_x40": ("duckdb", "SELECT repeat('x', 100000000) FROM range(40)"),
}


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _target(engine: str, folder: Path) -> str:
    if engine == "sqlite":
        path = folder / "t.sqlite"
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE t (x INTEGER)")
        conn.commit()
        conn.close()
        return str(path)
    import duckdb

    path = folder / "t.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute("CREATE TABLE t AS SELECT 1 AS x")
    conn.close()
    return f"duckdb:///{path}"


def measure(name: str, timeout_s: float) -> dict[str, Any]:
    """Run one case in this process: seconds, peak RSS growth (MB), how it ended."""
    from sqlweave.db import Database, ExecutionError

    engine, sql = CASES[name]
    with tempfile.TemporaryDirectory() as tmp, Database.open(_target(engine, Path(tmp))) as db:
        db.execute("SELECT 1", use_cache=False)
        base = _peak_mb()
        start = time.perf_counter()
        try:
            db.execute(sql, timeout_s=timeout_s, use_cache=False)
            ended = "finished"
        except ExecutionError as err:
            ended = err.kind
        seconds = time.perf_counter() - start
    return {
        "case": name,
        "engine": engine,
        "sql": sql,
        "timeout_s": timeout_s,
        "seconds": round(seconds, 2),
        "past_timeout_s": round(seconds - timeout_s, 2),
        "rss_growth_mb": round(_peak_mb() - base, 1),
        "ended": ended,
    }


def _in_child(name: str, timeout_s: float) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", name, "--timeout", str(timeout_s)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return {"case": name, "ended": f"process failed ({done.returncode})", "log": done.stderr}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--timeout", type=float, default=2.0, help="timeout_s of each query")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_runaway.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.timeout)))
        return
    rows = [_in_child(name, args.timeout) for name in args.cases]
    print(f"{'case':<26} {'seconds':>8} {'past timeout':>13} {'RSS growth MB':>14}  ended")
    for row in rows:
        print(
            f"{row['case']:<26} {row.get('seconds', float('nan')):>8} "
            f"{row.get('past_timeout_s', float('nan')):>13} "
            f"{row.get('rss_growth_mb', float('nan')):>14}  {row['ended']}"
        )
    payload = {
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "timeout_s": args.timeout,
        "cases": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
