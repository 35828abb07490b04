"""``sqlweave ask``: one question, its SQL and result table (or ``--json``)."""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

import typer

from sqlweave.cli import options as opt
from sqlweave.cli.common import configure_lm, fail, setup_logging
from sqlweave.cli.root import app
from sqlweave.cli.switches import program_from


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="the question to answer")],
    db: Annotated[str, typer.Option("--db", help="SQLite file or SQLAlchemy URL")],
    program: opt.ProgramOpt = None,
    preset: opt.PresetOpt = None,
    set_: opt.SetOpt = None,
    evidence: Annotated[str, typer.Option(help="external knowledge (BIRD evidence)")] = "",
    model: opt.ModelOpt = "local:qwen2.5-coder-1.5b",
    api_base: opt.ApiBaseOpt = None,
    lm_threads: opt.LmThreadsOpt = None,
    max_rows: Annotated[int, typer.Option(help="rows to print")] = 20,
    allow_superuser: opt.AllowSuperuserOpt = False,
    json_: opt.JsonOpt = False,
    quiet: opt.QuietOpt = False,
    verbose: opt.VerboseOpt = False,
) -> None:
    """Answer one question: print the SQL, then its result table (run read-only).

    With --json: one object with sql, columns, rows, truncated and error (null when it ran).
    """
    setup_logging(verbose, quiet)
    from sqlweave.answers import answer_body
    from sqlweave.db import Database, ExecutionError

    if max_rows < 1:
        fail(f"--max-rows must be at least 1, not {max_rows}")
    if not question.strip():  # as sqlweave.ask and POST /ask refuse it, before the model loads
        fail("the question is empty")
    try:
        database = Database.open(db, allow_superuser=allow_superuser)
    except ExecutionError as err:
        fail(err.message.replace("pass allow_superuser=True", "pass --allow-superuser"))
    prog, _ = program_from(program, set_ or [], preset)
    configure_lm(model, api_base, lm_threads)
    try:
        result = prog(question, db=database, evidence=evidence, max_rows=max(max_rows, 1000))
    except ExecutionError as err:
        fail(err.feedback())
    except Exception as err:  # the LM or the program failed: one line, not a traceback
        from sqlweave.failures import as_program_error

        logging.getLogger(__name__).debug("ask failed", exc_info=True)
        fail(str(as_program_error(err)))  # the error sqlweave.ask raises
    if json_:
        typer.echo(json.dumps(answer_body(result, max_rows), default=str))
        if not result.ok:
            raise typer.Exit(code=1)
        return
    typer.echo(result.sql or "(the model returned no SQL)")
    if not result.sql:
        raise typer.Exit(code=1)
    if result.error is not None:
        typer.secho(result.error.feedback(), fg=typer.colors.YELLOW)
        print_confidence(result, max_rows)
        raise typer.Exit(code=1)
    typer.echo(result.table(max_rows=max_rows))
    print_confidence(result, max_rows)


def print_confidence(result: Any, max_rows: int) -> None:
    """What to check in the answer (its caveats), its confidence and, when that is low or there
    is something to check, the other readings (SQL and first rows)."""
    from sqlweave.db import QueryResult

    for caveat in result.get("caveats") or []:
        typer.secho(f"check: {caveat}", fg=typer.colors.YELLOW)
    confidence = result.get("confidence")
    if confidence is None:
        return
    low = bool(result.get("low_confidence"))
    typer.secho(
        f"confidence: {100 * confidence:.0f}%" + (" (not sure)" if low else ""),
        fg=typer.colors.YELLOW if low else None,
    )
    if not low and not result.get("caveats"):
        return
    for i, alt in enumerate(result.get("alternatives") or [], 1):
        typer.echo(f"other reading {i} ({100 * alt['share']:.0f}% of the candidates): {alt['sql']}")
        rows = tuple(tuple(r) for r in alt["rows"])
        cut = bool(alt.get("truncated"))  # the reading kept its first rows only
        preview = QueryResult(tuple(alt["columns"]), rows, cut).preview(max_rows=min(max_rows, 5))
        typer.echo("  " + preview.replace("\n", "\n  "))
