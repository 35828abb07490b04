"""Benchmark loaders: Spider and BIRD questions (and a user's question files) as ``dspy.Example``
objects.

Every example has the same fields whichever benchmark it comes from, so programs, metrics and the
evaluation loop never branch on the source:

* inputs: ``question``, ``db_id``, ``evidence`` (``""`` for Spider) and ``db_path`` (the SQLite
  file, a string). ``db_path`` is an input because programs open the database from it
  (:func:`sqlweave.programs.resolve_database`); optimizers call ``program(**example.inputs())``.
* labels: ``gold_sql``, ``difficulty`` (Spider: the official hardness easy/medium/hard/extra
  computed from the gold SQL by :func:`sqlweave.hardness.spider_hardness`; BIRD: simple/moderate/
  challenging from the file), ``question_id``, ``source`` (``"spider"``/``"bird"``/``"user"``) and
  ``split``.

Where the data lives is explicit. :func:`resolve_data_root` takes, in order: the ``root`` argument,
the ``SQLWEAVE_DATA`` environment variable (read at call time, never at import), the ``shared/data``
folder next to a repository checkout. ``root`` may be the folder holding ``spider/`` and ``bird/``
or the benchmark's own folder.

Malformed files raise :class:`DataError` naming the file and the problem, never a bare KeyError.

Everything here is importable from :mod:`sqlweave.data` too, beside the slices built from it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import dspy

from sqlweave.db import Database
from sqlweave.errors import SqlweaveError
from sqlweave.hardness import spider_hardness

logger = logging.getLogger(__name__)

INPUT_FIELDS = ("question", "db_id", "evidence", "db_path")
SPIDER_SPLITS = {"dev": "dev.json", "train": "train_spider.json", "test": "test.json"}
SPIDER_LEVELS = ("easy", "medium", "hard", "extra")
BIRD_LEVELS = ("simple", "moderate", "challenging")


class DataError(SqlweaveError, ValueError):
    """A benchmark or question file is missing or malformed; the message names file and problem."""

    # Documented, caught and reported as sqlweave.data.DataError since the first release (it is
    # re-exported there); it moved here with the loaders, its name did not.
    __module__ = "sqlweave.data"

    def __init__(self, path: str | Path | None, problem: str) -> None:
        self.path = Path(path) if path is not None else None
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path is not None else problem)


# --- where the data lives ---------------------------------------------------------------------


def _checkout_data_root() -> Path:
    # sqlweave/benchmarks.py -> repository root -> its parent holds shared/data in a workspace checkout.
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


def resolve_data_root(root: str | Path | None = None) -> Path:
    """The data folder: ``root``, else ``$SQLWEAVE_DATA``, else ``../shared/data``, else the package's bundle.

    The environment is read here, at call time, so tests and the CLI can point at other data
    without re-importing anything.
    """
    if root is not None:
        path = Path(root).expanduser()
        if not path.exists():
            raise DataError(path, "data folder does not exist")
        return path
    env = os.environ.get("SQLWEAVE_DATA")
    if env:
        path = Path(env).expanduser()
        if not path.exists():
            raise DataError(path, "folder named by SQLWEAVE_DATA does not exist")
        return path
    bundled = _checkout_data_root()
    if bundled.is_dir():
        return bundled
    # A user install has no checkout beside it: fall back to the Spider demo bundle shipped in
    # the package (all bundled dev questions, a small train pool and the spider-train-val
    # databases' questions; see scripts/make_demo_bundle.py).
    packaged = Path(__file__).resolve().parent / "demo"
    if (packaged / "spider" / "dev.json").is_file():
        return packaged
    raise DataError(
        None,
        "no benchmark data found: pass root=PATH (CLI: --data-root PATH) or set SQLWEAVE_DATA to "
        "the folder holding spider/ and/or bird/",
    )


def _benchmark_dir(root: str | Path | None, name: str, marker: Iterable[str]) -> Path:
    """``root/name`` when present, else ``root`` itself when it already looks like the benchmark."""
    base = resolve_data_root(root)
    sub = base / name
    if sub.is_dir():
        return sub
    if any((base / m).exists() for m in marker):
        return base
    raise DataError(base, f"no {name}/ folder here (and this does not look like {name} itself)")


def _read_text(path: Path) -> str:
    """A questions file's text, each way it cannot be read said as the file's mistake."""
    try:
        return path.read_text(encoding="utf-8-sig")  # -sig: a leading BOM is no JSON error
    except FileNotFoundError as err:
        raise DataError(path, "file not found") from err
    except IsADirectoryError as err:
        raise DataError(path, "is a folder, not a questions file") from err
    except UnicodeDecodeError as err:
        raise DataError(path, f"not UTF-8 text ({err.reason} at byte {err.start})") from err


def _read_json_list(path: Path) -> list[dict[str, Any]]:
    return _json_list(path, _read_text(path))


def _json_list(path: Path, text: str) -> list[dict[str, Any]]:
    """The objects of the JSON list ``text`` (``path``'s, named in every error)."""
    try:
        items = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(path, f"invalid JSON at line {err.lineno}, column {err.colno}") from err
    except RecursionError as err:
        raise DataError(path, "invalid JSON: nested too deeply") from err
    if not isinstance(items, list):
        raise DataError(path, f"expected a JSON list of questions, got {type(items).__name__}")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise DataError(path, f"item {i} is {type(item).__name__}, expected an object")
    return items


def _item(i: int | str) -> str:
    """Where an item stands, as a message names it: ``item 3`` in a JSON list, or the label its
    reader gave it (``line 5`` of a JSON Lines file, blank lines counted)."""
    return i if isinstance(i, str) else f"item {i}"


def _field(path: Path, i: int | str, item: dict[str, Any], *names: str) -> str:
    """:func:`_text`, required: an item that gives none of ``names`` is the file's mistake."""
    value = _text(path, i, item, *names)
    if value is None:
        wanted = " or ".join(repr(n) for n in names)
        raise DataError(path, f"{_item(i)} has no string field {wanted}")
    return value


def _text(path: Path, i: int | str, item: dict[str, Any], *names: str) -> str | None:
    """The first of ``names`` that item ``i`` gives (not null), which must be text: a number or
    an object where a path, a query or an id belongs is the file's mistake, said as one."""
    for name in names:
        value = item.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise DataError(
                path,
                f"{_item(i)}: {name!r} must be a string, not {type(value).__name__} {value!r}",
            )
        return value
    return None


def _hardness(sql: str) -> str:
    """Spider hardness of a gold query, ``"unknown"`` (with a warning) when sqlglot cannot parse it."""
    try:
        return spider_hardness(sql)
    except ValueError:
        logger.warning("cannot grade the hardness of gold SQL: %s", sql)
        return "unknown"


def _make_example(**fields: Any) -> dspy.Example:
    return dspy.Example(**fields).with_inputs(*INPUT_FIELDS)


def _check_databases(path: Path, db_paths: dict[str, Path]) -> None:
    missing = sorted(db for db, p in db_paths.items() if not p.is_file())
    if missing:
        shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
        raise DataError(
            path, f"{len(missing)} database(s) used by its questions are missing: {shown}"
        )


# --- Spider -----------------------------------------------------------------------------------


def spider_database_dirs(spider_dir: Path, split: str) -> list[Path]:
    """Folders searched for ``<db_id>/<db_id>.sqlite``: ``test_database/`` first for the test split."""
    dirs = [spider_dir / "test_database"] if split == "test" else []
    return [d for d in [*dirs, spider_dir / "database"] if d.is_dir()]


def load_spider(split: str = "dev", root: str | Path | None = None) -> list[dspy.Example]:
    """Spider questions of ``split`` (``dev``, ``train`` = ``train_spider.json``, or ``test``).

    Layout (the official release): ``spider/{dev,train_spider,test}.json`` and
    ``spider/database/<db_id>/<db_id>.sqlite`` (test databases in ``test_database/`` when present).
    ``question_id`` is ``spider_<split>_<index in file>``, or the item's own ``question_id`` when it
    has one (a subset such as the package's demo bundle keeps the full set's ids, so the committed
    slices resolve in it). ``difficulty`` is computed from the gold
    SQL with the official hardness rules, since the files carry none.
    """
    if split not in SPIDER_SPLITS:
        raise DataError(
            None, f"unknown Spider split {split!r}; choose from {sorted(SPIDER_SPLITS)}"
        )
    spider_dir = _benchmark_dir(root, "spider", SPIDER_SPLITS.values())
    path = spider_dir / SPIDER_SPLITS[split]
    items = _read_json_list(path)
    db_dirs = spider_database_dirs(spider_dir, split)
    if not db_dirs:
        raise DataError(spider_dir, "no database/ folder with the SQLite files")

    db_paths: dict[str, Path] = {}
    examples = []
    for i, item in enumerate(items):
        db_id = _field(path, i, item, "db_id")
        gold = _field(path, i, item, "query")
        question = _field(path, i, item, "question")
        if db_id not in db_paths:
            candidates = [d / db_id / f"{db_id}.sqlite" for d in db_dirs]
            db_paths[db_id] = next((c for c in candidates if c.is_file()), candidates[-1])
        examples.append(
            _make_example(
                question=question,
                db_id=db_id,
                evidence="",
                db_path=str(db_paths[db_id]),
                gold_sql=gold,
                difficulty=_hardness(gold),
                question_id=str(item.get("question_id") or f"spider_{split}_{i:04d}"),
                source="spider",
                split=split,
            )
        )
    _check_databases(path, db_paths)
    logger.info("loaded %d Spider %s questions from %s", len(examples), split, path)
    return examples


# --- BIRD -------------------------------------------------------------------------------------


def find_bird_split(bird_dir: Path, split: str) -> tuple[Path, Path]:
    """Locate ``(<split>.json, <split>_databases/)`` in any of the layouts BIRD ships in.

    Searched, first match wins: ``bird/<split>.json``, ``bird/<split>/<split>.json`` and
    ``bird/<split>_*/<split>.json`` (e.g. ``dev_20240627/``, in name order). The databases folder
    is ``<split>_databases/`` beside the JSON file, else beside ``bird/`` itself.
    """
    candidates = [bird_dir / f"{split}.json", bird_dir / split / f"{split}.json"]
    candidates += [d / f"{split}.json" for d in sorted(bird_dir.glob(f"{split}_*")) if d.is_dir()]
    for json_path in candidates:
        if json_path.is_file():
            for db_dir in (
                json_path.parent / f"{split}_databases",
                bird_dir / f"{split}_databases",
            ):
                if db_dir.is_dir():
                    return json_path, db_dir
            raise DataError(json_path, f"found the questions but no {split}_databases/ beside it")
    tried = ", ".join(str(c.relative_to(bird_dir)) for c in candidates)
    raise DataError(bird_dir, f"no BIRD {split} questions found (looked for {tried})")


def load_bird(split: str = "dev", root: str | Path | None = None) -> list[dspy.Example]:
    """BIRD questions of ``split`` (``dev`` or ``train``) in the official layout.

    Fields read: ``question_id`` (train has none: ``bird_<split>_<index>`` is used), ``db_id``,
    ``question``, ``evidence``, ``SQL``, ``difficulty`` (train has none: ``"unknown"``). Databases
    are ``<split>_databases/<db_id>/<db_id>.sqlite``; see :func:`find_bird_split` for where files
    are looked for and :func:`description_dir` for the column descriptions.
    """
    bird_dir = _benchmark_dir(root, "bird", (f"{split}.json", split, f"{split}_databases"))
    path, db_dir = find_bird_split(bird_dir, split)
    items = _read_json_list(path)
    db_paths: dict[str, Path] = {}
    examples = []
    for i, item in enumerate(items):
        db_id = _field(path, i, item, "db_id")
        gold = _field(path, i, item, "SQL", "sql")
        question = _field(path, i, item, "question")
        evidence = item.get("evidence") or ""
        if not isinstance(evidence, str):
            raise DataError(path, f"item {i} has a non-string 'evidence'")
        difficulty = item.get("difficulty") or "unknown"
        db_paths.setdefault(db_id, db_dir / db_id / f"{db_id}.sqlite")
        qid = item.get("question_id")
        examples.append(
            _make_example(
                question=question,
                db_id=db_id,
                evidence=evidence,
                db_path=str(db_paths[db_id]),
                gold_sql=gold,
                difficulty=str(difficulty),
                question_id=f"bird_{split}_{qid if qid is not None else i}",
                source="bird",
                split=split,
            )
        )
    _check_databases(path, db_paths)
    logger.info("loaded %d BIRD %s questions from %s", len(examples), split, path)
    return examples


def description_dir(example_or_db_path: Any) -> Path | None:
    """BIRD's ``database_description/`` folder (one CSV per table) beside a database, if any."""
    db_path = Path(getattr(example_or_db_path, "db_path", example_or_db_path))
    folder = db_path.parent / "database_description"
    return folder if folder.is_dir() else None


# --- user question files ----------------------------------------------------------------------


def load_questions(
    path: str | Path, *, db_root: str | Path | None = None, source: str = "user"
) -> list[dspy.Example]:
    """Questions from a user file: a JSON list, or JSON Lines (one object per line).

    Each object needs ``question`` and either ``db_path`` (relative paths are taken from the
    file's folder) or ``db_id``, found as ``<db_root>/<db_id>/<db_id>.sqlite`` or, without
    ``db_root``, among the bundled benchmarks' databases. Optional: ``evidence``, gold SQL
    (``gold_sql``, ``sql``, ``SQL`` or ``query``), ``question_id`` and ``difficulty`` (computed with the
    Spider rules when a gold query is given without one). ``source`` picks the metric semantics
    (``"bird"`` for BIRD's, anything else Spider's).
    """
    path = Path(path)
    text = _read_text(path)
    examples = []
    first_of: dict[str, str] = {}  # question id -> where it first stands
    for i, (at, item) in enumerate(_parse_question_text(path, text)):
        question = _field(path, at, item, "question")
        if not question.strip():
            raise DataError(path, f"{_item(at)}: the question is empty")
        qid = item.get("question_id")
        if qid is not None and (isinstance(qid, bool) or not isinstance(qid, str | int)):
            raise DataError(path, f"{_item(at)}: 'question_id' must be a string or a number")
        question_id = str(f"{path.stem}_{i}" if qid is None else qid)
        if question_id in first_of:  # records are keyed by it: two would overwrite each other
            raise DataError(
                path, f"{_item(at)}: question_id {question_id!r} repeats {first_of[question_id]}"
            )
        first_of[question_id] = _item(at)
        db_file, db_id = _database_of(path, at, item, db_root)
        gold = _text(path, at, item, "gold_sql", "sql", "SQL", "query") or ""
        difficulty = _text(path, at, item, "difficulty") or (_hardness(gold) if gold else "unknown")
        examples.append(
            _make_example(
                question=question,
                db_id=str(db_id),
                evidence=_text(path, at, item, "evidence") or "",
                db_path=db_file,
                gold_sql=gold,
                difficulty=str(difficulty),
                question_id=question_id,
                source=str(item.get("source", source)),
                split=str(item.get("split", "user")),
            )
        )
    return examples


def is_url(db_path: Any) -> bool:
    """Whether a ``db_path`` is a database URL (``postgresql://…``, ``duckdb:///…``), not a file:
    as a ``Path`` it would lose its ``//``."""
    return isinstance(db_path, str) and "://" in db_path


def url_name(url: str) -> str:
    """What :meth:`sqlweave.db.Database.open` names a URL's database: its database part's stem."""
    return Path(url.rsplit("/", 1)[-1].split("?", 1)[0]).stem or "db"


def _database_of(
    path: Path, i: int | str, item: dict[str, Any], db_root: str | Path | None
) -> tuple[str, str]:
    """Item ``i``'s database (``db_path``: a SQLite file, relative to the questions file, or a
    URL, as synthesized pairs of a server's database name it; else ``db_id`` found on disk) and
    its ``db_id``."""
    db_path = _text(path, i, item, "db_path", "db")
    db_id = _text(path, i, item, "db_id")
    if is_url(db_path):  # opened when asked, by the program
        return db_path, db_id or url_name(db_path)
    if db_path:
        db_file = Path(db_path)
        if not db_file.is_absolute():
            db_file = path.parent / db_file
        db_id = db_id or db_file.stem
    elif db_id:
        db_file = _find_db(str(db_id), db_root, path, i)
    else:
        raise DataError(path, f"{_item(i)} needs 'db_id' or 'db_path'")
    if not file_exists(db_file):
        raise DataError(path, f"{_item(i)}: database file not found: {db_file}")
    return str(db_file), str(db_id)


def _parse_question_text(path: Path, text: str) -> list[tuple[int | str, dict[str, Any]]]:
    """Each item of a JSON list (labelled by its index) or of JSON Lines (by its line)."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        return list(enumerate(_json_list(path, text)))  # read once, by load_questions
    items: list[tuple[int | str, dict[str, Any]]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as err:
            _not_json_lines(path, text)
            why = err.msg if isinstance(err, json.JSONDecodeError) else "nested too deeply"
            raise DataError(path, f"line {lineno} is not valid JSON ({why})") from err
        if not isinstance(item, dict):
            raise DataError(path, f"line {lineno} is not a JSON object")
        items.append((f"line {lineno}", item))
    if not items:
        raise DataError(path, "no questions in file")
    return items


def _not_json_lines(path: Path, text: str) -> None:
    """Say so when a file whose lines are no JSON is one JSON document of another shape (a
    pretty-printed ``{"questions": [...]}``): its first line is then no error of its own."""
    try:
        whole = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return
    raise DataError(
        path,
        f"expected a JSON list of questions or JSON Lines (one object per line), "
        f"got one JSON {type(whole).__name__} over several lines",
    )


def _find_db(db_id: str, db_root: str | Path | None, path: Path, i: int | str) -> Path:
    if db_root is not None:
        return Path(db_root) / db_id / f"{db_id}.sqlite"
    try:
        return database_path(db_id)
    except DataError as err:
        raise DataError(
            path, f"{_item(i)}: database {db_id!r} not found; pass db_root= or give 'db_path'"
        ) from err


# --- databases --------------------------------------------------------------------------------


def database_path(
    example_or_db_id: Any,
    *,
    source: str | None = None,
    split: str = "dev",
    root: str | Path | None = None,
) -> Path:
    """The SQLite file of an example (its ``db_path``) or of a bare ``db_id``.

    A ``db_id`` is looked up in Spider's ``database/`` then BIRD's ``<split>_databases/`` under
    the data root (``source`` restricts the search to one benchmark).
    """
    db_path = getattr(example_or_db_id, "db_path", None)
    if db_path:
        return Path(db_path)
    db_id = getattr(example_or_db_id, "db_id", example_or_db_id)
    if not isinstance(db_id, str) or not db_id:
        raise DataError(None, f"cannot find a database for {example_or_db_id!r}")
    if Path(db_id).suffix in (".sqlite", ".db", ".sqlite3") and file_exists(Path(db_id)):
        return Path(db_id)
    base = resolve_data_root(root)
    tried: list[Path] = []
    if source in (None, "spider"):
        spider_dir = base / "spider" if (base / "spider").is_dir() else base
        for d in spider_database_dirs(spider_dir, split) or [spider_dir / "database"]:
            tried.append(d / db_id / f"{db_id}.sqlite")
    if source in (None, "bird"):
        bird_dir = base / "bird" if (base / "bird").is_dir() else base
        try:
            _, db_dir = find_bird_split(bird_dir, split)
            tried.append(db_dir / db_id / f"{db_id}.sqlite")
        except DataError:
            pass
    for candidate in tried:
        if file_exists(candidate):
            return candidate
    raise DataError(base, f"database {db_id!r} not found (tried {len(tried)} places)")


def file_exists(path: Path) -> bool:
    """``path.is_file()``, False where the name cannot be a file at all (too long, a NUL byte)
    rather than an OSError: a db_id is the user's text."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def open_database(example_or_path: Any) -> Database:
    """An open, shared :class:`Database` for an example, db_id or path: one handle per file.

    Sharing the handle shares its result cache, so a gold query runs once per database however
    many times it is scored. The handle comes from :func:`sqlweave.caches.open_database`, the
    one handle cache that programs use too.
    """
    from sqlweave.caches import open_database as open_shared

    db_path = getattr(example_or_path, "db_path", example_or_path)
    if is_url(db_path):
        return open_shared(db_path)
    return open_shared(database_path(example_or_path))
