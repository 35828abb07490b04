"""Compile data for your own databases: synthesized pairs, split into train and validation.

``sqlweave compile --db shop.sqlite --synthesize 40`` (and ``sqlweave.compile(program,
db=..., synthesize=40)``) needs no labelled question: :func:`synthetic_sets` makes ``n`` pairs
per database with :func:`~sqlweave.synthesis.pairs.synthesize` (one resumable questions
file each), splits them with a seeded shuffle, and returns the record an artefact keeps of them
(``meta.extra["synthetic"]``): the set's sha256, its size and the databases it belongs to, any
password redacted.

**Split.** Each database's pairs are split on their own (a seeded share to validation,
``val_fraction``, a fifth by default; at least one when a database has two pairs or more, none
when it has one, and always one left to train), so every database has demos and validation
questions alike: the compile is for these databases, not for unseen ones, unlike
:func:`sqlweave.compile_plan.default_validation`, which holds whole databases out. Validation
keeps at most ``n_val`` pairs, taken in turn from each database; the pairs beyond go back to
train.

**Which share.** A compile that tunes demos needs the pairs to train on; a switch search needs
none, only enough validation to tell configurations apart (a fifth of 10 pairs is 2 questions
a database): give it a larger share (``val_fraction=0.9``). And a switch search should validate
on pairs the round trip did not filter (``check=False``): the round trip keeps exactly the
questions the round-trip program (``direct``, greedy) already answers, so on such pairs that
program's own configuration scores 100 % by construction and no other can beat it (README,
"What a compile learns from synthesized questions"). :func:`synthesis_defaults` says which
a compile gets when its caller does not choose: that recipe for a switch search alone.

**Files.** Without ``out``, pairs go to ``$SQLWEAVE_CACHE/synthetic`` (else
``~/.cache/sqlweave/synthetic``), one file per database and settings (seed, round trip), so a
rerun with the same settings resumes and reuses them. With ``out`` and one database, ``out``
is the file; with several, ``<stem>.<database name><suffix>`` beside it.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy

from sqlweave.db import Database
from sqlweave.db.errors import masked
from sqlweave.synthesis.pairs import (
    SynthesisError,
    database_ref,
    draft_queries,
    synthesize,
)

VAL_FRACTION = 0.2
"""The share of each database's pairs that validates, by default."""
SEARCH_VAL_FRACTION = 0.9
"""The share that validates when a switch search alone compiles (it trains on nothing)."""


@dataclass(frozen=True)
class SynthesisDefaults:
    """How a compile on synthesized pairs makes and splits them when the caller did not say."""

    check: bool
    val_fraction: float
    n_val: int | None
    """None: the caller's own default cap; 0: no cap (every validating pair)."""


def synthesis_defaults(optimizer: str, *, valset_given: bool) -> SynthesisDefaults:
    """The measured recipe for a switch search alone with no validation questions of its own:
    pairs the round trip did not filter, 90 % of each database's validating, no cap on how many
    (README, "What a compile learns from synthesized questions"; on round-trip pairs the
    program as it is scores 100 % by construction, and 20 questions cannot separate
    configurations a few questions apart). Any optimizer that learns demos keeps the round
    trip and a fifth validating: it trains on the pairs, so they should be right."""
    search_only = {part.strip() for part in optimizer.split("+")} == {"search"}
    if search_only and not valset_given:
        return SynthesisDefaults(check=False, val_fraction=SEARCH_VAL_FRACTION, n_val=0)
    return SynthesisDefaults(check=True, val_fraction=VAL_FRACTION, n_val=None)


@dataclass
class SyntheticSet:
    """Train and validation examples from synthesized pairs, and the artefact's record of them."""

    train: list[dspy.Example]
    val: list[dspy.Example]
    record: dict[str, Any] = field(default_factory=dict)


def pairs_hash(pairs: Sequence[dict[str, Any]]) -> str:
    """sha256 of a pair set's canonical content: each pair as JSON with sorted keys and no
    spaces, the lines sorted and joined by newlines (so neither key order, line order nor
    formatting changes it; any changed field does)."""
    lines = sorted(
        json.dumps(p, sort_keys=True, ensure_ascii=False, separators=(",", ":")) for p in pairs
    )
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def redact(ref: str) -> str:
    """A database path or URL fit to record: a URL's password replaced by ``***``."""
    if "://" not in ref:
        return ref
    try:
        import sqlalchemy as sa

        return sa.engine.make_url(ref).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a URL SQLAlchemy cannot parse is masked by pattern
        return masked(ref)


