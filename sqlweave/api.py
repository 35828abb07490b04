"""The Python API: compile a program, save it, load it, ask it questions.

```python
import sqlweave
from sqlweave.data import load_spider

sqlweave.configure("local:qwen2.5-coder-0.5b")
p = sqlweave.compile("direct", load_spider("train")[:40], optimizer="bootstrap", budget=40)
p.save("direct.json")

p = sqlweave.load("direct.json")
r = p("How many singers are there?", db="concert_singer.sqlite")
r.sql, r.columns, r.rows, r.error      # the SQL, its result (run read-only), or why it failed
r.steps                                 # the program's other outputs (schema shown, raw text, ...)
```

Design: :func:`compile` and :func:`load` return a :class:`CompiledProgram`, a ``dspy.Module``
that wraps the :class:`~sqlweave.programs.SQLProgram` (``p.program``) with its provenance
(``p.meta``). Calling it runs the program and then executes the SQL read-only, returning a
:class:`Result`, which is a ``dspy.Prediction`` (``.sql`` as every program output has, plus the
rows). So ``p`` drops into a user's own DSPy program as any module would, and DSPy optimizers and
:func:`sqlweave.evaluate.evaluate` accept it; use ``p.program`` for the bare program whose
output is the program's own prediction without execution.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dspy

from sqlweave.db import Database, ExecutionError
from sqlweave.optimizers.artifact import ArtifactMeta, load_program, save_program, trainset_hash
from sqlweave.programs import SQLProgram, get, resolve_database

logger = logging.getLogger(__name__)


class Result(dspy.Prediction):
    """A program's answer: ``sql``, and its execution: ``columns``, ``rows``, ``truncated``, or
    ``error`` (an :class:`~sqlweave.db.ExecutionError`, None when the SQL ran). ``confidence``:
    the calibrated probability that the answer is right (:mod:`sqlweave.programs.confidence`; None when
    not judged), ``low_confidence`` when it is under the shipped threshold, ``alternatives``:
    the other readings among the candidates (dicts of ``sql``, ``columns``, ``rows``,
    ``share``). ``steps`` holds the program's other outputs, ``prediction`` the program's own
    ``dspy.Prediction``."""

    @property
    def ok(self) -> bool:
        """Whether there is SQL and it ran."""
        return bool(self.get("sql")) and self.get("error") is None

    def table(self, max_rows: int = 20) -> str:
        """The result as text: a header line and rows, or the error."""
        if self.get("error") is not None:
            return self.error.feedback()
        from sqlweave.db import QueryResult

        return QueryResult(tuple(self.columns), tuple(self.rows), bool(self.truncated)).preview(
            max_rows=max_rows, max_chars=100_000
        )


def _run_sql(sql: str, database: Database, max_rows: int, timeout_s: float) -> dict[str, Any]:
    if not sql:
        return {
            "columns": (),
            "rows": (),
            "truncated": False,
            "error": ExecutionError("syntax", "the program returned no SQL"),
        }
    outcome = database.try_execute(sql, timeout_s=timeout_s, max_rows=max_rows)
    if isinstance(outcome, ExecutionError):
        return {"columns": (), "rows": (), "truncated": False, "error": outcome}
    return {
        "columns": outcome.columns,
        "rows": outcome.rows,
        "truncated": outcome.truncated,
        "error": None,
    }


def _judged(
    question: str,
    candidates: Any,
    sql: str,
    database: Database,
    recalibration: dict[str, float] | None = None,
) -> dict[str, Any]:
    """``confidence``, ``low_confidence`` and ``alternatives`` for a Result; judging that
    fails (a candidate that breaks the executor, a missing model file) leaves them empty and
    never fails the answer."""
    from sqlweave.programs.confidence import assess

    empty = {"confidence": None, "low_confidence": None, "alternatives": []}
    if not sql:
        return empty
    pool = [str(c) for c in candidates] if isinstance(candidates, list | tuple) else [sql]
    try:
        judged = assess(question, pool or [sql], sql, database, recalibration=recalibration)
    except Exception:  # noqa: BLE001 - confidence is advice; the answer stands without it
        logger.debug("could not judge the answer's confidence", exc_info=True)
        return empty
    return {
        "confidence": judged.confidence,
        "low_confidence": judged.low,
        "alternatives": [a.as_dict() for a in judged.alternatives],
    }


class CompiledProgram(dspy.Module):
    """A program plus its provenance; calling it answers with SQL *and* the SQL's result."""

    def __init__(self, program: SQLProgram, meta: ArtifactMeta | None = None) -> None:
        super().__init__()
        self.program = program
        self.meta = meta or ArtifactMeta(
            program=getattr(program, "name", type(program).__name__),
            switches=dict(getattr(program, "switches", {})),
        )

    def __repr__(self) -> str:
        return (
            f"CompiledProgram({self.meta.program!r}, optimizer={self.meta.optimizer!r}, "
            f"val_ex_pct={self.meta.val_ex_pct})"
        )

    def forward(
        self,
        question: str,
        db: Database | str | Path | None = None,
        *,
        db_path: str | None = None,
        evidence: str = "",
        max_rows: int = 1000,
        timeout_s: float = 30.0,
        confidence: bool = True,
        **kwargs: Any,
    ) -> Result:
        """Answer ``question`` over ``db`` (a path, URL or open Database) and run the SQL;
        ``confidence=False`` skips judging the answer (:mod:`sqlweave.programs.confidence`).

        A database that cannot be opened raises :class:`~sqlweave.db.ExecutionError` before any
        LM call; SQL that fails to run is reported in ``Result.error``, never raised.
        """
        database = resolve_database(db, db_path)
        pred = self.program(question=question, db=database, evidence=evidence or "", **kwargs)
        sql = (pred.get("sql") if isinstance(pred, dspy.Prediction) else None) or ""
        steps = {k: v for k, v in pred.items() if k != "sql"} if pred is not None else {}
        refit = self.meta.extra.get("confidence")
        judged = (
            _judged(question, steps.get("candidates"), sql, database, refit) if confidence else {}
        )
        return Result(
            sql=sql,
            **_run_sql(sql, database, max_rows, timeout_s),
            **judged,
            steps=steps,
            prediction=pred,
        )

    def ask(self, question: str, db: Database | str | Path, **kwargs: Any) -> Result:
        """Same as calling the program; reads well in scripts."""
        return self(question, db=db, **kwargs)

    def save(self, path: str | Path) -> Path:
        """Write the self-describing artefact (state + provenance) to ``path``."""
        return save_program(self.program, path, self.meta)


