"""``sqlweave demo``: the main job in one command: compile, save, evaluate beside naive, ask once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from sqlweave.cli import options as opt
from sqlweave.cli.ask import ask
from sqlweave.cli.common import fail, load_examples, setup_logging
from sqlweave.cli.compile import CompileRequest, compile_request
from sqlweave.cli.describe import search_of
from sqlweave.cli.root import app
from sqlweave.cli.runs import model_tag, record_provenance, run_identity

#: The main job's folder: the compiled program, its runs and report.
DEFAULT_WORKDIR = Path("runs/demo")


@app.command()
def demo(
    model: opt.ModelOpt = "local:qwen2.5-coder-1.5b",
    api_base: opt.ApiBaseOpt = None,
    lm_threads: opt.LmThreadsOpt = None,
    workdir: Annotated[Path, typer.Option(help="where the program and runs go")] = DEFAULT_WORKDIR,
    n_dev: Annotated[int, typer.Option(help="bundled dev questions to evaluate")] = 20,
    n_val: Annotated[
        int,
        typer.Option(
            help="validation questions (compile's --n-val, from spider-train-val); the search "
            "scores each choice on all of them"
        ),
    ] = 10,
    data_root: opt.DataRootOpt = None,
    quiet: opt.QuietOpt = False,
    verbose: opt.VerboseOpt = False,
) -> None:
    """The main job: compile, save, evaluate the saved program beside naive, ask once.

    The compile is the switch search from the default preset over the switch that separates
    one candidate per prompt from the preset's samples, scored on --n-val spider-train-val
    questions (databases the evaluation never sees): what it chose, and by how
    much, is printed. The saved file is then evaluated on --n-dev bundled dev questions beside
    naive on the same questions (paired: EX, interval, McNemar p), the report written, and
    one question answered from the saved file. A smoke test at this size: the measured figures
    are in docs/results.md.
    """
    progress = setup_logging(verbose, quiet) >= 0
    from sqlweave.data import eval_slice
    from sqlweave.optimizers import load_program
    from sqlweave.programs.presets import DEFAULT_PRESET, get_preset

    if n_dev < 1:
        fail(f"--n-dev must be at least 1, not {n_dev}")  # before the compile, not after it
    if workdir.exists() and not workdir.is_dir():
        fail(f"--workdir {workdir} is a file; give a folder")
    workdir.mkdir(parents=True, exist_ok=True)
    artefact = workdir / f"{DEFAULT_PRESET}.json"
    space = f"samples=1,{get_preset(DEFAULT_PRESET).switches.get('samples', 8)}"
    typer.secho(f"1/4 compile: the {DEFAULT_PRESET} preset, the search over {space}", bold=True)
    request = CompileRequest(
        out=artefact,
        preset=DEFAULT_PRESET,
        optimizer="search",
        train="spider",
        data_root=data_root,
        n_train=4,  # the search changes switches, not demos: train is not read
        max_demos=0,
        model=model,
        api_base=api_base,
        n_val=n_val,
        trials=2,
        space=[space],
        sampler="grid",
        progress=progress,
        lm_threads=lm_threads,
    )
    compile_request(request)
    program, meta = load_program(artefact)
    dev = eval_slice(load_examples("spider", "dev", data_root), n=n_dev, seed=0)
    runs = _evaluate_both(program, meta, artefact, dev, workdir, model, api_base, progress)
    typer.echo("")
    for line in paired_table(runs["compiled"]["summary"], runs["naive"]["summary"], meta):
        typer.echo(line)
    _write_report(runs, workdir)
    typer.secho("4/4 ask the saved program", bold=True)
    _ask_one(
        runs["compiled"]["summary"], dev, artefact, model, api_base, lm_threads, quiet, verbose
    )


def _evaluate_both(
    program: Any,
    meta: Any,
    artefact: Path,
    dev: list[Any],
    workdir: Path,
    model: str,
    api_base: str | None,
    progress: bool,
) -> dict[str, dict[str, Any]]:
    """Steps 2 and 3: the saved program and naive on the same dev questions."""
    from sqlweave.api import CompiledProgram
    from sqlweave.evaluate import evaluate as run_eval
    from sqlweave.programs import get as get_program
    from sqlweave.programs.stages.confidence import record_confidence

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
        identity = run_identity(path, wrapped, model, api_base)
        records_path = workdir / f"{label}-dev-n{len(dev)}-{model_tag(model)}.jsonl"
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
            fail(str(err))
        record_provenance(records_path)
        runs[label] = {"summary": summary, "path": records_path}
    return runs


def _write_report(runs: dict[str, dict[str, Any]], workdir: Path) -> None:
    """The HTML report of both runs (skipped without the report extra)."""
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


def _ask_one(
    summary: dict[str, Any],
    dev: list[Any],
    artefact: Path,
    model: str,
    api_base: str | None,
    lm_threads: int | None,
    quiet: bool,
    verbose: bool,
) -> None:
    """Step 4: ask a question the evaluation just answered right (an easy one if any), so the
    demo ends on the answer's rows rather than on a miss."""
    right = {r["question_id"] for r in summary["records"] if r.get("correct")}
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


def paired_table(compiled: dict[str, Any], naive: dict[str, Any], meta: Any) -> list[str]:
    """The main job's one table: the compiled program beside naive on the same questions."""
    from sqlweave.evaluate import compare

    cmp = compare(compiled["records"], naive["records"])
    chosen = search_of(meta).get("chosen") or {}
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