def cache_dir() -> Path:
    """``$SQLWEAVE_CACHE/synthetic``, else ``~/.cache/sqlweave/synthetic``; read at call time."""
    root = os.environ.get("SQLWEAVE_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "sqlweave"
    return base / "synthetic"


def default_pairs_file(database: Database, *, seed: int, check: bool, program: str) -> Path:
    """The cache file of ``database``'s pairs under these settings (a rerun resumes it)."""
    key = json.dumps([database_ref(database), seed, check, program])
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    return cache_dir() / f"{database.name}-{digest}.jsonl"


def pairs_files(
    databases: Sequence[Database],
    out: str | Path | None,
    *,
    seed: int = 0,
    check: bool = True,
    program: str = "direct",
) -> list[Path]:
    """One pairs file per database: ``out`` itself for one database, ``<stem>.<name><suffix>``
    beside it for several, the cache (:func:`default_pairs_file`) without ``out``."""
    if out is None:
        return [default_pairs_file(d, seed=seed, check=check, program=program) for d in databases]
    out = Path(out)
    if len(databases) == 1:
        return [out]
    suffix = out.suffix or ".jsonl"
    return [out.with_name(f"{out.stem}.{d.name}{suffix}") for d in databases]


def stage_pairs(
    db_paths: Mapping[str, str | Path], pairs_dir: str | Path, out: str | Path
) -> list[Path]:
    """Pairs synthesized elsewhere, staged where ``sqlweave compile --synthetic-out out`` reads
    them (:func:`pairs_files`: ``out`` itself for one database, ``<stem>.<name><suffix>`` beside
    it for several), each pair given its database's path on this machine.

    ``db_paths`` maps each database's name to its file; ``pairs_dir`` holds ``<name>.jsonl`` per
    database (a committed set, without paths) and, when present, its ``<name>.jsonl.tried.jsonl``
    verdicts, copied alongside. Returns the databases' files, sorted. Raises
    :class:`~sqlweave.synthesis.pairs.SynthesisError` (``context["missing"]``: their names)
    when a database has no pairs file: nothing is staged then.
    """
    from contextlib import ExitStack

    pairs_dir = Path(pairs_dir)
    paths = {name: Path(path) for name, path in db_paths.items()}
    missing = sorted(db for db in paths if not (pairs_dir / f"{db}.jsonl").is_file())
    if missing:
        raise SynthesisError(
            f"no synthesized pairs for {', '.join(missing)} in {pairs_dir}",
            context={"missing": missing, "pairs_dir": pairs_dir},
        )
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:  # named as the compile names the databases it opens
        opened = [stack.enter_context(Database.open(path)) for path in paths.values()]
        targets = pairs_files(opened, out)
    for (db, path), target in zip(paths.items(), targets, strict=True):
        source = pairs_dir / f"{db}.jsonl"
        pairs = [json.loads(x) for x in source.read_text().splitlines() if x.strip()]
        target.write_text("".join(json.dumps({**p, "db_path": str(path)}) + "\n" for p in pairs))
        tried = source.with_name(source.name + ".tried.jsonl")
        if tried.is_file():
            target.with_name(target.name + ".tried.jsonl").write_text(tried.read_text())
    return sorted(paths.values())


def open_databases(dbs: Database | str | Path | Sequence[Database | str | Path]) -> list[Database]:
    """Open every database and check that each has something to ask about, before any LM call.

    Raises :class:`~sqlweave.db.ExecutionError` for a database that cannot be opened and
    :class:`SynthesisError` for none given, two with one name (demos are matched to questions by
    it), a database with no tables or only empty ones.
    """
    from sqlweave.programs import resolve_database

    items = [dbs] if isinstance(dbs, Database | str | Path) else list(dbs)
    if not items:
        raise SynthesisError("no database given to synthesize pairs for")
    databases = [resolve_database(d) for d in items]
    names = [d.name for d in databases]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SynthesisError(
            f"two databases are named {', '.join(map(repr, twice))}: a demo is matched to a "
            "question by its database's name, so give each database its own file name"
        )
    for database in databases:
        next(draft_queries(database, 1), None)  # no tables, or only empty ones: raises now
    return databases


def check_val_fraction(val_fraction: float) -> float:
    """``val_fraction`` if it is a share strictly between 0 and 1, else :class:`SynthesisError`."""
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, int | float):
        raise SynthesisError(f"the validation share must be a number, got {val_fraction!r}")
    if not 0 < val_fraction < 1:
        raise SynthesisError(
            f"the validation share must be above 0 and below 1 (some pairs validate, some "
            f"train), got {val_fraction}"
        )
    return float(val_fraction)