def load(path: str | Path) -> CompiledProgram:
    """Rebuild a compiled program from its artefact; :class:`ArtifactError` says what is wrong."""
    if not isinstance(path, str | Path):
        raise ValueError(f"path must be a file path, not {type(path).__name__}")
    program, meta = load_program(path)
    return CompiledProgram(program, meta)


def _as_program(
    program: SQLProgram | CompiledProgram | str | None,
    switches: dict[str, Any],
    preset: str | None = None,
) -> SQLProgram:
    """The program a caller named: an instance, an artefact path, a registry name, or a preset
    (none of them: the default preset, :mod:`sqlweave.programs.presets`)."""
    if _given(program):
        if preset is not None:
            raise ValueError("preset= builds a program; it cannot apply to a program given")
        if isinstance(program, CompiledProgram):
            return program.program
        if isinstance(program, SQLProgram):
            return program
        return load_program(program)[0]
    return preset_meta(None if program is None else str(program), preset, switches)[0]


def _given(program: Any) -> bool:
    """Whether ``program`` is a built program or an artefact's path (not a name to build)."""
    return isinstance(program, CompiledProgram | SQLProgram) or (
        isinstance(program, str | Path)
        and (Path(program).suffix == ".json" or Path(program).is_file())
    )


def preset_meta(
    program: str | None, preset: str | None, switches: dict[str, Any]
) -> tuple[SQLProgram, ArtifactMeta]:
    """A program built from a registry name or a preset, with the provenance an artefact keeps
    (the preset's name in ``extra["preset"]``)."""
    from sqlweave.programs.presets import resolve

    name, resolved, chosen = resolve(program, preset, switches)
    meta = ArtifactMeta(program=name, switches=resolved)
    if chosen is not None:
        meta.extra["preset"] = chosen
    return get(name, **resolved), meta


