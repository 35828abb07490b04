"""``sqlweave evaluate``: EX of a program on a slice or a questions file, resumable, with an
optional paired comparison against another run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from sqlweave.cli import options as opt
from sqlweave.cli.common import check_writable, configure_lm, fail, load_examples, setup_logging
from sqlweave.cli.root import app
from sqlweave.cli.runs import (
    model_tag,
    print_summary,
    record_provenance,
    run_identity,
    run_stem,
    summary_json,
)
from sqlweave.cli.switches import program_from

SplitOpt = Annotated[str, typer.Option(help="dev or train")]
NOpt = Annotated[int, typer.Option("--n", help="stratified slice size; 0 = all")]
SeedOpt = Annotated[int, typer.Option(help="seed of the evaluation slice")]
OutOpt = Annotated[Path | None, typer.Option(help="JSONL of per-question records (resumable)")]
ResumeOpt = Annotated[
    bool, typer.Option("--resume/--no-resume", help="skip questions already in --out")
]
ThreadsOpt = Annotated[int, typer.Option(help="questions evaluated in parallel")]
SliceOpt = Annotated[
    str | None,
    typer.Option(
        "--slice",
        help="a named slice (spider-dev-200, bird-52, spider-train-val); "
        "replaces --dataset/--split/--n/--seed",
    ),
]
BaselineOpt = Annotated[
    Path | None,
    typer.Option(help="JSONL of another run (e.g. naive) to compare with, paired"),
]
StrictGoldOpt = Annotated[
    bool,
    typer.Option(
        "--strict-gold",
        help="stop at a gold query that fails (default: record it as a flagged miss)",
    ),
]
NThreadsOpt = Annotated[
    int | None, typer.Option("--n-threads", hidden=True, help="deprecated: --lm-threads")
]
PromptLookupOpt = Annotated[
    int | None,
    typer.Option(
        "--prompt-lookup",
        help="draft tokens of prompt-lookup decoding for a local model, copied from the "
        "prompt and kept only where greedy decoding agrees (default: "
        "$SQLWEAVE_PROMPT_LOOKUP, else 0 = off)",
    ),
]
ProgressOpt = Annotated[bool, typer.Option("--progress/--no-progress")]


@app.command()
def evaluate(
    program: opt.ProgramOpt = None,
    preset: opt.PresetOpt = None,
    dataset: opt.DatasetOpt = "spider",
    split: SplitOpt = "dev",
    n: NOpt = 200,
    seed: SeedOpt = 0,
    out: OutOpt = None,
    resume: ResumeOpt = True,
    data_root: opt.DataRootOpt = None,
    model: opt.ModelOpt = "local:qwen2.5-coder-1.5b",
    api_base: opt.ApiBaseOpt = None,
    set_: opt.SetOpt = None,
    threads: ThreadsOpt = 1,
    slice_: SliceOpt = None,
    baseline: BaselineOpt = None,
    strict_gold: StrictGoldOpt = False,
    lm_threads: opt.LmThreadsOpt = None,
    n_threads: NThreadsOpt = None,
    prompt_lookup: PromptLookupOpt = None,
    progress: ProgressOpt = True,
    json_: opt.JsonOpt = False,
    quiet: opt.QuietOpt = False,
    verbose: opt.VerboseOpt = False,
) -> None:
    """Execution accuracy (EX, percent) of a program on a benchmark slice or your own questions
    file; resumes an interrupted run.

    Prints EX with a 95% bootstrap interval, per difficulty, usage per question and, with
    --baseline, the paired difference and McNemar's exact p-value against that run. --json
    prints the same as one object (the per-question records stay in the JSONL file).
    """
    level = setup_logging(verbose, quiet)
    progress = progress and level >= 0 and not json_
    if n_threads is not None and lm_threads is None:
        lm_threads = n_threads
    if n < 0:
        fail(f"--n must be a positive number of questions, or 0 for all; got {n}")
    if threads < 1:
        fail(f"--threads must be at least 1, not {threads}")
    examples, tag = _examples(slice_, dataset, split, n, seed, data_root)
    _check_databases(examples)
    base_records = _baseline_records(baseline)
    prog, name = program_from(program, set_ or [], preset)
    identity = run_identity(program or name, prog, model, api_base)
    stem = run_stem(program or name, prog, name)
    out = out or Path("runs") / f"{stem}-{tag}-{model_tag(model)}.jsonl"
    check_writable(out, "--out")
    configure_lm(model, api_base, lm_threads, prompt_lookup)
    run = {"num_threads": threads, "resume": resume, "progress": progress}
    summary = _run(prog.program, examples, out, identity, strict_gold=strict_gold, **run)
    record_provenance(out)
    _report(summary, out, base_records, baseline, json_)


def _examples(
    slice_: str | None, dataset: str, split: str, n: int, seed: int, data_root: Path | None
) -> tuple[list[Any], str]:
    """The questions to evaluate and the tag of their default file name."""
    from sqlweave.data import eval_slice, load_slice

    if slice_ is not None:
        try:
            return load_slice(slice_, root=data_root), slice_
        except Exception as err:
            fail(str(err))
    examples = load_examples(dataset, split, data_root)
    examples = eval_slice(examples, n=n or None, seed=seed)
    return examples, f"{Path(dataset).stem}-{split}-n{len(examples)}"


def _check_databases(examples: list[Any]) -> None:
    """Every database the questions name opens, before the model loads (one line otherwise)."""
    from sqlweave.compile_plan import check_databases
    from sqlweave.data import DataError

    try:
        check_databases(examples)
    except DataError as err:
        fail(str(err))


def _baseline_records(baseline: Path | None) -> list[dict[str, Any]] | None:
    """The records of ``--baseline``, read before the model loads (None: no baseline)."""
    from sqlweave.evaluate import read_records

    if baseline is None:
        return None
    if not baseline.exists():
        fail(f"--baseline {baseline} not found (an earlier evaluate's records file)")
    try:
        records = read_records(baseline)
    except (OSError, ValueError) as err:
        fail(f"cannot read --baseline {baseline}: {err}")
    if not records:
        fail(f"--baseline {baseline} holds no records")
    return records


def _run(
    program: Any,
    examples: list[Any],
    out: Path,
    identity: dict[str, Any],
    *,
    strict_gold: bool,
    **options: Any,
) -> dict[str, Any]:
    """The evaluation, each way it can stop said in one line (Ctrl-C: how to resume)."""
    from sqlweave.db import ExecutionError
    from sqlweave.evaluate import evaluate as run_eval
    from sqlweave.failures import LMUnavailableError
    from sqlweave.metrics import GoldQueryError
    from sqlweave.programs.stages.confidence import record_confidence

    try:
        return run_eval(
            program,
            examples,
            out_path=out,
            strict_gold=strict_gold,
            identity=identity,
            judge=record_confidence,
            **options,
        )
    except ValueError as err:  # --out holds another dataset's records, or another run's
        fail(str(err))
    except LMUnavailableError as err:  # the model endpoint is down: nothing was recorded
        fail(str(err))
    except GoldQueryError as err:  # --strict-gold
        fail(str(err))
    except ExecutionError as err:  # a database that cannot be opened at all
        fail(err.feedback())
    except OSError as err:  # the disk filled up, the folder went away
        fail(f"cannot write --out {out}: {err.strerror or err}")
    except KeyboardInterrupt:
        typer.secho(
            f"interrupted; the finished questions are in {out}: run the same command to resume",
            fg=typer.colors.YELLOW,
            err=True,
        )
        raise typer.Exit(code=130) from None


def _report(
    summary: dict[str, Any],
    out: Path,
    base_records: list[dict[str, Any]] | None,
    baseline: Path | None,
    json_: bool,
) -> None:
    """Print the summary (text or one JSON object); exit 1 when questions failed outside
    their SQL."""
    payload = summary_json(summary, out) if json_ else None
    if not json_:
        print_summary(summary)
        gold_failed = sum(r.get("gold_error") is not None for r in summary["records"])
        if gold_failed:
            typer.secho(
                f"  {gold_failed} gold quer{'y' if gold_failed == 1 else 'ies'} could not be "
                "compared (scored as misses; see gold_error in the records, or use --strict-gold)",
                fg=typer.colors.YELLOW,
            )
    if base_records is not None:
        _compare(summary, base_records, baseline, payload)
    failed = summary["failed"]
    if payload is not None:
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


def _compare(
    summary: dict[str, Any],
    base_records: list[dict[str, Any]],
    baseline: Path | None,
    payload: dict[str, Any] | None,
) -> None:
    """The paired comparison with ``--baseline``: into ``payload`` (--json) or printed."""
    from sqlweave.evaluate import compare

    try:
        cmp = compare(summary["records"], base_records)
    except ValueError as err:
        fail(f"--baseline {baseline}: {err}")
    if payload is not None:
        payload["baseline"] = {
            "path": str(baseline),
            "delta_points": round(100 * cmp["delta"], 2),
            "ci95_points": [round(100 * v, 2) for v in cmp["delta_interval"]],
            "n_shared": cmp["n"],
            "only_run": cmp["only_run"],
            "only_baseline": cmp["only_baseline"],
            "mcnemar_p": cmp["p"],
        }
        return
    low, high = cmp["delta_interval"]
    typer.echo(
        f"vs {baseline}: {cmp['delta'] * 100:+.1f} points on {cmp['n']} shared questions "
        f"[{low * 100:+.1f}, {high * 100:+.1f}], only this run {cmp['only_run']}, only the "
        f"baseline {cmp['only_baseline']}, McNemar p = {cmp['p']:.3g}"
    )
