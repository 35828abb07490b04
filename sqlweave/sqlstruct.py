"""The shape of a SQL query, without its names and values: skeletons, keywords and pq-grams.

Structure-aware demo retrieval (MageSQL's Struct-Tree, skeleton matching) compares a draft SQL
with the gold SQL of train examples by what the queries *do*, not by which tables they touch.
Everything here is a pure function of SQL text (parsed with sqlglot), so it is cheap to test and
to precompute for a pool of thousands of queries:

* :func:`skeleton` — the query with every table, column, alias and literal replaced by ``_``,
  lowercase and token-spaced (``select _ from _ where _ = _ order by _ desc limit _``);
  :func:`skeleton_similarity` compares two of them token by token.
* :func:`sql_keywords` — the set of clauses, aggregates and operators a query uses.
* :func:`pq_gram_profile` / :func:`pq_gram_distance` — the pq-gram profile of the query's AST
  with node *types* as labels (Augsten, Böhlen and Gamper's pq-grams, an approximation of tree
  edit distance that is linear to compute). :class:`BagIndex` holds the profiles of a pool so one
  query is compared with all of them in a few vectorised steps.
* :func:`question_tokens` / :func:`jaccard` — the question-side baseline (MageSQL's "question
  Jaccard").

SQL that sqlglot cannot parse is never an error: each function falls back to the token stream
(and, below that, a regular-expression split), so a garbled draft from a small model still gets a
usable, if rougher, structure.

Spider writes string values in double quotes (``name = "France"``), which SQLite's grammar
reads as identifiers. For the ``sqlite`` dialect a double-quoted token that is not next to a
``.`` and does not follow ``FROM``/``JOIN``/``AS`` is read as a string literal, so ``"France"``
and ``'France'`` give the same structure; backtick and bracket quoting (BIRD's identifiers) are
left alone.
"""

from __future__ import annotations

import difflib
import functools
import logging
import re
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError, TokenError
from sqlglot.tokens import Token, TokenType

from sqlweave.caches import CACHE
from sqlweave.sqlsymbols import ARITHMETIC, COMPARISONS
from sqlweave.sqltree import MAX_SQL_CHARS

logger = logging.getLogger(__name__)

PLACEHOLDER = "_"
PAD = "*"  # pq-gram padding label; no sqlglot node key is "*" (Star's key is "star")

_TOKEN_RE = re.compile(r"[a-z0-9_]+|<>|!=|>=|<=|\|\||[^\sa-z0-9_]")
_FALLBACK_SQL_TOKEN_RE = re.compile(
    r"'(?:[^']|'')*'|\"[^\"]*\"|`[^`]*`|\[[^\]]*\]|\d+(?:\.\d+)?|\w+|<>|!=|>=|<=|\|\||[^\s\w]"
)
_WORD_RE = re.compile(r"[a-z0-9]+")

#: Function words dropped from questions: they carry no content and inflate every overlap.
#: Question words (what, how, many, which) stay: they hint at the query shape.
STOP_WORDS = frozenset(
    "a an the of to in on at for by with from and or is are was were be been being do does did "
    "that this these those it its their there me my our your please as than".split()
)


# --- parsing ------------------------------------------------------------------------------------


def _identifier_kept(prev: Token | None, nxt: Token | None) -> bool:
    """Whether a double-quoted token is an identifier by position (else it is read as a string)."""
    if nxt is not None and nxt.token_type == TokenType.DOT:
        return True
    if prev is not None and prev.token_type in (
        TokenType.DOT,
        TokenType.FROM,
        TokenType.JOIN,
        TokenType.ALIAS,
    ):
        return True
    return False


