"""Per-question demos: a program that picks, for each question, the demos of its nearest train
questions (the ``knn`` optimizer's result).

Below both :mod:`~sqlweave.optimizers.compile`, which builds such a program, and
:mod:`~sqlweave.optimizers.artifact`, which rebuilds it from a saved pool, so neither imports
the other to do so.
"""

from __future__ import annotations

import types
from typing import Any

import dspy

from sqlweave.programs import SQLProgram


def _knn_vectorizer() -> dspy.Embedder:
    from sqlweave.embeddings import embed

    return dspy.Embedder(embed)


def attach_knn(program: SQLProgram, pool: list[dict[str, Any]], k: int) -> SQLProgram:
    """Make ``program`` pick its demos per call: the ``k`` train questions nearest the question.

    ``pool`` items are ``{"question": str, "demos": {predictor name: demo dict}}``. This is what
    ``dspy.KNNFewShot`` does (DSPy's ``KNN`` retriever, then labeled demos on a fresh copy per
    call), without its per-call BootstrapFewShot, which prints on every call and would put the
    same raw example on every predictor. Only the question is embedded, at train and call time
    alike. The pool is kept on the program (``knn_pool``) so that an artefact can store it.
    """
    from dspy.predict.knn import KNN

    inner = program.deepcopy()
    examples = [
        dspy.Example(question=item["question"], demos=item["demos"]).with_inputs("question")
        for item in pool
    ]
    retriever = (
        KNN(min(k, len(examples)), examples, vectorizer=_knn_vectorizer()) if examples else None
    )

    def forward(self: SQLProgram, question: str, *args: Any, **kwargs: Any) -> dspy.Prediction:
        call = inner.deepcopy()
        if retriever is not None:
            nearest = retriever(question=question)
            for name, predictor in call.named_predictors():
                predictor.demos = [
                    dspy.Example(**item.demos[name]) for item in nearest if name in item.demos
                ]
        return call(question, *args, **kwargs)

    program.forward = types.MethodType(forward, program)
    program.knn_pool = {"k": k, "pool": pool}
    return program


__all__ = ["attach_knn"]