def _registry_names() -> list[str]:
    from sqlweave.programs import available

    return available()


def _lm_spec() -> str | None:
    from sqlweave.lm import LMSpecError, spec_of

    lm = dspy.settings.lm
    if lm is None:
        return None
    try:
        return spec_of(lm)
    except (LMSpecError, AttributeError):
        return getattr(lm, "model", None)


#: Demonstrations per predictor: one default for ``sqlweave.compile`` and ``sqlweave compile``.
DEFAULT_MAX_DEMOS = 2
#: Validation questions the default validation policy takes.
DEFAULT_N_VAL = 20
#: The named slice whose databases no default demo pool uses (:func:`sqlweave.data.load_slice`).
HELD_OUT_SLICE = "spider-train-val"


def default_validation(
    trainset: Sequence[dspy.Example], *, n_val: int = DEFAULT_N_VAL, seed: int = 0
) -> tuple[list[dspy.Example], list[dspy.Example], str]:
    """The compile policy when no validation set is given: ``(train, val, how)``.

    A compile should choose what carries over to databases it has not seen, as a user's are, so
    validation questions come from databases the demo pool never sees. Spider train questions
    validate on the first ``n_val`` of ``spider-train-val`` (train keeps none of its databases)
    where that slice's databases exist; any other train set holds out whole databases, drawn in
    a seeded order until they hold a fifth of the questions, and validates on up to ``n_val`` of
    theirs; a train set on one database falls back to a seeded fifth of its questions.
    """
    from sqlweave.data import DataError, load_slice

    trainset = list(trainset)
    if trainset and all(
        ex.get("source") == "spider" and ex.get("split") == "train" for ex in trainset
    ):
        # The slice's questions come from the same Spider folder as the train questions.
        # (<spider>/database/<db_id>/<db_id>.sqlite): no such path, no slice.
        parents = Path(str(trainset[0].get("db_path") or "")).parents
        try:
            whole = load_slice(HELD_OUT_SLICE, root=parents[2]) if len(parents) > 2 else []
        except DataError:
            whole = []
        if whole:
            held = {ex.db_id for ex in whole}
            train = [ex for ex in trainset if ex.db_id not in held]
            if train:
                return (
                    train,
                    whole[: n_val or None],
                    (f"{HELD_OUT_SLICE}, databases the demos never saw"),
                )
    databases = sorted({str(ex.get("db_id")) for ex in trainset})
    if len(databases) < 2:
        from sqlweave.optimizers.compile import split_train_val

        train, val = split_train_val(trainset, seed=seed)
        return train, val[: n_val or None], "a seeded 20% of the train questions (one database)"
    import random

    random.Random(f"validation:{seed}").shuffle(databases)
    held: set[str] = set()
    count = 0
    for db_id in databases[:-1]:  # at least one database stays for the demos
        if count * 5 >= len(trainset):
            break
        held.add(db_id)
        count += sum(str(ex.get("db_id")) == db_id for ex in trainset)
    val = [ex for ex in trainset if str(ex.get("db_id")) in held]
    train = [ex for ex in trainset if str(ex.get("db_id")) not in held]
    random.Random(seed).shuffle(val)
    return (
        train,
        val[: n_val or None],
        (f"{len(held)} held-out train database(s) the demos never saw"),
    )