def _requote_strings(sql: str, dialect: str) -> str:
    """Rewrite Spider's double-quoted values as single-quoted strings (sqlite dialect only)."""
    if dialect != "sqlite" or '"' not in sql:
        return sql
    try:
        tokens = Dialect.get_or_raise(dialect).tokenize(sql)
    except TokenError:
        return sql
    pieces: list[str] = []
    last = 0
    for i, tok in enumerate(tokens):
        if tok.token_type != TokenType.IDENTIFIER or sql[tok.start] != '"':
            continue
        prev = tokens[i - 1] if i > 0 else None
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if _identifier_kept(prev, nxt):
            continue
        pieces.append(sql[last : tok.start])
        pieces.append("'" + tok.text.replace("'", "''") + "'")
        last = tok.end + 1
    if not pieces:
        return sql
    pieces.append(sql[last:])
    return "".join(pieces)


@functools.lru_cache(maxsize=8192)  # ~6 KB a tree: a Spider-train-sized pool fits in ~50 MB
def _parse(sql: str, dialect: str) -> exp.Expression | None:
    """The first statement of ``sql`` as a sqlglot tree, or None if it does not parse.

    Cached: a pool is profiled, skeletonised and keyword-scanned from one parse per query. Callers
    must not mutate the returned tree (copy first).
    """
    if len(sql) > MAX_SQL_CHARS:  # no query to read: the executor refuses it unread
        return None
    text = _requote_strings(sql.strip().rstrip(";").strip(), dialect)
    if not text:
        return None
    try:
        statements = sqlglot.parse(text, read=dialect)
    except (ParseError, TokenError) as err:
        logger.debug("cannot parse SQL (%s): %s", err.__class__.__name__, sql)
        return None
    return next((s for s in statements if s is not None), None)


def parse(sql: str, dialect: str = "sqlite") -> exp.Expression | None:
    """The first statement of ``sql`` as a (shared, cached) sqlglot tree, or None if it does not
    parse; Spider's double-quoted values read as strings. Do not mutate the tree: copy it first."""
    return _parse(sql, dialect)


@functools.lru_cache(maxsize=8)
def _tokenizer_keywords(dialect: str) -> frozenset[str]:
    """Single-word keywords of the dialect's tokenizer (to tell keywords from names by regex)."""
    tokenizer = Dialect.get_or_raise(dialect).tokenizer_class
    return frozenset(k for k in tokenizer.KEYWORDS if k.isalpha())


def _fallback_tokens(sql: str, dialect: str) -> list[tuple[str, str]]:
    """``(kind, text)`` pairs for unparseable SQL: kind is ``kw``, ``name``, ``value`` or ``op``."""
    try:
        tokens = Dialect.get_or_raise(dialect).tokenize(sql)
    except TokenError:
        tokens = None
    out: list[tuple[str, str]] = []
    if tokens is not None:
        for tok in tokens:
            tt = tok.token_type
            if tt in (TokenType.VAR, TokenType.IDENTIFIER):
                out.append(("name", tok.text))
            elif tt in (TokenType.STRING, TokenType.NUMBER, TokenType.NATIONAL_STRING):
                out.append(("value", tok.text))
            else:
                text = " ".join(tok.text.lower().split())  # "GROUP  BY" is one token
                out.append(("kw" if text.replace(" ", "").isalpha() else "op", text))
        return out
    keywords = _tokenizer_keywords(dialect)
    for piece in _FALLBACK_SQL_TOKEN_RE.findall(sql):
        if piece[0] in "'\"" or piece[0].isdigit():
            out.append(("value", piece))
        elif piece[0] in "`[":
            out.append(("name", piece))
        elif piece[0].isalpha() or piece[0] == "_":
            out.append(("kw" if piece.upper() in keywords else "name", piece.lower()))
        else:
            out.append(("op", piece))
    return out


# --- skeletons ----------------------------------------------------------------------------------


