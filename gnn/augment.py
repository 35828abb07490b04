"""SQL-preserving graph augmentations: the positive views of contrastive training.

Generic graph augmentations (drop any node, perturb any edge) can turn a query graph into
something no SQL statement produces (a ``JOIN`` swapped for a ``SELECT``). These transforms edit
a query graph only in ways that keep it the graph of some valid query of similar shape:

* :class:`FeatureMasking` – hide the text of a few non-essential nodes;
* :class:`KeywordReplacement` – swap operators within their family (``MAX``↔``MIN``, ``>``↔``<=``);
* :class:`ValueReplacement` – replace literals by other literals of the same kind;
* :class:`DatabaseReplacement` – rename tables and columns into another database's, preferring
  columns of the same kind;
* :class:`PredicateModification` – drop a ``WHERE``/``HAVING`` clause or one of its conjuncts;
* :class:`JoinSimplification` – drop one of several ``JOIN`` clauses.

Removal prunes what only the removed part used (reachability from the root over structural
edges); a table survives while any surviving column belongs to it. Each transform is a
``BaseTransform`` with its own seeded RNG and an ``applicable(data)`` test, so they compose with
``Compose`` and :class:`RandomAugmentation` can pick one that does something.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import torch
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform, Compose

from sqlweave.gnn.graph import (
    COLUMN,
    KEYWORD,
    MASK_TEXT,
    MEMBERSHIP,
    NUM_NODE_TYPES,
    ROOT,
    STRUCTURAL,
    TABLE,
    VALUE,
    Catalog,
    SQLGraph,
    from_data,
    to_data,
)

__all__ = [
    "Compose",
    "DatabaseReplacement",
    "FeatureMasking",
    "JoinSimplification",
    "KeywordReplacement",
    "PredicateModification",
    "RandomAugmentation",
    "ValueReplacement",
    "ValueVocabulary",
    "augmentation_texts",
    "default_augmentations",
    "prune",
]

ESSENTIAL_KEYWORDS = frozenset({"SELECT", "JOIN", "WHERE", "GROUP BY", "ORDER BY"})

KEYWORD_FAMILIES: tuple[tuple[str, ...], ...] = (
    ("=", "!=", ">", "<", ">=", "<="),
    ("AND", "OR"),
    ("COUNT", "SUM", "AVG", "MIN", "MAX"),
    ("ASC", "DESC"),
    ("+", "-", "*", "/"),
    ("UNION", "INTERSECT", "EXCEPT"),
    ("LIKE", "ILIKE"),
)
_FAMILY = {kw: fam for fam in KEYWORD_FAMILIES for kw in fam}


class Featurizer(Protocol):
    """Maps node texts and types to a feature matrix (``GraphBuilder.featurize``)."""

    def featurize(self, texts: Sequence[str], types: Sequence[int]) -> torch.Tensor: ...


def _graph_attrs(data: Data) -> dict[str, Any]:
    return {k: data[k] for k in ("sql", "db_id") if k in data}


def _rebuild(data: Data, g: SQLGraph, x: torch.Tensor) -> Data:
    return to_data(g, x, **_graph_attrs(data))


def _refeaturize(data: Data, g: SQLGraph, changed: Iterable[int], featurizer: Featurizer) -> Data:
    """Same structure, new texts on ``changed`` nodes: only their feature rows are recomputed."""
    x = data.x.clone()
    idx = sorted(set(changed))
    if idx:
        x[idx] = featurizer.featurize([g.texts[i] for i in idx], [g.types[i] for i in idx])
    return _rebuild(data, g, x)


def prune(data: Data, removed: Iterable[int], extra_edges: Sequence[tuple[int, int]] = ()) -> Data:
    """Drop ``removed`` nodes and everything that only they reached; keep features of the rest.

    A node survives if the root reaches it over structural edges (plus ``extra_edges``, used to
    splice a node out); a table also survives while one of its columns does.
    """
    g = from_data(data)
    gone = set(removed)
    children: dict[int, list[int]] = {}
    for s, d, t in g.edges:
        if t == STRUCTURAL and s not in gone and d not in gone:
            children.setdefault(s, []).append(d)
    for s, d in extra_edges:
        children.setdefault(s, []).append(d)
    seen = {0}
    stack = [0]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    for s, d, t in g.edges:
        if t == MEMBERSHIP and d in seen and s not in gone:
            seen.add(s)
    keep = sorted(seen)
    new_id = {old: i for i, old in enumerate(keep)}
    edges = [(new_id[s], new_id[d], t) for s, d, t in g.edges if s in new_id and d in new_id]
    edges += [(new_id[s], new_id[d], STRUCTURAL) for s, d in extra_edges]
    edges = list(dict.fromkeys(edges))
    out = SQLGraph(
        texts=[g.texts[i] for i in keep],
        types=[g.types[i] for i in keep],
        infos=[g.infos[i] for i in keep],
        edges=edges,
    )
    return _rebuild(data, out, data.x[keep])


def _structural_children(g: SQLGraph, node: int) -> list[int]:
    return [d for s, d, t in g.edges if s == node and t == STRUCTURAL]


class _Augmentation(BaseTransform):
    """Shared plumbing: a seeded RNG, ``applicable`` and a readable ``repr``."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    def applicable(self, data: Data) -> bool:
        """Whether this transform would change ``data`` (e.g. no JOIN to drop)."""
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _NodeEdit(_Augmentation):
    """An edit of some of a graph's nodes, its :meth:`candidates`: applicable when there is one,
    the graph unchanged when there is none. The edits differ in which nodes they may touch and
    in what they do to them (:meth:`edit`), not in that; most choose nodes one by one
    (:meth:`touches`)."""

    def touches(self, text: str, kind: int, info: str) -> bool:
        """Whether this edit may touch a node of this text, type and info."""
        raise NotImplementedError

    def candidates(self, data: Data) -> list[int]:
        """The nodes this edit may touch, in graph order."""
        nodes = zip(data.node_text, data.node_type.tolist(), data.node_info, strict=True)
        return [i for i, node in enumerate(nodes) if self.touches(*node)]

    def applicable(self, data: Data) -> bool:
        return bool(self.candidates(data))

    def forward(self, data: Data) -> Data:
        cands = self.candidates(data)
        return self.edit(data, cands) if cands else data

    def edit(self, data: Data, cands: list[int]) -> Data:
        """``data`` with some of ``cands`` (one at least) edited."""
        raise NotImplementedError


