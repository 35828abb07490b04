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

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dspy

from sqlweave.compile_plan import (
    DEFAULT_MAX_DEMOS,
    DEFAULT_N_TRAIN,
    DEFAULT_N_VAL,
    HELD_OUT_SLICE,
    CompilePlan,
    Named,
    _refit_confidence,
    default_validation,
)
from sqlweave.compiled import (
    CompiledProgram,
    Result,
    _as_program,
    _given,
    load,
    preset_meta,
)
from sqlweave.db import Database, ExecutionError
from sqlweave.programs import SQLProgram

__all__ = [
    "DEFAULT_MAX_DEMOS",
    "DEFAULT_N_TRAIN",
    "DEFAULT_N_VAL",
    "HELD_OUT_SLICE",
    "CompiledProgram",
    "Named",
    "Result",
    "_as_program",
    "_given",
    "_refit_confidence",
    "ask",
    "compile",
    "configure",
    "default_validation",
    "load",
    "preset_meta",
]


def compile(  # noqa: A001 - the verb users look for; shadows the builtin only in this module
    program: SQLProgram | CompiledProgram | str | None = None,
    trainset: Sequence[dspy.Example | dict[str, Any]] | Named | None = None,
    valset: Sequence[dspy.Example | dict[str, Any]] | Named | None = None,
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
    n_train: int | None = None,
    **switches: Any,
) -> CompiledProgram:
    """Optimize ``program`` (an instance, or a registry name built with ``switches``; or
    ``preset``, a named configuration of :mod:`sqlweave.programs.presets` that ``switches``
    override; neither: the default preset, its name kept in the artefact) on
    ``trainset`` with the current DSPy LM, score it on ``valset`` and return it with provenance.

    The policy is the compile plan's (:mod:`sqlweave.compile_plan`), the one ``sqlweave
    compile`` runs too. ``trainset`` and ``valset`` hold ``dspy.Example`` objects, dicts or
    :func:`sqlweave.Example` items (``question``, ``sql``, ``db``), checked before any optimizer
    runs (one :class:`~sqlweave.data.DataError` names every missing field), or a
    :class:`~sqlweave.compile_plan.Named` source as the command line's ``--train``/``--val``
    (``Named("spider")``, ``Named("spider-train-val")``); ``n_train`` draws that many train
    questions (seeded; default: all of a list, 24 of a named source). ``valset=None`` applies
    :func:`default_validation`: ``n_val`` questions from databases the demos never see; a
    valset you give that overlaps train is a warning. ``optimizer`` is a registered name or a
    sequence such as ``"search+bootstrap"``; ``options`` go to the optimizers that take them
    (the switch search: ``space``, ``n_trials``, ``val_size``, ``sampler``). ``budget`` caps the
    optimizer's LM calls across resumes of a ``checkpoint`` (a file that lets an interrupted
    compile resume without repeating finished LM work; :mod:`sqlweave.optimizers.compile`).

    **No labelled questions?** Give ``db`` (a path, URL or open Database, or a list of them)
    and ``synthesize=N`` instead of ``trainset``: N pairs are synthesized for each database with
    the configured LM (:func:`sqlweave.synthesis.sets.synthetic_sets`) into ``synthetic_out``
    (default: a file per database in ``~/.cache/sqlweave/synthetic``; a rerun resumes it), split
    by a seeded shuffle (``synthetic_val_fraction`` of each database's pairs validate, at most
    ``n_val``; with a ``valset`` every pair trains). Left as None, ``synthesis_check`` (the round
    trip), the fraction and ``n_val`` follow the optimizer
    (:func:`sqlweave.synthesis.sets.synthesis_defaults`). The artefact records the set in
    ``meta.extra["synthetic"]``. ``trainset`` and ``synthesize`` do not combine (``ValueError``):
    synthesize to a file with :func:`sqlweave.synthesize` and pass both lists as ``trainset``.
    """
    plan = CompilePlan(
        program,
        trainset,
        valset,
        preset=preset,
        switches=switches,
        n_train=n_train,
        n_val=n_val,
        db=db,
        synthesize=synthesize,
        synthetic_out=synthetic_out,
        synthesis_check=synthesis_check,
        synthetic_val_fraction=synthetic_val_fraction,
        optimizer=optimizer,
        metric=metric,
        budget=budget,
        max_demos=max_demos,
        seed=seed,
        proposer_lm=proposer_lm,
        checkpoint=checkpoint,
        progress=progress,
        candidates=candidates,
        options=dict(options or {}),
    )
    return plan.run()


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
