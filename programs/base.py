"""What every sqlweave program shares: resolving the database a question is asked of.

Programs are called with the same keyword inputs as the benchmark examples (``question``,
``db_id``, ``evidence``, ``db_path``) or, from the Python API, with ``db=`` naming a SQLite file, a
SQLAlchemy URL or an open :class:`~sqlweave.db.Database`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy

from sqlweave.db import Database, ExecutionError

logger = logging.getLogger(__name__)


def resolve_database(
    db: Database | str | Path | None = None, db_path: str | None = None
) -> Database:
    """Return an open database for ``db`` (preferred) or ``db_path``; opened handles are reused."""
    if isinstance(db, Database):
        return db
    target = db if db is not None else db_path
    if target is None:
        raise ExecutionError("connection", "no database given: pass db=PATH_OR_URL (or db_path)")
    from sqlweave.caches import open_database

    return open_database(target)


class SQLProgram(dspy.Module):
    """Base class of the text-to-SQL programs. Subclasses implement :meth:`answer`.

    ``switches`` records the constructor arguments so a compiled program can be rebuilt from its
    saved artefact.
    """

    name: str = "program"

    def __init__(self, **switches: Any) -> None:
        super().__init__()
        self.switches = dict(switches)

    def forward(
        self,
        question: str,
        db: Database | str | Path | None = None,
        *,
        db_path: str | None = None,
        evidence: str = "",
        db_id: str | None = None,
        **_: Any,
    ) -> dspy.Prediction:
        from sqlweave.adapter import use_default_adapter

        database = resolve_database(db, db_path)
        # Small local models need plain prompts; a user-configured adapter still wins.
        with use_default_adapter():
            return self.answer(question=question, db=database, evidence=evidence or "")

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        raise NotImplementedError


def predict_sql(predictor: dspy.Predict, *, field: str = "sql", **inputs: Any) -> tuple[str, str]:
    """Call a SQL-writing predictor and return ``(sql, raw_text)``; never raises on model garbage.

    A small model that ignores the output format often still wrote a usable query, so on an
    :class:`AdapterParseError` the raw completion is kept and cleaned with
    :func:`sqlweave.sqltext.extract_sql`. Pass per-call demos as ``demos=[...]`` (DSPy's
    ``Predict`` uses them instead of its own ``.demos`` for that call).
    """
    from dspy.utils.exceptions import AdapterParseError

    from sqlweave.sqltext import extract_sql

    try:
        out = predictor(**inputs)
        raw = str(getattr(out, field, "") or "")
    except AdapterParseError as err:
        raw = err.lm_response or ""
        logger.debug("unparsed LM output kept as raw text: %s", raw[:200])
    return extract_sql(raw), raw


class Generator(dspy.Predict):
    """The generator stage: a SQL-writing predictor that never raises on model garbage.

    A ``dspy.Predict`` of ``signature`` (so optimizers see and tune it like any predictor, under
    the attribute name the program gives it), whose call returns ``Prediction(sql, raw)``: the
    ``field`` output cleaned by :func:`sqlweave.sqltext.extract_sql`, and the raw text (kept on an
    ``AdapterParseError``, see :func:`predict_sql`). Per-call ``demos`` (retrieved for this
    question) are appended to the compiled ones, best last. It installs sqlweave's adapter itself,
    so the block sends the same prompt inside a user's own DSPy module as inside a sqlweave
    program (a user-configured adapter still wins).
    """

    def __init__(
        self,
        signature: Any = None,
        field: str = "sql",
        layout: str | None = None,
        prefill: bool | None = None,
        **config: Any,
    ) -> None:
        if signature is None:
            from sqlweave.signatures import GenerateSQL

            signature = GenerateSQL
        if layout is not None:
            from sqlweave.adapter import check_layout

            check_layout(layout, "prompt layout")
        super().__init__(signature, **config)
        self.field = field
        #: The prompt layout of sqlweave's adapter for this predictor (None: the adapter's own).
        self.layout = layout
        #: False: never prefill ``SELECT`` for this predictor (None: the adapter's own setting).
        self.prefill = None if prefill is None else ("auto" if prefill else False)

    def forward(self, **kwargs: Any) -> dspy.Prediction:
        from dspy.utils.exceptions import AdapterParseError

        from sqlweave.adapter import use_default_adapter
        from sqlweave.sqltext import extract_sql

        extra = kwargs.pop("demos", None)
        if extra:
            kwargs["demos"] = [*self.demos, *extra]
        with use_default_adapter(self.layout, self.prefill):
            try:
                out = super().forward(**kwargs)
                raw = str(getattr(out, self.field, "") or "")
            except AdapterParseError as err:
                raw = err.lm_response or ""
                logger.debug("unparsed LM output kept as raw text: %s", raw[:200])
        return dspy.Prediction(sql=extract_sql(raw), raw=raw)

    def candidate_reader(self) -> Callable[[str], str] | None:
        """How the answer of this predictor's next LM call (the assistant message, a prefilled
        start included) becomes the ``sql`` it returns, when that text alone decides it; None
        when it does not.

        The adapter is the one :meth:`forward` would use (sqlweave's unless the user set one);
        an adapter that reads a completion as plain text says how (``output_reader``, as
        :class:`~sqlweave.adapter.SQLAdapter` does). Another may parse markers or ask the LM
        again, so the text alone does not give the answer. A settling
        :class:`~sqlweave.programs.voting.Sampler` hands the reader to the local engine, which
        then judges the samples it decodes as the candidates they will be.
        """
        from sqlweave.adapter import use_default_adapter
        from sqlweave.sqltext import extract_sql

        with use_default_adapter(self.layout, self.prefill):
            adapter = dspy.settings.adapter
        output_reader = getattr(adapter, "output_reader", None)
        parse = output_reader(self.signature) if callable(output_reader) else None
        if parse is None:
            return None
        field = self.field

        def candidate_of(answer: str) -> str:
            return extract_sql(str(parse(answer).get(field, "") or ""))

        return candidate_of