class FeatureMasking(_NodeEdit):
    """Replace the text of a fraction ``p`` of non-essential nodes by ``[MASK]`` (zero vector).

    The root and the clause keywords that define a query's skeleton (``SELECT``, ``JOIN``,
    ``WHERE``, ``GROUP BY``, ``ORDER BY``) are never masked; the node type one-hot is kept, so a
    masked column is still known to be a column. At least one node is masked when any can be.
    """

    def __init__(self, p: float = 0.2, seed: int | None = None) -> None:
        super().__init__(seed)
        self.p = p

    def touches(self, text: str, kind: int, info: str) -> bool:
        essential = kind == KEYWORD and text in ESSENTIAL_KEYWORDS
        return kind != ROOT and not essential and text != MASK_TEXT

    def edit(self, data: Data, cands: list[int]) -> Data:
        n = max(1, round(self.p * len(cands)))
        chosen = self.rng.sample(cands, n)
        g = from_data(data)
        x = data.x.clone()
        for i in chosen:
            g.texts[i] = MASK_TEXT
            x[i, NUM_NODE_TYPES:] = 0.0
        return _rebuild(data, g, x)

    def __repr__(self) -> str:
        return f"FeatureMasking(p={self.p})"


class KeywordReplacement(_NodeEdit):
    """Swap each replaceable keyword, with probability ``p`` (at least one), within its family.

    Families: comparisons, ``AND``/``OR``, aggregates, ``ASC``/``DESC``, arithmetic, set
    operators, ``LIKE``/``ILIKE``. Only texts (and their feature rows) change.
    """

    def __init__(self, featurizer: Featurizer, p: float = 0.5, seed: int | None = None) -> None:
        super().__init__(seed)
        self.featurizer = featurizer
        self.p = p

    def touches(self, text: str, kind: int, info: str) -> bool:
        return kind == KEYWORD and text in _FAMILY

    def edit(self, data: Data, cands: list[int]) -> Data:
        chosen = [i for i in cands if self.rng.random() < self.p] or [self.rng.choice(cands)]
        g = from_data(data)
        for i in chosen:
            g.texts[i] = self.rng.choice([k for k in _FAMILY[g.texts[i]] if k != g.texts[i]])
        return _refeaturize(data, g, chosen, self.featurizer)

    def __repr__(self) -> str:
        return f"KeywordReplacement(p={self.p})"


