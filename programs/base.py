"""What every sqlweave program shares: resolving the database a question is asked of.

Programs are called with the same keyword inputs as the benchmark examples (``question``,
``db_id``, ``evidence``, ``db_path``) or, from the Python API, with ``db=`` naming a SQLite file, a
SQLAlchemy URL or an open :class:`~sqlweave.db.Database`.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

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

    **Switches are declared once**, as the constructor's parameters (with their type hints and
    defaults, which the CLI and the switch search read). Every subclass's ``__init__`` is wrapped
    so that, before its body runs, each switch is bound (defaults applied), stored as an attribute
    of the same name and recorded in ``switches``, from which a compiled program is rebuilt
    (:func:`sqlweave.optimizers.load_program`). The body only validates, builds the stages and
    overrides what it derives (``self.x = ...``, or ``self.switches["x"] = ...`` to save a
    normalised value). The stage roles (``linker``, ``selector``, ``corrector``) are recorded by
    registry name (None for an unregistered stage instance, which cannot be saved) and left for
    the body to build; the parameters in :attr:`INJECTED` are data and tools, not switches: they
    are neither recorded nor set.
    """

    name: str = "program"
    #: Constructor parameters that are not switches (a train pool, an encoder, a retriever
    #: object): passed again by the caller after loading, never saved.
    INJECTED: ClassVar[frozenset[str]] = frozenset({"pool", "encoder", "retriever"})
    #: The stage capability a Sampler reads (stages.CAPABILITIES): a program is called with
    #: ``db=``, so one can be sampled like a predictor.
    takes_db: ClassVar[bool] = True
    #: The switch search's default space (:func:`sqlweave.optimizers.search.default_space`):
    #: switch -> choices, declared beside the switches it names. Empty: no default space (the
    #: search then needs ``space=``).
    SEARCH_SPACE: ClassVar[dict[str, tuple[Any, ...]]] = {}
    #: The switches this program was built with (see the class docstring).
    switches: dict[str, Any]
    #: Schema filtering before the program runs (:func:`sqlweave.schema_filter.narrow`):
    #: ``"auto"`` narrows only a schema that would not fit the LM's context window, ``"on"``
    #: always, ``"off"`` never. Set it on an instance (``program.schema_filter = "on"``).
    schema_filter: str = "auto"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "records_switches", False):
            cls.__init__ = _recording(init)  # type: ignore[method-assign]

    def __init__(self, **switches: Any) -> None:
        super().__init__()
        if switches:  # a subclass that names its switches itself (the older style)
            self.switches = {**self.__dict__.get("switches", {}), **switches}
        else:
            self.__dict__.setdefault("switches", {})

    def _record_switches(self, signature: inspect.Signature, arguments: dict[str, Any]) -> None:
        """Store the bound constructor ``arguments`` as switches and attributes (class doc)."""
        from sqlweave.programs import stages as stage_registry

        recorded: dict[str, Any] = {}
        for name, param in list(signature.parameters.items())[1:]:  # [0] is self
            if name in self.INJECTED or param.kind is param.VAR_POSITIONAL:
                continue
            value = arguments[name]
            if param.kind is param.VAR_KEYWORD:
                recorded.update(value)
            elif name in stage_registry.ROLES:
                recorded[name] = stage_registry.name_of(name, value)
            else:
                recorded[name] = value
        for name, value in recorded.items():
            if name not in stage_registry.ROLES and not _is_defined_by_class(type(self), name):
                setattr(self, name, value)
        # A subclass's own __init__ ran its wrapper first (the outermost call): keep its values.
        self.switches = {**recorded, **self.__dict__.get("switches", {})}

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
        from sqlweave.schema_filter import narrow

        database = resolve_database(db, db_path)
        # A schema too big for the context window is narrowed to the tables this question needs
        # (a scoped view: every stage below sees only those; the SQL still runs on the database).
        database = narrow(database, question, evidence or "", mode=self.schema_filter)
        # Small local models need plain prompts; a user-configured adapter still wins.
        with use_default_adapter():
            pred = self.answer(question=question, db=database, evidence=evidence or "")
        # What the program returns is what runs: a view's short table names made real, names a
        # case-folding engine cannot read bare quoted (Database.runnable).
        return _as_run(pred, database)

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        raise NotImplementedError


def _as_run(pred: dspy.Prediction, db: Database) -> dspy.Prediction:
    """``pred`` with its SQL and candidates written as ``db`` runs them
    (:meth:`Database.runnable`); untouched where that changes nothing (SQLite, DuckDB)."""
    if pred is None or not (db.table_aliases or db.backend.folds_unquoted_names):
        return pred

    def real(sql: Any) -> Any:
        return db.runnable(sql) if isinstance(sql, str) else sql

    if "sql" in pred:
        pred.sql = real(pred.sql)
    candidates = pred.get("candidates")
    if isinstance(candidates, list | tuple):
        pred.candidates = [real(c) for c in candidates]
    return pred


def _recording(init: Any) -> Any:
    """``init`` wrapped to record the switches it is called with (:class:`SQLProgram`); the
    wrapper keeps ``init``'s signature and hints (``functools.wraps``: ``inspect.signature`` and
    ``typing.get_type_hints`` read through ``__wrapped__``)."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self: SQLProgram, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        self._record_switches(signature, bound.arguments)
        init(self, *args, **kwargs)

    __init__.records_switches = True  # type: ignore[attr-defined]
    return __init__


def _is_defined_by_class(cls: type, name: str) -> bool:
    """Whether ``name`` is a method or property of ``cls``, which a switch must not shadow."""
    attr = inspect.getattr_static(cls, name, None)
    return callable(attr) or isinstance(attr, property | staticmethod | classmethod)


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
        :class:`~sqlweave.programs.stages.sampling.Sampler` hands the reader to the local engine, which
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