def _abstract_tree(tree: exp.Expression) -> exp.Expression:
    """A copy of ``tree`` with names, aliases and literals replaced by the placeholder."""
    tree = tree.copy()
    for node in list(tree.find_all(exp.Alias)):
        node.replace(node.this)
    for node in list(tree.find_all(exp.TableAlias)):
        if isinstance(node.parent, (exp.Table, exp.Subquery)):
            node.pop()
        else:  # a CTE name is syntax: keep a placeholder
            node.set("this", exp.to_identifier(PLACEHOLDER))
            node.set("columns", None)
    for node in list(tree.find_all(exp.Column)):
        node.replace(exp.column(PLACEHOLDER))
    for node in list(tree.find_all(exp.Table)):
        node.replace(exp.Table(this=exp.to_identifier(PLACEHOLDER)))
    for node in list(tree.find_all(exp.Literal)):
        node.replace(exp.var(PLACEHOLDER))
    for node in tree.find_all(exp.Join):
        if (node.kind or "").upper() == "INNER":  # BIRD's INNER JOIN is Spider's JOIN
            node.set("kind", None)
    return tree


def _fallback_skeleton(sql: str, dialect: str) -> str:
    words: list[str] = []
    for kind, text in _fallback_tokens(sql, dialect):
        word = PLACEHOLDER if kind in ("name", "value") else text
        if word == PLACEHOLDER and words[-2:] == [PLACEHOLDER, "."]:
            words.pop()  # t1 . name -> _
            continue
        if word == PLACEHOLDER and words and words[-1] == "as":
            words.pop()  # drop "AS alias"
            continue
        if word == PLACEHOLDER and words and words[-1] == PLACEHOLDER:
            continue  # "FROM singer T1" (implicit alias) -> _
        words.append(word)
    return " ".join(_TOKEN_RE.findall(" ".join(words).lower()))


@functools.lru_cache(maxsize=32768)
def skeleton(sql: str, dialect: str = "sqlite") -> str:
    """The query with table/column names, aliases and literals replaced by ``_``.

    Two queries with the same skeleton ask the same kind of question of different data, which is
    what a structure-based demo selector looks for. Output is lowercase with tokens separated by
    single spaces (``select count ( * ) from _ where _ > _``). Unparseable SQL gets a skeleton from
    its token stream, so it stays comparable with parsed ones.
    """
    tree = _parse(sql, dialect)
    if tree is None:
        return _fallback_skeleton(sql, dialect)
    try:
        text = _abstract_tree(tree).sql(dialect=dialect)
    except SqlglotError as err:
        logger.debug("cannot render skeleton (%s): %s", err, sql)
        return _fallback_skeleton(sql, dialect)
    return " ".join(_TOKEN_RE.findall(text.lower()))


def skeleton_tokens(sql: str, dialect: str = "sqlite") -> tuple[str, ...]:
    """:func:`skeleton` split into its tokens (what :func:`skeleton_similarity` compares)."""
    return tuple(skeleton(sql, dialect).split())


def token_ratio(a: Sequence[str], b: Sequence[str]) -> float:
    """difflib's ratio ``2·M / (|a| + |b|)`` over token sequences, made symmetric.

    SequenceMatcher's matching blocks can differ with argument order; comparing in a canonical
    order makes ``token_ratio(a, b) == token_ratio(b, a)`` exactly. Autojunk is off so long
    queries are not treated differently from short ones.
    """
    a, b = list(a), list(b)
    if a > b:
        a, b = b, a
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def skeleton_similarity(a: str, b: str, dialect: str = "sqlite") -> float:
    """Similarity in [0, 1] of two queries' skeletons; 1.0 when they are identical.

    Token-level difflib ratio, so one extra clause costs a little and a different query shape
    costs a lot. Takes SQL text (skeletonised here).
    """
    return token_ratio(skeleton_tokens(a, dialect), skeleton_tokens(b, dialect))


# --- keywords -----------------------------------------------------------------------------------

