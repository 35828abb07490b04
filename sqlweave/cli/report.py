"""``sqlweave report``: evaluation runs as one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sqlweave.cli.common import fail
from sqlweave.cli.root import app


@app.command()
def report(
    runs: Annotated[
        list[Path], typer.Argument(help="evaluation JSONL files; the first is the baseline")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="HTML file to write")] = Path(
        "report.html"
    ),
    title: Annotated[str, typer.Option(help="page title")] = "sqlweave evaluation report",
    name: Annotated[
        list[str] | None, typer.Option("--name", help="display name per run, in order")
    ] = None,
) -> None:
    """One self-contained HTML page: EX per difficulty and per database, paired differences
    against the first run, error classes (LM failures apart), cost, each run's provenance, and
    a per-question table filtered by gained, lost, all wrong or LM failure."""
    from sqlweave.report import write_report

    try:
        path = write_report(runs, out, title=title, names=name or None)
    except (OSError, ValueError, ImportError) as err:
        fail(str(err))
    typer.echo(f"report: {path}")
