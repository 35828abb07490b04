"""``sqlweave gnn``: the graph retriever's own commands (:mod:`sqlweave.gnn.cli`), passed through."""

from __future__ import annotations

import typer

from sqlweave.cli.common import fail
from sqlweave.cli.root import HELP, app


@app.command(
    "gnn",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def gnn(ctx: typer.Context) -> None:
    """Graph retriever commands: train, retrieve (sqlweave gnn -h)."""
    try:
        from sqlweave.gnn.cli import app as gnn_app
    except Exception as err:  # any import failure must not break the rest of the CLI
        fail(f"the gnn commands are not available: {type(err).__name__}: {err}")
    command = typer.main.get_command(gnn_app)
    command.main(
        args=list(ctx.args),
        prog_name="sqlweave gnn",
        standalone_mode=True,
        help_option_names=HELP["help_option_names"],  # -h there too; subcommands inherit it
    )