def compile(  # noqa: A001 - the verb users look for; shadows the builtin only in this module
    program: SQLProgram | CompiledProgram | str | None = None,
    trainset: Sequence[dspy.Example | dict[str, Any]] | None = None,
    valset: Sequence[dspy.Example | dict[str, Any]] | None = None,
    *,
    preset: str | None = None,
    db: Database | str | Path | Sequence[Database | str | Path] | None = None,
    synthesize: int | None = None,
    synthetic_out: str | Path | None = None,
    synthesis_check: bool | None = None,
    synthetic_val_fraction: float | None = None,
    optimizer: str = "bootstrap",
    metric: Callable[..., Any] | None = None,
    budget: int | None = None,
    max_demos: int = DEFAULT_MAX_DEMOS,
    n_val: int | None = None,
    seed: int = 0,
    proposer_lm: Any = None,
    checkpoint: str | Path | None = None,
    progress: bool = True,
    candidates: int = 2,
    options: dict[str, Any] | None = None,
    **switches: Any,
) -> CompiledProgram:
    """Optimize ``program`` (an instance, or a registry name built with ``switches``; or
    ``preset``, a named configuration of :mod:`sqlweave.programs.presets` that ``switches``
    override; neither: the default preset, its name kept in the artefact) on
    ``trainset`` with the current DSPy LM, score it on ``valset`` and return it with provenance.

    ``trainset`` and ``valset`` hold ``dspy.Example`` objects, dicts or :func:`sqlweave.Example`
    items (``question``, ``sql``, ``db``); they are checked before any optimizer runs, and one
    :class:`~sqlweave.data.DataError` names every missing field (:func:`sqlweave.examples.as_examples`).
    ``optimizer`` is a registered name or a sequence such as ``"search+bootstrap"``;
    ``options`` go to the optimizers that take them (the switch search: ``space``,
    ``n_trials``, ``val_size``, ``sampler``). ``valset=None`` applies
    :func:`default_validation`: ``n_val`` questions from databases the demos never see (the same
    policy as ``sqlweave compile``). ``budget`` caps the optimizer's LM calls (see
    :mod:`sqlweave.optimizers.compile`); the validation run is not counted in it but its calls
    are recorded too. ``checkpoint`` names a file that lets an interrupted compile resume without
    repeating finished LM work; it also keeps the calls made so far, so the budget caps the
    compile across resumes and ``meta.lm_calls`` is the total of all its runs. The artefact
    records the compiled program's switches (the search's choice), the optimizer's details
    (the search history) and how validation was chosen (``meta.extra["validation"]``).

    **No labelled questions?** Give ``db`` (a SQLite path, a SQLAlchemy URL or an open
    Database, or a list of them) and ``synthesize=N`` instead of ``trainset``: N pairs are
    synthesized for each database with the configured LM
    (:func:`sqlweave.synthesis.sets.synthetic_sets`; ``synthesis_check=False`` skips the
    round trip), written to ``synthetic_out`` (default: a file per database in
    ``~/.cache/sqlweave/synthetic``; a rerun resumes it), split by a seeded shuffle into train
    and validation (``synthetic_val_fraction`` of each database's pairs, at most ``n_val``;
    with a ``valset`` every pair trains), and compiled on as any train set is. Left as None,
    the three follow the optimizer (:func:`sqlweave.synthesis.sets.synthesis_defaults`):
    a switch search alone needs no demos, only validation that tells configurations apart, so
    it gets pairs the round trip did not filter, 90 % of them validating, all of them
    (``n_val`` no cap); an optimizer that learns demos gets the round trip, a fifth validating,
    at most ``n_val`` (default 20). The artefact records the set in
    ``meta.extra["synthetic"]``: its sha256, its size, each database (password redacted) and
    the synthesis's LM calls. ``trainset`` and ``synthesize`` do not combine
    (``ValueError``): to add labelled questions, synthesize to a file with
    :func:`sqlweave.synthesize` and pass both lists as ``trainset``.
    """
    from sqlweave.evaluate import evaluate
    from sqlweave.examples import as_examples
    from sqlweave.lm import track_usage
    from sqlweave.optimizers.compile import run_optimizer

    if synthesize is not None or db is not None:
        if trainset is not None:
            raise ValueError(
                "give a trainset or db= with synthesize=N, not both (to combine them, "
                "synthesize to a file with sqlweave.synthesize and pass both as trainset)"
            )
        if synthesize is None or db is None:
            raise ValueError("db= and synthesize=N go together: N pairs for each database in db")
    elif trainset is None:
        raise ValueError("compile needs a trainset, or db=PATH_OR_URL and synthesize=N to make one")
    else:
        trainset = as_examples(trainset, what="trainset")
    if valset is not None:
        valset = as_examples(valset, what="valset")
    if synthesize is not None:
        from sqlweave.synthesis.sets import synthesis_defaults

        recipe = synthesis_defaults(optimizer, valset_given=valset is not None)
        synthesis_check = recipe.check if synthesis_check is None else synthesis_check
        if synthetic_val_fraction is None:
            synthetic_val_fraction = recipe.val_fraction
        if n_val is None and recipe.n_val is not None:
            n_val = recipe.n_val
    n_val = DEFAULT_N_VAL if n_val is None else n_val
    if max_demos < 0 or n_val < 0:
        raise ValueError(f"max_demos and n_val must be 0 or more, not {max_demos} and {n_val}")
    preset_name = None
    if _given(program):
        student = _as_program(program, switches, preset)
    else:  # built once, from a name or a preset: the preset's name goes into the artefact
        student, built = preset_meta(program, preset, switches)
        program, preset_name = built.program, built.extra.get("preset")
    synthetic = None
    if synthesize is not None:
        from sqlweave.synthesis.sets import synthetic_sets

        if dspy.settings.lm is None:
            raise ValueError(
                "synthesize=N writes questions with the configured LM, and none is: call "
                "sqlweave.configure(MODEL) first"
            )
        if synthesis_check and valset is None and "search" in optimizer.split("+"):
            logger.warning(
                "the switch search validates on synthesized pairs the round trip kept: those are "
                "the questions %s as it is already answers, so no other configuration can beat "
                "it there; synthesize without the round trip (synthesis_check=False, "
                "--no-synthesis-check) for a search",
                getattr(student, "name", "the program"),
            )
        synthetic = synthetic_sets(
            db,
            synthesize,
            out=synthetic_out,
            seed=seed,
            n_val=n_val,
            val_fraction=synthetic_val_fraction,
            check=synthesis_check,
            progress=progress,
        )
        trainset = synthetic.train
        if valset is not None:
            trainset = trainset + synthetic.val
        else:
            valset = synthetic.val
    assert trainset is not None
    if isinstance(program, CompiledProgram):
        name = program.meta.program
    elif isinstance(program, str) and program in _registry_names():
        name = program
    else:
        name = getattr(student, "name", type(student).__name__)
    if valset is None:
        trainset, valset, how = default_validation(trainset, n_val=n_val, seed=seed)
        logger.info("validating on %s", how)
    elif synthetic is not None and valset is synthetic.val:
        how = (
            f"a seeded {100 * synthetic_val_fraction:g} % of each database's synthesized pairs"
            f"{'' if synthesis_check else ' (no round trip)'}"
        )
    else:
        how = "given"
    valset = list(valset)
    outcome = run_optimizer(
        student,
        trainset,
        valset,
        optimizer=optimizer,
        metric=metric,
        budget=budget,
        max_demos=max_demos,
        seed=seed,
        proposer_lm=proposer_lm,
        checkpoint=checkpoint,
        progress=progress,
        candidates=candidates,
        **(options or {}),
    )
    report = outcome.report
    val_ex_pct = None
    val_calls = 0
    from sqlweave.programs.confidence import record_confidence

    refit = None
    if valset:
        with track_usage() as usage:
            summary = evaluate(
                outcome.program, valset, out_path=None, progress=progress, judge=record_confidence
            )
        val_ex_pct, val_calls = 100 * summary["ex"], usage.calls
        refit = _refit_confidence(summary["records"])
    meta = ArtifactMeta(
        program=name,
        switches=dict(getattr(outcome.program, "switches", getattr(student, "switches", {}))),
        lm=_lm_spec(),
        optimizer=optimizer,
        trainset_hash=trainset_hash(trainset),
        val_ex_pct=val_ex_pct,
        budget=budget,
        lm_calls=report.lm_calls,
        compile_seconds=report.seconds,
        n_train=len(trainset),
        n_val=len(valset),
        extra={
            "max_demos": max_demos,
            "seed": seed,
            "validation": how,
            "budget_exhausted": report.budget_exhausted,
            "cached_calls": report.cached_calls,
            "resumed_units": report.resumed_units,
            "resumed_calls": report.resumed_calls,
            "val_lm_calls": val_calls,
            "proposer_lm": proposer_lm if isinstance(proposer_lm, str) else None,
            **({"details": report.details} if report.details else {}),
            **({"synthetic": synthetic.record} if synthetic is not None else {}),
            **({"preset": preset_name} if preset_name is not None else {}),
            **({"confidence": refit} if refit is not None else {}),
        },
    )
    logger.info(
        "compiled %s with %s: %d LM calls, %.1fs, validation EX %s%%",
        meta.program,
        optimizer,
        report.lm_calls,
        report.seconds,
        "n/a" if val_ex_pct is None else f"{val_ex_pct:.1f}",
    )
    return CompiledProgram(outcome.program, meta)


