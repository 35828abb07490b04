"""How sure an answer is: a calibrated confidence from the candidate pool, and the alternatives.

A program that draws several candidates already holds the evidence a person needs to know
when not to trust its answer: how the candidates' executions split (a 7-of-8 agreement is
right far more often than a 3-of-8 one), whether the answer's string values are stored in the
database (:func:`sqlweave.programs.grounding.is_grounded`), whether it returns nothing or only
NULLs. :func:`evidence` turns a pool into those numbers; a :class:`Calibrator` (a logistic
model, fitted against EX out of fold by database on train-side questions,
``experiments/fit_confidence.py``) turns them into a probability that the answer is right.
The fitted weights ship in ``confidence.json`` beside this module, one model for answers
chosen among several candidates (``pool``) and one for a single candidate (``single``), with
the threshold below which ``ask`` also shows the next distinct readings (chosen on train-side
questions so that the answers above it are right at least 90 % of the time).

No LM call: everything here re-executes the candidates read-only (the database's result cache
makes that cheap right after the program ran them).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from sqlweave.db import Database, ExecutionError, QueryResult

#: The fitted models and threshold (``experiments/fit_confidence.py``).
WEIGHTS_FILE = Path(__file__).with_name("confidence.json")
#: The features :func:`evidence` computes, in the order the models read them.
FEATURES = (
    "agree",
    "margin",
    "ran",
    "log_classes",
    "grounded",
    "grounded_agree",
    "empty",
    "null",
    "one_row",
)
#: Seconds a candidate may run while its pool is judged (the selectors' own limit).
EVIDENCE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Reading:
    """One distinct answer among the candidates: a representative SQL, its first rows and the
    share of candidates that returned it."""

    sql: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    share: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "sql": self.sql,
            "columns": list(self.columns),
            "rows": [list(r) for r in self.rows],
            "share": round(self.share, 3),
        }


@dataclass(frozen=True)
class Assessment:
    """``confidence`` in [0, 1] (None when there was nothing to judge: no SQL), ``low`` when it
    is under the shipped threshold, ``alternatives``: the other readings, most shared first."""

    confidence: float | None
    low: bool
    features: Mapping[str, float] = field(default_factory=dict)
    alternatives: tuple[Reading, ...] = ()


@dataclass(frozen=True)
class Calibrator:
    """A logistic model over :data:`FEATURES`: ``P(right) = sigmoid(bias + w . x)``."""

    weights: Mapping[str, float]
    bias: float

    def probability(self, features: Mapping[str, float]) -> float:
        z = self.bias + sum(self.weights.get(k, 0.0) * float(v) for k, v in features.items())
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))

    def as_dict(self) -> dict[str, Any]:
        return {"bias": self.bias, "weights": dict(self.weights)}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> Calibrator:
        return cls(
            {str(k): float(v) for k, v in payload["weights"].items()}, float(payload["bias"])
        )


@cache
def _packaged() -> dict[str, Any]:
    return json.loads(WEIGHTS_FILE.read_text(encoding="utf-8"))


def packaged_calibrators() -> dict[str, Calibrator]:
    """The shipped models: ``{"pool": ..., "single": ...}``."""
    return {k: Calibrator.from_dict(v) for k, v in _packaged()["models"].items()}


def packaged_threshold() -> float:
    """Below this confidence ``ask`` also prints the next readings (module doc)."""
    return float(_packaged()["threshold"])


def _agree_with(result: QueryResult, groups: Sequence[Any]) -> int | None:
    from sqlweave.programs.voting import equivalent

    for i, g in enumerate(groups):
        if equivalent(result, g.result, ordered=g.ordered) or equivalent(result, g.result):
            return i
    return None


def evidence(
    question: str,
    candidates: Sequence[str],
    sql: str,
    db: Database,
    *,
    timeout_s: float = EVIDENCE_TIMEOUT_S,
) -> tuple[dict[str, float], list[Reading]]:
    """The pool's numbers for the answer ``sql`` (:data:`FEATURES`) and every distinct reading
    of ``candidates`` that runs, the answer's own first.

    ``agree``: the share of candidates whose result equals the answer's; ``margin``: that, less
    the largest share of another result; ``ran``: the share of candidates that ran;
    ``log_classes``: log of 1 + the number of distinct results; ``grounded``: the answer's
    string values are stored in the database; ``grounded_agree``: the share of the grounded
    candidates that agree with the answer; ``empty``, ``null``, ``one_row``: the answer's shape.
    """
    from sqlweave.programs.grounding import ValueLookup, is_grounded
    from sqlweave.programs.voting import execution_groups, ranked_groups

    del question  # the features read the pool and the database, not the wording (yet)
    pool = [c for c in candidates if c] or [sql]
    groups, _ = execution_groups(pool, db, timeout_s=timeout_s)
    answer = db.try_execute(sql, timeout_s=timeout_s)
    n = len(pool)
    lookup = ValueLookup(db)
    ran = sum(len(g.members) for g in groups)
    own = None if isinstance(answer, ExecutionError) else _agree_with(answer, groups)
    agree = len(groups[own].members) / n if own is not None else 0.0
    others = [len(g.members) / n for i, g in enumerate(groups) if i != own]
    grounded_members = {i for g in groups for i in g.members if is_grounded(pool[i], lookup)}
    agreeing = set(groups[own].members) if own is not None else set()
    rows = () if isinstance(answer, ExecutionError) else answer.rows
    features = {
        "agree": agree,
        "margin": agree - max(others, default=0.0),
        "ran": ran / n,
        "log_classes": math.log1p(len(groups)),
        "grounded": float(is_grounded(sql, lookup)),
        "grounded_agree": len(agreeing & grounded_members) / len(grounded_members)
        if grounded_members
        else 0.0,
        "empty": float(not rows),
        "null": float(bool(rows) and all(v is None for r in rows for v in r)),
        "one_row": float(len(rows) == 1),
    }
    readings = [
        Reading(pool[g.first], g.result.columns, g.result.rows[:5], len(g.members) / n)
        for g in ranked_groups(groups)
    ]
    if own is not None:
        mine = groups[own]
        readings.sort(key=lambda r: r.sql != pool[mine.first])
    return features, readings


def assess(
    question: str,
    candidates: Sequence[str],
    sql: str,
    db: Database,
    *,
    calibrators: Mapping[str, Calibrator] | None = None,
    threshold: float | None = None,
    max_alternatives: int = 2,
    recalibration: Mapping[str, float] | None = None,
) -> Assessment:
    """The answer's calibrated confidence and, after it, the other readings (module doc).

    ``candidates``: the pool the program chose among (``[sql]`` for a one-call program, which
    the ``single`` model judges). ``calibrators`` and ``threshold`` default to the shipped ones;
    ``recalibration``: a compile's refit on its validation answers (:func:`recalibrate`).
    """
    if not sql:
        return Assessment(None, True)
    models = calibrators or packaged_calibrators()
    cut = packaged_threshold() if threshold is None else threshold
    features, readings = evidence(question, candidates, sql, db)
    distinct = [c for c in dict.fromkeys(candidates) if c]
    model = models["pool"] if len(distinct) > 1 or len(candidates) > 1 else models["single"]
    confidence = recalibrated(model.probability(features), recalibration)
    alternatives = tuple(readings[1 : 1 + max_alternatives])
    return Assessment(confidence, confidence < cut, features, alternatives)


#: Validation answers a compile needs before it refits the confidence (fewer: the shipped one).
MIN_REFIT = 30


def recalibrate(scores: Sequence[float], labels: Sequence[bool]) -> dict[str, float] | None:
    """Platt scaling of the shipped confidence on a compile's own validation answers:
    ``{"a", "b", "n"}`` for ``sigmoid(a * logit(p) + b)``, or None with fewer than
    :data:`MIN_REFIT` answers or only right (or only wrong) ones."""
    if len(scores) < MIN_REFIT or len(set(labels)) < 2:
        return None
    fitted = fit_calibrator([{"agree": _logit(p)} for p in scores], labels)
    return {"a": fitted.weights["agree"], "b": fitted.bias, "n": float(len(scores))}


def _logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def recalibrated(p: float, params: Mapping[str, float] | None) -> float:
    """``p`` through a compile's :func:`recalibrate` parameters (unchanged without them)."""
    if not params:
        return p
    z = params["a"] * _logit(p) + params["b"]
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


