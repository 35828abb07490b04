"""``Database.close()`` stops the queries still running in other threads, on every engine
(issue 35: DuckDB and PostgreSQL ran on to their own timeout).

Each query would run for a minute; ``close()`` comes while it runs, and the query must end with
the "closed" error (kind ``connection``), not its timeout, and the handle must work again after.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import duckdb_url

from sqlweave.db import Database, ExecutionError

#: A query per engine that runs far past the test: a counting loop, a huge cross join, a sleep.
LONG = {
    "sqlite": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
    "SELECT count(*) FROM c",
    "duckdb": "SELECT sum(a.range * b.range) FROM range(1000000) a, range(1000000) b",
    "postgres": "SELECT pg_catalog.pg_sleep(60)",
}
QUERY_TIMEOUT_S = 60.0


@pytest.fixture(params=["sqlite", "duckdb", "postgres"])
def database(
    request: pytest.FixtureRequest, demo_concert_db: Path, tmp_path: Path
) -> Iterator[Database]:
    kind = request.param
    if kind == "sqlite":
        path = tmp_path / "concert.sqlite"
        shutil.copy(demo_concert_db, path)
        target = str(path)
    elif kind == "duckdb":
        target = duckdb_url(tmp_path / "t.duckdb", "CREATE TABLE t AS SELECT 1 AS x", engine=False)
    else:
        target = os.environ.get("SQLWEAVE_PG_URL", "")
        if not target:
            pytest.skip('SQLWEAVE_PG_URL is not set (run: eval "$(.ci/postgres.sh)")')
    db = Database.open(target)
    yield db
    db.close()


def test_close_stops_a_running_query(database: Database) -> None:
    outcome: dict[str, object] = {}
    started = threading.Event()

    def run() -> None:
        started.set()
        try:
            outcome["result"] = database.execute(
                LONG[database.dialect], timeout_s=QUERY_TIMEOUT_S, use_cache=False
            )
        except ExecutionError as err:
            outcome["error"] = err
        except BaseException as err:  # anything else is a bug
            outcome["bug"] = err

    worker = threading.Thread(target=run)
    worker.start()
    started.wait()
    time.sleep(1.0)  # let the query get going
    assert worker.is_alive(), outcome
    database.close()
    worker.join(timeout=QUERY_TIMEOUT_S / 2)
    assert not worker.is_alive(), "close() did not stop the query"
    error = outcome.get("error")
    assert isinstance(error, ExecutionError), outcome
    assert error.kind == "connection" and "closed while the query ran" in error.message
    # The handle serves the next query: close() leaves nothing armed against it.
    assert database.execute("SELECT 1 AS one", use_cache=False).rows == ((1,),)
