"""How sure an answer is: the calibration half (models, threshold, refit, figures).

A program that draws several candidates already holds the evidence a person needs to know
when not to trust its answer: how the candidates' executions split (a 7-of-8 agreement is
right far more often than a 3-of-8 one), whether the answer's string values are stored in the
database (:func:`sqlweave.programs.stages.grounding.is_grounded`), whether it returns nothing or only
NULLs. :func:`sqlweave.programs.stages.confidence.evidence` turns a pool into those numbers; a :class:`Calibrator` (a logistic
model, fitted against EX out of fold by database on train-side questions,
``experiments/fit_confidence.py``) turns them into a probability that the answer is right.
The fitted weights ship in ``confidence.json`` beside this module, one model for answers
chosen among several candidates (``pool``) and one for a single candidate (``single``), with
the threshold below which ``ask`` also shows the next distinct readings (chosen on train-side
questions so that the answers above it are right at least 90 % of the time).

This module reads numbers only (the core knows nothing of programs); judging a pool, which
re-executes its candidates read-only, is :mod:`sqlweave.programs.stages.confidence`.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

#: The fitted models and threshold (``experiments/fit_confidence.py``).
WEIGHTS_FILE = Path(__file__).with_name("confidence.json")
#: How the pool splits and the answer's result (rule 17's features, docs/decisions.md).
POOL_FEATURES = (
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
#: What the answer's SQL and its database look like (rule 20): harder queries over bigger
#: schemas are wrong more often at the same vote.
SHAPE_FEATURES = ("hardness", "tables", "schema_tables")
#: Whether the candidates that agree with the answer wrote its very query (rule 30): two prompts
#: reading different evidence that write the same SQL, against different SQL with equal rows.
TEXT_FEATURES = ("same_sql",)
#: How many candidates the program drew (rule 32): with the cascade, a unanimous pool of the two
#: greedy queries (it stopped) is right far more often than a unanimous pool of eight drawn after
#: they disagreed, and no other feature tells the two apart.
SIZE_FEATURES = ("log_candidates",)
#: How the answer's query matches the question's words (rule 33): the ``ranked`` selector's
#: numbers (:func:`sqlweave.programs.stages.reranker.alignment`), read from the question and
#: the SQL alone.
ALIGN_FEATURES = (
    "align_unparsed",
    "align_has_literal",
    "align_literal_exact",
    "align_literal_case",
    "align_literal_absent",
    "align_number_absent",
    "align_tables",
    "align_tables_unnamed",
    "align_projected_unnamed",
    "align_filtered_unnamed",
    "align_question_covered",
)
#: How probable the model finds its own answer (rule 34), from a local model only
#: (:func:`sqlweave.programs.stages.confidence.likelihood`); not part of :data:`FEATURES`,
#: which the pool alone gives.
LM_FEATURES = ("lm_mean_logprob",)
#: Every feature :func:`sqlweave.programs.stages.confidence.evidence` computes; a model reads
#: those it has weights for.
FEATURES = POOL_FEATURES + SHAPE_FEATURES + TEXT_FEATURES + SIZE_FEATURES + ALIGN_FEATURES


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


def packaged_card() -> dict[str, Any]:
    """The shipped file as stored: its models, threshold and provenance (where each model was
    fitted, on how many answers, its out-of-fold figures); ``inspect`` prints it."""
    return copy.deepcopy(_packaged())  # a copy: the cached file stays as read


def packaged_calibrators() -> dict[str, Calibrator]:
    """The shipped models: ``{"pool": ..., "single": ...}``."""
    return {k: Calibrator.from_dict(v) for k, v in _packaged()["models"].items()}


def packaged_threshold() -> float:
    """Below this confidence ``ask`` also prints the next readings (module doc)."""
    return float(_packaged()["threshold"])


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
    rows: Sequence[Mapping[str, float]],
    labels: Sequence[bool],
    *,
    c: float = 1.0,
    features: Sequence[str] = POOL_FEATURES,
) -> Calibrator:
    """A logistic model on ``rows`` (feature dicts) against ``labels`` (right or not), reading
    ``features``; ``c``: inverse L2 strength (scikit-learn's ``C``)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    if len(set(labels)) < 2:
        raise ValueError("fitting a calibrator needs right and wrong answers among the labels")
    x = np.array([[float(r.get(k, 0.0)) for k in features] for r in rows])
    model = LogisticRegression(C=c, max_iter=1000).fit(x, np.array(labels, dtype=int))
    weights = {k: float(w) for k, w in zip(features, model.coef_[0], strict=True)}
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


def _bin_masks(s: Any, bins: int) -> Any:
    """``bins x answers``: which of ``bins`` equal-width bins of [0, 1] each confidence falls in
    (``[lo, hi)``, the last ``[lo, 1]``; one outside [0, 1] in none). Shared by
    :func:`calibration_error` and :func:`calibration_consistency`, so both bin alike."""
    import numpy as np

    edges = np.linspace(0, 1, bins + 1)
    return np.array(
        [
            (s >= lo) & ((s < hi) if hi < 1 else (s <= hi))
            for lo, hi in zip(edges[:-1], edges[1:], strict=True)
        ]
    )


def calibration_error(scores: Sequence[float], labels: Sequence[bool], bins: int = 10) -> float:
    """Expected calibration error over ``bins`` equal-width bins of the confidence."""
    import numpy as np

    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=float)
    total = 0.0
    for inside in _bin_masks(s, bins):
        if inside.any():
            total += inside.sum() / len(s) * abs(s[inside].mean() - y[inside].mean())
    return float(total)