_KEYWORD_NODES: dict[type[exp.Expression], str] = {
    exp.Select: "select",
    exp.Where: "where",
    exp.Group: "group by",
    exp.Having: "having",
    exp.Order: "order by",
    exp.Join: "join",
    exp.Limit: "limit",
    exp.Offset: "offset",
    exp.Union: "union",
    exp.Intersect: "intersect",
    exp.Except: "except",
    exp.With: "with",
    exp.Count: "count",
    exp.Max: "max",
    exp.Min: "min",
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Distinct: "distinct",
    exp.Like: "like",
    exp.ILike: "like",
    exp.In: "in",
    exp.Not: "not",
    exp.Between: "between",
    exp.Exists: "exists",
    exp.Is: "is",
    exp.Case: "case",
    exp.Cast: "cast",
    exp.And: "and",
    exp.Or: "or",
    **COMPARISONS,
    **ARITHMETIC,
}

_FALLBACK_KEYWORDS = frozenset({*_KEYWORD_NODES.values(), "desc", "null"})


def _keyword_of(node: exp.Expression) -> str | None:
    for cls in type(node).__mro__:
        if cls in _KEYWORD_NODES:
            return _KEYWORD_NODES[cls]
    return None


def sql_keywords(sql: str, dialect: str = "sqlite") -> set[str]:
    """The SQL keywords and operators a query uses (``select``, ``group by``, ``count``, ``desc``…).

    A cheap, interpretable structure signature: MageSQL's correction hints and hardness-style
    heuristics ask "does it join / nest / use a set operator". A SELECT inside another SELECT
    adds ``nested-select``; an outer join adds e.g. ``left join`` besides ``join``.
    """
    tree = _parse(sql, dialect)
    if tree is None:
        return _fallback_keywords(sql, dialect)
    found: set[str] = set()
    for node in tree.walk():
        word = _keyword_of(node)
        if word:
            found.add(word)
        if isinstance(node, exp.Ordered) and node.args.get("desc"):
            found.add("desc")
        elif isinstance(node, exp.Join) and node.side:
            found.add(f"{node.side.lower()} join")
        elif isinstance(node, exp.Null):
            found.add("null")
        if isinstance(node, exp.Select) and node.find_ancestor(exp.Select) is not None:
            found.add("nested-select")
    return found


def _fallback_keywords(sql: str, dialect: str) -> set[str]:
    words = [text for kind, text in _fallback_tokens(sql, dialect) if kind in ("kw", "op")]
    found = {w for w in words if w in _FALLBACK_KEYWORDS}
    for a, b in zip(words, words[1:], strict=False):
        if b == "by" and a in ("group", "order"):
            found.add(f"{a} by")
    set_ops = sum(words.count(w) for w in ("union", "intersect", "except"))
    if words.count("select") > set_ops + 1:
        found.add("nested-select")
    return found


# --- pq-grams -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabelTree:
    """An ordered labelled tree: the input of the pq-gram profile."""

    label: str
    children: tuple[LabelTree, ...] = field(default=())

    def size(self) -> int:
        """Number of nodes (for logging and tests)."""
        return 1 + sum(c.size() for c in self.children)


def _node_label(node: exp.Expression) -> str:
    label = node.key
    if isinstance(node, exp.Ordered) and node.args.get("desc"):
        label += " desc"
    elif isinstance(node, exp.Join):
        extra = " ".join(x.lower() for x in (node.side, node.kind) if x and x.upper() != "INNER")
        label += f" {extra}" if extra else ""
    elif isinstance(node, exp.SetOperation) and not node.args.get("distinct", True):
        label += " all"
    elif isinstance(node, exp.Anonymous):
        label += f" {str(node.this).lower()}"  # a function name is structure, not data
    return label


