"""Schema filtering: the few tables and columns a question needs, when the whole schema is too big.

A program that shows the LM the whole schema fails on a database whose schema does not fit the
context window (a 200-table schema renders to ~14,500 tokens; the local model's window is 8,192).
This module picks what to show *without* an LM call, from evidence that scales to any schema, in the
spirit of CodeS's and CHESS's schema filters:

* **names and descriptions**: BM25 over one document per table (its name, description and column
  names split into words) and one per column (table and column words, descriptions), with the
  question and the evidence as the query;
* **meaning**: cosine similarity of the question to the same documents under the bundled
  all-MiniLM-L6-v2 (optional: without the ``embeddings`` extra BM25 ranks alone);
* **stored values**: a value the question names verbatim (``ValueIndex.mentioned``) pins its column;
* **join paths**: foreign keys of kept tables pull in the tables that join them, so a kept pair of
  tables can still be joined.

The ranks are fused by reciprocal rank (robust to the scales of the three scores), tables are kept
best first, and the rendered subset is held within a budget of characters a caller computes from
its model's context. Pure functions over a :class:`~sqlweave.schema.Schema`; the linker stage in
``programs/`` wraps them.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import bm25s
import dspy
import numpy as np
from bm25s.stopwords import STOPWORDS_EN

from sqlweave.caches import CACHE
from sqlweave.db import Database, TableScope
from sqlweave.schema import Schema, Table

logger = logging.getLogger(__name__)

RRF_K = 10
"""Reciprocal-rank constant: small, so the top few ranks of each signal dominate."""

_WORD = re.compile(r"[A-Za-z]+|\d+")
_STOPWORDS = frozenset(STOPWORDS_EN) | {
    "all",
    "any",
    "many",
    "list",
    "show",
    "find",
    "give",
    "number",
}


def words(name: str) -> list[str]:
    """``"concert_singer__Song_Name"`` -> ``["concert", "singer", "song", "name"]``; camelCase too."""
    spaced = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name)
    return [w.lower() for w in _WORD.findall(spaced)]


def stem(word: str) -> str:
    """Light plural folding, so "singers" meets "singer" and "countries" meets "country"."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("es") and word[-3] in "sxz":
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def _tokens(text: str) -> list[str]:
    return [stem(w) for w in words(text)]


def table_document(table: Table) -> str:
    """What BM25 and the encoder read for a table: its name, description, column names."""
    parts = [" ".join(words(table.name)), table.description]
    parts += [" ".join(words(c.name)) for c in table.columns]
    return " ".join(p for p in parts if p)


def column_document(table: Table, column_index: int) -> str:
    """What BM25 and the encoder read for a column: table and column words, descriptions."""
    col = table.columns[column_index]
    parts = [" ".join(words(table.name)), " ".join(words(col.name))]
    parts += [col.description, col.value_description]
    return " ".join(p for p in parts if p)


@dataclass(frozen=True)
class FilteredSchema:
    """The kept subset, with why: every table's fused score and the order tables were kept in."""

    schema: Schema
    ranking: list[str]
    scores: dict[str, float] = field(default_factory=dict)
    pinned: list[tuple[str, str]] = field(default_factory=list)

    @property
    def tables(self) -> list[str]:
        return self.schema.table_names


