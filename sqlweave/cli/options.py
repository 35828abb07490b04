"""The options several commands share, declared once (one spelling per option, issue 39)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="local:qwen2.5-coder-1.5b | local:qwen2.5-coder-0.5b | gguf:PATH | any LiteLLM model",
    ),
]
ApiBaseOpt = Annotated[
    str | None, typer.Option("--api-base", help="endpoint of an OpenAI-compatible server")
]
DatasetOpt = Annotated[
    str,
    typer.Option(
        "--dataset",
        "-d",
        help="spider, bird, or a questions file (.json list or .jsonl; see README: own data)",
    ),
]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="details: every log line")]
QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", help="results and errors only, no progress bars")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object instead of text")]
DataRootOpt = Annotated[
    Path | None, typer.Option("--data-root", help="dataset folder (default: bundled data)")
]
ProgramOpt = Annotated[
    str | None,
    typer.Option(
        "--program",
        "-p",
        help="registry name (sqlweave.programs.available()) or compiled .json "
        "(default: the default preset; sqlweave programs lists them)",
    ),
]
LmThreadsOpt = Annotated[
    int | None,
    typer.Option(
        "--lm-threads",
        help="llama.cpp threads for a local model (default: $SQLWEAVE_N_THREADS, else all "
        "cores but one)",
    ),
]
AllowSuperuserOpt = Annotated[
    bool,
    typer.Option(
        "--allow-superuser",
        help="let a PostgreSQL role with superuser-like powers run the SQL (refused by "
        "default: connect as a read-only role, see docs/security.md)",
    ),
]
PresetOpt = Annotated[
    str | None,
    typer.Option(
        "--preset",
        help="a named, measured configuration (sqlweave programs lists them); --set overrides "
        "one switch; default: the default preset when no --program is given",
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="switch=value for the program (bool, int, float or string)"),
]
