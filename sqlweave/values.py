"""Database values the question talks about: BM25 retrieval with exact-match bridging, and repair.

SEA-SQL's semantic-enhanced schema shows, next to each column, the stored values most related to
the question: BM25 over the column's distinct values (top-k = 1000), then "bridging" moves values
that occur verbatim in the question to rank 1, and the top m = 2 per column are kept. MageSQL's
rule-based fixer needs the opposite direction: given a literal from generated SQL, the closest
value that really exists (``'male'`` → ``'Male'``). Both read one :class:`ValueIndex`.

Only text columns are indexed: numbers and dates are matched by the LM's arithmetic, not by
lookup, and their values would flood BM25 with digit tokens. One global BM25 index holds every
value, ordered by column, so a question is scored once and each column takes its best slice.
Indexes are cached in memory and on disk per database fingerprint, in a versioned format of
JSON and ``.npy`` files (bm25s' own, loaded with ``allow_pickle=False``), rebuilt on any mismatch.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN

from sqlweave.caches import CACHE
from sqlweave.db import Database, ExecutionError
from sqlweave.schema import introspect, quote, unscoped

logger = logging.getLogger(__name__)

#: Bump when the on-disk layout or tokenisation changes; older caches are then rebuilt.
FORMAT_VERSION = 1

DEFAULT_MAX_VALUES = 100_000
#: Longer strings are prose (comments, abstracts), not literals a query would compare against.
DEFAULT_MAX_VALUE_CHARS = 200
#: Longest value, in tokens, that bridging looks for in the question.
_MAX_PHRASE_TOKENS = 12
_SCAN_TIMEOUT_S = 120.0
_INDEXED_KINDS = frozenset({"text", "unknown"})

_WORD = re.compile(r"\w+")
_PHRASE_TOKEN = re.compile(r"\w+|[^\w\s]")
_STOPWORDS = frozenset(STOPWORDS_EN)


def _tokens(text: str) -> list[str]:
    """BM25 tokens: lower-case words without English stop words. Single characters and digits
    stay, since values such as ``3-D Man`` or ``Type 2`` depend on them."""
    return [t for t in _WORD.findall(text.lower()) if t not in _STOPWORDS]


def _phrase(text: str) -> tuple[str, ...]:
    """Words and punctuation marks, lower-cased: bridging compares these, so a value matches only
    as a whole phrase (``3-D Man`` in "powers of 3-D Man?", but ``Man`` not inside ``Manhattan``)."""
    return tuple(_PHRASE_TOKEN.findall(text.lower()))


def default_cache_dir() -> Path:
    """``$SQLWEAVE_CACHE/values``, else ``~/.cache/sqlweave/values``; read at call time."""
    root = os.environ.get("SQLWEAVE_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "sqlweave"
    return base / "values"


@dataclass(frozen=True)
class ValueMatch:
    """An existing value close to a looked-up one. ``kind`` is ``exact``, ``case`` (equal but for
    letter case), ``substring`` or ``fuzzy``; ``score`` is difflib's similarity ratio."""

    table: str
    column: str
    value: str
    kind: str
    score: float


_KIND_RANK = {"exact": 0, "case": 1, "substring": 2, "fuzzy": 3}

#: Where :data:`~sqlweave.caches.CACHE` keeps the indexes built in this process.
MEMO_NAMESPACE = "value_index"