class SchemaIndex:
    """BM25 (and, when available, embeddings) over one schema's table and column documents.

    Built once per schema and reused for every question on it: a 200-table schema indexes in well
    under a second; the encoder embeds its ~1,200 documents once (a few seconds on a CPU).
    """

    def __init__(self, schema: Schema, *, encoder: object | None = None) -> None:
        self.schema = schema
        self.columns: list[tuple[int, int]] = [
            (ti, ci) for ti, t in enumerate(schema.tables) for ci in range(len(t.columns))
        ]
        table_docs = [table_document(t) for t in schema.tables]
        column_docs = [column_document(schema.tables[ti], ci) for ti, ci in self.columns]
        self._tables = _Bm25(table_docs)
        self._columns = _Bm25(column_docs)
        self._encoder = encoder
        self._table_vecs = encoder.encode(table_docs) if encoder is not None else None
        self._column_vecs = encoder.encode(column_docs) if encoder is not None else None
        #: Foreign-key neighbours of each table, and the connected component each belongs to.
        self.graph = _fk_neighbours(schema)
        self.component_of = {
            t: i for i, part in enumerate(_components(self.graph, schema.table_names)) for t in part
        }

    def table_scores(self, query: str) -> np.ndarray:
        """One fused score per table (higher is more related)."""
        n = len(self.schema.tables)
        ranks: list[np.ndarray] = [self._tables.scores(query, n)]
        col_bm25 = self._columns.scores(query, len(self.columns))
        ranks.append(self._per_table(col_bm25))
        if self._encoder is not None:
            q = self._encoder.encode([query])[0]
            ranks.append(self._table_vecs @ q)
            ranks.append(self._per_table(self._column_vecs @ q))
        return sum(_rrf(r) for r in ranks)

    def _per_table(self, column_scores: np.ndarray) -> np.ndarray:
        best = np.full(len(self.schema.tables), -np.inf, dtype=np.float64)
        for (ti, _ci), s in zip(self.columns, column_scores, strict=True):
            best[ti] = max(best[ti], float(s))
        best[np.isinf(best)] = 0.0
        return best


class _Bm25:
    """bm25s over pre-tokenised documents; the query loses English stopwords first."""

    def __init__(self, docs: Sequence[str]) -> None:
        # bm25s cannot index no documents (a database with no tables): such an index scores none
        self._model = bm25s.BM25() if docs else None
        if self._model is not None:
            self._model.index([_tokens(d) or ["_"] for d in docs], show_progress=False)

    def scores(self, query: str, n: int) -> np.ndarray:
        if self._model is None:
            return np.zeros(n, dtype=np.float64)
        terms = [t for t in _tokens(query) if t not in _STOPWORDS]
        ids = self._model.get_tokens_ids(terms) if terms else []
        if not ids:
            return np.zeros(n, dtype=np.float64)
        return self._model.get_scores_from_ids(ids).astype(np.float64)


def _rrf(scores: np.ndarray) -> np.ndarray:
    """Reciprocal-rank fusion term of each item; items scoring 0 (no evidence) get nothing."""
    order = np.argsort(-scores, kind="stable")
    ranks = np.empty(len(scores), dtype=np.float64)
    ranks[order] = np.arange(len(scores))
    fused = 1.0 / (RRF_K + ranks + 1.0)
    fused[scores <= 0] = 0.0
    return fused


def _fk_neighbours(schema: Schema) -> dict[str, set[str]]:
    """Each table's foreign-key neighbours; a key naming no table of the schema (a schema built
    by hand, or an engine that keeps such keys) joins nothing."""
    graph: dict[str, set[str]] = defaultdict(set)
    tables = set(schema.table_names)
    for fk in schema.foreign_keys:
        if fk.table != fk.ref_table and fk.table in tables and fk.ref_table in tables:
            graph[fk.table].add(fk.ref_table)
            graph[fk.ref_table].add(fk.table)
    return graph


def _join_path(graph: dict[str, set[str]], start: str, goal: str, limit: int = 3) -> list[str]:
    """Tables strictly between ``start`` and ``goal`` on a shortest FK path (at most ``limit``)."""
    frontier, parent = [start], {start: ""}
    for _ in range(limit + 1):
        nxt = []
        for node in frontier:
            for other in sorted(graph.get(node, ())):
                if other not in parent:
                    parent[other] = node
                    nxt.append(other)
        if goal in parent:
            path, node = [], parent[goal]
            while node and node != start:
                path.append(node)
                node = parent[node]
            return path[::-1]
        frontier = nxt
    return []


def _components(graph: dict[str, set[str]], names: Sequence[str]) -> list[list[str]]:
    """The schema's connected components under its foreign keys (a table with none: alone)."""
    seen: set[str] = set()
    parts: list[list[str]] = []
    for name in names:
        if name in seen:
            continue
        part, stack = [], [name]
        seen.add(name)
        while stack:
            node = stack.pop()
            part.append(node)
            for other in graph.get(node, ()):
                if other not in seen:
                    seen.add(other)
                    stack.append(other)
        parts.append(part)
    return parts