def calibration_consistency(
    scores: Sequence[float],
    labels: Sequence[bool],
    threshold: float,
    bins: int = 10,
    resamples: int = 2000,
    seed: int = 0,
) -> dict[str, float | None]:
    """What a perfectly calibrated model with these confidences would show on this many answers.

    Each resample draws every answer right with probability equal to its confidence (Bröcker
    and Smith's consistency resampling) and recomputes :func:`calibration_error` and the share
    right at or above ``threshold``. On 200 answers the calibration error of a model that is
    exactly right about its probabilities is far from 0 (on `accurate`'s dev read its median is
    about 0.06), so a figure is read against this floor: ``ece_if_calibrated`` (the median),
    ``ece_p`` (the share of resamples at or above the observed error: small means miscalibrated
    beyond chance), ``precision_if_calibrated`` (the mean confidence at or above the threshold,
    in 0-100) and ``precision_p`` (the share of resamples right at or above the threshold no
    more often than observed)."""
    import numpy as np

    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=float)
    if not len(s):
        return {}
    rng = np.random.default_rng(seed)
    onehot = _bin_masks(s, bins).T.astype(float)  # answers x bins, calibration_error's bins
    counts = onehot.sum(axis=0)
    conf_mean = np.divide(s @ onehot, counts, out=np.zeros(bins), where=counts > 0)
    above = s >= threshold
    simulated, shares = [], []
    step = max(1, 2_000_000 // len(s))  # resamples per chunk: a few MB whatever the size
    for start in range(0, resamples, step):
        draws = (rng.random((min(step, resamples - start), len(s))) < s).astype(float)
        right = np.divide(
            draws @ onehot, counts, out=np.zeros((len(draws), bins)), where=counts > 0
        )
        simulated.append((np.abs(right - conf_mean) * counts / len(s)).sum(axis=1))
        if above.any():
            shares.append(draws[:, above].mean(axis=1))
    simulated_all = np.concatenate(simulated)
    observed = calibration_error(s, y, bins)
    out: dict[str, float | None] = {
        "ece_if_calibrated": round(float(np.median(simulated_all)), 3),
        "ece_p": round(float((simulated_all >= observed - 1e-12).mean()), 3),
        "precision_if_calibrated": None,
        "precision_p": None,
    }
    if above.any():
        right_above = np.concatenate(shares)
        out["precision_if_calibrated"] = round(100 * float(s[above].mean()), 1)
        out["precision_p"] = round(float((right_above <= y[above].mean() + 1e-12).mean()), 3)
    return out


def accuracy_at_coverage(scores: Sequence[float], labels: Sequence[bool], coverage: float) -> float:
    """Accuracy of the ``coverage`` share of answers the confidence ranks highest."""
    import numpy as np

    order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")
    k = max(1, round(coverage * len(order)))
    return float(np.asarray(labels, dtype=float)[order[:k]].mean())


def threshold_for(scores: Sequence[float], labels: Sequence[bool], target: float) -> float:
    """The lowest confidence whose answers at or above it are right at least ``target`` of the
    time (1.0 when none is): :func:`threshold_for_all` on one set."""
    return threshold_for_all([(scores, labels)], target)


def wilson_lower(right: float, n: int, z: float) -> float:
    """The Wilson score interval's lower end for ``right`` successes out of ``n`` at normal
    quantile ``z`` (1.645: one-sided 95 %); ``z`` = 0 gives the share itself, and no answers
    give 1.0 (nothing above a cut is wrong). Wilson rather than the normal approximation: the
    shares here sit near 90 %, where that one is too wide on one side and too narrow on the
    other."""
    if n <= 0:
        return 1.0
    share = right / n
    if z == 0:
        return share
    z2 = z * z
    centre = share + z2 / (2 * n)
    spread = z * math.sqrt(share * (1 - share) / n + z2 / (4 * n * n))
    return (centre - spread) / (1 + z2 / n)


def threshold_for_all(
    sets: Sequence[tuple[Sequence[float], Sequence[bool]]],
    target: float,
    z: Sequence[float] | None = None,
) -> float:
    """The lowest confidence whose answers at or above it are right at least ``target`` of the
    time in **every** ``(scores, labels)`` set (a set with none above counts as right; 1.0 when
    no cut holds everywhere): rule 20 asks it of the decision set and spider-train-val.

    ``z``, one per set, asks instead that the Wilson lower bound at that quantile
    (:func:`wilson_lower`) reach ``target`` there: rule 40 asks the one-sided 95 % bound
    (1.645) of the decision set and the share itself (0) of spider-train-val, so the cut holds
    with confidence on the many answers rather than at the edge."""
    import numpy as np

    arrays = [(np.asarray(s, dtype=float), np.asarray(y, dtype=float)) for s, y in sets]
    quantiles = list(z) if z is not None else [0.0] * len(arrays)
    if len(quantiles) != len(arrays):
        raise ValueError(f"z has {len(quantiles)} values for {len(arrays)} sets")

    def holds(t: float, s: Any, y: Any, q: float) -> bool:
        above = s >= t
        return wilson_lower(float(y[above].sum()), int(above.sum()), q) >= target - 1e-12

    # ascending: the first cut that holds everywhere keeps the most answers
    for t in np.unique(np.concatenate([s for s, _ in arrays])):
        if all(holds(t, s, y, q) for (s, y), q in zip(arrays, quantiles, strict=True)):
            return float(t)
    return 1.0


def confidence_figures(
    scores: Sequence[float], labels: Sequence[bool], threshold: float | None = None
) -> dict[str, Any]:
    """AUROC, calibration error, accuracy at 50 / 70 / 90 % coverage, the share kept and right
    at or above ``threshold`` (default: the shipped one), percentages in 0-100, and what a
    perfectly calibrated model would show on as many answers (:func:`calibration_consistency`)."""
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
        **calibration_consistency(s, y, cut),
    }
