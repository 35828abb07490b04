"""The ``sqlweave`` Typer app and its root options (``--version``, ``-q``, ``-v``); each command
registers itself on :data:`app` from its own module."""

from __future__ import annotations

from typing import Annotated

import typer

HELP = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    context_settings=HELP,
    rich_markup_mode=None,
    help="Text-to-SQL pipelines from the literature as compilable DSPy programs.",
)
models_app = typer.Typer(
    no_args_is_help=True, context_settings=HELP, help="Local model weights: list and fetch."
)
app.add_typer(models_app, name="models")

#: The whole run's verbosity, from the root options (-q/-v before the command).
VERBOSITY = {"level": 0}


def _version(value: bool) -> None:
    if value:
        from sqlweave import __version__

        typer.echo(f"sqlweave {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="print the version"),
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="results and errors only, no progress bars")
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="details: every library's log lines")
    ] = False,
) -> None:
    """Text-to-SQL pipelines from the literature as compilable DSPy programs."""
    VERBOSITY["level"] = 1 if verbose else -1 if quiet else 0
