"""``sqlweave serve``: a program over HTTP (:mod:`sqlweave.serve`)."""

from __future__ import annotations

from typing import Annotated

import typer

from sqlweave.cli import options as opt
from sqlweave.cli.common import configure_lm, fail, setup_logging
from sqlweave.cli.root import app
from sqlweave.cli.switches import program_from


@app.command("serve")
def serve_cmd(
    db: Annotated[
        list[str],
        typer.Option(
            "--db",
            help="SQLite file or SQLAlchemy URL, or NAME=PATH_OR_URL; repeat for several (the "
            "first is the default)",
        ),
    ],
    program: opt.ProgramOpt = None,
    preset: opt.PresetOpt = None,
    set_: opt.SetOpt = None,
    model: opt.ModelOpt = "local:qwen2.5-coder-1.5b",
    api_base: opt.ApiBaseOpt = None,
    host: Annotated[
        str, typer.Option(help="address to listen on (127.0.0.1: this machine only)")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    lm_threads: opt.LmThreadsOpt = None,
    concurrency: Annotated[
        int,
        typer.Option(
            help="questions a served model answers at once (a local model: one at a time)"
        ),
    ] = 8,
    max_rows: Annotated[int, typer.Option(help="rows an answer returns at most")] = 1000,
    allow_superuser: opt.AllowSuperuserOpt = False,
    quiet: opt.QuietOpt = False,
    verbose: opt.VerboseOpt = False,
) -> None:
    """Serve a program over HTTP: POST /ask, GET /schema, GET /health and a web page at /.

    Listens on 127.0.0.1 unless --host says otherwise. No endpoint runs SQL a client sends;
    the program's SQL runs read-only. See docs/serve.md.
    """
    setup_logging(verbose, quiet)
    from sqlweave.db import Database, ExecutionError
    from sqlweave.serve import ServeError, parse_databases, serve, url_of

    if port < 1 or port > 65535:  # 0 would pick a port this line could not print
        fail(f"--port must be between 1 and 65535, not {port}")
    if concurrency < 1 or max_rows < 1:
        fail(f"--concurrency and --max-rows must be at least 1, not {concurrency}, {max_rows}")
    try:
        targets = parse_databases(db)
        databases = {
            name: Database.open(target, name=name, allow_superuser=allow_superuser)
            for name, target in targets.items()
        }
    except ServeError as err:
        fail(str(err))
    except ExecutionError as err:
        fail(err.message.replace("pass allow_superuser=True", "pass --allow-superuser"))
    prog, _ = program_from(program, set_ or [], preset)
    lm = configure_lm(model, api_base, lm_threads)
    typer.echo(f"sqlweave serve: {url_of(host, port)} ({', '.join(databases)})", err=True)
    try:
        serve(
            prog,
            databases,
            lm=lm,
            model=model,
            host=host,
            port=port,
            max_rows=max_rows,
            concurrency=concurrency,
            log_level="warning" if quiet else "info",
        )
    except ServeError as err:
        fail(str(err))
