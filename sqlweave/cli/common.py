"""What every command does the same way: fail with one line, set up logging, configure the LM,
read a dataset by name, check an output path before the work starts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NoReturn

import typer

from sqlweave.cli.root import VERBOSITY


def fail(message: str) -> NoReturn:
    """Print ``error: message`` in red on stderr and exit with status 2 (a usage error)."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


def first_line(text: str, limit: int = 300) -> str:
    """The first line of an error message, cut to ``limit`` characters (some LM client errors
    span pages)."""
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def setup_logging(verbose: bool = False, quiet: bool = False) -> int:
    """Set up logging for this run from the command's and the root's options; the verbosity
    (-1 quiet, 0 normal, 1 verbose)."""
    from sqlweave import logs

    level = VERBOSITY["level"]
    if verbose:
        level = logs.VERBOSE
    elif quiet:
        level = logs.QUIET
    logs.setup(level)
    return level


def configure_lm(
    model: str,
    api_base: str | None,
    n_threads: int | None = None,
    prompt_lookup: int | None = None,
) -> Any:
    from sqlweave.lm import configure

    options: dict[str, Any] = {}
    if api_base:
        options["api_base"] = api_base
    if n_threads is not None:
        if n_threads < 1:
            fail(f"--lm-threads must be at least 1, not {n_threads}")
        if model.startswith(("local:", "gguf:")):
            options["n_threads"] = n_threads
    if prompt_lookup is not None:
        if prompt_lookup < 0:
            fail(f"--prompt-lookup must be 0 (off) or more draft tokens, not {prompt_lookup}")
        if model.startswith(("local:", "gguf:")):
            options["prompt_lookup"] = prompt_lookup
    try:
        return configure(model, **options)
    except Exception as err:  # weights missing, server unreachable: say so and stop
        fail(str(err))


def load_examples(dataset: str, split: str, root: Path | None) -> list[Any]:
    from sqlweave import data

    try:
        if dataset == "spider":
            return data.load_spider(split=split, root=root)
        if dataset == "bird":
            return data.load_bird(split=split, root=root)
        return data.load_questions(Path(dataset))
    except Exception as err:
        fail(str(err))
    return []


def check_writable(path: Path, option: str, *, touch: bool = True) -> None:
    """Fail now, not after hours of work, when ``path`` cannot be written as a file.

    ``touch`` opens it for appending (records written as they go); ``touch=False`` leaves a file
    written once at the end untouched and checks permissions instead.
    """
    if path.is_dir():
        fail(f"{option} {path} is a directory; give a file path")
    if path.exists() and not path.is_file():
        fail(f"{option} {path} is not a regular file; give a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if touch:
            existed = path.exists()
            with open(path, "a", encoding="utf-8"):
                pass
            if not existed:  # checked, not made: a run stopped by a later error leaves nothing
                path.unlink()
    except OSError as err:
        fail(f"cannot write {option} {path}: {err.strerror or err}")
    if not touch and (
        not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK))
    ):
        fail(f"cannot write {option} {path}: permission denied")
