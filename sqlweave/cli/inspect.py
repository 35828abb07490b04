"""``sqlweave inspect``: what a compiled artefact changed, its switch search, its predictors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from sqlweave.cli.common import fail
from sqlweave.cli.describe import confidence_lines, search_lines, summary_lines
from sqlweave.cli.root import app


@app.command()
def inspect(
    path: Annotated[Path, typer.Argument(help="compiled program .json")],
    full: Annotated[bool, typer.Option(help="print demos in full (schemas included)")] = False,
    json_: Annotated[
        bool, typer.Option("--json", help="print the artefact's provenance as raw JSON")
    ] = False,
) -> None:
    """What compiling changed (switches, demos, instructions: before -> after), then the
    switch search, where the answers' confidence comes from (the shipped model's weights and
    threshold, the compile's refit), and each predictor's instructions and demos. --json: the
    raw provenance."""
    from sqlweave.optimizers import ArtifactError, load_program, read_artifact

    try:
        payload = read_artifact(path)
        program, meta = load_program(path)
    except ArtifactError as err:
        fail(str(err))
    if json_:
        typer.echo(
            json.dumps(
                {"versions": payload.get("versions"), **dataclasses.asdict(meta)},
                indent=2,
                default=str,
            )
        )
        return
    try:
        _describe(program, meta, payload, full)
    except (TypeError, ValueError, AttributeError, KeyError) as err:
        # A hand-edited provenance the loader does not read (details, trials, versions).
        fail(f"{path}: its provenance is malformed ({type(err).__name__}: {err})")


def _describe(program: Any, meta: Any, payload: dict[str, Any], full: bool) -> None:
    for line in summary_lines(program, meta, payload):
        typer.echo(line)
    search = (meta.extra.get("details") or {}).get("search")
    if isinstance(search, dict) and isinstance(search.get("space"), dict):
        typer.secho("\nswitch search", bold=True)
        for line in search_lines(search):
            typer.echo(line)
    typer.secho("\nconfidence", bold=True)
    for line in confidence_lines(meta):
        typer.echo(line)
    for pname, predictor in program.named_predictors():
        typer.secho(f"\n[{pname}]", bold=True)
        typer.echo(f"instructions: {predictor.signature.instructions}")
        typer.echo(f"demos: {len(predictor.demos)}")
        for i, demo in enumerate(predictor.demos, 1):
            if full:
                typer.echo(f"  {i}. " + json.dumps(dict(demo.items()), indent=2, default=str))
            else:
                typer.echo(f"  {i}. {demo.get('question', '')!s} -> {demo.get('sql', '')!s}")