class ValueVocabulary:
    """Replacement literals by kind, drawn from a pool's own values (whose texts are embedded).

    Keys are ``(kind, shape)`` where shape records ``LIKE`` wildcards at either end, so ``'%USA%'``
    is replaced by another ``'%…%'`` pattern. Missing kinds fall back to generated values.
    """

    def __init__(self, graphs: Iterable[Data] = ()) -> None:
        self.values: dict[tuple[str, str], list[str]] = {}
        for data in graphs:
            self.add(data)

    def add(self, data: Data) -> None:
        """Collect the value nodes of one graph."""
        for text, ty, info in zip(
            data.node_text, data.node_type.tolist(), data.node_info, strict=True
        ):
            if ty == VALUE and info in ("int", "float", "string") and text != MASK_TEXT:
                bucket = self.values.setdefault((info, _shape(text)), [])
                if text not in bucket:
                    bucket.append(text)

    def draw(self, text: str, kind: str, rng: random.Random) -> str:
        """A different literal of the same kind (and wildcard shape) as ``text``."""
        bucket = [v for v in self.values.get((kind, _shape(text)), []) if v != text]
        if bucket:
            return rng.choice(bucket)
        if kind == "int":
            base = abs(int(text)) if text.lstrip("-").isdigit() else 10
            return str(rng.choice([v for v in range(0, 2 * base + 11) if str(v) != text]))
        if kind == "float":
            return f"{rng.uniform(0, 100):.2f}"
        if kind == "bool":
            return "FALSE" if text.upper() == "TRUE" else "TRUE"
        core = rng.choice([w for w in _FALLBACK_STRINGS if w not in text])
        shape = _shape(text)
        return ("%" if shape[0] == "%" else "") + core + ("%" if shape[1] == "%" else "")


_FALLBACK_STRINGS = ("France", "blue", "Smith", "Engineering", "2010-05-01", "Boston", "cat")


def _shape(text: str) -> str:
    return ("%" if text.startswith("%") else "_") + ("%" if text.endswith("%") else "_")


class ValueReplacement(_NodeEdit):
    """Replace each literal (``NULL`` excluded) by another literal of the same kind."""

    def __init__(
        self, featurizer: Featurizer, vocab: ValueVocabulary | None = None, seed: int | None = None
    ) -> None:
        super().__init__(seed)
        self.featurizer = featurizer
        self.vocab = vocab or ValueVocabulary()

    def touches(self, text: str, kind: int, info: str) -> bool:
        return kind == VALUE and info in ("int", "float", "string", "bool") and text != MASK_TEXT

    def edit(self, data: Data, cands: list[int]) -> Data:
        g = from_data(data)
        for i in cands:
            g.texts[i] = self.vocab.draw(g.texts[i], g.infos[i], self.rng)
        return _refeaturize(data, g, cands, self.featurizer)


class DatabaseReplacement(_Augmentation):
    """Rename the query's tables and columns into another database of ``catalog``.

    Tables map one-to-one onto random tables of a database (other than the graph's own
    ``db_id``) that has at least as many; each column maps onto a column of its table's image,
    preferring one of the same kind (number/text/…) and avoiding reuse. ``*`` is kept. Columns
    whose table is unknown map onto any column of the mapped tables.
    """

    def __init__(self, featurizer: Featurizer, catalog: Catalog, seed: int | None = None) -> None:
        super().__init__(seed)
        self.featurizer = featurizer
        self.catalog = catalog
        self._by_size: dict[tuple[int, int], list[str]] = {}

    def _targets(self, data: Data) -> list[str]:
        n_tables = max(1, int((data.node_type == TABLE).sum()))
        own = data.db_id if "db_id" in data else None
        key = (len(self.catalog.databases), n_tables)
        if key not in self._by_size:  # called for every view: do not rescan the catalog
            self._by_size[key] = sorted(
                db for db, tables in self.catalog.databases.items() if len(tables) >= n_tables
            )
        return [db for db in self._by_size[key] if db != own]

    def applicable(self, data: Data) -> bool:
        has_names = any(t in (TABLE, COLUMN) for t in data.node_type.tolist())
        return has_names and bool(self._targets(data))

    def forward(self, data: Data) -> Data:
        targets = self._targets(data)
        if not targets:
            return data
        target = self.rng.choice(targets)
        schema = self.catalog.tables(target)
        own = data.db_id if "db_id" in data else None
        g = from_data(data)
        tables = [i for i, t in enumerate(g.types) if t == TABLE and g.texts[i] != MASK_TEXT]
        images = self.rng.sample(sorted(schema), len(tables))
        table_map = {g.texts[i]: img for i, img in zip(tables, images, strict=True)}
        changed = []
        for i, img in zip(tables, images, strict=True):
            g.texts[i] = img
            changed.append(i)
        used: set[str] = set()
        for i, (text, ty) in enumerate(zip(list(g.texts), g.types, strict=True)):
            if ty != COLUMN or text in ("*", MASK_TEXT):
                continue
            table, _, column = text.rpartition(".")
            kind = self.catalog.column_kind(own, table, column) if table else None
            dest_tables = [table_map[table]] if table in table_map else list(table_map.values())
            dest_tables = dest_tables or sorted(schema)
            options = [(t, c, k) for t in dest_tables for c, k in schema[t].items()]
            fresh = [o for o in options if f"{o[0]}.{o[1]}" not in used] or options
            same = [o for o in fresh if kind is not None and o[2] == kind]
            t, c, _ = self.rng.choice(same or fresh)
            new = f"{t}.{c}" if table else c
            used.add(f"{t}.{c}")
            g.texts[i] = new
            changed.append(i)
        out = _refeaturize(data, g, changed, self.featurizer)
        out.db_id = target
        return out

    def __repr__(self) -> str:
        return f"DatabaseReplacement(databases={len(self.catalog.databases)})"


