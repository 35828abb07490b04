"""Shared fixtures: where the bundled benchmark data lives, and open databases from it.

``data_root`` is ``../shared/data`` beside the repository checkout, or ``$SQLWEAVE_DATA`` when set
(read when the fixture runs). Tests that need the data are skipped, not failed, where it is absent,
so the package's own tests still run from a bare checkout.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import types
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sqlweave.db import Database

#: The Spider demo bundle shipped inside the package (a data root, as on a fresh install), present
#: in every checkout and install, unlike ``../shared/data``.
DEMO_ROOT = Path(__file__).resolve().parents[1] / "sqlweave" / "demo"
#: Its concert_singer database.
DEMO_CONCERT_DB = DEMO_ROOT / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"


@pytest.fixture(scope="session")
def demo_concert_db() -> Path:
    """The bundled concert_singer database (read it only; copy it to change it)."""
    return DEMO_CONCERT_DB


@pytest.fixture()
def singers_example(demo_concert_db: Path) -> Any:
    """One question on the bundled concert_singer database ("How many singers?", id ``q0``),
    as ``evaluate`` takes it: for tests of a run's records rather than of the answer."""
    import dspy

    return dspy.Example(
        question_id="q0",
        db_id="concert_singer",
        question="How many singers?",
        db_path=str(demo_concert_db),
        gold_sql="SELECT count(*) FROM singer",
        evidence="",
    ).with_inputs("question", "db_path", "evidence")


def _data_root() -> Path:
    env = os.environ.get("SQLWEAVE_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The benchmark data folder (holding ``spider/`` and ``bird/``); skips the test if absent."""
    root = _data_root()
    if not root.is_dir():
        pytest.skip(f"benchmark data not found at {root} (set SQLWEAVE_DATA)")
    return root


@pytest.fixture(scope="session")
def spider_root(data_root: Path) -> Path:
    root = data_root / "spider"
    if not (root / "dev.json").is_file():
        pytest.skip(f"Spider data not found under {root}")
    return root


@pytest.fixture(scope="session")
def bird_root(data_root: Path) -> Path:
    root = data_root / "bird"
    if not (root / "dev.json").is_file():
        pytest.skip(f"BIRD data not found under {root}")
    return root


def _db_factory(folder: Path, label: str) -> tuple[Callable[[str], Database], dict[str, Database]]:
    """Open ``folder/<db>/<db>.sqlite`` once per session, skipping when it is not bundled."""
    opened: dict[str, Database] = {}

    def open_db(db_id: str) -> Database:
        if db_id not in opened:
            path = folder / db_id / f"{db_id}.sqlite"
            if not path.is_file():
                pytest.skip(f"{label} database {db_id} not bundled")
            opened[db_id] = Database.open(path)
        return opened[db_id]

    return open_db, opened


@pytest.fixture(scope="session")
def spider_db(spider_root: Path) -> Iterator[Callable[[str], Database]]:
    """Factory: ``spider_db("concert_singer")`` opens (once per session) a bundled Spider database."""
    open_db, opened = _db_factory(spider_root / "database", "Spider")
    yield open_db
    for db in opened.values():
        db.close()


@pytest.fixture(scope="session")
def bird_db(bird_root: Path) -> Iterator[Callable[[str], Database]]:
    """Factory: ``bird_db("superhero")`` opens (once per session) a bundled BIRD dev database."""
    open_db, opened = _db_factory(bird_root / "dev_databases", "BIRD")
    yield open_db
    for db in opened.values():
        db.close()


def need_llama_cpp() -> None:
    """Skip a local-model test where llama-cpp-python is missing; fail in CI, where it must be."""
    if importlib.util.find_spec("llama_cpp") is None:
        if os.environ.get("CI"):
            pytest.fail("llama-cpp-python is not installed in CI (pip install 'sqlweave[local]')")
        pytest.skip("llama-cpp-python is not installed")


def stand_in_llama(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, llama: Any, key: tuple[Any, ...] = ()
) -> str:
    """Make every local engine load ``llama`` (a stand-in for ``llama_cpp.Llama``) instead of a
    model: writes a placeholder GGUF file and returns its ``gguf:`` spec."""
    from sqlweave.lm import engine, loading

    gguf = tmp_path / "fake.gguf"
    gguf.write_bytes(b"GGUF")
    loaded = loading.Loaded(llama, key=key)
    monkeypatch.setattr(loading, "load_llama", lambda *a, **k: loaded)
    monkeypatch.setattr(engine, "_reset_perf", lambda llama: None)
    return f"gguf:{gguf}"


def fake_llama_cpp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, llama_class: type) -> str:
    """Install a ``llama_cpp`` module whose ``Llama`` is ``llama_class``, so the real
    :func:`sqlweave.lm.loading.load_llama` runs without a model: gives the test its own loaded-model
    registries (so its stand-ins never reach the real exit hook), writes a placeholder GGUF file
    and returns its ``gguf:`` spec."""
    from sqlweave.lm import loading

    fake_module = types.ModuleType("llama_cpp")
    fake_module.Llama = llama_class  # type: ignore[attr-defined]
    fake_module.LlamaRAMCache = object  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "llama_cpp", fake_module)
    monkeypatch.setattr(loading, "_LOADED", {})
    monkeypatch.setattr(loading, "_OPEN_MODELS", weakref.WeakSet())
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    return f"gguf:{gguf}"