def _to_label_trees(node: exp.Expression) -> list[LabelTree]:
    # Names and aliases are dropped; an Alias node stands for the expression it names.
    if isinstance(node, (exp.Identifier, exp.TableAlias)):
        return []
    if isinstance(node, exp.Alias):
        return _to_label_trees(node.this)
    children: list[LabelTree] = []
    for key in type(node).arg_types:
        value = node.args.get(key)
        for child in value if isinstance(value, list) else (value,):
            if isinstance(child, exp.Expression):
                children.extend(_to_label_trees(child))
    return [LabelTree(_node_label(node), tuple(children))]


def structure_tree(sql: str, dialect: str = "sqlite") -> LabelTree:
    """The query's AST as node types only (no identifiers, no literal values).

    Unparseable SQL becomes a flat tree ``unparsed`` → token kinds (keywords verbatim, names
    ``name``, values ``literal``), so it can still be compared, just coarsely.
    """
    tree = _parse(sql, dialect)
    if tree is not None:
        roots = _to_label_trees(tree)
        if roots:
            return roots[0]
    leaves = tuple(
        LabelTree({"name": "name", "value": "literal"}.get(kind, text))
        for kind, text in _fallback_tokens(sql, dialect)
    )
    return LabelTree("unparsed", leaves)


def tree_pq_grams(tree: LabelTree, p: int = 2, q: int = 3) -> Counter[tuple[str, ...]]:
    """The pq-gram profile (a bag of label tuples of length p+q) of an ordered labelled tree.

    Each gram is a stem of ``p`` labels (a node and its p-1 nearest ancestors, padded with ``*``
    above the root) followed by ``q`` consecutive children of that node (padded with ``*`` at both
    ends of the child list; a leaf contributes one gram of ``q`` pads).
    """
    if p < 1 or q < 1:
        raise ValueError(f"p and q must be >= 1, got p={p}, q={q}")
    profile: Counter[tuple[str, ...]] = Counter()
    stack: list[tuple[LabelTree, tuple[str, ...]]] = [(tree, (PAD,) * p)]
    while stack:  # explicit stack: deeply nested AND chains must not hit the recursion limit
        node, parent_stem = stack.pop()
        stem = parent_stem[1:] + (node.label,)
        if not node.children:
            profile[stem + (PAD,) * q] += 1
            continue
        base = (PAD,) * q
        for child in node.children:
            base = base[1:] + (child.label,)
            profile[stem + base] += 1
            stack.append((child, stem))
        for _ in range(q - 1):
            base = base[1:] + (PAD,)
            profile[stem + base] += 1
    return profile


@functools.lru_cache(maxsize=32768)
def _cached_profile(sql: str, p: int, q: int, dialect: str) -> Counter[tuple[str, ...]]:
    try:
        return tree_pq_grams(structure_tree(sql, dialect), p, q)
    except RecursionError:  # nested past the stack: no structure to compare, as for no parse
        return Counter()


def pq_gram_profile(
    sql: str, p: int = 2, q: int = 3, dialect: str = "sqlite"
) -> Counter[tuple[str, ...]]:
    """pq-gram profile of a query's node-type tree (see :func:`structure_tree`).

    Compute it once per pool query and compare many times with :func:`profile_similarity` or a
    :class:`BagIndex`. Returns a fresh Counter the caller may modify.
    """
    return Counter(_cached_profile(sql, p, q, dialect))


def _bag_intersection(a: Mapping[Hashable, int], b: Mapping[Hashable, int]) -> int:
    if len(a) > len(b):
        a, b = b, a
    return sum(min(n, b.get(key, 0)) for key, n in a.items())


def profile_similarity(a: Mapping[Hashable, int], b: Mapping[Hashable, int]) -> float:
    """``2·|A ∩ B| / (|A| + |B|)`` over bags (multiset intersection); 1.0 for two empty bags."""
    total = sum(a.values()) + sum(b.values())
    if total == 0:
        return 1.0
    return 2 * _bag_intersection(a, b) / total


def pq_gram_similarity(a: str, b: str, p: int = 2, q: int = 3, dialect: str = "sqlite") -> float:
    """1 − :func:`pq_gram_distance`: 1.0 when the two queries have the same node-type tree."""
    return profile_similarity(_cached_profile(a, p, q, dialect), _cached_profile(b, p, q, dialect))