class PredicateModification(_NodeEdit):
    """Drop a ``WHERE``/``HAVING`` clause, or (probability ``p_simplify``) one of its conjuncts.

    Simplifying removes one operand of the top ``AND``/``OR`` with its sub-tree; when a single
    operand remains, the logic node is spliced out so the clause points at it directly.
    """

    CLAUSES = ("WHERE", "HAVING")

    def __init__(self, p_simplify: float = 0.5, seed: int | None = None) -> None:
        super().__init__(seed)
        self.p_simplify = p_simplify

    def touches(self, text: str, kind: int, info: str) -> bool:
        return kind == KEYWORD and text in self.CLAUSES

    def edit(self, data: Data, cands: list[int]) -> Data:
        clause = self.rng.choice(cands)
        g = from_data(data)
        kids = _structural_children(g, clause)
        logic = kids[0] if len(kids) == 1 and g.texts[kids[0]] in ("AND", "OR") else None
        operands = _structural_children(g, logic) if logic is not None else []
        if logic is None or len(operands) < 2 or self.rng.random() >= self.p_simplify:
            return prune(data, [clause])
        dropped = self.rng.choice(operands)
        rest = [o for o in operands if o != dropped]
        if len(rest) == 1:  # splice the AND/OR out: clause → the remaining operand
            return prune(data, [dropped, logic], extra_edges=[(clause, rest[0])])
        return prune(data, [dropped])

    def __repr__(self) -> str:
        return f"PredicateModification(p_simplify={self.p_simplify})"


class JoinSimplification(_NodeEdit):
    """Drop one ``JOIN`` (its table reference and ``ON`` condition) of a ``SELECT`` with several."""

    def candidates(self, data: Data) -> list[int]:
        g = from_data(data)
        out: list[int] = []
        for i, t in enumerate(g.texts):
            if g.types[i] == KEYWORD and t == "SELECT":
                joins = [c for c in _structural_children(g, i) if g.texts[c] == "JOIN"]
                if len(joins) >= 2:
                    out.extend(joins)
        return out

    def edit(self, data: Data, cands: list[int]) -> Data:
        return prune(data, [self.rng.choice(cands)])


class RandomAugmentation(_Augmentation):
    """Apply one transform picked at random among those applicable to the graph.

    This is how a positive view is made: one SQL-preserving edit per view. When none applies
    the graph is returned unchanged.
    """

    def __init__(self, transforms: Sequence[_Augmentation], seed: int | None = None) -> None:
        super().__init__(seed)
        self.transforms = list(transforms)

    def forward(self, data: Data) -> Data:
        options = [t for t in self.transforms if t.applicable(data)]
        if not options:
            return data
        return self.rng.choice(options)(data)

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"RandomAugmentation([{inner}])"


def augmentation_texts(catalog: Catalog | None = None) -> list[str]:
    """Every text an augmentation may write, except pool values: embed them once up front.

    Embedding one new text at a time inside the training loop costs a model call per view;
    batching the catalog's names and the keyword families first keeps augmentation a lookup.
    """
    texts = [kw for fam in KEYWORD_FAMILIES for kw in fam] + list(_FALLBACK_STRINGS)
    if catalog is not None:
        for tables in catalog.databases.values():
            for table, columns in tables.items():
                texts.append(table)
                for column in columns:
                    texts += [f"{table}.{column}", column]
    return list(dict.fromkeys(texts))


def default_augmentations(
    featurizer: Featurizer,
    catalog: Catalog | None = None,
    vocab: ValueVocabulary | None = None,
    seed: int = 0,
) -> RandomAugmentation:
    """The six MageSQL augmentations, each with its own seed derived from ``seed``.

    Database replacement is left out when no catalog (or a catalog of one database) is given.
    """
    transforms: list[_Augmentation] = [
        FeatureMasking(seed=seed + 1),
        KeywordReplacement(featurizer, seed=seed + 2),
        ValueReplacement(featurizer, vocab, seed=seed + 3),
        PredicateModification(seed=seed + 5),
        JoinSimplification(seed=seed + 6),
    ]
    if catalog is not None and len(catalog.databases) > 1:
        transforms.insert(3, DatabaseReplacement(featurizer, catalog, seed=seed + 4))
    return RandomAugmentation(transforms, seed=seed)
