"""Statistics for EX claims: bootstrap intervals and paired McNemar tests.

On a few hundred questions one question moves EX by half a point and a two-point gap is noise, so
every figure sqlweave reports carries a 95% interval, and every comparison of two programs on the
same questions carries the paired difference and McNemar's exact p-value. McNemar looks only at
the *discordant* questions (one program right, the other wrong): that is the test that matches a
paired design, and far more sensitive than comparing two independent intervals.

Pure functions over lists of booleans; no numpy needed, deterministic for a given seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "Interval",
    "PairedComparison",
    "bootstrap_ci",
    "mcnemar_exact",
    "paired",
    "outcomes_by_id",
]


@dataclass(frozen=True)
class Interval:
    """A proportion with its bootstrap percentile interval (all three in [0, 1])."""

    estimate: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{100 * self.estimate:.1f} [{100 * self.low:.1f}, {100 * self.high:.1f}]"


def bootstrap_ci(
    outcomes: Sequence[bool | int | float],
    *,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Interval:
    """Mean of ``outcomes`` with a percentile bootstrap interval.

    ``outcomes`` are per-question scores (True/False or 0/1). With no outcomes the estimate and
    the interval are 0 and ``n`` is 0, so an empty run never raises in a report.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), not {level!r}")
    if resamples < 1:
        raise ValueError(f"resamples must be positive, not {resamples!r}")
    values = [float(v) for v in outcomes]
    n = len(values)
    if n == 0:
        return Interval(0.0, 0.0, 0.0, 0)
    mean = sum(values) / n
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    tail = (1 - level) / 2
    low = means[max(0, math.floor(tail * resamples))]
    high = means[min(resamples - 1, math.ceil((1 - tail) * resamples) - 1)]
    return Interval(mean, low, high, n)


def cluster_bootstrap(
    values: Sequence[float],
    clusters: Sequence[Hashable],
    *,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Mean of ``values`` with a percentile interval from resampling whole ``clusters`` (e.g.
    databases): questions on one database are not independent, so the interval is wider than
    :func:`bootstrap_ci`'s per-question one. Returns ``(mean, low, high)``."""
    import numpy as np

    if len(values) != len(clusters):
        raise ValueError("values and clusters differ in length")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), not {level!r}")
    if resamples < 1:
        raise ValueError(f"resamples must be positive, not {resamples!r}")
    if not values:
        return 0.0, 0.0, 0.0
    by: dict[Hashable, list[float]] = {}
    for v, c in zip(values, clusters, strict=True):
        by.setdefault(c, []).append(float(v))
    sums = np.array([sum(g) for g in by.values()])
    sizes = np.array([len(g) for g in by.values()])
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(sums), size=(resamples, len(sums)))
    means = sums[picks].sum(axis=1) / sizes[picks].sum(axis=1)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(np.mean(values)), float(low), float(high)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` and ``c`` discordant pairs.

    ``b`` counts questions only the first program got right, ``c`` those only the second got
    right. Under the null each discordant pair is a fair coin, so the p-value is the two-sided
    binomial tail of ``min(b, c)`` in ``b + c`` trials (1.0 when there is no discordant pair).
    """
    if b < 0 or c < 0:
        raise ValueError(f"counts must be non-negative, not {b!r} and {c!r}")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class PairedComparison:
    """Program A against program B on the questions both answered."""

    n: int
    ex_a: float
    ex_b: float
    only_a: int
    only_b: int
    p_value: float
    diff: Interval

    @property
    def delta(self) -> float:
        """EX of A minus EX of B, in [−1, 1]."""
        return self.ex_a - self.ex_b

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["delta"] = self.delta
        return out


def paired(
    a: Mapping[str, bool],
    b: Mapping[str, bool],
    *,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> PairedComparison:
    """Compare two runs keyed by question id, on the ids they share.

    The interval is a paired bootstrap of the per-question difference; the p-value is McNemar's
    exact test on the discordant questions.
    """
    shared = sorted(set(a) & set(b))
    if not shared:
        raise ValueError("the two runs share no question id; nothing to compare")
    xa = [bool(a[q]) for q in shared]
    xb = [bool(b[q]) for q in shared]
    only_a = sum(x and not y for x, y in zip(xa, xb, strict=True))
    only_b = sum(y and not x for x, y in zip(xa, xb, strict=True))
    diffs = [int(x) - int(y) for x, y in zip(xa, xb, strict=True)]
    n = len(shared)
    return PairedComparison(
        n=n,
        ex_a=sum(xa) / n,
        ex_b=sum(xb) / n,
        only_a=only_a,
        only_b=only_b,
        p_value=mcnemar_exact(only_a, only_b),
        diff=bootstrap_ci(diffs, level=level, resamples=resamples, seed=seed),
    )


def outcomes_by_id(records: Sequence[Mapping[str, Any]]) -> dict[str, bool]:
    """``{question_id: correct}`` from evaluation records (the JSONL that ``evaluate`` writes)."""
    return {str(r["question_id"]): bool(r.get("correct")) for r in records}