def pq_gram_distance(a: str, b: str, p: int = 2, q: int = 3, dialect: str = "sqlite") -> float:
    """Normalised pq-gram distance ``1 − 2|P1 ∩ P2| / (|P1| + |P2|)`` (bag semantics), in [0, 1].

    MageSQL's Struct-Tree selector ranks train SQL by this distance to the draft SQL: it
    approximates tree edit distance between the queries' node-type trees in linear time.
    """
    return 1.0 - pq_gram_similarity(a, b, p, q, dialect)


class BagIndex:
    """Many bags (pq-gram profiles, token multisets, token sets) indexed for one-to-all overlap.

    Stored as postings (key → pool positions and counts), so ``intersections(bag)`` costs one
    vectorised ``minimum`` per distinct key of the query bag, not one loop over the pool.
    """

    def __init__(self, bags: Sequence[Mapping[Hashable, int]]) -> None:
        positions: dict[Hashable, list[int]] = {}
        counts: dict[Hashable, list[int]] = {}
        for i, bag in enumerate(bags):
            for key, n in bag.items():
                if n > 0:
                    positions.setdefault(key, []).append(i)
                    counts.setdefault(key, []).append(n)
        self._postings = {
            key: (np.asarray(positions[key], dtype=np.int64), np.asarray(counts[key], np.float64))
            for key in positions
        }
        self.sizes = np.asarray(
            [sum(n for n in bag.values() if n > 0) for bag in bags], dtype=np.float64
        )

    def __len__(self) -> int:
        return len(self.sizes)

    def intersections(self, bag: Mapping[Hashable, int]) -> np.ndarray:
        """Multiset intersection size of ``bag`` with every indexed bag (float64 array)."""
        inter = np.zeros(len(self.sizes), dtype=np.float64)
        for key, n in bag.items():
            posting = self._postings.get(key)
            if posting is not None and n > 0:
                idx, cnt = posting
                inter[idx] += np.minimum(cnt, n)
        return inter

    def dice(self, bag: Mapping[Hashable, int]) -> np.ndarray:
        """``2|A ∩ B| / (|A| + |B|)`` against every bag: :func:`profile_similarity`, vectorised."""
        total = self.sizes + sum(n for n in bag.values() if n > 0)
        inter = self.intersections(bag)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = 2 * inter / total
        out[total == 0] = 1.0
        return out

    def jaccard(self, bag: Mapping[Hashable, int]) -> np.ndarray:
        """``|A ∩ B| / |A ∪ B|`` against every bag (sets: all counts 1); :func:`jaccard`, vectorised."""
        inter = self.intersections(bag)
        union = self.sizes + sum(n for n in bag.values() if n > 0) - inter
        with np.errstate(invalid="ignore", divide="ignore"):
            out = inter / union
        out[union == 0] = 1.0
        return out


# --- questions ----------------------------------------------------------------------------------


def question_tokens(text: str) -> set[str]:
    """Lowercase word tokens of a question without function words (see :data:`STOP_WORDS`).

    The token set behind question-Jaccard demo selection; numbers are kept (a question about
    "2 cars" and one about "3 cars" still share "cars").
    """
    return {t for t in _WORD_RE.findall(text.lower()) if t not in STOP_WORDS}


def jaccard(a: Iterable[Hashable], b: Iterable[Hashable]) -> float:
    """``|a ∩ b| / |a ∪ b|`` of two sets; 1.0 when both are empty (nothing tells them apart)."""
    a, b = set(a), set(b)
    union = len(a | b)
    return len(a & b) / union if union else 1.0


# Part of sqlweave.caches.CACHE.clear().
CACHE.register(skeleton.cache_clear)
CACHE.register(_cached_profile.cache_clear)