class ValueIndex:
    """Distinct text values of one database, searchable by question (BM25) and by value."""

    def __init__(
        self,
        db_id: str,
        fingerprint: str,
        columns: Sequence[tuple[str, str]],
        offsets: Sequence[int],
        values: Sequence[str],
        bm25: bm25s.BM25,
        source: str = "built",
    ) -> None:
        self.db_id = db_id
        self.fingerprint = fingerprint
        self.columns = [tuple(c) for c in columns]
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.values_list = list(values)
        self.source = source
        self._bm25 = bm25
        self._col_of = {(t.lower(), c.lower()): i for i, (t, c) in enumerate(self.columns)}
        self._lock = threading.Lock()
        self._phrases: dict[tuple[str, ...], list[int]] | None = None
        self._lower: dict[int, dict[str, list[str]]] = {}
        self._renamed: dict[tuple[tuple[str, str], ...], ValueIndex] = {}

    def renamed(self, tables: Mapping[str, str]) -> ValueIndex:
        """The same index with tables renamed (``tables``: name, lower-cased -> new name), for a
        view that shows short table names; values, BM25 and caches are shared. Made once per
        renaming: every stage of every question on that view asks for it."""
        key = tuple(sorted(tables.items()))
        with self._lock:
            twin = self._renamed.get(key)
            if twin is None:
                twin = ValueIndex(
                    self.db_id,
                    self.fingerprint,
                    [(tables.get(t.lower(), t), c) for t, c in self.columns],
                    self.offsets,
                    (),
                    self._bm25,
                    self.source,
                )
                # The values and the per-column lookups do not depend on table names: shared.
                twin.values_list = self.values_list
                twin._lower = self._lower
                self._renamed[key] = twin
        return twin

    def __repr__(self) -> str:
        return (
            f"ValueIndex({self.db_id!r}, columns={len(self.columns)}, "
            f"values={len(self.values_list)}, source={self.source!r})"
        )

    def __len__(self) -> int:
        return len(self.values_list)

    # -- construction ------------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        db: Database,
        *,
        max_values_per_column: int = DEFAULT_MAX_VALUES,
        max_value_chars: int = DEFAULT_MAX_VALUE_CHARS,
        cache_dir: str | Path | None = None,
        persist: bool = True,
    ) -> ValueIndex:
        """The index of ``db``: from memory, else from the disk cache, else scanned and saved.

        ``cache_dir`` defaults to :func:`default_cache_dir`; ``persist=False`` skips the disk.
        A cache written by another format version, for other arguments, or for another state of
        the database (its fingerprint) is ignored and overwritten. A scoped view
        (:func:`sqlweave.schema_filter.scoped`) gets its database's index (cached per database,
        not per view), read through the view's short table names when it shows them.
        """
        if db.visible_tables is not None:
            display = db.display_names
            whole = cls.build(
                unscoped(db),
                max_values_per_column=max_values_per_column,
                max_value_chars=max_value_chars,
                cache_dir=cache_dir,
                persist=persist,
            )
            return whole.renamed(display) if display else whole
        root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        params = {
            "max_values_per_column": max_values_per_column,
            "max_value_chars": max_value_chars,
        }
        memo_key = (db.fingerprint, db.name, str(root) if persist else None, *params.values())

        def load_or_scan() -> ValueIndex:
            folder = root / f"{_safe_name(db.name)}-{db.fingerprint}"
            index = cls._load(folder, db, params) if persist else None
            if index is None:
                index = cls._scan(db, max_values_per_column, max_value_chars)
                if persist:
                    index._save(folder, params)
            return index

        # one build per database at a time (CACHE.memo): four threads asking at once had
        # scanned four times (38 s and 2.6 GB against 7 s and 0.7 GB)
        return CACHE.memo(MEMO_NAMESPACE, memo_key, load_or_scan)

    @classmethod
    def _scan(cls, db: Database, max_values: int, max_chars: int) -> ValueIndex:
        start = time.perf_counter()
        schema = introspect(db)
        columns: list[tuple[str, str]] = []
        offsets = [0]
        values: list[str] = []
        for table, column in schema.all_columns():
            if column.kind not in _INDEXED_KINDS:
                continue
            sql = (
                f"SELECT DISTINCT {quote(column.name)} FROM {quote(table.name)} "
                f"WHERE {quote(column.name)} IS NOT NULL LIMIT {int(max_values)}"
            )
            try:
                result = db.execute(
                    sql, timeout_s=_SCAN_TIMEOUT_S, max_rows=max_values, use_cache=False
                )
            except ExecutionError as err:
                logger.warning("skipping %s.%s in %s: %s", table.name, column.name, db.name, err)
                continue
            kept = [
                v
                for (v,) in result.rows
                if isinstance(v, str) and v.strip() and len(v) <= max_chars
            ]
            if not kept:
                continue
            columns.append((table.name, column.name))
            values.extend(kept)
            offsets.append(len(values))
        bm25 = bm25s.BM25()
        if values:
            bm25.index([_tokens(v) for v in values], show_progress=False)
        logger.info(
            "indexed %d values of %d text columns in %s (%.2f s)",
            len(values),
            len(columns),
            db.name,
            time.perf_counter() - start,
        )
        return cls(db.name, db.fingerprint, columns, offsets, values, bm25, source="built")

    def _save(self, folder: Path, params: dict[str, int]) -> None:
        """Write into a fresh sibling folder and swap it in, so readers never see half a cache."""
        meta = {
            "format_version": FORMAT_VERSION,
            "bm25s_version": bm25s.__version__,
            "db_id": self.db_id,
            "fingerprint": self.fingerprint,
            "params": params,
            "columns": [list(c) for c in self.columns],
            "offsets": self.offsets.tolist(),
            "values": self.values_list,
        }
        tmp: Path | None = None
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
            if self.values_list:
                self._bm25.save(tmp / "bm25", show_progress=False)
            (tmp / "meta.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(tmp, folder)
        except OSError as err:
            logger.warning("could not cache the value index at %s: %s", folder, err)
            if tmp is not None:  # another process's index took the place: leave no half copy
                shutil.rmtree(tmp, ignore_errors=True)

    @classmethod
    def _load(cls, folder: Path, db: Database, params: dict[str, int]) -> ValueIndex | None:
        meta_path = folder / "meta.json"
        if not meta_path.is_file():
            return None
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if (
                meta.get("format_version") != FORMAT_VERSION
                or meta.get("fingerprint") != db.fingerprint
                or meta.get("params") != params
            ):
                logger.info("value cache %s is stale; rebuilding", folder)
                return None
            values = meta["values"]
            offsets = meta["offsets"]
            columns = meta["columns"]
            if len(offsets) != len(columns) + 1 or (offsets and offsets[-1] != len(values)):
                raise ValueError("inconsistent offsets")
            bm25 = bm25s.BM25()
            if values:
                bm25 = bm25s.BM25.load(folder / "bm25", allow_pickle=False, show_progress=False)
                if int(bm25.scores["num_docs"]) != len(values):
                    raise ValueError("BM25 index does not match the stored values")
        except (OSError, ValueError, KeyError, TypeError) as err:  # JSONDecodeError is a ValueError
            logger.warning("unreadable value cache %s (%s); rebuilding", folder, err)
            return None
        logger.debug("loaded value index of %s from %s", db.name, folder)
        return cls(db.name, db.fingerprint, columns, offsets, values, bm25, source="disk")

    # -- question → values (SEA-SQL) ---------------------------------------------------------------

    def retrieve(
        self, question: str, *, top_k: int = 1000, keep: int = 2, fill: bool = False
    ) -> dict[tuple[str, str], list[str]]:
        """The ``keep`` values per column most related to ``question``.

        BM25 ranks each column's values (at most ``top_k`` candidates with a positive score);
        values found verbatim in the question, as a whole phrase and ignoring case, go first,
        longer phrases before shorter ones. Columns with nothing related are left out, unless
        ``fill`` is set: then they show their first values, as format examples.
        """
        if keep <= 0 or not self.values_list:
            return {}
        token_ids = self._bm25.get_tokens_ids(_tokens(question))
        scores = (
            self._bm25.get_scores_from_ids(token_ids)
            if token_ids
            else np.zeros(len(self.values_list), dtype=np.float32)
        )
        bridged = self._bridge(question)
        out: dict[tuple[str, str], list[str]] = {}
        for ci, key in enumerate(self.columns):
            lo, hi = int(self.offsets[ci]), int(self.offsets[ci + 1])
            first = bridged.get(ci, [])
            ranked = first + [
                d for d in self._top(scores, lo, hi, keep + len(first), top_k) if d not in first
            ]
            chosen = [self.values_list[d] for d in ranked[:keep]]
            if not chosen and fill:
                chosen = self.values_list[lo : min(hi, lo + keep)]
            if chosen:
                out[key] = chosen
        return out

    def mentioned(self, question: str, *, limit: int = 8) -> list[tuple[str, str, str]]:
        """Stored values that occur verbatim in ``question`` (ignoring case), longest first, as
        ``(table, column, value)``; at most ``limit``.

        This is the cheap, high-precision half of :meth:`retrieve`: a question that names
        "Jetblue Airways" gets the stored spelling "JetBlue Airways" and its column, which is what
        a small model most often gets wrong in a WHERE clause.
        """
        out: list[tuple[str, str, str]] = []
        for column, docs in self._bridge(question).items():
            table, name = self.columns[column]
            out.extend((table, name, self.values_list[d]) for d in docs)
        out.sort(key=lambda t: -len(t[2]))
        return out[:limit]

    @staticmethod
    def _top(scores: np.ndarray, lo: int, hi: int, k: int, top_k: int) -> list[int]:
        """Document ids of the best positive scores in [lo, hi), ties broken by position."""
        segment = scores[lo:hi]
        candidates = np.flatnonzero(segment > 0)
        limit = min(k, top_k)
        if candidates.size == 0 or limit <= 0:
            return []
        if candidates.size > limit:
            # Keep everything tied with the limit-th score, then sort deterministically.
            threshold = np.partition(segment[candidates], candidates.size - limit)[
                candidates.size - limit
            ]
            candidates = candidates[segment[candidates] >= threshold]
        order = np.lexsort((candidates, -segment[candidates]))
        return [lo + int(i) for i in candidates[order][:limit]]

    def _bridge(self, question: str) -> dict[int, list[int]]:
        """Column id → ids of values that occur verbatim in the question, longest first."""
        phrases = self._phrase_table()
        words = _phrase(question)
        found: dict[int, list[int]] = {}
        seen: set[int] = set()
        for n in range(min(_MAX_PHRASE_TOKENS, len(words)), 0, -1):
            for i in range(len(words) - n + 1):
                for doc in phrases.get(words[i : i + n], ()):
                    if doc not in seen:
                        seen.add(doc)
                        found.setdefault(self._column_of_doc(doc), []).append(doc)
        return found

    def _phrase_table(self) -> dict[tuple[str, ...], list[int]]:
        with self._lock:
            if self._phrases is None:
                table: dict[tuple[str, ...], list[int]] = {}
                for doc, value in enumerate(self.values_list):
                    words = _phrase(value)
                    # A value made only of stop words and punctuation ("A", "-") would bridge
                    # on almost every question.
                    if 0 < len(words) <= _MAX_PHRASE_TOKENS and any(
                        w not in _STOPWORDS and _WORD.fullmatch(w) for w in words
                    ):
                        table.setdefault(words, []).append(doc)
                self._phrases = table
            return self._phrases

    def _column_of_doc(self, doc: int) -> int:
        return int(np.searchsorted(self.offsets, doc, side="right")) - 1

    # -- value → existing values (MageSQL) ------------------------------------------------------------

    def values(self, table: str, column: str) -> list[str]:
        """The indexed values of one column (case-insensitive names); empty if not indexed."""
        ci = self._col_of.get((table.lower(), column.lower()))
        if ci is None:
            return []
        return self.values_list[int(self.offsets[ci]) : int(self.offsets[ci + 1])]

    def match(
        self,
        value: str,
        table: str | None = None,
        column: str | None = None,
        *,
        limit: int = 5,
        cutoff: float = 0.6,
    ) -> list[ValueMatch]:
        """Existing values closest to ``value``, best first, in the given table/column if named.

        Exact matches win outright, then case-insensitive ones; only if neither exists are
        substring matches (either way round) and difflib fuzzy matches (ratio ≥ ``cutoff``)
        ranked by similarity. Fuzzy search over a whole large database is slow; name the column.
        """
        text = str(value)
        low = text.lower()
        col_ids = [
            i
            for i, (t, c) in enumerate(self.columns)
            if (table is None or t.lower() == table.lower())
            and (column is None or c.lower() == column.lower())
        ]
        found: list[ValueMatch] = []
        for ci in col_ids:
            t, c = self.columns[ci]
            for v in self._lower_map(ci).get(low, ()):
                kind = "exact" if v == text else "case"
                found.append(ValueMatch(t, c, v, kind, 1.0))
        if found:
            found.sort(key=lambda m: _KIND_RANK[m.kind])
            return found[:limit]
        for ci in col_ids:
            t, c = self.columns[ci]
            lower_map = self._lower_map(ci)
            for v_low, originals in lower_map.items():
                if low in v_low or (len(v_low) >= 3 and v_low in low):
                    score = difflib.SequenceMatcher(None, low, v_low).ratio()
                    found += [ValueMatch(t, c, v, "substring", score) for v in originals]
            for v_low in difflib.get_close_matches(low, list(lower_map), n=limit, cutoff=cutoff):
                if low in v_low or v_low in low:
                    continue  # already a substring match
                score = difflib.SequenceMatcher(None, low, v_low).ratio()
                found += [ValueMatch(t, c, v, "fuzzy", score) for v in lower_map[v_low]]
        found.sort(key=lambda m: (-m.score, _KIND_RANK[m.kind], m.table, m.column, m.value))
        return found[:limit]

    def _lower_map(self, ci: int) -> dict[str, list[str]]:
        cached = self._lower.get(ci)
        if cached is None:
            cached = {}
            for v in self.values_list[int(self.offsets[ci]) : int(self.offsets[ci + 1])]:
                cached.setdefault(v.lower(), []).append(v)
            self._lower[ci] = cached
        return cached


def clear_memory_cache() -> None:
    """Forget indexes held in memory (the disk cache stays), e.g. to test disk reuse."""
    CACHE.forget(MEMO_NAMESPACE)


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64] or "db"


__all__ = ["FORMAT_VERSION", "ValueIndex", "ValueMatch", "clear_memory_cache", "default_cache_dir"]
