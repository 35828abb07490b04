"""``sqlweave compile``: the options read into a :class:`~sqlweave.compile_plan.CompilePlan`, the
plan built and run (the same plan ``sqlweave.compile`` runs), the artefact saved and described.

What is left here is parsing: option combinations, paths written next to ``--out`` (the
checkpoint, the synthesized pairs), ``--space``. Data, validation and provenance are the plan's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from sqlweave.cli import options as opt
from sqlweave.cli.common import check_writable, configure_lm, fail, setup_logging
from sqlweave.cli.describe import kept_defaults_line, switch_text, synthetic_lines
from sqlweave.cli.root import app
from sqlweave.cli.switches import search_space, typed_switches
from sqlweave.compile_plan import DEFAULT_MAX_DEMOS, DEFAULT_N_TRAIN, DEFAULT_N_VAL

ProgramNameOpt = Annotated[
    str | None,
    typer.Option(
        "--program", "-p", help="registry name, e.g. direct (default: the default preset)"
    ),
]
OutOpt = Annotated[Path, typer.Option(help="where to save the compiled program")]
OptimizerOpt = Annotated[
    str,
    typer.Option(
        help="labeled | bootstrap | random_search | knn | mipro | gepa | search, "
        "or a sequence: search+bootstrap"
    ),
]
BudgetOpt = Annotated[
    int | None, typer.Option(help="most LM calls the optimizer may make (default: no cap)")
]
TrainOpt = Annotated[
    str | None,
    typer.Option("--train", help="spider (the default), bird or a questions file (.json/.jsonl)"),
]
DbOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--db",
        help="with --synthesize: your database, a SQLite file or SQLAlchemy URL "
        "(repeat for several)",
    ),
]
SynthesizeOpt = Annotated[
    int | None,
    typer.Option(
        "--synthesize",
        help="no labelled questions: make N question/SQL pairs per --db database, split "
        "them into train and validation and compile on them (not with --train)",
    ),
]
SyntheticOutOpt = Annotated[
    Path | None,
    typer.Option(
        "--synthetic-out",
        help="the synthesized pairs file, resumed by a rerun (default: OUT's name with "
        ".synthetic.jsonl; with several --db, one file per database beside it)",
    ),
]
SynthesisCheckOpt = Annotated[
    bool | None,
    typer.Option(
        "--synthesis-check/--no-synthesis-check",
        help="keep only synthesized pairs that pass the round trip (default: on, but off "
        "for --optimizer search alone without --val, which validates on them)",
        show_default=False,
    ),
]
ValFractionOpt = Annotated[
    float | None,
    typer.Option(
        "--synthetic-val-fraction",
        help="with --synthesize: the share of each database's pairs that validates (the "
        "rest train); default 0.2, and 0.9 for --optimizer search alone without --val",
        show_default=False,
    ),
]
ValOpt = Annotated[
    str | None,
    typer.Option(
        "--val",
        help="validation data: spider/bird (their dev split), a named slice such as "
        "spider-train-val (train drops its databases), or a questions file. Default: "
        "questions on databases the demos never see (with --train spider: "
        "spider-train-val; else held-out databases of --train), as sqlweave.compile does",
    ),
]
NTrainOpt = Annotated[
    int | None,
    typer.Option(
        help=f"train examples to use; 0 = all (default {DEFAULT_N_TRAIN}; not with --synthesize)"
    ),
]
NValOpt = Annotated[
    int | None,
    typer.Option(
        help=f"validation questions to use; 0 = all (default {DEFAULT_N_VAL}; all for "
        "--optimizer search alone on synthesized pairs, without --val)",
        show_default=False,
    ),
]
MaxDemosOpt = Annotated[int, typer.Option(help="demonstrations per predictor")]
CandidatesOpt = Annotated[int, typer.Option(help="random_search: shuffled candidates")]
TrialsOpt = Annotated[
    int, typer.Option(help="search: switch configurations to try (the program's own first)")
]
SearchValOpt = Annotated[
    int, typer.Option(help="search: validation examples each trial is scored on; 0 = all")
]
SpaceOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--space",
        help="search: switch=a,b,c (repeatable); default: the program's own search space",
    ),
]
SamplerOpt = Annotated[str, typer.Option(help="search: auto | grid | tpe | random")]
SeedOpt = Annotated[int, typer.Option(help="seed of the data slices and the optimizer")]
CheckpointOpt = Annotated[
    Path | None,
    typer.Option(help="resume file for finished work (default: OUT with .ckpt.json)"),
]
ProposerOpt = Annotated[
    str | None,
    typer.Option("--proposer-model", help="LM that proposes instructions (mipro, gepa)"),
]
ProgressOpt = Annotated[bool, typer.Option("--progress/--no-progress")]


@dataclass
class CompileRequest:
    """``sqlweave compile``'s options as given (``demo`` fills one too)."""

    out: Path
    program: str | None = None
    preset: str | None = None
    set_: list[str] = field(default_factory=list)
    optimizer: str = "bootstrap"
    budget: int | None = None
    train: str | None = None
    db: list[str] = field(default_factory=list)
    synthesize: int | None = None
    synthetic_out: Path | None = None
    synthesis_check: bool | None = None
    synthetic_val_fraction: float | None = None
    val: str | None = None
    n_train: int | None = None
    n_val: int | None = None
    max_demos: int = DEFAULT_MAX_DEMOS
    candidates: int = 2
    trials: int = 8
    search_val: int = 0
    space: list[str] = field(default_factory=list)
    sampler: str = "auto"
    seed: int = 0
    checkpoint: Path | None = None
    data_root: Path | None = None
    model: str = "local:qwen2.5-coder-1.5b"
    proposer_model: str | None = None
    api_base: str | None = None
    lm_threads: int | None = None
    progress: bool = True


