"""A compiled program and its answers: :class:`CompiledProgram` (a program with its provenance)
and :class:`Result` (the SQL and what running it returned), and the one way a caller names a
program: an instance, an artefact's path, a registry name or a preset.

:mod:`sqlweave.api` (``sqlweave.compile``, ``load``, ``ask``) and the compile plan
(:mod:`sqlweave.compile_plan`) both stand on this module; it holds no compile policy.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import dspy

from sqlweave.db import Database, ExecutionError
from sqlweave.optimizers.artifact import ArtifactMeta, load_program, save_program
from sqlweave.programs import SQLProgram, get, resolve_database

logger = logging.getLogger(__name__)


class Result(dspy.Prediction):
    """A program's answer: ``sql``, and its execution: ``columns``, ``rows``, ``truncated``, or
    ``error`` (an :class:`~sqlweave.db.ExecutionError`, None when the SQL ran). ``confidence``:
    the calibrated probability that the answer is right (:mod:`sqlweave.programs.stages.confidence`; None when
    not judged), ``low_confidence`` when it is under the shipped threshold, ``alternatives``:
    the other readings among the candidates (dicts of ``sql``, ``columns``, ``rows``,
    ``share``), ``caveats``: sentences on what the query says that the question does not
    (:mod:`sqlweave.caveats`; numbers it never states). ``steps`` holds the program's other
    outputs, ``prediction`` the program's own ``dspy.Prediction``."""

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
    from sqlweave.programs.stages.confidence import assess

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


def _caveats(question: str, sql: str, database: Database) -> list[str]:
    """What the query says that the question does not (:mod:`sqlweave.caveats`); advice, so a
    failure to read the query leaves none rather than failing the answer."""
    from sqlweave.caveats import caveats

    try:
        return caveats(question, sql, database.dialect) if sql else []
    except Exception:  # noqa: BLE001 - a caveat is advice; the answer stands without it
        logger.debug("could not read the query for caveats", exc_info=True)
        return []


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
        evidence: str = "",
        max_rows: int = 1000,
        timeout_s: float = 30.0,
        confidence: bool = True,
        db_path: str | None = None,
        **kwargs: Any,
    ) -> Result:
        """Answer ``question`` over ``db`` (a path, URL or open Database) and run the SQL;
        ``confidence=False`` skips judging the answer (:mod:`sqlweave.programs.stages.confidence`).

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
            caveats=_caveats(question, sql, database),
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
        isinstance(program, str | Path) and is_artifact_path(program)
    )


def is_artifact_path(program: str | Path) -> bool:
    """Whether ``program`` names an artefact file rather than a registry program: a ``.json``
    path, or an existing file whose name no program has (a file called ``direct`` in the
    working folder does not hide the program ``direct``)."""
    from sqlweave.programs import available

    path = Path(program)
    if path.suffix == ".json":
        return True
    return str(program) not in available() and path.exists()


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
