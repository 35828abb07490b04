"""Per-question demos: a program that picks, for each question, the demos of its nearest train
questions (the ``knn`` optimizer's result).

Below both :mod:`~sqlweave.optimizers.compile`, which builds such a program, and
:mod:`~sqlweave.optimizers.artifact`, which rebuilds it from a saved pool, so neither imports
the other to do so.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import dspy
import numpy as np

from sqlweave.adapter import AFTER_SCHEMA, SAME_DB_SCHEMA
from sqlweave.programs import SQLProgram


def _knn_vectorizer() -> dspy.Embedder:
    from sqlweave.embeddings import embed

    return dspy.Embedder(embed)


def _query_db_id(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The name of the database a call asks about (``db_id``, the Database's name or the file's
    stem, as :meth:`sqlweave.db.Database.open` names it), or None when the call names none."""
    if kwargs.get("db_id"):
        return str(kwargs["db_id"])
    target = kwargs.get("db", args[0] if args else None) or kwargs.get("db_path")
    if target is None:
        return None
    name = getattr(target, "name", None)
    if isinstance(name, str) and not isinstance(target, Path):
        return name
    text = str(target)
    if "://" in text:
        from sqlweave.programs import resolve_database

        try:
            return resolve_database(text).name
        except Exception:  # noqa: BLE001 - the program itself reports a database it cannot open
            return None
    return Path(text).stem


def nearest_first(
    scores: np.ndarray, db_ids: list[str | None], own_db: str | None, k: int
) -> list[int]:
    """The ``k`` best pool positions: those on the question's own database first, then the rest,
    each group by descending score.

    Within a group the order is ``dspy.KNN``'s (``argsort`` reversed), so a pool with no item of
    the question's database gives exactly the demos ``dspy.KNN`` would. Demos from the same
    database show the tables and values the question is about; on a database the pool never saw
    (Spider dev for a Spider train pool) every item is in the second group.
    """
    order = np.atleast_1d(scores).argsort()[::-1].tolist()
    if own_db is not None:
        order = [i for i in order if db_ids[i] == own_db] + [
            i for i in order if db_ids[i] != own_db
        ]
    return order[:k]


SAME_DB_DEMOS = ("turns", "inline", "full")
"""How a demo of the question's own database is shown (:func:`attach_knn`'s ``same_db``)."""


def _shown(demo: dict[str, Any], same_db: str | None) -> dspy.Example:
    """A pool demo as shown; ``same_db`` is the mode for a demo of the question's own database,
    None for another database's (shown as it is)."""
    if same_db in ("turns", "inline") and "db_schema" in demo:
        demo = {**demo, "db_schema": SAME_DB_SCHEMA}
        if same_db == "inline":
            demo[AFTER_SCHEMA] = True
    return dspy.Example(**demo)


def attach_knn(
    program: SQLProgram, pool: list[dict[str, Any]], k: int, *, same_db: str = "turns"
) -> SQLProgram:
    """Make ``program`` pick its demos per call: the ``k`` train questions nearest the question,
    those on the question's own database first (:func:`nearest_first`).

    ``pool`` items are ``{"question": str, "demos": {predictor name: demo dict}, "db_id": str}``
    (``db_id`` may be missing in artefacts written before it was kept: such items count as
    another database). This is what ``dspy.KNNFewShot`` does (question embeddings compared as
    DSPy's ``KNN`` compares them, then labeled demos on a fresh copy per call), without its
    per-call BootstrapFewShot, which prints on every call and would put the same raw example on
    every predictor, and with the own-database preference a compile over several databases
    needs. Only the question is embedded, at train and call time alike. The pool is kept on the
    program (``knn_pool``) so that an artefact can store it.

    ``same_db``, how a demo of the question's own database is shown (one of
    :data:`SAME_DB_DEMOS`; demos of other databases always keep their schema, since their SQL
    names tables the question's schema does not have):

    - ``"turns"`` (default): a turn before the question's, with :data:`SAME_DB_SCHEMA` as its
      schema instead of the schema again (for a full-schema program the same text k + 1 times:
      four same-database demos on a ten-table schema would quadruple the prompt);
    - ``"inline"``: inside the question's turn, after its schema (:mod:`sqlweave.adapter`), so
      the schema stays the prompt's first tokens and the engine's prefix cache reads it once per
      database: about 3x faster on this CPU, but the model copies demos it reads last more;
    - ``"full"``: a turn with its schema repeated (as before the switch existed).

    Chosen on validation (spider-train-val, 200 questions, 1.5B, ``direct`` with 4 synthesized
    demos of each question's database): turns 70.5, inline 65.0 (−5.5, p 0.035); no demos 74.0.
    """
    if same_db not in SAME_DB_DEMOS:
        raise ValueError(f"same_db must be one of {', '.join(SAME_DB_DEMOS)}, not {same_db!r}")
    inner = program.deepcopy()
    vectorizer = _knn_vectorizer() if pool else None
    # The text dspy.KNN embeds for an example whose one input is the question.
    vectors = (
        vectorizer([f"question: {item['question']}" for item in pool]).astype(np.float32)
        if vectorizer is not None
        else None
    )
    db_ids = [item.get("db_id") for item in pool]

    def forward(self: SQLProgram, question: str, *args: Any, **kwargs: Any) -> dspy.Prediction:
        call = inner.deepcopy()
        if vectors is not None and vectorizer is not None:
            query = vectorizer([f"question: {question}"]).astype(np.float32)
            scores = np.dot(vectors, query.T).squeeze()
            own = _query_db_id(args, kwargs)
            chosen = nearest_first(scores, db_ids, own, k)
            for name, predictor in call.named_predictors():
                predictor.demos = [
                    _shown(pool[i]["demos"][name], same_db if own and db_ids[i] == own else None)
                    for i in chosen
                    if name in pool[i]["demos"]
                ]
        return call(question, *args, **kwargs)

    program.forward = types.MethodType(forward, program)
    program.knn_pool = {"k": k, "pool": pool, "same_db": same_db}
    return program


__all__ = ["SAME_DB_DEMOS", "SAME_DB_SCHEMA", "attach_knn", "nearest_first"]