def fit_calibrator(
    rows: Sequence[Mapping[str, float]], labels: Sequence[bool], *, c: float = 1.0
) -> Calibrator:
    """A logistic model on ``rows`` (:data:`FEATURES` dicts) against ``labels`` (right or not);
    ``c``: inverse L2 strength (scikit-learn's ``C``)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    if len(set(labels)) < 2:
        raise ValueError("fitting a calibrator needs right and wrong answers among the labels")
    x = np.array([[float(r.get(k, 0.0)) for k in FEATURES] for r in rows])
    model = LogisticRegression(C=c, max_iter=1000).fit(x, np.array(labels, dtype=int))
    weights = {k: float(w) for k, w in zip(FEATURES, model.coef_[0], strict=True)}
    return Calibrator(weights, float(model.intercept_[0]))


# --- how well a confidence ranks and calibrates (evaluate, the report, the fitting script) ---


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """The probability that a right answer scores above a wrong one (ties count half); NaN
    when every answer is right or every one wrong."""
    import numpy as np
    from scipy.stats import rankdata

    y = np.asarray(labels, dtype=bool)
    pos, neg = int(y.sum()), int((~y).sum())
    if not pos or not neg:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


def calibration_error(scores: Sequence[float], labels: Sequence[bool], bins: int = 10) -> float:
    """Expected calibration error over ``bins`` equal-width bins of the confidence."""
    import numpy as np

    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=float)
    edges = np.linspace(0, 1, bins + 1)
    total = 0.0
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        inside = (s >= lo) & ((s < hi) if hi < 1 else (s <= hi))
        if inside.any():
            total += inside.sum() / len(s) * abs(s[inside].mean() - y[inside].mean())
    return float(total)


def accuracy_at_coverage(scores: Sequence[float], labels: Sequence[bool], coverage: float) -> float:
    """Accuracy of the ``coverage`` share of answers the confidence ranks highest."""
    import numpy as np

    order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")
    k = max(1, round(coverage * len(order)))
    return float(np.asarray(labels, dtype=float)[order[:k]].mean())


def threshold_for(scores: Sequence[float], labels: Sequence[bool], target: float) -> float:
    """The lowest confidence whose answers at or above it are right at least ``target`` of the
    time (1.0 when none is)."""
    import numpy as np

    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=float)
    for t in np.unique(s):  # ascending: the first that reaches the target keeps the most answers
        above = s >= t
        if above.any() and y[above].mean() >= target:
            return float(t)
    return 1.0


def confidence_figures(
    scores: Sequence[float], labels: Sequence[bool], threshold: float | None = None
) -> dict[str, Any]:
    """AUROC, calibration error, accuracy at 50 / 70 / 90 % coverage, and the share kept and
    right at or above ``threshold`` (default: the shipped one), percentages in 0-100."""
    import numpy as np

    cut = packaged_threshold() if threshold is None else threshold
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    if not len(s):
        return {"n": 0}
    above = s >= cut
    area = auroc(s, y)
    return {
        "n": len(s),
        "ex": round(100 * float(y.mean()), 1),
        "auroc": None if math.isnan(area) else round(area, 3),
        "ece": round(calibration_error(s, y), 3),
        "mean_confidence": round(float(s.mean()), 3),
        **{
            f"acc_at_{int(100 * c)}": round(100 * accuracy_at_coverage(s, y, c), 1)
            for c in (0.5, 0.7, 0.9)
        },
        "threshold": round(cut, 3),
        "coverage_above": round(100 * float(above.mean()), 1),
        "precision_above": round(100 * float(y[above].mean()), 1) if above.any() else None,
    }
