"""The cost of a big schema: each run on a merged slice paired with the same program's run on the
questions' own databases.

For every ``<program>[__<config>]__<slice>-merged__<model>.jsonl`` in ``results/protocol`` whose
own-database twin (``…__<slice>__<model>.jsonl``; for a config ``<base>-<variant>`` with no twin of
its own, e.g. ``compiled-search-rules-short``, the twin of ``<base>``) exists, prints EX on both, the paired
difference with its interval and McNemar's p, the ratio of EX kept (the issue's target: the best
program keeps >= 90% of its own EX), and prompt tokens per call on both (target: <= 1.5x).

    python experiments/merged_vs_own.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "protocol"
OUT = Path(__file__).resolve().parent / "results" / "schema_filter" / "merged_vs_own.json"


def tokens_per_call(records: list[dict[str, Any]]) -> float:
    """Prompt tokens per cold LM call (cache hits cost none and are left out)."""
    calls = sum(
        float((r.get("usage") or {}).get("calls", 0))
        - float((r.get("usage") or {}).get("cached_calls", 0))
        for r in records
    )
    tokens = sum(float((r.get("usage") or {}).get("prompt_tokens", 0)) for r in records)
    return tokens / calls if calls else 0.0


def own_twin(merged: Path) -> Path | None:
    """The run of the same program and switches on the questions' own databases (module doc)."""
    own = merged.with_name(merged.name.replace("-merged__", "__"))
    if own.exists():
        return own
    parts = own.name.split("__")
    if len(parts) == 4 and "-" in parts[1]:  # program__config__slice__model.jsonl
        parts[1] = parts[1].rsplit("-", 1)[0]
        base = own.with_name("__".join(parts))
        return base if base.exists() else None
    return None


def pairs() -> list[dict[str, Any]]:
    from sqlweave.evaluate import compare, read_records

    rows = []
    for merged in sorted(RESULTS.glob("*-merged__*.jsonl")):
        own = own_twin(merged)
        if own is None:
            continue
        a, b = read_records(merged), read_records(own)
        cmp = compare(a, b)
        rows.append(
            {
                "run": merged.name,
                "own": own.name,
                "n": cmp["n"],
                "ex_merged": 100 * cmp["ex"],
                "ex_own": 100 * cmp["ex_baseline"],
                "delta": 100 * cmp["delta"],
                "delta_interval": [100 * x for x in cmp["delta_interval"]],
                "p": cmp["p"],
                "kept": cmp["ex"] / cmp["ex_baseline"] if cmp["ex_baseline"] else None,
                "tokens_per_call_merged": tokens_per_call(a),
                "tokens_per_call_own": tokens_per_call(b),
                "seconds_per_q_merged": sum(float(r.get("seconds") or 0) for r in a) / len(a),
            }
        )
    return rows


def main() -> None:
    rows = pairs()
    print(
        "| run | n | EX merged | EX own | Δ [95% CI] | p | EX kept | prompt tokens/call merged, own "
        "| s/q merged |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        low, high = r["delta_interval"]
        own_tokens = r["tokens_per_call_own"]
        # an own run answered from DSPy's cache recorded no tokens: no ratio to show
        ratio = f"{r['tokens_per_call_merged'] / own_tokens:.2f}x" if own_tokens else "cached"
        print(
            f"| {r['run'].removesuffix('.jsonl')} | {r['n']} | {r['ex_merged']:.1f} | {r['ex_own']:.1f} "
            f"| {r['delta']:+.1f} [{low:+.1f}, {high:+.1f}] | {r['p']:.2g} | {100 * (r['kept'] or 0):.0f}% "
            f"| {r['tokens_per_call_merged']:.0f}, {own_tokens:.0f} ({ratio}) "
            f"| {r['seconds_per_q_merged']:.1f} |"
        )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"\nwritten {OUT}")


if __name__ == "__main__":
    main()