def _dominant_component(
    part_of: dict[str, int],
    names: Sequence[str],
    kept: Sequence[str],
    score_of: dict[str, float],
    largest: int,
    share: float,
) -> list[str]:
    """The whole component holding ``share`` of ``kept``'s score, best first, if it is small."""
    if largest < 2 or not kept:
        return []
    weight: dict[int, float] = defaultdict(float)
    for t in kept:
        weight[part_of[t]] += max(score_of[t], 0.0)
    total = sum(weight.values())
    best = max(weight, key=weight.__getitem__)
    if total <= 0 or weight[best] < share * total:
        return []
    part = [t for t in names if part_of[t] == best]
    if not 1 < len(part) <= largest:
        return []
    return sorted(part, key=lambda t: -score_of[t])


def filter_schema(
    index: SchemaIndex,
    question: str,
    evidence: str = "",
    *,
    mentioned: Iterable[tuple[str, str, str]] = (),
    max_tables: int = 6,
    min_share: float = 0.5,
    neighbour_weight: float = 0.5,
    value_weight: float = 1.0,
    whole_component: int = 12,
    component_share: float = 0.75,
    fit: Callable[[Schema], bool] | None = None,
) -> FilteredSchema:
    """The tables ``question`` most likely needs, joinable, within what ``fit`` accepts.

    Tables are ranked by :meth:`SchemaIndex.table_scores` fused with one more signal: the stored
    values the question names verbatim (``mentioned`` ``(table, column, value)`` triples, from
    :meth:`sqlweave.values.ValueIndex.mentioned`), longer values weighing more; values under three
    characters or stopwords ("All") are ignored, since a big database stores them everywhere. The best table is kept,
    then each next one while its score is at least ``min_share`` of the best and fewer than
    ``max_tables`` are kept, each with the tables on the FK path that joins it to those already kept.
    Every column of a kept table stays (recall matters more than a few tokens). If ``fit`` rejects
    the rendering, the lowest-ranked tables go until it accepts (the best table always stays).

    ``whole_component`` (0: off) and ``component_share``: a schema whose foreign keys split it
    into separate connected components (several applications in one database, or a merged
    benchmark) can mix look-alike tables of unrelated applications (``singer`` from one,
    ``concert`` from another). When at least ``component_share`` of the kept tables' summed score
    lies in one component of 2 to ``whole_component`` tables and ``fit`` accepts it whole, that
    component is shown instead, best table first: what the program would see on that
    application's own database. Chosen on ``spider-train-val-merged``: every share from 0.6 to 0.9
    leaves its gold-table recall unchanged and switches only questions to their own database's
    tables (58 % of them at 0.6, 31 % at 0.9); 0.75 is the middle of that plateau.
    """
    schema = index.schema
    query = " ".join(p for p in (question, evidence) if p)
    names = schema.table_names
    value_scores, pinned = _value_scores(names, mentioned)
    own = index.table_scores(query) + value_weight * _rrf(value_scores)
    graph = index.graph
    # A table joined to a related table is related too: "customers with the most invoices" names
    # customers, and invoices (joined to them) must come along, not another database's orders.
    position = {n: i for i, n in enumerate(names)}
    neighbour_best = np.array(
        [max((own[position[m]] for m in graph.get(n, ())), default=0.0) for n in names]
    )
    total = own + neighbour_weight * neighbour_best
    order = [names[i] for i in np.argsort(-total, kind="stable")]
    score_of = {names[i]: float(total[i]) for i in range(len(names))}
    kept = _keep(order, score_of, graph, max_tables, min_share)
    whole = _dominant_component(
        index.component_of, names, kept, score_of, whole_component, component_share
    )
    if whole:
        subset = schema.subset(tables=whole)
        if fit is None or fit(subset):
            return FilteredSchema(schema=subset, ranking=whole, scores=score_of, pinned=pinned)
    subset = schema.subset(tables=kept)
    if fit is not None:
        while len(kept) > 1 and not fit(subset):
            kept.pop()
            subset = schema.subset(tables=kept)
    return FilteredSchema(schema=subset, ranking=kept, scores=score_of, pinned=pinned)


