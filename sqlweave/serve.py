"""``sqlweave serve``: an HTTP JSON API and one web page over a program.

```python
from sqlweave.serve import create_app, serve

app = create_app("direct", {"concert": "concert_singer.sqlite"}, lm=my_lm)   # a Starlette app
serve("direct", {"concert": "concert_singer.sqlite"}, lm=my_lm)              # runs uvicorn
```

Endpoints: ``POST /ask`` (a question, the SQL and its rows), ``GET /schema?db=NAME``,
``GET /health`` and ``GET /`` (the page, ``serve_page.html``). There is no endpoint that runs
SQL a client sends: the only SQL that runs is the program's, checked and executed read-only by
:class:`~sqlweave.db.Database` as everywhere else.

Concurrency: the program call blocks, so it runs in a worker thread. A model running in this
process (llama.cpp, ``local:``/``gguf:`` specs) is not thread-safe: questions then take turns,
one at a time, in arrival order. A served model (an OpenAI-compatible endpoint) answers
``concurrency`` questions at once; the rest wait for a free worker.

The ``serve`` extra installs what this needs: ``pip install 'sqlweave[serve]'``.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from sqlweave.answers import answer_body
from sqlweave.db import Database, ExecutionError
from sqlweave.errors import SqlweaveError

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
#: Questions a served model answers at once (an in-process model answers one at a time).
DEFAULT_CONCURRENCY = 8
#: Rows of an answer the API returns (``truncated`` says when there were more).
DEFAULT_MAX_ROWS = 1000
#: Seconds the program's SQL may run.
DEFAULT_TIMEOUT_S = 30.0
#: Longest question and evidence accepted (characters), and largest request body (bytes).
MAX_QUESTION_CHARS = 4000
MAX_EVIDENCE_CHARS = 20000
MAX_BODY_BYTES = 256 * 1024
#: Host headers a loopback server answers (a DNS-rebinding page sends its own name).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")

_FIELDS = ("question", "db", "evidence")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


class ServeError(SqlweaveError, ValueError):
    """A server that cannot start as asked (no database, a name given twice...)."""


def _missing_extra(err: ImportError) -> ServeError:
    return ServeError(
        f"sqlweave serve needs the serve extra ({err.name} is missing): "
        "pip install 'sqlweave[serve]'"
    )


def parse_databases(items: Sequence[str]) -> dict[str, str]:
    """``--db`` values as name -> path or URL: ``NAME=PATH_OR_URL``, or a bare path or URL named
    after its file (``concert_singer.sqlite`` -> ``concert_singer``) or its database."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, target = item.partition("=")
        if not sep or not _NAME.match(name) or not target or Path(item).exists():
            name, target = _default_name(item), item
        if not name:
            raise ServeError(f"cannot name the database {item!r}: give it as NAME={item}")
        if name in out:
            raise ServeError(f"two databases are named {name!r}: give one as OTHER_NAME=PATH")
        out[name] = target
    if not out:
        raise ServeError("give at least one database (--db PATH_OR_URL)")
    return out


def _default_name(target: str) -> str:
    if "://" in target:
        tail = target.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        return Path(tail).stem if tail else ""
    return Path(target).stem


def answer_json(result: Any, db: str, seconds: float, max_rows: int) -> dict[str, Any]:
    """The ``POST /ask`` body for a :class:`~sqlweave.api.Result`: ``sqlweave ask --json``'s
    answer (:func:`~sqlweave.answers.answer_body`) with its timing and database name."""
    return {**answer_body(result, max_rows), "timing": {"seconds": round(seconds, 4)}, "db": db}


def schema_json(database: Database, name: str) -> dict[str, Any]:
    """``GET /schema``: tables, columns (name, type, key) and foreign keys; no sampled values."""
    from sqlweave.schema import introspect

    schema = introspect(database)
    return {
        "db": name,
        "dialect": schema.dialect,
        "tables": [
            {
                "name": table.name,
                "columns": [
                    {
                        "name": column.name,
                        "type": column.type,
                        "primary_key": column.name in table.primary_key,
                        **({"description": column.description} if column.description else {}),
                    }
                    for column in table.columns
                ],
                **({"description": table.description} if table.description else {}),
            }
            for table in schema.tables
        ],
        "foreign_keys": [
            {
                "table": fk.table,
                "column": fk.column,
                "ref_table": fk.ref_table,
                "ref_column": fk.ref_column,
            }
            for fk in schema.foreign_keys
        ],
    }


