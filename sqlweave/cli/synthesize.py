"""``sqlweave synthesize``: training pairs for your own database (:mod:`sqlweave.synthesis`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sqlweave.cli import options as opt
from sqlweave.cli.common import check_writable, configure_lm, fail, setup_logging
from sqlweave.cli.root import app
from sqlweave.cli.switches import typed_switches
from sqlweave.errors import SqlweaveError

DbOpt = Annotated[str, typer.Option("--db", help="SQLite file or SQLAlchemy URL")]
NOpt = Annotated[int, typer.Option("--n", help="question/SQL pairs to make")]
OutOpt = Annotated[
    Path,
    typer.Option(help="questions file to write (JSON Lines); a rerun resumes it"),
]
CheckerOpt = Annotated[
    str, typer.Option(help="the program whose answers check each question (round trip)")
]
CheckOpt = Annotated[
    bool, typer.Option("--check/--no-check", help="keep only pairs that pass the round trip")
]
AcceptOpt = Annotated[
    str,
    typer.Option(
        help="round trip: keep a pair when the program's answer returns the label's rows "
        "(answer) or when any candidate it weighed does (any; with e.g. --set samples=8)"
    ),
]
SeedOpt = Annotated[int, typer.Option(help="seed of the template draws")]
SampleRowsOpt = Annotated[
    int, typer.Option(help="stored rows per table shown to the question writer (0: none)")
]


@app.command()
def synthesize(
    db: DbOpt,
    n: NOpt = 40,
    out: OutOpt = Path("synthetic.jsonl"),
    program: CheckerOpt = "direct",
    set_: opt.SetOpt = None,
    check: CheckOpt = True,
    accept: AcceptOpt = "answer",
    seed: SeedOpt = 0,
    sample_rows: SampleRowsOpt = 0,
    model: opt.ModelOpt = "local:qwen2.5-coder-1.5b",
    api_base: opt.ApiBaseOpt = None,
    lm_threads: opt.LmThreadsOpt = None,
    quiet: opt.QuietOpt = False,
    verbose: opt.VerboseOpt = False,
) -> None:
    """Make training pairs for your own database: template SQL checked by execution, the
    question written by the LM, kept when a program's answer to it returns the same rows.

    The file is a questions file: pass it to compile --train or evaluate --dataset.
    """
    level = setup_logging(verbose, quiet)
    from sqlweave import programs
    from sqlweave.db import Database, ExecutionError
    from sqlweave.synthesis.pairs import (
        ROUND_TRIP_ACCEPT,
        SynthesisError,
        draft_queries,
        shortfall_reason,
    )
    from sqlweave.synthesis.pairs import synthesize as run_synthesis

    if n < 1:
        fail(f"--n must be at least 1, not {n}")
    if accept not in ROUND_TRIP_ACCEPT:
        fail(f"--accept must be one of {', '.join(ROUND_TRIP_ACCEPT)}, not {accept!r}")
    try:  # an unknown name is a ValueError naming the registered programs
        checker = programs.get(program, **typed_switches(program, set_ or []))
    except (ValueError, TypeError) as err:
        fail(str(err))
    if sample_rows < 0:
        fail(f"--sample-rows must be 0 or more, not {sample_rows}")
    check_writable(out, "--out", touch=False)
    try:
        database = Database.open(db)
    except ExecutionError as err:
        fail(err.message)
    try:  # a database with nothing to ask about fails now, before the model loads
        next(draft_queries(database, 1, seed=seed), None)
    except SynthesisError as err:
        fail(str(err))
    configure_lm(model, api_base, lm_threads)
    from sqlweave.failures import endpoint_guard

    try:
        with endpoint_guard():  # a dead endpoint ends it as one LMUnavailableError
            pairs = run_synthesis(
                database,
                n,
                out=out,
                seed=seed,
                program=checker,
                check=check,
                sample_rows=sample_rows,
                accept=accept,
                progress=level >= 0,
            )
    except (SynthesisError, SqlweaveError, OSError) as err:
        # SqlweaveError: a dead model endpoint, said in one line as compile and evaluate do
        fail(str(err))
    typer.echo(
        f"{len(pairs)} pairs for {database.name} in {out} (every verdict: {out}.tried.jsonl)"
    )
    if len(pairs) < n:
        typer.secho(
            f"only {len(pairs)} of {n}: {shortfall_reason(Path(f'{out}.tried.jsonl'))}",
            fg=typer.colors.YELLOW,
            err=True,
        )
