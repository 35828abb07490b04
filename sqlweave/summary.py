"""What a run's evaluation records add up to: EX with intervals, per difficulty, usage, oracle EX,
failures outside the SQL, and the paired comparison of two runs.

Pure functions over records (the dicts :func:`sqlweave.evaluate.evaluate` writes), so a finished
run's file can be summarised again, or compared with another, without running anything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from sqlweave.data import BIRD_LEVELS, SPIDER_LEVELS
from sqlweave.stats import bootstrap_ci, outcomes_by_id, paired


def _level_order(level: str) -> tuple[int, str]:
    known = (*SPIDER_LEVELS, *BIRD_LEVELS)
    return (known.index(level), level) if level in known else (len(known), level)


def _interval(outcomes: Sequence[bool]) -> list[float]:
    ci = bootstrap_ci(outcomes)
    return [ci.low, ci.high]


def compare(
    records: Sequence[dict[str, Any]], baseline: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Paired comparison of a run against a baseline run on the questions both answered:
    ``{"n", "ex", "ex_baseline", "delta", "delta_interval", "only_run", "only_baseline", "p"}``
    (McNemar's exact p-value, paired bootstrap interval of the difference)."""
    result = paired(outcomes_by_id(records), outcomes_by_id(baseline))
    return {
        "n": result.n,
        "ex": result.ex_a,
        "ex_baseline": result.ex_b,
        "delta": result.delta,
        "delta_interval": [result.diff.low, result.diff.high],
        "only_run": result.only_a,
        "only_baseline": result.only_b,
        "p": result.p_value,
    }


def failed_outside_sql(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The questions that failed for a reason outside their SQL: the program raised (an LM error
    other than a dead endpoint, a reply it could not read, a bug). ``{"n", "reasons": {reason:
    count}}``, a reason being the exception's class name, most frequent first. A question whose
    gold query could not be compared either (its database is broken) is counted apart, by
    ``gold_error``."""
    reasons: Counter[str] = Counter(
        str(r.get("error") or "").split(":", 1)[0].strip() or "program"
        for r in records
        if r.get("error_kind") == "program" and r.get("gold_error") is None
    )
    return {"n": sum(reasons.values()), "reasons": dict(reasons.most_common())}


def oracle_hit(record: Mapping[str, Any]) -> bool:
    """Whether the record's answer or any of its candidates is right: its ``oracle`` when
    evaluation wrote one, else read from its ``candidates`` (each with ``correct``). A record
    without candidates counts its answer alone (one candidate: oracle = EX)."""
    if "oracle" in record:
        return bool(record["oracle"])
    candidates = record.get("candidates")
    return bool(record.get("correct")) or any(
        isinstance(c, Mapping) and c.get("correct")
        for c in (candidates if isinstance(candidates, list) else [])
    )


def has_candidates(records: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any record carries its candidates (so oracle EX means something)."""
    return any(isinstance(r.get("candidates"), list) for r in records)


def oracle_ex(records: Sequence[dict[str, Any]]) -> float | None:
    """The share of questions some candidate answered right (the answer itself included,
    :func:`oracle_hit`): what a perfect selector over the same candidates would score. None
    when no record has candidates."""
    if not records or not has_candidates(records):
        return None
    return sum(oracle_hit(r) for r in records) / len(records)


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """EX overall and per difficulty (each with a 95% bootstrap ``interval``), plus mean and total
    usage, from evaluation records; ``failed`` counts the questions that failed for reasons
    outside their SQL (:func:`failed_outside_sql`). When records carry candidates, ``oracle_ex``
    (:func:`oracle_ex`) and ``selection_gap`` (oracle EX minus EX: what selection loses)."""
    n = len(records)
    correct = sum(bool(r.get("correct")) for r in records)
    levels: dict[str, list[bool]] = {}
    for r in records:
        levels.setdefault(str(r.get("difficulty") or "unknown"), []).append(bool(r.get("correct")))
    by_difficulty = {
        level: {"ex": sum(v) / len(v), "n": len(v), "interval": _interval(v)}
        for level, v in sorted(levels.items(), key=lambda kv: _level_order(kv[0]))
    }
    totals: dict[str, float] = {"wall_seconds": sum(float(r.get("seconds") or 0) for r in records)}
    for r in records:
        usage = r.get("usage")
        for key, value in (usage if isinstance(usage, dict) else {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                totals[key] = totals.get(key, 0) + value
    oracle = oracle_ex(records)
    judged = [r for r in records if isinstance(r.get("confidence"), int | float)]
    if judged:
        from sqlweave.confidence import confidence_figures

        confidence = confidence_figures(
            [float(r["confidence"]) for r in judged], [bool(r.get("correct")) for r in judged]
        )
    return {
        "ex": correct / n if n else 0.0,
        "interval": _interval([bool(r.get("correct")) for r in records]),
        **(
            {"oracle_ex": oracle, "selection_gap": oracle - correct / n}
            if oracle is not None and n
            else {}
        ),
        "n": n,
        "errors": sum(r.get("error") is not None for r in records),
        "failed": failed_outside_sql(records),
        "by_difficulty": by_difficulty,
        **({"confidence": confidence} if judged else {}),
        "usage": {k: v / n for k, v in totals.items()} if n else {},
        "usage_total": totals,
        "records": list(records),
    }
