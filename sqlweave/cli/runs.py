"""What an evaluation run records and prints: its identity (what a resume compares), default
file names, provenance beside the records, and the summary as text or JSON."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

import typer

logger = logging.getLogger(__name__)


def model_tag(model: str) -> str:
    """A file-name-safe tag for an LM spec: ``local:qwen2.5-coder-1.5b`` -> ``qwen2.5-coder-1.5b``,
    ``gguf:/models/x.gguf`` -> ``x``, ``openai/gpt-4o-mini`` -> ``openai-gpt-4o-mini``."""
    kind, sep, rest = model.partition(":")
    if sep and kind in ("local", "gguf"):
        model = Path(rest).stem if kind == "gguf" else rest
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-.") or "model"


def artifact_digest(path: Path) -> str:
    """A hash of what a compiled program does (its predictors' state and KNN pool), not of its
    provenance: recompiling to the same program (timings differ) is the same run."""
    from sqlweave.optimizers import read_artifact

    payload = read_artifact(path)
    content = {"state": payload["state"], "knn": payload.get("knn")}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


def run_identity(program: str, prog: Any, model: str, api_base: str | None) -> dict[str, Any]:
    """What makes two evaluation runs comparable record by record: the program (a registry
    name and its switches, or a compiled artefact and its content hash), the LM and the EX
    semantics. ``evaluate`` refuses to resume a file written under another identity."""
    identity: dict[str, Any] = {
        "program": prog.meta.program,
        "switches": dict(prog.meta.switches),
        "model": model,
        "semantics": "per-example",
    }
    path = Path(program)
    if path.is_file():
        identity["artifact"] = artifact_digest(path)
    if api_base:
        identity["api_base"] = api_base
    return identity


def source_commit() -> str | None:
    """The git commit of the sqlweave checkout this runs from, or None (an installed package,
    no git): recorded beside evaluation records so a report can say what code made them."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", commit) else None


def record_provenance(out: Path) -> None:
    """Add the commit (and sqlweave's version) to ``<out>.run.json`` beside the run identity
    (``_run``), which stays what a resume compares; a failure here never fails the run."""
    from sqlweave import __version__
    from sqlweave.evaluate import run_identity_path

    path = run_identity_path(out)
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
        payload["provenance"] = {"commit": source_commit(), "sqlweave": __version__}
        path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    except (OSError, ValueError, TypeError, AttributeError):
        logger.debug("could not record provenance beside %s", out, exc_info=True)


def run_stem(program: str, prog: Any, name: str) -> str:
    """The program part of a default output name: the registry name (with a short hash of its
    switches, if any), or the artefact's file name when it differs from its program name."""
    path = Path(program)
    if path.is_file():
        return name if path.stem == name else f"{name}-{path.stem}"
    switches = prog.meta.switches
    if not switches:
        return name
    digest = hashlib.sha256(json.dumps(switches, sort_keys=True).encode()).hexdigest()[:8]
    return f"{name}-set{digest}"


def print_summary(summary: dict[str, Any]) -> None:
    low, high = summary.get("interval") or (summary["ex"], summary["ex"])
    typer.echo(
        f"EX {summary['ex'] * 100:.1f}% [95% CI {low * 100:.1f}, {high * 100:.1f}] "
        f"on {summary['n']} questions"
    )
    if summary.get("oracle_ex") is not None:
        typer.echo(
            f"oracle EX {summary['oracle_ex'] * 100:.1f}% (some candidate right; selection "
            f"gap {summary['selection_gap'] * 100:.1f} points)"
        )
    conf = summary.get("confidence")
    if conf and conf.get("n"):
        auroc = "n/a" if conf.get("auroc") is None else f"{conf['auroc']:.2f}"
        typer.echo(
            f"confidence: AUROC {auroc}, calibration error {conf['ece']:.3f}"
            + (
                f" (a calibrated model on as many answers: {conf['ece_if_calibrated']:.3f})"
                if conf.get("ece_if_calibrated") is not None
                else ""
            )
            + "; right at 50/70/90 "
            f"% coverage {conf['acc_at_50']:.0f}/{conf['acc_at_70']:.0f}/{conf['acc_at_90']:.0f}"
            f"%; {conf['coverage_above']:.0f}% at or above {conf['threshold']:g}"
            + (f", {conf['precision_above']:.0f}% of them right" if conf["precision_above"] else "")
        )
    for level, stats in summary.get("by_difficulty", {}).items():
        lo, hi = stats.get("interval") or (stats["ex"], stats["ex"])
        typer.echo(
            f"  {level:<12} EX {stats['ex'] * 100:5.1f}  [{lo * 100:5.1f}, {hi * 100:5.1f}]"
            f"  (n={stats['n']})"
        )
    usage = summary.get("usage")
    if usage:
        typer.echo(
            "  per question: "
            + ", ".join(
                f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in usage.items()
            )
        )


def summary_json(summary: dict[str, Any], out: Path) -> dict[str, Any]:
    """``evaluate --json``: the summary without its records, EX in percent."""

    def pct(stats: dict[str, Any]) -> dict[str, Any]:
        low, high = stats.get("interval") or (stats["ex"], stats["ex"])
        return {
            "ex_pct": round(100 * stats["ex"], 2),
            "ci95_pct": [round(100 * low, 2), round(100 * high, 2)],
            "n": stats["n"],
        }

    return {
        **pct(summary),
        "by_difficulty": {k: pct(v) for k, v in summary.get("by_difficulty", {}).items()},
        **(
            {
                "oracle_ex_pct": round(100 * summary["oracle_ex"], 2),
                "selection_gap_pct": round(100 * summary["selection_gap"], 2),
            }
            if summary.get("oracle_ex") is not None
            else {}
        ),
        "usage_per_question": summary.get("usage") or {},
        "gold_errors": sum(r.get("gold_error") is not None for r in summary["records"]),
        # what the text prints too: the questions that failed outside their SQL (why the run
        # exits 1) and the confidence figures (AUROC, calibration error, accuracy by coverage)
        "failed": summary.get("failed") or {"n": 0, "reasons": {}},
        **({"confidence": summary["confidence"]} if summary.get("confidence") else {}),
        "records": str(out),
    }