def _refit_confidence(records: Sequence[dict[str, Any]]) -> dict[str, float] | None:
    """The confidence refitted on the compile's validation answers (Platt scaling of the
    shipped model, :func:`sqlweave.confidence.recalibrate`), or None when too few."""
    from sqlweave.confidence import recalibrate

    judged = [r for r in records if isinstance(r.get("confidence"), int | float)]
    return recalibrate(
        [float(r["confidence"]) for r in judged], [bool(r.get("correct")) for r in judged]
    )


def ask(
    question: str,
    db: Database | str | Path,
    program: SQLProgram | CompiledProgram | str | None = None,
    *,
    preset: str | None = None,
    model: str | None = None,
    evidence: str = "",
    **switches: Any,
) -> Result:
    """One question, one answer: ``program`` is a registry name, an artefact path or a program;
    ``preset`` a named configuration (:mod:`sqlweave.programs.presets`; neither: the default
    preset); ``switches`` override the preset's or the program's; ``model`` an LM spec
    (default: the LM already configured in DSPy).

    Raises what ``sqlweave ask`` reports: :class:`~sqlweave.db.ExecutionError` for a database
    that cannot be opened, :class:`~sqlweave.failures.LMUnavailableError` for a model endpoint
    that cannot answer, :class:`~sqlweave.failures.ProgramError` for anything else the program
    raised (``ValueError`` for arguments of the wrong type). SQL that fails to run is reported
    in ``Result.error``, not raised.
    """
    from sqlweave.failures import as_program_error, endpoint_guard

    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"question must be a non-empty string, not {question!r}")
    if not isinstance(db, Database | str | Path):
        raise ValueError(f"db must be a Database, a path or a URL, not {type(db).__name__}")
    if model is not None and not isinstance(model, str):
        raise ValueError(f"model must be an LM spec string, not {type(model).__name__}")
    wrapped = (
        program
        if isinstance(program, CompiledProgram)
        else CompiledProgram(_as_program(program, switches, preset))
    )
    try:
        if model is None:
            with endpoint_guard():
                return wrapped(question, db=db, evidence=evidence)
        from sqlweave.lm import build_lm

        with dspy.context(lm=build_lm(model)), endpoint_guard():
            return wrapped(question, db=db, evidence=evidence)
    except ExecutionError:
        raise
    except Exception as err:  # the LM or the program: the error the command line reports
        raise as_program_error(err) from err


def configure(model: str = "local:qwen2.5-coder-1.5b", **options: Any) -> Any:
    """Make ``model`` DSPy's default LM (see :func:`sqlweave.lm.configure`)."""
    from sqlweave.lm import configure as _configure

    return _configure(model, **options)