def spy_rollouts(lm: Any) -> list[tuple[Any, Any]]:
    """``(rollout_id, temperature)`` of every copy made of ``lm``, in order: each sampled rollout
    runs on a copy (its own history), so this is how a test sees which samples were drawn."""
    seen: list[tuple[Any, Any]] = []
    original_copy = lm.copy

    def spy_copy(**kwargs: Any) -> Any:
        seen.append((kwargs.get("rollout_id"), kwargs.get("temperature")))
        return original_copy(**kwargs)

    lm.copy = spy_copy
    return seen


def duckdb_url(path: Path, *statements: str, engine: bool = True) -> str:
    """A DuckDB file at ``path`` made by ``statements``, and its URL (skips without DuckDB, and
    without its SQLAlchemy dialect when ``engine``: what ``Database.open`` needs)."""
    duckdb = pytest.importorskip("duckdb")
    if engine:
        pytest.importorskip("duckdb_engine")
    conn = duckdb.connect(str(path))
    try:
        for statement in statements:
            conn.execute(statement)
    finally:
        conn.close()
    return f"duckdb:///{path}"


@contextlib.contextmanager
def pg_schema(name: str, *statements: str) -> Iterator[str]:
    """A fresh schema ``name`` on the loopback PostgreSQL of ``.ci/postgres.sh``, made by
    ``statements`` (run with it as the search path, so they name tables bare), and a URL that
    reads it; dropped afterwards. Skips when the server is not set up."""
    url = os.environ.get("SQLWEAVE_PG_URL")
    if not url:
        pytest.skip('SQLWEAVE_PG_URL is not set (run: eval "$(.ci/postgres.sh)")')
    import sqlalchemy as sa

    from sqlweave.transfer import search_path_url

    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        conn.exec_driver_sql(f'CREATE SCHEMA "{name}"')
        conn.exec_driver_sql(f'SET search_path TO "{name}"')
        for statement in statements:
            conn.exec_driver_sql(statement)
        conn.commit()
    try:
        yield search_path_url(url, name)
    finally:
        with engine.connect() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{name}" CASCADE')
            conn.commit()
        engine.dispose()