# --- the app --------------------------------------------------------------------------------------


class _BadRequest(SqlweaveError):
    """A request the API refuses: its HTTP status, message and extra JSON fields."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.extra = extra


@dataclass
class _State:
    program: Any
    databases: dict[str, Database]
    lm: Any
    model: str | None
    serialized: bool | None
    concurrency: int
    max_rows: int
    timeout_s: float
    limiters: dict[bool, Any] = field(default_factory=dict)

    def takes_turns(self) -> bool:
        """Whether questions take turns now: as fixed at creation, or (None) whether the model
        that will answer runs in this process, read per request, since DSPy's configured LM
        may be set after the app is made."""
        if self.serialized is not None:
            return self.serialized
        return in_process(self.current_lm(), self.model)

    def worker_limiter(self) -> Any:
        # Made on first use, inside the event loop that runs the app.
        turns = self.takes_turns()
        if turns not in self.limiters:
            import anyio

            self.limiters[turns] = anyio.CapacityLimiter(1 if turns else self.concurrency)
        return self.limiters[turns]

    def current_lm(self) -> Any:
        return self.lm if self.lm is not None else _configured_lm()


def _as_compiled(program: Any) -> Any:
    from sqlweave import api

    if isinstance(program, api.CompiledProgram):
        return program
    from sqlweave.compiled import is_artifact_path

    if isinstance(program, str | Path) and is_artifact_path(program):
        return api.load(program)
    if isinstance(program, str):
        return api.CompiledProgram(api._as_program(program, {}))
    return api.CompiledProgram(program)


def _open(databases: Mapping[str, Database | str | Path]) -> dict[str, Database]:
    if not databases:
        raise ServeError("give at least one database")
    opened = {}
    for name, target in databases.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ServeError(f"database names are letters, digits, '_', '.' and '-', not {name!r}")
        opened[name] = (
            target if isinstance(target, Database) else Database.open(str(target), name=name)
        )
    return opened


def in_process(lm: Any, model: str | None = None) -> bool:
    """Whether ``lm`` (or the spec ``model``) runs in this process: llama.cpp, one call at a time."""
    from sqlweave.lm import LMSpec, is_local

    if lm is not None and is_local(lm):
        return True
    spec = model or str(getattr(lm, "model", "") or "")
    try:
        return bool(spec) and LMSpec.parse(spec).is_local
    except SqlweaveError:
        return False


def _configured_lm() -> Any:
    import dspy

    return dspy.settings.lm


def _model_spec(lm: Any) -> str | None:
    if lm is None:
        return None
    from sqlweave.lm import LMSpecError, spec_of

    try:
        return spec_of(lm)
    except (LMSpecError, AttributeError):
        return str(getattr(lm, "model", None) or type(lm).__name__)


def create_app(
    program: Any,
    databases: Mapping[str, Database | str | Path],
    *,
    lm: Any = None,
    model: str | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    concurrency: int = DEFAULT_CONCURRENCY,
    serialized: bool | None = None,
    allowed_hosts: Sequence[str] | None = LOOPBACK_HOSTS,
) -> Any:
    """The Starlette app serving ``program`` over ``databases`` (name -> open Database, path or
    URL; the first is the default of ``POST /ask``).

    ``program`` is a :class:`~sqlweave.api.CompiledProgram`, a program, a registry name or an
    artefact path. ``lm`` answers every question (default: DSPy's configured LM at call time);
    ``model`` is its spec for ``/health`` (default: read from ``lm``). ``serialized`` (default:
    whether the model runs in this process) makes questions take turns; otherwise up to
    ``concurrency`` run at once. ``allowed_hosts`` are the Host headers answered (None: any;
    the default, loopback names, refuses a DNS-rebinding page).
    """
    try:
        from starlette.applications import Starlette
        from starlette.middleware import Middleware
        from starlette.middleware.trustedhost import TrustedHostMiddleware
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise _missing_extra(err) from err
    _check_limits(max_rows, concurrency, timeout_s)
    compiled = _as_compiled(program)
    state = _State(
        program=compiled,
        databases=_open(databases),
        lm=lm,
        model=model or _model_spec(lm),
        serialized=in_process(lm, model) if serialized is None and lm is not None else serialized,
        concurrency=concurrency,
        max_rows=max_rows,
        timeout_s=float(timeout_s),
    )
    middleware = []
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)))
    app = Starlette(routes=_routes(state, compiled), middleware=middleware)
    app.state.sqlweave = state
    return app


def _check_limits(max_rows: Any, concurrency: Any, timeout_s: Any) -> None:
    """Refuse limits that would make every request fail (or none ever finish) before serving."""
    if not _count(max_rows):
        raise ServeError(f"max_rows must be at least 1, not {max_rows!r}")
    if not _count(concurrency):
        raise ServeError(f"concurrency must be at least 1, not {concurrency!r}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise ServeError(f"timeout_s must be a number of seconds, not {timeout_s!r}")
    if not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ServeError(f"timeout_s must be positive and finite, not {timeout_s!r}")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _routes(state: _State, compiled: Any) -> list[Any]:
    """The four endpoints over ``state``. Each handler answers every failure with one JSON
    error (a request's own mistake with its status, anything else 500), never a crash."""
    from starlette.routing import Route

    async def page(request: Any) -> Any:
        return _page_response()

    async def health(request: Any) -> Any:
        return _json(
            {
                "status": "ok",
                "program": compiled.meta.program,
                "model": state.model or _model_spec(state.current_lm()),
                "databases": list(state.databases),
                "serialized": state.takes_turns(),
                "concurrency": 1 if state.takes_turns() else state.concurrency,
            }
        )

    async def schema(request: Any) -> Any:
        from starlette.concurrency import run_in_threadpool

        try:
            name, database = _database(state, request.query_params.get("db"))
            return _json(await run_in_threadpool(schema_json, database, name))
        except _BadRequest as err:
            return _json({"error": str(err), **err.extra}, err.status)
        except ExecutionError as err:
            return _json({"error": err.feedback(), "kind": err.kind}, 503)
        except Exception as err:  # never a crash of the server: one JSON error
            logger.exception("GET /schema failed")
            return _json({"error": f"{type(err).__name__}: {err}"}, 500)

    async def ask(request: Any) -> Any:
        try:
            return await _ask(state, request)
        except _BadRequest as err:
            return _json({"error": str(err), **err.extra}, err.status)
        except Exception as err:  # never a crash of the server: one JSON error
            logger.exception("POST /ask failed")
            return _json({"error": f"{type(err).__name__}: {err}"}, 500)

    return [
        Route("/", page, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/schema", schema, methods=["GET"]),
        Route("/ask", ask, methods=["POST"]),
    ]


def _json(body: Any, status: int = 200) -> Any:
    from starlette.responses import Response

    # ASCII-escaped, so that text no UTF-8 can hold (a lone surrogate a client sent, echoed in
    # an error) is written as its escape instead of failing inside the response.
    text = json.dumps(body, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return Response(
        text,
        status_code=status,
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def _page_response() -> Any:
    from starlette.responses import HTMLResponse

    html = resources.files("sqlweave").joinpath("serve_page.html").read_text(encoding="utf-8")
    return HTMLResponse(
        html,
        headers={
            "Content-Security-Policy": _CSP,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
        },
    )


def _database(state: _State, name: Any) -> tuple[str, Database]:
    if name is None or name == "":
        name = next(iter(state.databases))
    if not isinstance(name, str):
        raise _BadRequest(422, f"db must be a database name (a string), not {_type(name)}")
    if name not in state.databases:
        known = list(state.databases)
        raise _BadRequest(
            404, f"unknown database {name!r}; known: {', '.join(known)}", databases=known
        )
    return name, state.databases[name]


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


async def _request_fields(request: Any) -> tuple[str, Any, str]:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        # A form post from another site's page needs no CORS preflight; a JSON one does.
        raise _BadRequest(415, "send the question as JSON (Content-Type: application/json)")
    body = await _bounded_body(request)
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as err:  # RecursionError: nesting too deep to parse
        raise _BadRequest(400, f"the body is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise _BadRequest(422, f"the body must be a JSON object, not {_type(data)}")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        names = ", ".join(ascii(name) for name in unknown)
        raise _BadRequest(422, f"unknown field(s) {names}; /ask takes {', '.join(_FIELDS)}")
    question = data.get("question")
    if not isinstance(question, str) or not question.strip():
        shown = "missing" if "question" not in data else f"{_type(question)} {question!r}"
        raise _BadRequest(422, f"question must be a non-empty string ({shown})")
    question = _text("question", question.strip(), MAX_QUESTION_CHARS)
    evidence = data.get("evidence")
    if evidence is None:
        evidence = ""
    if not isinstance(evidence, str):
        raise _BadRequest(422, f"evidence must be a string, not {_type(evidence)}")
    return question, data.get("db"), _text("evidence", evidence, MAX_EVIDENCE_CHARS)


def _text(field_name: str, value: str, limit: int) -> str:
    if len(value) > limit:
        raise _BadRequest(422, f"{field_name} is over {limit} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: JSON can carry it, no model prompt can
        raise _BadRequest(422, f"{field_name} holds text that is not valid Unicode") from None
    return value


async def _bounded_body(request: Any) -> bytes:
    """The request body, refused with 413 as soon as it is known to pass ``MAX_BODY_BYTES``
    (by its Content-Length, or while it streams in) rather than after all of it is held."""
    too_big = _BadRequest(413, f"the request body is over {MAX_BODY_BYTES} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise too_big
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


async def _ask(state: _State, request: Any) -> Any:
    import anyio

    question, db, evidence = await _request_fields(request)
    name, database = _database(state, db)
    lm = state.current_lm()
    if lm is None:
        raise _BadRequest(503, "no language model is configured")
    started = time.perf_counter()

    def answer() -> Any:
        import dspy

        from sqlweave.failures import endpoint_guard

        with dspy.context(lm=lm), endpoint_guard():
            return state.program(
                question,
                db=database,
                evidence=evidence,
                max_rows=state.max_rows,
                timeout_s=state.timeout_s,
            )

    from sqlweave.failures import LMUnavailableError, as_program_error

    try:
        result = await anyio.to_thread.run_sync(answer, limiter=state.worker_limiter())
    except LMUnavailableError as err:
        raise _BadRequest(503, str(err), endpoint=err.endpoint) from None
    except ExecutionError as err:  # the database went away (the program's SQL never raises)
        raise _BadRequest(503, err.feedback(), kind=err.kind) from None
    except Exception as err:  # the program failed on this question: say so, keep serving
        failure = as_program_error(err)
        if isinstance(failure, LMUnavailableError):
            raise _BadRequest(503, str(failure), endpoint=failure.endpoint) from None
        logger.info("POST /ask: %s", failure, exc_info=True)
        raise _BadRequest(500, str(failure)) from None
    seconds = time.perf_counter() - started
    return _json(answer_json(result, name, seconds, state.max_rows))


def serve(
    program: Any,
    databases: Mapping[str, Database | str | Path],
    *,
    lm: Any = None,
    model: str | None = None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    concurrency: int = DEFAULT_CONCURRENCY,
    log_level: str = "info",
) -> None:
    """Serve ``program`` with uvicorn on ``host``:``port`` (loopback unless told otherwise)
    until interrupted. One process: an in-process model is loaded once."""
    try:
        import uvicorn
    except ImportError as err:
        raise _missing_extra(err) from err
    wildcard = host in ("0.0.0.0", "::", "")
    allowed = None if wildcard else tuple(dict.fromkeys([*LOOPBACK_HOSTS, *_host_forms(host)]))
    if host not in LOOPBACK_HOSTS:
        logger.warning(
            "serving on %s: anyone who can reach it can ask questions of your databases", host
        )
    app = create_app(
        program,
        databases,
        lm=lm,
        model=model,
        max_rows=max_rows,
        timeout_s=timeout_s,
        concurrency=concurrency,
        allowed_hosts=allowed,
    )
    uvicorn.run(app, host=host, port=port, log_level=log_level, workers=1)


def _host_forms(host: str) -> tuple[str, ...]:
    """``host`` as a Host header may name it: an IPv6 address also in brackets."""
    return (host, f"[{host}]") if ":" in host and not host.startswith("[") else (host,)


def url_of(host: str, port: int) -> str:
    """The page's address, an IPv6 host in brackets."""
    return f"http://{_host_forms(host)[-1]}:{port}/"