@app.command("compile")
def compile_cmd(
    program: ProgramNameOpt = None,
    preset: opt.PresetOpt = None,
    set_: opt.SetOpt = None,
    out: OutOpt = Path("compiled.json"),
    optimizer: OptimizerOpt = "bootstrap",
    budget: BudgetOpt = None,
    train: TrainOpt = None,
    db: DbOpt = None,
    synthesize: SynthesizeOpt = None,
    synthetic_out: SyntheticOutOpt = None,
    synthesis_check: SynthesisCheckOpt = None,
    synthetic_val_fraction: ValFractionOpt = None,
    val: ValOpt = None,
    n_train: NTrainOpt = None,
    n_val: NValOpt = None,
    max_demos: MaxDemosOpt = DEFAULT_MAX_DEMOS,
    candidates: CandidatesOpt = 2,
    trials: TrialsOpt = 8,
    search_val: SearchValOpt = 0,
    space: SpaceOpt = None,
    sampler: SamplerOpt = "auto",
    seed: SeedOpt = 0,
    checkpoint: CheckpointOpt = None,
    data_root: opt.DataRootOpt = None,
    model: opt.ModelOpt = "local:qwen2.5-coder-1.5b",
    proposer_model: ProposerOpt = None,
    api_base: opt.ApiBaseOpt = None,
    lm_threads: opt.LmThreadsOpt = None,
    progress: ProgressOpt = True,
    quiet: opt.QuietOpt = False,
    verbose: opt.VerboseOpt = False,
) -> None:
    """Optimize a program against EX on train data, score it on validation data and save it.

    Train and validation data: spider, bird, or your own questions file (a JSON list or JSON
    Lines of objects with question, sql and db_path or db_id; see the README). No questions?
    --db YOUR_DB --synthesize N makes N pairs for your database (as sqlweave synthesize does),
    validates on a seeded fifth of them (--synthetic-val-fraction) and compiles on the rest;
    --optimizer search alone (without --val) validates on 90 % of them, all, synthesized without
    the round trip.
    """
    given = dict(locals())  # every option by name, before anything else is bound here
    level = setup_logging(given.pop("verbose"), given.pop("quiet"))
    given.update(set_=set_ or [], db=db or [], space=space or [])
    request = CompileRequest(**{**given, "progress": progress and level >= 0})
    compile_request(request)