def sqlite_ddl(db: Path) -> str:
    """The database's own CREATE TABLE statements, read without sqlweave (the lm tests' schema)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type='table' AND sql IS NOT NULL"
        ).fetchall()
    finally:
        conn.close()
    return "\n".join(row[0] for row in rows)


EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def concert_question(spider_root: Path, gold: str, question: str = "", qid: str = "q") -> Any:
    """A recorded-run question on Spider's concert_singer whose gold query is ``gold``, as
    :mod:`sqlweave.programs.stages.replay` reads one."""
    from types import SimpleNamespace

    return SimpleNamespace(
        question_id=qid,
        question=question,
        db_id="concert_singer",
        db_path=spider_root / "database" / "concert_singer" / "concert_singer.sqlite",
        gold_sql=gold,
        source="spider",
        semantics="official-spider",
    )


def recorded(*candidates: tuple[str, str], qid: str = "q") -> dict[str, Any]:
    """A run's record of question ``qid`` with its ``(sql, origin)`` candidates."""
    return {"question_id": qid, "candidates": [{"sql": s, "origin": o} for s, o in candidates]}


def run_experiment(
    name: str,
    *args: str | Path,
    folder: Path = EXPERIMENTS,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """``python <folder>/<name>.py args...`` in a fresh process, as its users run it: a test runs
    an experiment script, it never imports one. Output captured as text; ``env`` adds to this
    process's environment."""
    command = [sys.executable, str(folder / f"{name}.py"), *map(str, args)]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def lab_copy(tmp_path: Path, *names: str) -> Path:
    """A folder of copies of ``experiments/<name>.py``: a script run from it writes its results
    beside it (``results/``), under ``tmp_path``, not into the checkout's."""
    folder = tmp_path / "experiments"
    folder.mkdir(exist_ok=True)
    for name in names:
        shutil.copy(EXPERIMENTS / f"{name}.py", folder / f"{name}.py")
    return folder


def run_on_stand_in(
    tmp_path: Path, script: str, n: int, *args: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``experiments/<script>.py args...`` in its own process on the first ``n`` questions of
    spider-dev-200, every model it loads answering them with their gold SQL
    (``tests/stand_in_bench.py``), a placeholder GGUF file as ``--model``: the finished process
    and what the stand-in saw (its report)."""
    from sqlweave.data import load_slice

    gold = {ex.question: ex.gold_sql for ex in load_slice("spider-dev-200")[:n]}
    (tmp_path / "gold.json").write_text(json.dumps(gold))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    report = tmp_path / "stand_in.json"
    runner = Path(__file__).resolve().with_name("stand_in_bench.py")
    command = [sys.executable, str(runner), str(tmp_path / "gold.json"), str(report)]
    command += [str(EXPERIMENTS / f"{script}.py"), "--model", f"gguf:{gguf}", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    return done, json.loads(report.read_text())


def chromium() -> str:
    """The headless Chromium binary, or a skip naming how to install it."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("headless Chromium not installed (Debian: apt-get install -y chromium)")
    raise AssertionError  # unreachable


def browse(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium on its own throwaway profile with ``args`` (a URL, --dump-dom...)."""
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.fixture()
def dummy_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The CLI's --model resolves to the DummyLM put in ``holder["lm"]`` (its options are kept
    in ``holder["options"]``); a test file may define its own."""
    import dspy

    holder: dict[str, Any] = {}

    def fake_configure(model: str, **options: object) -> Any:
        holder["options"] = options
        dspy.configure(lm=holder["lm"])
        return holder["lm"]

    monkeypatch.setattr("sqlweave.lm.configure", fake_configure)
    yield holder
    dspy.configure(lm=None)


class NumberedQuestions(dict):
    """DummyLM answers (prompt key -> fields) whose question writer numbers each question it
    writes: synthesis keeps a question once per database, and a real writer's questions differ
    with their queries. Use as ``DummyLM(NumberedQuestions({...}))``."""

    def __init__(self, answers: dict) -> None:
        super().__init__(answers)
        self.count = 0

    def items(self):  # DummyLM reads its dict answers through items(), once a call
        for key, value in super().items():
            if "question" in value:
                self.count += 1
                value = {**value, "question": f"{value['question']} ({self.count})"}
            yield key, value