def _value_scores(
    names: list[str], mentioned: Iterable[tuple[str, str, str]]
) -> tuple[np.ndarray, list[tuple[str, str]]]:
    """Per table, the summed length of the stored values the question names (values under three
    characters and stopwords left out); and the (table, column) pairs those values pin."""
    by_lower = {n.lower(): i for i, n in enumerate(names)}
    value_scores = np.zeros(len(names))
    pinned = []
    for table, column, value in mentioned:
        i = by_lower.get(table.lower())
        if i is None or len(value) < 3 or value.lower() in _STOPWORDS:
            continue
        # Longer values name things more specifically ("Jetblue Airways" vs "All", "20").
        value_scores[i] += len(value)
        pinned.append((names[i], column))
    return value_scores, pinned


def _keep(
    order: list[str],
    score_of: dict[str, float],
    graph: dict[str, set[str]],
    max_tables: int,
    min_share: float,
) -> list[str]:
    """The best table, then each next one while its score is at least ``min_share`` of the
    best and fewer than ``max_tables`` are kept, each with the FK path joining it to the kept."""
    kept: list[str] = []
    best = score_of[order[0]] if order else 0.0
    for name in order:
        if len(kept) >= max_tables:
            break
        if kept and (score_of[name] <= 0 or score_of[name] < min_share * best):
            break
        if name in kept:
            continue
        bridge: list[str] = []
        if kept and not any(name in graph.get(k, ()) for k in kept):
            paths = [_join_path(graph, k, name) for k in kept]
            paths = [p for p in paths if p]
            bridge = min(paths, key=len) if paths else []
        for t in [*bridge, name]:
            if t not in kept:
                kept.append(t)
    return kept


# --- narrowing a database for one question ----------------------------------------------------
#
# Programs never see a FilteredSchema: they see a *scoped view* of the database (the same
# connections, a set of visible tables), and the schema readers (``introspect``, ``native_ddl``)
# show only those tables. So every program, its own linkers included, works on the reduced schema
# without knowing it was reduced, and the SQL it writes still runs on the real database.

DEFAULT_CONTEXT_WINDOW = 8192
"""Assumed when the LM does not say (a served model): small enough to be safe for most."""
SCHEMA_SHARE = 0.5
"""Share of the context window the schema may fill; the rest is instructions, demos, hints and
the answer (a program with demos and value hints needs about as much again)."""
CHARS_PER_TOKEN = 3.0
"""Conservative: DDL measured 3.67 characters per token with Qwen2.5-Coder's tokenizer."""

MODES = ("auto", "on", "off")
SHORT_NAMES = True
"""Show a narrowed view of one ``<namespace>__`` under short table names (:mod:`sqlweave.tablenames`)."""
USE_EMBEDDINGS = True
"""Rank with the bundled sentence encoder too (when installed). Embedding a 1,000-table schema's
documents takes about a minute on two cores, once per database and process; BM25 and values
alone lose about 2 points of table recall on spider-train-val-merged."""

_INDEXES: dict[tuple[str, str], SchemaIndex] = {}
_WHOLE_CHARS: dict[tuple[str, str], int] = {}
_LOCK = threading.Lock()


def visible_tables(db: Database) -> frozenset[str] | None:
    """The lower-cased tables a scoped view shows, or None for the whole database."""
    return db.visible_tables


def scoped(db: Database, tables: Iterable[str], *, short: bool = False) -> Database:
    """A view of ``db`` whose schema readers show only ``tables`` (same connections and caches).

    With ``short``, a view whose tables share one ``<namespace>__`` prefix shows them under their
    short names (:mod:`sqlweave.tablenames`): ``table_aliases`` (short -> real, lower-cased keys)
    maps SQL back before it runs, ``display_names`` (real -> short) renders the schema.
    """
    return db.scoped(TableScope.of(tables, short=short))