def compile_request(request: CompileRequest) -> Any:
    """Check the options, build the plan (no model yet), configure the LM, run, save, report."""
    from sqlweave.compile_plan import CompilePlan

    plan = CompilePlan(**_plan_options(request))
    built = _build(plan)
    configure_lm(request.model, request.api_base, request.lm_threads)
    compiled = _run(built, plan)
    return report_compile(compiled, built.name, request)


def _plan_options(request: CompileRequest) -> dict[str, Any]:
    """The plan's arguments from the options, each bad option a one-line error."""
    from sqlweave.compile_plan import Named
    from sqlweave.programs.presets import resolve

    r = request
    options = _optimizer_options(r)
    if r.program is not None and Path(r.program).suffix == ".json":
        fail("compile starts from a registry program name, not a compiled .json")
    try:
        base = resolve(r.program, r.preset)[0]
    except ValueError as err:
        fail(str(err))
    for option, value in (
        ("--max-demos", r.max_demos),
        ("--n-train", r.n_train),
        ("--n-val", r.n_val),
        ("--candidates", r.candidates),
        ("--budget", r.budget),
        ("--search-val", r.search_val),
    ):
        if value is not None and value < 0:
            fail(f"{option} must be 0 or more, not {value}")
    if "n_trials" in options and r.space:
        options["space"] = search_space(base, r.space)
    check_writable(r.out, "--out", touch=False)
    checkpoint = r.checkpoint or r.out.with_suffix(".ckpt.json")
    if checkpoint.is_dir():
        fail(f"--checkpoint {checkpoint} is a directory; give a file path")
    data = _synthesis_options(r) if r.synthesize is not None or r.db else {}
    if not data:
        data = {"trainset": Named(r.train or "spider", r.data_root), "n_train": r.n_train}
    return {
        "program": r.program,
        "preset": r.preset,
        "switches": typed_switches(base, r.set_),
        "valset": Named(r.val, r.data_root) if r.val is not None else None,
        "n_val": r.n_val,
        "optimizer": r.optimizer,
        "budget": r.budget,
        "max_demos": r.max_demos,
        "seed": r.seed,
        "proposer_lm": r.proposer_model,
        "checkpoint": checkpoint,
        "progress": r.progress,
        "candidates": r.candidates,
        "options": options,
        **data,
    }


def _optimizer_options(r: CompileRequest) -> dict[str, Any]:
    """The switch search's options (``--space`` is read once the program is known)."""
    from sqlweave.optimizers.registry import stage_names
    from sqlweave.optimizers.search import SAMPLERS

    try:
        stages = stage_names(r.optimizer)
    except ValueError as err:
        fail(str(err))
    if "search" not in stages:
        if r.space:
            fail("--space applies to the search optimizer (--optimizer search or search+...)")
        return {}
    if r.trials < 1:
        fail(f"--trials must be 1 or more, not {r.trials}")
    if r.sampler not in SAMPLERS:
        fail(f"--sampler must be one of {', '.join(SAMPLERS)}, not {r.sampler!r}")
    return {"n_trials": r.trials, "val_size": r.search_val or None, "sampler": r.sampler}


