"""Recorded runs: one program on one named slice, its records and the summary beside them.

A run is a JSONL of per-question records (``evaluate`` writes it, resumably) and a JSON summary
beside it. This module holds what every figure quoted from such a run depends on, so the lab's
scripts (``experiments/protocol.py`` and the scripts that read its folder) and the tests share
one definition: the file names, the identity a resume is checked against, the provenance a
summary keeps, the summary with its paired comparisons, and the markdown table of a folder.
Everything takes the folder it reads, so nothing here knows where the lab keeps its results.
"""

from __future__ import annotations

import json
from inspect import Parameter, signature
from pathlib import Path
from typing import Any

PROVENANCE = ("n_threads", "wall_seconds_this_invocation", "commit", "finished")
"""What a summary says of the invocation that made its records."""
LATER_PROVENANCE = ("response_cache",)
"""Provenance fields newer than the summaries of older runs: carried when there, never required."""


def model_tag(model: str) -> str:
    """A model's short name in the lab's file names (``local:qwen2.5-coder-1.5b`` -> ``1.5b``).

    Not :func:`sqlweave.cli.runs.model_tag` (the CLI's ``qwen2.5-coder-1.5b``): every committed
    record under ``experiments/results/`` is named with this one, so it cannot change."""
    return model.split(":")[-1].replace("/", "_").replace("qwen2.5-coder-", "")


def stem(program: str, config: str, slice_name: str, model: str) -> str:
    """A run's file stem: ``<program>[__<config>]__<slice>__<model tag>``."""
    name = program if config in ("", "full", "default") else f"{program}__{config}"
    return f"{name}__{slice_name}__{model_tag(model)}"


def lm_options(n_threads: int | None, no_cache: bool) -> dict[str, Any]:
    """The options a run hands ``sqlweave.lm.configure``: ``cache=False`` only when asked, so a
    cold run asks the model every time (fresh samples, cold timings) and a default run keeps
    the engine's own default."""
    options: dict[str, Any] = {}
    if n_threads:
        options["n_threads"] = n_threads
    if no_cache:
        options["cache"] = False
    return options


def run_identity(program: str, switches: dict[str, Any], slice_name: str, model: str) -> dict:
    """What a run's records were made by, written beside its JSONL: a resume under other
    switches (a program's defaults changed, another ``--set``) raises instead of mixing runs.
    ``evaluate`` writes and compares it as JSON (a value JSON cannot hold becomes its text)."""
    return {"program": program, "switches": switches, "slice": slice_name, "model": model}


def _added_at_default(identity: dict[str, Any], recorded: dict[str, Any], cls: type) -> list[str]:
    """The switches of ``identity`` that ``recorded`` lacks and that sit at ``cls``'s default."""
    params = signature(cls.__init__).parameters
    legacy = getattr(cls, "LEGACY_SWITCHES", {})
    return [
        name
        for name, value in identity["switches"].items()
        if name not in recorded["switches"]
        and name not in legacy
        and name in params
        and params[name].default is not Parameter.empty
        and value == params[name].default
    ]


def resumable_identity(
    identity: dict[str, Any], jsonl: Path, program_cls: type | None
) -> dict[str, Any]:
    """``identity``, less the switches added to the program since ``jsonl``'s run was recorded
    and left at their default, when that is all that tells the two apart: a new switch's
    default keeps the old behaviour (a program names in ``LEGACY_SWITCHES`` the ones whose
    default does not), so resuming or re-reading that run is resuming the same run. Any other
    difference is left for ``evaluate`` to refuse. ``program_cls``: the run's program class
    (the caller looks it up, so this core module knows nothing of the programs), ``None`` when
    the program is unknown."""
    from sqlweave.evaluate import read_run_identity

    recorded = read_run_identity(jsonl) if jsonl.is_file() else None
    if program_cls is None or not recorded or not isinstance(recorded.get("switches"), dict):
        return identity
    added = _added_at_default(identity, recorded, program_cls)
    if not added:
        return identity
    switches = identity["switches"]
    reduced = {**identity, "switches": {k: v for k, v in switches.items() if k not in added}}
    if json.loads(json.dumps(reduced, sort_keys=True, default=str)) != recorded:
        return identity
    print(f"{jsonl.name}: recorded before the switches {', '.join(added)} (at their defaults)")
    return reduced


def provenance(old: dict[str, Any] | None, *, ran_nothing: bool, fresh: dict[str, Any]) -> dict:
    """The run's provenance fields: ``fresh`` when this invocation added records, else the
    summary's own. A resume that found every record done (another script asking for the same
    run) made nothing: stamping it with its own commit, threads and 0.1 s would erase which
    code and settings did make the records."""
    if ran_nothing and old and all(key in old for key in PROVENANCE):
        return {key: old[key] for key in (*PROVENANCE, *LATER_PROVENANCE) if key in old}
    return fresh