def split_pairs(
    by_db: Sequence[Sequence[dict[str, Any]]],
    *,
    seed: int = 0,
    n_val: int = 0,
    val_fraction: float = VAL_FRACTION,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(train, val)`` from each database's pairs (see the module doc); ``n_val=0``: no cap."""
    val_fraction = check_val_fraction(val_fraction)
    train: list[dict[str, Any]] = []
    held: list[list[dict[str, Any]]] = []
    for pairs in by_db:
        shuffled = list(pairs)
        random.Random(f"synthetic-split:{seed}").shuffle(shuffled)
        n = len(shuffled)
        k = min(n - 1, max(1, int(n * val_fraction))) if n > 1 else 0
        held.append(shuffled[:k])
        train += shuffled[k:]
    # In turn from each database, so a cap keeps every database in validation.
    turns: list[dict[str, Any]] = []
    for i in range(max((len(h) for h in held), default=0)):
        turns += [h[i] for h in held if i < len(h)]
    cap = n_val or len(turns)
    return train + turns[cap:], turns[:cap]


def synthetic_sets(
    dbs: Database | str | Path | Sequence[Database | str | Path],
    n: int,
    *,
    out: str | Path | None = None,
    seed: int = 0,
    n_val: int = 0,
    val_fraction: float = VAL_FRACTION,
    program: Any = "direct",
    check: bool = True,
    progress: bool = True,
) -> SyntheticSet:
    """``n`` pairs for each of ``dbs``, split into train and validation (``val_fraction`` of
    every database's pairs, a fifth by default; ``n_val`` caps it, 0: no cap), with the
    artefact's record of them.

    Uses DSPy's configured LM (the describer and the round-trip ``program``). A database that
    yields fewer pairs than asked is kept, with a warning; one that yields none raises
    :class:`SynthesisError` naming the file of every tried query's verdict.
    """
    from sqlweave.examples import as_examples
    from sqlweave.lm import track_usage

    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise SynthesisError(f"synthesize must be a positive number of pairs, got {n!r}")
    val_fraction = check_val_fraction(val_fraction)
    databases = open_databases(dbs)
    name = program if isinstance(program, str) else type(program).__name__
    files = pairs_files(databases, out, seed=seed, check=check, program=name)
    by_db: list[list[dict[str, Any]]] = []
    entries: list[dict[str, Any]] = []
    with track_usage() as usage:
        for database, path in zip(databases, files, strict=True):
            pairs = _pairs_for(
                database, path, n, seed=seed, program=program, check=check, progress=progress
            )
            by_db.append(pairs)
            entries.append(
                {
                    "db": redact(database_ref(database)),
                    "db_id": database.name,
                    "n_pairs": len(pairs),
                    "sha256": pairs_hash(pairs),
                    "file": str(path),
                }
            )
    train, val = split_pairs(by_db, seed=seed, n_val=n_val, val_fraction=val_fraction)
    everything = [p for pairs in by_db for p in pairs]
    record = {
        "sha256": pairs_hash(everything),
        "n_pairs": len(everything),
        "n_asked": n,
        "databases": entries,
        "n_train": len(train),
        "n_val": len(val),
        "val_fraction": val_fraction,
        "seed": seed,
        "check": check,
        "program": name,
        "lm_calls": usage.calls,
    }
    return SyntheticSet(
        as_examples(train, what="synthesized pairs"),
        as_examples(val, what="synthesized pairs") if val else [],
        record,
    )


def _pairs_for(
    database: Database, path: Path, n: int, *, seed: int, program: Any, check: bool, progress: bool
) -> list[dict[str, Any]]:
    """One database's pairs, synthesized into (or resumed from) ``path``; none is an error.
    Fewer than ``n`` is :func:`~sqlweave.synthesis.pairs.synthesize`'s warning, said once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pairs = synthesize(
        database, n, out=path, seed=seed, program=program, check=check, progress=progress
    )
    if not pairs:
        raise SynthesisError(
            f"{database.name}: no pair survived synthesis (the model wrote no question "
            f"whose answer matched its SQL); every tried query's verdict is in "
            f"{path}.tried.jsonl"
        )
    # Resumed pairs may name the database as an older release wrote it (a URL with "***" for
    # its password, which nothing can open): they are this database's, so they name it as now.
    ref = database_ref(database)
    return [p if p.get("db_path") == ref else {**p, "db_path": ref} for p in pairs]


__all__ = [
    "SyntheticSet",
    "check_val_fraction",
    "default_pairs_file",
    "open_databases",
    "pairs_files",
    "pairs_hash",
    "redact",
    "split_pairs",
    "stage_pairs",
    "synthetic_sets",
]
