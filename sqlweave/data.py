"""The questions a run asks: the benchmarks' examples and the fixed slices every figure is
measured on.

The loaders (Spider, BIRD, a user's question files, where the data lives, each question's
database) are :mod:`sqlweave.benchmarks`, re-exported here where callers have always imported
them. This module holds what is made from them: a deterministic stratified sample
(:func:`eval_slice`), the named slices whose question ids are committed under
``sqlweave/slices/`` (:func:`load_slice`), and the merged slices that ask a slice's questions of
one database holding 48 databases' tables.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import dspy
from sqlglot.errors import SqlglotError

from sqlweave.benchmarks import (
    BIRD_LEVELS,
    INPUT_FIELDS,
    SPIDER_LEVELS,
    SPIDER_SPLITS,
    DataError,
    database_path,
    description_dir,
    find_bird_split,
    load_bird,
    load_questions,
    load_spider,
    open_database,
    resolve_data_root,
    spider_database_dirs,
)
from sqlweave.merge import (
    MergedDatabase,
    check_rewrite,
    merge_databases,
    rewrite_sql,
    table_renames,
)

__all__ = [
    "BIRD_LEVELS",
    "INPUT_FIELDS",
    "MERGED_DB_ID",
    "MERGED_SLICES",
    "N_DISTRACTORS",
    "SLICES",
    "SLICES_DIR",
    "SPIDER_LEVELS",
    "SPIDER_SPLITS",
    "TRAIN_SELECT_SIZE",
    "TRAIN_VAL_MIN_QUESTIONS",
    "TRAIN_VAL_SIZE",
    "DataError",
    "assert_disjoint",
    "build_merged_slice",
    "build_slice_ids",
    "database_path",
    "demo_pool_exclusions",
    "description_dir",
    "ensure_merged",
    "eval_slice",
    "find_bird_split",
    "load_bird",
    "load_merged_slice",
    "load_questions",
    "load_slice",
    "load_spider",
    "merged_cache_dir",
    "merged_sources",
    "open_database",
    "resolve_data_root",
    "slice_ids",
    "spider_database_dirs",
    "train_val_databases",
    "write_slice_files",
]


# --- splits and slices ------------------------------------------------------------------------


def assert_disjoint(train: Iterable[Any], dev: Iterable[Any]) -> None:
    """Raise :class:`DataError` if any (db_id, question) pair is in both sets.

    Demonstrations are drawn from train; a dev question leaking into them would inflate EX.
    """
    seen = {(ex.db_id, ex.question.strip().lower()) for ex in train}
    clash = [ex for ex in dev if (ex.db_id, ex.question.strip().lower()) in seen]
    if clash:
        shown = "; ".join(f"{ex.db_id}: {ex.question!r}" for ex in clash[:3])
        raise DataError(None, f"{len(clash)} dev question(s) also in train, e.g. {shown}")


def eval_slice(
    examples: Sequence[Any],
    n: int | None = 200,
    seed: int = 0,
    stratify: str | None = "difficulty",
) -> list[Any]:
    """A fixed, deterministic, stratified sample of ``n`` examples, in their original order.

    The standard slice for experiments on a 2-core CPU is **Spider dev, n=200, seed=0**; the full
    dev set is ``n=None``. Each stratum (value of the ``stratify`` field; ``None`` = no strata)
    gets ``n`` × its share, rounded by largest remainder (ties: stratum name order), and its
    members are drawn with ``random.Random(f"{seed}:{stratum}")``, which is stable across Python
    versions and processes. The same input list and arguments always give the same slice.
    """
    if n is None or n >= len(examples):
        return list(examples)
    if n <= 0:
        raise ValueError("n must be positive (or None for all examples)")
    groups: dict[str, list[int]] = defaultdict(list)
    for i, ex in enumerate(examples):
        key = str(getattr(ex, stratify, "")) if stratify else ""
        groups[key].append(i)
    keys = sorted(groups)
    total = len(examples)
    quotas = {k: n * len(groups[k]) / total for k in keys}
    alloc = {k: int(quotas[k]) for k in keys}
    by_remainder = sorted(keys, key=lambda k: (-(quotas[k] - alloc[k]), k))
    for k in by_remainder[: n - sum(alloc.values())]:
        alloc[k] += 1
    chosen: list[int] = []
    for k in keys:
        chosen += random.Random(f"{seed}:{k}").sample(groups[k], alloc[k])
    return [examples[i] for i in sorted(chosen)]


# --- named slices -----------------------------------------------------------------------------
#
# Claims are made on a few fixed, named slices so every table in the project compares the same
# questions. Their question ids are committed (``sqlweave/slices/<name>.json``) so a figure can be
# traced to its questions even if a loader or the bundled data changes; :func:`build_slice_ids`
# recomputes them and a test checks the two agree.

SLICES_DIR = Path(__file__).with_name("slices")
#: ``name -> (benchmark, split)``.
SLICES: dict[str, tuple[str, str]] = {
    "spider-dev-200": ("spider", "dev"),
    "bird-52": ("bird", "dev"),
    "spider-train-val": ("spider", "train"),
    "spider-train-select": ("spider", "train"),
}
#: How many train databases (at least) and questions make up ``spider-train-val``.
TRAIN_VAL_MIN_QUESTIONS = 300
TRAIN_VAL_SIZE = 200
#: Questions in ``spider-train-select`` (three draws: 400, 600 more, 600 more): train questions for
#: *fitting* a selector (the learned one of :mod:`sqlweave.programs.stages.reranker`), from train
#: databases outside ``spider-train-val``, so a selector fitted here is still checked on databases
#: it never saw.
TRAIN_SELECT_SIZE = (400, 600, 600)


def train_val_databases(train: Sequence[Any]) -> list[str]:
    """The Spider train databases held out for validation (seed 0), in draw order.

    Databases are drawn in a seeded random order until they hold at least
    :data:`TRAIN_VAL_MIN_QUESTIONS` questions. Validation on *unseen databases* is what makes a
    choice made on it carry over to dev, whose databases are never in train.
    """
    sizes: dict[str, int] = defaultdict(int)
    for ex in train:
        sizes[ex.db_id] += 1
    order = sorted(sizes)
    random.Random("spider-train-val:0").shuffle(order)
    chosen, total = [], 0
    for db_id in order:
        if total >= TRAIN_VAL_MIN_QUESTIONS:
            break
        chosen.append(db_id)
        total += sizes[db_id]
    return chosen


def build_slice_ids(name: str, root: str | Path | None = None) -> list[str]:
    """Recompute the question ids of the slice ``name`` from the data (what the files hold)."""
    if name == "spider-dev-200":
        # Not stratified: a plain random sample, so figures compare with published full-dev ones.
        picked = eval_slice(load_spider("dev", root=root), n=200, seed=0, stratify=None)
    elif name == "bird-52":
        picked = load_bird("dev", root=root)
    elif name == "spider-train-val":
        train = load_spider("train", root=root)
        held = set(train_val_databases(train))
        picked = eval_slice(
            [ex for ex in train if ex.db_id in held], n=TRAIN_VAL_SIZE, seed=0, stratify=None
        )
    elif name == "spider-train-select":
        # Drawn in rounds (draw k of the rest, seed k) so each earlier run's questions stay the
        # slice's first ones: a run resumed on the grown slice keeps its records.
        train = load_spider("train", root=root)
        held = set(train_val_databases(train))
        pool = [ex for ex in train if ex.db_id not in held]
        picked = []
        for seed, n in enumerate(TRAIN_SELECT_SIZE):
            taken = {ex.question_id for ex in picked}
            rest = [ex for ex in pool if ex.question_id not in taken]
            picked += eval_slice(rest, n=n, seed=seed, stratify=None)
    else:
        raise DataError(None, f"unknown slice {name!r}; choose from {', '.join(SLICES)}")
    return [str(ex.question_id) for ex in picked]


def slice_ids(name: str) -> list[str]:
    """The committed question ids of the slice ``name`` (no benchmark data needed)."""
    if name not in SLICES and name not in MERGED_SLICES:
        raise DataError(None, f"unknown slice {name!r}; choose from {', '.join(SLICES)}")
    path = SLICES_DIR / f"{name}.json"
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DataError(path, f"cannot read the slice file: {err}") from err
    return [str(i) for i in payload["question_ids"]]


def load_slice(name: str, root: str | Path | None = None) -> list[dspy.Example]:
    """The examples of the named slice, in the committed order.

    ``spider-dev-200`` (200 random Spider dev questions, seed 0), ``bird-52`` (every bundled BIRD
    question), ``spider-train-val`` (200 train questions on train databases that
    :func:`demo_pool_exclusions` keeps out of every default demo pool), ``spider-train-select``
    (1,600 train questions on the other train databases, for fitting a selector); ``<name>-merged`` asks a
    slice's questions of one database holding 48 databases' tables (:mod:`sqlweave.merge`).
    """
    if name in MERGED_SLICES:
        return load_merged_slice(name, root=root)
    ids = slice_ids(name)
    benchmark, split = SLICES[name]
    loader = load_spider if benchmark == "spider" else load_bird
    by_id = {str(ex.question_id): ex for ex in loader(split, root=root)}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise DataError(
            None,
            f"slice {name!r}: {len(missing)} question id(s) are not in the loaded data "
            f"(e.g. {missing[0]}); is this the bundled {benchmark} {split} set?",
        )
    return [by_id[i] for i in ids]


def demo_pool_exclusions() -> frozenset[str]:
    """Database ids no default demo pool may use: those of the ``spider-train-val`` slice."""
    path = SLICES_DIR / "spider-train-val.json"
    try:
        return frozenset(json.loads(path.read_text(encoding="utf-8"))["databases"])
    except (OSError, ValueError, KeyError):
        return frozenset()


def write_slice_files(root: str | Path | None = None) -> list[Path]:
    """(Re)write ``sqlweave/slices/*.json`` from the data; used once, kept for transparency."""
    SLICES_DIR.mkdir(exist_ok=True)
    written = []
    for name, (benchmark, split) in SLICES.items():
        payload: dict[str, Any] = {"name": name, "benchmark": benchmark, "split": split}
        if name == "spider-train-val":
            payload["databases"] = train_val_databases(load_spider("train", root=root))
        payload["question_ids"] = build_slice_ids(name, root=root)
        path = SLICES_DIR / f"{name}.json"
        path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
        written.append(path)
    return written


# --- the merged benchmark slices --------------------------------------------------------------
#
# ``spider-dev-200-merged`` and ``bird-52-merged`` ask the questions of ``spider-dev-200`` and
# ``bird-52`` against one file holding the tables of 48 databases: the 16 Spider dev databases,
# BIRD's superhero, the 8 databases of spider-train-val (so ``spider-train-val-merged`` can tune a
# schema filter on validation, never on the slices we report), and 23 other Spider train databases
# as distractors (drawn with a fixed seed). Question ids stay those of the base slice, so a run on a
# merged slice pairs with the same program's run on the original databases question by question.

MERGED_DB_ID = "merged-48"
MERGED_SLICES: dict[str, str] = {
    "spider-dev-200-merged": "spider-dev-200",
    "bird-52-merged": "bird-52",
    "spider-train-val-merged": "spider-train-val",
}
"""Merged slice name -> the named slice whose questions it asks."""
N_DISTRACTORS = 23


def merged_sources(root: str | Path | None = None) -> dict[str, Path]:
    """``db_id -> SQLite file`` of the 48 databases merged into :data:`MERGED_DB_ID`, in order."""
    dev: dict[str, Path] = {}
    for ex in load_spider("dev", root=root):
        dev.setdefault(ex.db_id, Path(ex.db_path))
    for ex in load_bird("dev", root=root):
        dev.setdefault(ex.db_id, Path(ex.db_path))
    train = load_spider("train", root=root)
    held = set(train_val_databases(train))
    paths: dict[str, Path] = {}
    for ex in train:
        if ex.db_id in held:
            dev.setdefault(ex.db_id, Path(ex.db_path))
        elif ex.db_id not in dev:
            paths.setdefault(ex.db_id, Path(ex.db_path))
    drawn = random.Random(f"{MERGED_DB_ID}:0").sample(sorted(paths), N_DISTRACTORS)
    return {db: dev[db] for db in sorted(dev)} | {db: paths[db] for db in sorted(drawn)}


def merged_cache_dir() -> Path:
    """``$SQLWEAVE_CACHE/merged`` (or ``~/.cache/sqlweave/merged``): where merged files are built."""
    from sqlweave.models import cache_dir

    return cache_dir().parent / "merged"


def ensure_merged(
    root: str | Path | None = None, folder: str | Path | None = None
) -> MergedDatabase:
    """The merged database of :func:`merged_sources`, built on first use (a few seconds).

    A stamp beside the file names the sources and their sizes; a change rebuilds the file.
    """
    sources = merged_sources(root)
    folder = Path(folder) if folder is not None else merged_cache_dir() / MERGED_DB_ID
    path = folder / f"{MERGED_DB_ID}.sqlite"
    stamp = folder / "sources.json"
    wanted = {db: [str(p), p.stat().st_size] for db, p in sources.items()}
    if path.is_file() and stamp.is_file():
        try:
            if json.loads(stamp.read_text(encoding="utf-8")) == wanted:
                return MergedDatabase(path=path, renames=_read_renames(sources))
        except ValueError:
            pass
    merged = merge_databases(sources, path)
    stamp.write_text(json.dumps(wanted, indent=1), encoding="utf-8")
    return merged


def _read_renames(sources: Mapping[str, Path]) -> dict[str, dict[str, str]]:
    return {db_id: table_renames(db_id, source) for db_id, source in sources.items()}


def build_merged_slice(name: str, root: str | Path | None = None) -> dict[str, Any]:
    """The content of ``sqlweave/slices/<name>.json``: ids, rewritten gold SQL, what was dropped."""
    if name not in MERGED_SLICES:
        raise DataError(
            None, f"unknown merged slice {name!r}; choose from {', '.join(MERGED_SLICES)}"
        )
    merged = ensure_merged(root)
    kept, gold, dropped = [], {}, {}
    for ex in load_slice(MERGED_SLICES[name], root=root):
        qid = str(ex.question_id)
        try:
            new = rewrite_sql(ex.gold_sql, merged.renames[ex.db_id])
        except SqlglotError as err:
            dropped[qid] = f"gold SQL does not parse: {err}"
            continue
        if not check_rewrite(ex.gold_sql, ex.db_path, new, merged.path):
            dropped[qid] = "the rewritten gold SQL returns other rows"
            continue
        kept.append(qid)
        gold[qid] = new
    return {
        "name": name,
        "base": MERGED_SLICES[name],
        "database": MERGED_DB_ID,
        "databases": list(merged_sources(root)),
        "n_tables": merged.n_tables,
        "question_ids": kept,
        "gold_sql": gold,
        "dropped": dropped,
    }


def load_merged_slice(name: str, root: str | Path | None = None) -> list[dspy.Example]:
    """The examples of a merged slice: the base slice's questions, asked of the merged file.

    ``db_id`` becomes :data:`MERGED_DB_ID`, ``db_path`` the merged file, ``gold_sql`` the committed
    rewrite; ``source_db_id`` keeps the question's own database for per-database tables.
    """
    path = SLICES_DIR / f"{name}.json"
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DataError(path, f"cannot read the slice file: {err}") from err
    merged = ensure_merged(root)
    by_id = {str(ex.question_id): ex for ex in load_slice(payload["base"], root=root)}
    examples = []
    for qid in payload["question_ids"]:
        ex = by_id[qid]
        examples.append(
            ex.copy(
                db_id=MERGED_DB_ID,
                db_path=str(merged.path),
                gold_sql=payload["gold_sql"][qid],
                source_db_id=ex.db_id,
            )
        )
    return examples