def summarize_run(
    jsonl: Path,
    *,
    program: str,
    config: str,
    switches: dict,
    slice_name: str,
    model: str,
    uncompiled: str | None = None,
) -> dict[str, Any]:
    """The JSON summary of one run's records, with the paired comparisons against the naive run
    of the same slice and model in the same folder and, for a compiled run, against the
    uncompiled program's records (``uncompiled``: their file name in that folder; default: the
    program's default run on the slice)."""
    from sqlweave.evaluate import compare, read_records, summarize

    folder = jsonl.parent
    records = read_records(jsonl)
    summary = summarize(records)
    summary.pop("records")
    out: dict[str, Any] = {
        "program": program,
        "config": config,
        "switches": switches,
        "slice": slice_name,
        "model": model,
        "records": jsonl.name,
        **summary,
    }
    naive = folder / f"{stem('naive', '', slice_name, model)}.jsonl"
    if program != "naive" and naive.exists():
        out["vs_naive"] = compare(records, read_records(naive))
    base = folder / (uncompiled or f"{stem(program, '', slice_name, model)}.jsonl")
    if config.startswith("compiled") and base.exists():
        out["uncompiled_records"] = base.name
        out["vs_uncompiled"] = compare(records, read_records(base))
    return out


def _cost(usage: dict[str, Any]) -> str:
    calls = usage.get("calls")
    if calls is None:
        return "— | — | — | —"
    cached = usage.get("cached_calls") or 0.0
    secs = usage.get("wall_seconds")
    tokens = (usage.get("prompt_tokens") or 0) + (usage.get("completion_tokens") or 0)
    return f"{calls:.2f} | {cached:.2f} | {tokens:,.0f} | {secs:.1f}"


def _row(summary: dict[str, Any]) -> str:
    ex = 100 * summary["ex"]
    low, high = (100 * x for x in summary["interval"])
    label = summary["program"] + (
        f" ({summary['config']})" if summary.get("config") not in ("", "full", None) else ""
    )
    cmp = summary.get("vs_naive")
    if cmp:
        lo, hi = (100 * x for x in cmp["delta_interval"])
        delta, p = f"{100 * cmp['delta']:+.1f} [{lo:+.1f}, {hi:+.1f}]", f"{cmp['p']:.2g}"
    else:
        delta, p = "—", "—"
    against = summary.get("vs_uncompiled")
    if against:
        label += f"; vs uncompiled {100 * against['delta']:+.1f}, p {against['p']:.2g}"
    oracle = summary.get("oracle_ex")
    ceiling = f"{100 * oracle:.1f}" if oracle is not None else "–"
    return (
        f"| {label} | {summary['n']} | {ex:.1f} | [{low:.1f}, {high:.1f}] | {ceiling} | {delta} "
        f"| {p} | {_cost(summary.get('usage') or {})} |"
    )


TABLE_PREAMBLE = (
    "Written by `python experiments/protocol.py --table` from the JSON summaries beside it. "
    "EX in %, 95% bootstrap interval; Δ vs naive is paired on the same questions (bootstrap "
    "interval), p is McNemar's exact test. oracle: EX of a perfect selector over the run's "
    "recorded candidates (some candidate right; – where the run recorded none). calls/q, "
    "cached/q (calls DSPy's cache answered from an earlier run), tokens/q (prompt + completion, "
    "cold calls only) and s/q are per question (s/q: wall seconds on this 2-core CPU machine, "
    "which other jobs shared during some runs). A cache hit costs no tokens and ~0 s, so a row "
    "with cached calls understates what a cold run costs."
)


def table(folder: Path) -> str:
    """Markdown tables of a folder's run summaries, one per (slice, model), naive first."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for path in sorted(folder.glob("*.json")):
        if path.name.endswith(".run.json"):  # a run's identity, beside its JSONL
            continue
        summary = json.loads(path.read_text())
        groups.setdefault((summary["slice"], summary["model"]), []).append(summary)
    lines = ["# Protocol results", "", TABLE_PREAMBLE, ""]
    for (slice_name, model), rows in sorted(groups.items()):
        rows.sort(key=lambda s: (s["program"] != "naive", -s["ex"]))
        lines += [
            f"## {slice_name}, {model}",
            "",
            "| program | n | EX | 95% CI | oracle | Δ vs naive [95% CI] | p | calls/q | cached/q "
            "| tokens/q | s/q |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *(_row(s) for s in rows),
            "",
        ]
    return "\n".join(lines)
