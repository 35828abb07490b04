"""Few-shot demonstration retrievers: pick train examples to show the LM for a new question.

The seed pipelines choose demos in different ways, all behind one interface
(``retrieve(example, k) -> list[dspy.Example]``, best first):

========================  ==================================================================
``random``                a per-question deterministic shuffle (the "random demos" baseline)
``question``              cosine of sentence embeddings of the questions (Dubo-SQL v2)
``masked_question``       the same on question skeletons: schema names → ``<mask>``, values →
                          ``<unk>`` (PET-SQL; reused by RSL-SQL)
``jaccard``               question token-set Jaccard (MageSQL's question baseline)
``skeleton``              token similarity of the draft SQL's skeleton to each gold skeleton
``pqgram``                pq-gram similarity of node-type trees, draft vs gold (MageSQL Struct-Tree)
``graph``                 GNN embedding of SQL graphs (MageSQL Struct-Graph), in
                          :mod:`sqlweave.gnn.retriever`, imported when first asked for
========================  ==================================================================

Every retriever takes the same options (:class:`BaseRetriever`): ``exclude_same_db`` (Dubo-SQL v2
never shows a demo from the question's own database), ``one_per_db`` (Dubo v2's diversity rule: at
most one demo per database), ``same_db_first`` (the question's own database's items before any
other's: for a pool of pairs from several databases, such as a compile's synthesized pairs) and two
leakage guards. The pool must be train data: any example whose
``split`` is not ``"train"`` makes the constructor raise ``ValueError`` (``allow_non_train=True``
opts out, e.g. for a user's own question bank). And ``retrieve`` never returns a pool item with the
query's own ``(db_id, question)``, so scoring a train example against a pool that holds it cannot
show the model its own answer.

The query ``example`` is a ``dspy.Example`` or a mapping with ``question`` and ``db_id``, optional
``evidence``, ``db_path`` and ``draft_sql``. Structure retrievers (``skeleton``, ``pqgram``) compare
``draft_sql`` (a pre-generated SQL, as MageSQL does) with each pool item's ``gold_sql``. When the
example has no (or an empty) ``draft_sql`` they fall back to question-token Jaccard, logged at
INFO; pass ``fallback=None`` to make that an error instead.

Everything expensive (embeddings, masks, skeletons, pq-gram profiles) is computed once in the
constructor; a query is a few numpy operations over the pool. Results are ordered best first with
ties broken by pool order, so the same pool and query always give the same demos.

Per-call demos in DSPy 3.4: ``predictor(**inputs, demos=as_demos(found))``. ``Predict`` pops
``demos`` from the call's keyword arguments (defaulting to ``self.demos``), so demos passed this way
*replace* the predictor's own (compiled) demos for that one call and leave ``predictor.demos``
untouched. The adapter formats a demo as a full user/assistant exchange only if it carries every
field of the signature (empty strings count); :func:`as_demos` fills all of
:class:`~sqlweave.signatures.generation.GenerateSQL`'s, and ``extra_fields`` fills any others.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import dspy
import numpy as np

from sqlweave.demo_choice import pick_demos
from sqlweave.programs.stages.masking import MASK as MASK  # re-exported
from sqlweave.programs.stages.masking import UNK as UNK
from sqlweave.programs.stages.masking import database_phrases
from sqlweave.programs.stages.masking import mask_question as mask_question
from sqlweave.programs.stages.masking import name_phrase as name_phrase
from sqlweave.programs.stages.masking import schema_phrases as schema_phrases
from sqlweave.registry import Registry
from sqlweave.sqlstruct import (
    BagIndex,
    pq_gram_profile,
    question_tokens,
    skeleton_tokens,
    token_ratio,
)

logger = logging.getLogger(__name__)


@runtime_checkable
class DemoRetriever(Protocol):
    """What programs need from a retriever: a name and ``retrieve(example, k)``, best first."""

    name: str

    def retrieve(self, example: Any, k: int) -> list[dspy.Example]:
        """Up to ``k`` pool examples to show as demos for ``example``, best first."""
        ...


# --- fields of examples and mappings ------------------------------------------------------------


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """A field of a dspy.Example, a mapping or a plain object; ``default`` when absent or None."""
    if isinstance(obj, Mapping):
        value = obj.get(key, default)
    elif isinstance(obj, dspy.Example):
        value = obj.get(key, default)
    else:
        value = getattr(obj, key, default)
    return default if value is None else value


def _question_key(obj: Any) -> tuple[str, str]:
    return (str(_get(obj, "db_id", "")), str(_get(obj, "question", "")).strip().lower())


# --- the shared base class ----------------------------------------------------------------------


class BaseRetriever:
    """Pool bookkeeping, leakage guards and the filtered top-k walk every retriever shares.

    Subclasses implement :meth:`scores` (one float per pool item, higher is better) and may
    override :meth:`ranking` when a lazy, exact best-first order is cheaper than scoring all.
    """

    name = "base"

    def __init__(
        self,
        pool: Iterable[Any],
        *,
        exclude_same_db: bool = False,
        one_per_db: bool = False,
        allow_non_train: bool = False,
        same_db_first: bool = False,
    ) -> None:
        self.pool: list[Any] = list(pool)
        self.exclude_same_db = exclude_same_db
        self.one_per_db = one_per_db
        self.same_db_first = same_db_first
        self.allow_non_train = allow_non_train
        if not allow_non_train:
            bad = [ex for ex in self.pool if _get(ex, "split") != "train"]
            if bad:
                first = bad[0]
                raise ValueError(
                    f"{len(bad)} pool example(s) are not train data (e.g. split="
                    f"{_get(first, 'split')!r}, {_get(first, 'db_id')}: "
                    f"{_get(first, 'question')!r}); demos must come from train to keep dev/test "
                    "scores honest (pass allow_non_train=True to use another pool on purpose)"
                )
        self._db_ids = [str(_get(ex, "db_id", "")) for ex in self.pool]
        self._keys = [_question_key(ex) for ex in self.pool]

    def __len__(self) -> int:
        return len(self.pool)

    def __repr__(self) -> str:
        flags = [f for f in ("exclude_same_db", "one_per_db", "same_db_first") if getattr(self, f)]
        extra = f", {', '.join(flags)}" if flags else ""
        return f"{type(self).__name__}(pool={len(self.pool)}{extra})"

    def scores(self, example: Any) -> np.ndarray:
        """One score per pool item for ``example`` (higher = better demo), float64."""
        raise NotImplementedError

    def ranking(self, example: Any) -> Iterable[int]:
        """Pool positions best first, ties in pool order (a stable sort of :meth:`scores`)."""
        scores = np.asarray(self.scores(example), dtype=np.float64)
        return np.argsort(-scores, kind="stable").tolist()

    def retrieve(self, example: Any, k: int) -> list[dspy.Example]:
        """The ``k`` best pool examples for ``example`` after the filters (fewer if the pool runs out).

        Skips the query itself (same db_id and question), the query's database when
        ``exclude_same_db``, and any database already used when ``one_per_db``. With
        ``same_db_first`` the pool items of the query's own database come first (in their
        ranking order), then the rest: a pool of pairs from several databases (a compile's own
        synthesized pairs) shows the question's own tables and values before any other's.
        """
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        if k == 0 or not self.pool:
            return []
        own_key = _question_key(example)
        chosen = pick_demos(
            self.ranking(example),
            self._db_ids.__getitem__,
            own_key[0],
            k,
            is_query=lambda i: self._keys[i] == own_key,
            exclude_same_db=self.exclude_same_db,
            one_per_db=self.one_per_db,
            same_db_first=self.same_db_first,
        )
        return [self.pool[i] for i in chosen]


def _log_build(retriever: BaseRetriever, started: float) -> None:
    logger.info(
        "built %s retriever over %d examples in %.2fs",
        retriever.name,
        len(retriever.pool),
        time.perf_counter() - started,
    )


# --- random ---------------------------------------------------------------------------------------


def _stable_hash(text: str) -> int:
    """A process-independent 64-bit hash (Python's ``hash`` of str is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


class RandomRetriever(BaseRetriever):
    """Random demos, but the same ones for the same question on every run (``seed`` ⊕ question)."""

    name = "random"

    def __init__(self, pool: Iterable[Any], seed: int = 0, **options: Any) -> None:
        super().__init__(pool, **options)
        self.seed = seed

    def _rng(self, example: Any) -> np.random.Generator:
        question = str(_get(example, "question", "")).strip().lower()
        return np.random.default_rng([self.seed, _stable_hash(question)])

    def scores(self, example: Any) -> np.ndarray:
        """A random permutation of ``0..n-1`` as scores (distinct, so the order is the shuffle)."""
        return self._rng(example).permutation(len(self.pool)).astype(np.float64)


# --- question embeddings --------------------------------------------------------------------------


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


class _EmbeddingRetriever(BaseRetriever):
    """Cosine similarity between an embedded query text and the embedded pool texts."""

    def __init__(self, pool: Iterable[Any], encoder: Any = None, **options: Any) -> None:
        super().__init__(pool, **options)
        if encoder is None:
            from sqlweave.embeddings import default_encoder

            encoder = default_encoder()
        self.encoder = encoder
        started = time.perf_counter()
        texts = [self.text(ex) for ex in self.pool]
        self.matrix = _unit_rows(self.encoder.encode(texts)) if texts else np.zeros((0, 1))
        _log_build(self, started)

    def text(self, example: Any) -> str:
        """The text embedded for an example (pool item or query)."""
        raise NotImplementedError

    def scores(self, example: Any) -> np.ndarray:
        """Cosine similarity of the query's text with every pool text."""
        if not self.pool:
            return np.zeros(0)
        query = _unit_rows(self.encoder.encode([self.text(example)]))[0]
        return (self.matrix @ query).astype(np.float64)


class QuestionRetriever(_EmbeddingRetriever):
    """Nearest train questions by sentence embedding (Dubo-SQL v2 retrieval; add ``one_per_db``).

    ``encoder`` is anything with ``encode(texts) -> array`` (default: the offline
    all-MiniLM-L6-v2 of :mod:`sqlweave.embeddings`); rows are re-normalised, so cosine is a dot.
    """

    name = "question"

    def text(self, example: Any) -> str:
        """The question as written."""
        return str(_get(example, "question", ""))


# --- masked questions (PET-SQL: the masking is sqlweave.programs.stages.masking) ----------------------


def _schema_names_of(example: Any) -> frozenset[tuple[str, ...]]:
    """Maskable phrases of the example's database (:func:`database_phrases`)."""
    target = _get(example, "db_path") or _get(example, "db_id")
    return database_phrases(target, _get(example, "db_id"))


class MaskedQuestionRetriever(_EmbeddingRetriever):
    """PET-SQL demo selection: embed question skeletons, so "How many singers are from France?"
    finds "How many cars are from Japan?" rather than other singer questions.

    Each question (query and pool) is masked against *its own* database's table and column names
    (:func:`mask_question`); the names come from :func:`sqlweave.schema.introspect`, read once per
    database. ``schema_names`` replaces that lookup (a callable example → phrases, for tests or
    non-file databases).
    """

    name = "masked_question"

    def __init__(
        self,
        pool: Iterable[Any],
        encoder: Any = None,
        schema_names: Callable[[Any], Iterable[tuple[str, ...]]] | None = None,
        **options: Any,
    ) -> None:
        self._names_of = schema_names or _schema_names_of
        super().__init__(pool, encoder=encoder, **options)

    def text(self, example: Any) -> str:
        """The masked question (see :func:`mask_question`)."""
        return mask_question(str(_get(example, "question", "")), self._names_of(example))


# --- question tokens --------------------------------------------------------------------------------


class JaccardRetriever(BaseRetriever):
    """Train questions sharing the most content words (:func:`sqlweave.sqlstruct.jaccard`)."""

    name = "jaccard"

    def __init__(self, pool: Iterable[Any], **options: Any) -> None:
        super().__init__(pool, **options)
        started = time.perf_counter()
        self._index = BagIndex(
            [dict.fromkeys(question_tokens(str(_get(ex, "question", ""))), 1) for ex in self.pool]
        )
        _log_build(self, started)

    def scores(self, example: Any) -> np.ndarray:
        """Jaccard of the query's question tokens with every pool question's tokens."""
        tokens = question_tokens(str(_get(example, "question", "")))
        return self._index.jaccard(dict.fromkeys(tokens, 1))


# --- draft-SQL structure --------------------------------------------------------------------------


class _StructureRetriever(BaseRetriever):
    """Shared handling of the draft SQL and of its absence."""

    def __init__(
        self,
        pool: Iterable[Any],
        *,
        dialect: str = "sqlite",
        fallback: str | None = "jaccard",
        **options: Any,
    ) -> None:
        if fallback not in (None, "jaccard"):
            raise ValueError(f"fallback must be 'jaccard' or None, got {fallback!r}")
        super().__init__(pool, **options)
        self.dialect = dialect
        self.fallback = fallback
        self._fallback: JaccardRetriever | None = None

    def _draft(self, example: Any) -> str | None:
        draft = str(_get(example, "draft_sql", "")).strip()
        if draft:
            return draft
        if self.fallback is None:
            raise ValueError(
                f"the {self.name} retriever compares SQL structure and needs example.draft_sql "
                "(a pre-generated query); none was given (use fallback='jaccard' to rank by "
                "question words instead)"
            )
        return None

    def _fallback_retriever(self) -> JaccardRetriever:
        if self._fallback is None:
            logger.info("%s retriever: no draft SQL, ranking by question Jaccard", self.name)
            self._fallback = JaccardRetriever(self.pool, allow_non_train=True)
        return self._fallback


class SkeletonRetriever(_StructureRetriever):
    """Gold SQL whose skeleton is closest to the draft's (:func:`sqlweave.sqlstruct.skeleton_similarity`).

    Exact difflib ratios are computed lazily: pool skeletons are deduplicated, bounded above by
    the bag-overlap bound (difflib's ``quick_ratio``, vectorised with a :class:`BagIndex`), and
    only as many are scored exactly as the top-k walk needs.
    """

    name = "skeleton"

    def __init__(self, pool: Iterable[Any], **options: Any) -> None:
        super().__init__(pool, **options)
        started = time.perf_counter()
        groups: dict[tuple[str, ...], list[int]] = {}
        for i, ex in enumerate(self.pool):
            tokens = skeleton_tokens(str(_get(ex, "gold_sql", "")), self.dialect)
            groups.setdefault(tokens, []).append(i)
        self._skeletons = list(groups)
        self._members = [np.asarray(groups[s], dtype=np.int64) for s in self._skeletons]
        self._index = BagIndex([Counter(s) for s in self._skeletons])
        _log_build(self, started)
        logger.debug("%d distinct skeletons in a pool of %d", len(self._skeletons), len(self.pool))

    def _query_tokens(self, example: Any) -> tuple[str, ...] | None:
        draft = self._draft(example)
        return None if draft is None else skeleton_tokens(draft, self.dialect)

    def scores(self, example: Any) -> np.ndarray:
        """Skeleton similarity of the draft with every pool item (exact; slower than ranking)."""
        tokens = self._query_tokens(example)
        if tokens is None:
            return self._fallback_retriever().scores(example)
        out = np.zeros(len(self.pool))
        for skel, members in zip(self._skeletons, self._members, strict=True):
            out[members] = token_ratio(tokens, skel)
        return out

    def ranking(self, example: Any) -> Iterator[int]:
        """Pool positions best first, scoring distinct skeletons only while they can still win."""
        tokens = self._query_tokens(example)
        if tokens is None:
            yield from self._fallback_retriever().ranking(example)
            return
        bounds = self._index.dice(Counter(tokens))
        order = np.argsort(-bounds, kind="stable")
        heap: list[tuple[float, int]] = []  # (-exact score, skeleton id)
        pos = 0
        while pos < len(order) or heap:
            next_bound = bounds[order[pos]] if pos < len(order) else -np.inf
            if heap and -heap[0][0] > next_bound:
                # Nothing unscored can reach this score: emit every skeleton tied at it, merged in
                # pool order so ties break exactly as a full stable sort would.
                best = heap[0][0]
                tied = []
                while heap and heap[0][0] == best:
                    tied.append(self._members[heapq.heappop(heap)[1]])
                yield from np.sort(np.concatenate(tied)).tolist()
                continue
            sid = int(order[pos])
            pos += 1
            heapq.heappush(heap, (-token_ratio(tokens, self._skeletons[sid]), sid))


class PQGramRetriever(_StructureRetriever):
    """MageSQL's Struct-Tree selector: smallest pq-gram distance between draft and gold SQL trees."""

    name = "pqgram"

    def __init__(self, pool: Iterable[Any], p: int = 2, q: int = 3, **options: Any) -> None:
        super().__init__(pool, **options)
        self.p, self.q = p, q
        started = time.perf_counter()
        self._index = BagIndex(
            [pq_gram_profile(str(_get(ex, "gold_sql", "")), p, q, self.dialect) for ex in self.pool]
        )
        _log_build(self, started)

    def scores(self, example: Any) -> np.ndarray:
        """pq-gram similarity (1 − distance) of the draft with every pool item's gold SQL."""
        draft = self._draft(example)
        if draft is None:
            return self._fallback_retriever().scores(example)
        return self._index.dice(pq_gram_profile(draft, self.p, self.q, self.dialect))


# --- factory --------------------------------------------------------------------------------------


def _unknown(name: str) -> ValueError:
    return ValueError(f"unknown retriever {name!r}; choose one of {', '.join(RETRIEVERS)}")


def _missing(name: str, err: Exception) -> ImportError:
    """A retriever whose module did not import (``graph`` without the GNN stack)."""
    others = ", ".join(n for n in RETRIEVERS if n != name)
    return ImportError(
        f"the {name!r} retriever needs {RETRIEVERS.where(name)}, which could not be "
        f"imported ({err}); choose another of {others}"
    )


#: name -> retriever class, in the one :class:`Registry` of programs, stages and optimizers
#: (``graph`` as ``module:Class``, imported on first use, so it needs the GNN stack only when
#: asked for; a user's class is added with ``RETRIEVERS.register``). A retriever takes the pool
#: and options (module docstring) and follows :class:`DemoRetriever`.
RETRIEVERS = Registry(
    "retriever",
    {
        "random": RandomRetriever,
        "question": QuestionRetriever,
        "masked_question": MaskedQuestionRetriever,
        "jaccard": JaccardRetriever,
        "skeleton": SkeletonRetriever,
        "pqgram": PQGramRetriever,
        "graph": "sqlweave.gnn.retriever:GraphRetriever",
    },
    unknown=_unknown,
    missing=_missing,
)
#: The built-in retriever names (``RETRIEVERS`` also holds those registered later).
RETRIEVER_NAMES = tuple(RETRIEVERS)


def make_retriever(name: str, pool: Iterable[Any], **options: Any) -> DemoRetriever:
    """Build the retriever called ``name`` over ``pool`` (one of :data:`RETRIEVERS`)."""
    return RETRIEVERS.load(name)(pool, **options)


# --- retrieved examples as demos ------------------------------------------------------------------

GENERATE_SQL_INPUTS = ("dialect", "db_schema", "question", "evidence")


def as_demos(
    examples: Sequence[Any],
    dialect: str = "sqlite",
    schema_text: Callable[[Any], str] | None = None,
    extra_fields: Mapping[str, str] | None = None,
) -> list[dspy.Example]:
    """Turn retrieved pool items into demos for :class:`~sqlweave.signatures.generation.GenerateSQL`.

    Each demo has ``dialect``, ``db_schema``, ``question``, ``evidence`` and ``sql`` (the gold SQL).
    ``schema_text(example)`` renders the demo's own schema (it gets the pool example, which has
    ``db_id`` and ``db_path``); without it the schema is empty, i.e. PET-style question/SQL pairs.
    ``extra_fields`` adds constant fields a richer signature needs (``{"hints": ""}`` for
    ``GenerateSQLWithHints``) so the adapter still formats the demos as complete examples.
    Pass the result per call: ``predictor(..., demos=as_demos(found))``.
    """
    demos = []
    for ex in examples:
        fields = {
            "dialect": dialect,
            "db_schema": schema_text(ex) if schema_text is not None else "",
            "question": str(_get(ex, "question", "")),
            "evidence": str(_get(ex, "evidence", "")),
            "sql": str(_get(ex, "gold_sql", "")),
            **dict(extra_fields or {}),
        }
        inputs = [k for k in fields if k != "sql"]
        demos.append(dspy.Example(**fields).with_inputs(*inputs))
    return demos


__all__ = [
    "MASK",
    "RETRIEVERS",
    "RETRIEVER_NAMES",
    "UNK",
    "BaseRetriever",
    "DemoRetriever",
    "JaccardRetriever",
    "MaskedQuestionRetriever",
    "PQGramRetriever",
    "QuestionRetriever",
    "RandomRetriever",
    "SkeletonRetriever",
    "as_demos",
    "make_retriever",
    "mask_question",
    "name_phrase",
    "schema_phrases",
]