def _synthesis_options(r: CompileRequest) -> dict[str, Any]:
    """``--db`` and ``--synthesize``: the combinations the options allow, and the pairs file."""
    from sqlweave.synthesis.sets import check_val_fraction

    if r.synthetic_val_fraction is not None:
        try:
            check_val_fraction(r.synthetic_val_fraction)
        except ValueError as err:
            fail(f"--synthetic-val-fraction: {err}")
    if r.synthesize is None:
        fail("--db names your database for --synthesize N (with --train, questions name theirs)")
    if not r.db:
        fail("--synthesize needs --db: the database(s) to make pairs for")
    if r.train is not None:
        fail(
            "--synthesize and --train do not combine: compile on synthesized pairs or on --train "
            "questions (to use both, run sqlweave synthesize and pass one questions file)"
        )
    if r.n_train is not None:
        fail("--n-train applies to --train; --synthesize N sets the number of pairs")
    if r.synthesize < 1:
        fail(f"--synthesize must be at least 1, not {r.synthesize}")
    synthetic_out = r.synthetic_out or r.out.with_name(f"{r.out.stem}.synthetic.jsonl")
    check_writable(synthetic_out, "--synthetic-out", touch=False)
    return {
        "db": list(r.db),
        "synthesize": r.synthesize,
        "synthetic_out": synthetic_out,
        "synthesis_check": r.synthesis_check,
        "synthetic_val_fraction": r.synthetic_val_fraction,
    }


def _build(plan: Any) -> Any:
    """The plan built before the model loads: bad data or databases fail here."""
    from sqlweave.db import ExecutionError
    from sqlweave.optimizers import ArtifactError

    try:
        return plan.build()
    except (ValueError, TypeError, ArtifactError, ExecutionError) as err:
        fail(str(err))
    except OSError as err:  # a questions file that cannot be read
        fail(str(err))


def _run(built: Any, plan: Any) -> Any:
    """The compile, each way it can fail said in one line."""
    from sqlweave.db import ExecutionError
    from sqlweave.failures import LMUnavailableError
    from sqlweave.optimizers import ArtifactError

    try:
        return built.run()
    except (ValueError, ArtifactError, LMUnavailableError, ExecutionError) as err:
        fail(str(err))
    except OSError as err:  # the checkpoint could not be written
        fail(f"cannot write the checkpoint {plan.checkpoint}: {err.strerror or err}")
    except KeyboardInterrupt:
        typer.secho(
            f"interrupted; the finished LM work is in {plan.checkpoint}: run the same command "
            "to resume",
            fg=typer.colors.YELLOW,
            err=True,
        )
        raise typer.Exit(code=130) from None


def report_compile(compiled: Any, name: str, request: CompileRequest) -> Any:
    """Save the compiled program to ``--out`` and say what the compile did."""
    meta, out = compiled.meta, request.out
    try:
        compiled.save(out)
    except OSError as err:
        fail(f"cannot write --out {out}: {err.strerror or err}")
    budget = request.budget
    cap = f" of {budget}" if budget is not None else ""
    stopped = " (budget reached: best so far kept)" if meta.extra.get("budget_exhausted") else ""
    resumed = meta.extra.get("resumed_units") or 0
    earlier = meta.extra.get("resumed_calls") or 0
    typer.echo(
        f"compiled {name} with {request.optimizer} on {meta.n_train} train examples in "
        f"{meta.compile_seconds:.0f} s: {meta.lm_calls}{cap} LM calls{stopped}"
        + (f", {earlier} of them by earlier runs" if earlier else "")
        + (f", {resumed} finished units resumed" if resumed else "")
    )
    for line in synthetic_lines(meta):
        typer.echo(line)
    search = (meta.extra.get("details") or {}).get("search")
    if search:
        best = search.get("best_score")
        best_text = "n/a" if best is None else f"{best * 100:.1f}%"
        typer.echo(
            f"search: {sum(t['status'] == 'done' for t in search['trials'])} configurations "
            f"on {search['n_val']} validation examples; chose {switch_text(search['chosen'])} "
            f"(score {best_text})"
        )
    kept = kept_defaults_line(meta, compiled.program)
    if kept:
        typer.secho(kept, fg=typer.colors.YELLOW)
    val_text = "n/a" if meta.val_ex_pct is None else f"{meta.val_ex_pct:.1f}%"
    how = meta.extra.get("validation")
    on = f" on {how}" if how and how != "given" else ""
    typer.echo(f"validation EX {val_text} (n={meta.n_val}){on}; saved {out}")
    return compiled