def context_window(lm: Any = None) -> int:
    """The context window of ``lm`` (DSPy's configured LM by default), in tokens."""
    lm = lm if lm is not None else dspy.settings.lm
    engine = getattr(lm, "engine", None) or getattr(lm, "kwargs", {}).get("engine")
    n_ctx = getattr(engine, "n_ctx", None)
    return int(n_ctx) if n_ctx else DEFAULT_CONTEXT_WINDOW


def schema_budget_tokens(lm: Any = None) -> int:
    """How many tokens the schema may take in a prompt to ``lm``."""
    return int(context_window(lm) * SCHEMA_SHARE)


def estimate_tokens(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN) + 1


def _key(db: Database) -> tuple[str, str]:
    return (db.fingerprint, db.name)


def schema_index(db: Database) -> SchemaIndex:
    """The :class:`SchemaIndex` of ``db``'s whole schema, built once per process.

    Uses the bundled sentence encoder when the ``embeddings`` extra is installed; BM25 alone
    otherwise (logged once).
    """
    from sqlweave.schema import introspect, unscoped

    key = _key(db)
    with _LOCK:
        hit = _INDEXES.get(key)
    if hit is not None:
        return hit
    whole = db if visible_tables(db) is None else unscoped(db)
    encoder = None
    if USE_EMBEDDINGS:
        try:
            from sqlweave.embeddings import EmbeddingError, default_encoder

            encoder = default_encoder()
            encoder.dim  # noqa: B018 - loads the model now, so a missing extra fails here
        except (ImportError, EmbeddingError) as err:
            logger.info("schema filter without embeddings (%s): BM25 and values only", err)
            encoder = None
    index = SchemaIndex(introspect(whole), encoder=encoder)
    with _LOCK:
        _INDEXES[key] = index
    return index


def whole_schema_tokens(db: Database) -> int:
    """Estimated tokens of ``db``'s whole schema as the native DDL renders it (cached)."""
    from sqlweave.schema import native_ddl, unscoped

    key = _key(db)
    with _LOCK:
        hit = _WHOLE_CHARS.get(key)
    if hit is None:
        hit = len(native_ddl(unscoped(db)))
        with _LOCK:
            _WHOLE_CHARS[key] = hit
    return int(hit / CHARS_PER_TOKEN) + 1


def narrow(
    db: Database,
    question: str,
    evidence: str = "",
    *,
    mode: str = "auto",
    budget_tokens: int | None = None,
) -> Database:
    """``db`` itself, or a scoped view holding the tables ``question`` needs.

    ``mode``: ``"auto"`` narrows only when the whole schema would take more than
    ``budget_tokens`` (default :func:`schema_budget_tokens` of the configured LM), so small
    schemas are shown whole as before; ``"on"`` always narrows; ``"off"`` never does. The kept
    tables are rendered within the budget too (the lowest-ranked ones go first).
    """
    if mode not in MODES:
        raise ValueError(f"schema_filter must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "off":
        return db
    budget = budget_tokens if budget_tokens is not None else schema_budget_tokens()
    if mode == "auto" and whole_schema_tokens(db) <= budget:
        return db
    from sqlweave.schema import native_ddl
    from sqlweave.values import ValueIndex

    index = schema_index(db)
    if not index.schema.tables:  # nothing to narrow, and BM25 cannot index no documents
        return db
    try:
        mentioned = ValueIndex.build(db).mentioned(question, limit=20)
    except Exception as err:  # noqa: BLE001 - values are a hint; a failing scan must not stop us
        logger.debug("schema filter: no value matches (%s)", err)
        mentioned = []

    def fits(schema: Schema) -> bool:
        return estimate_tokens(native_ddl(scoped(db, schema.table_names))) <= budget

    kept = filter_schema(index, question, evidence, mentioned=mentioned, fit=fits)
    logger.debug("schema filter kept %d of %d tables", len(kept.tables), len(index.schema.tables))
    return scoped(db, kept.tables, short=SHORT_NAMES)


def clear_cache() -> None:
    """Forget built schema indexes and schema sizes (part of ``sqlweave.caches.CACHE.clear()``)."""
    with _LOCK:
        _INDEXES.clear()
        _WHOLE_CHARS.clear()


CACHE.register(clear_cache)
