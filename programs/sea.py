"""SEA-SQL: semantic-enhanced schema, pre-SQL, adaptive bias elimination, execution adjustment.

Four stages (SEA-SQL §4), each behind a constructor switch so the paper's ablations are
configurations of one program:

1. **semantic-enhanced schema** (no LM): every text column shows the ``values_per_column`` stored
   values most related to the question (BM25 over the column's values, ``top_k`` candidates, then
   "bridging" moves values quoted verbatim in the question to the front), rendered as compact
   ``# table(col ['v1', 'v2'], ...)`` lines. Only text columns carry values: the value index
   leaves numbers and dates out, as they would flood BM25 with digit tokens;
2. **pre-SQL** (1 call): question + enhanced schema → SQL, zero-shot unless compiled demos exist
   (a :class:`~sqlweave.programs.base.Generator`);
3. **adaptive bias elimination** (ABE, 1 call, :class:`BiasEliminator`): a reviewer sees the
   pre-SQL and what it returned when executed (rows or error) and answers with a corrected query
   or the same one;
4. **dynamic execution adjustment** (DEA, 0 calls when the query runs, else 2 per round): the
   ``corrector`` role, by default the ``execution`` corrector with ``reflect`` and ``multi_turn``
   (execute, reflect on the error, correct; earlier attempts, errors and reasons are carried).

The roles of :mod:`sqlweave.programs.stages` are replaceable: ``linker`` (default ``none``; a
link prunes the enhanced schema before the pre-SQL, as there is no draft yet), ``selector``
(default ``first``; another one chooses among the queries the stages wrote, the latest first) and
``corrector`` (default ``execution``, in DEA's place).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import dspy

from sqlweave.db import Database
from sqlweave.programs import stages as stage_registry
from sqlweave.programs.base import Generator, SQLProgram, resolve_database
from sqlweave.programs.stages.feedback import describe_execution
from sqlweave.schema import Schema, ident, introspect, render_compact
from sqlweave.signatures import GenerateSQL, ReviewSQL
from sqlweave.values import ValueIndex

logger = logging.getLogger(__name__)

#: Result rows the bias eliminator is shown: enough to judge the columns and values a query
#: returns, few enough to keep the prompt of a small model short.
RESULT_ROWS = 5

_OFF = {"bias_elimination": False, "execution_adjustment": False}


def render_foreign_keys(schema: Schema) -> str:
    """``# t(col) REFERENCES t2(col)`` lines in the style of the compact schema.

    The paper's prompt lists tables and columns only; join paths are an opt-in switch because a
    small model guesses joins badly without them.
    """
    dialect = schema.dialect
    return "\n".join(
        f"# {ident(fk.table, dialect)}({ident(fk.column, dialect)}) REFERENCES "
        f"{ident(fk.ref_table, dialect)}({ident(fk.ref_column, dialect)})"
        for fk in schema.foreign_keys
    )


def question_values(
    question: str, db: Database, *, per_column: int = 2, top_k: int = 1000, fill: bool = False
) -> dict[tuple[str, str], list[str]]:
    """The stored values per column that ``question`` points at, ``per_column`` of each (none
    when 0): SEA-SQL's semantic enhancement, shared by :class:`SEASQL` and its generator
    (:class:`~sqlweave.programs.stages.generators.SeaGenerator`). The value index is built once per
    database and cached (:class:`~sqlweave.values.ValueIndex`)."""
    if per_column <= 0:
        return {}
    return ValueIndex.build(db).retrieve(question, top_k=top_k, keep=per_column, fill=fill)


def render_enhanced(
    schema: Schema, values: dict[tuple[str, str], list[str]], *, foreign_keys: bool = False
) -> str:
    """The compact schema text with ``values`` beside their columns (and, with
    ``foreign_keys``, the ``REFERENCES`` lines)."""
    text = render_compact(schema, values=values)
    if foreign_keys and schema.foreign_keys:
        text += "\n" + render_foreign_keys(schema)
    return text


class BiasEliminator(Generator):
    """SEA-SQL's adaptive bias elimination (ABE): review a query against what it returned.

    Follows the corrector protocol of :mod:`sqlweave.programs.stages` (``sql``, ``db``,
    ``question``, ``evidence``, ``db_schema``), so it can stand in any corrector slot. One
    :class:`~sqlweave.signatures.ReviewSQL` call (predictor ``predict``) sees the query and its
    execution result (first :data:`RESULT_ROWS` rows, or the error). An answer with no usable SQL
    is read as "unchanged": the paper's eliminator copies a query it judges right, and losing the
    query to a formatting slip would be worse than keeping it.

    Returns ``Prediction(sql, rounds, history, execution_result)``.
    """

    def __init__(self) -> None:
        super().__init__(ReviewSQL, field="reviewed_sql")

    def forward(  # type: ignore[override]
        self,
        sql: str,
        db: Database | str,
        question: str,
        evidence: str = "",
        db_schema: str = "",
        **_: Any,
    ) -> dspy.Prediction:
        database = resolve_database(db)
        _, result_text = describe_execution(database, sql, max_rows=RESULT_ROWS)
        reviewed = (
            super()
            .forward(
                dialect=database.dialect,
                db_schema=db_schema,
                question=question,
                evidence=evidence,
                sql=sql,
                execution_result=result_text,
            )
            .sql
        )
        history = [{"sql": sql, "feedback": result_text}]
        return dspy.Prediction(
            sql=reviewed or sql, rounds=1, history=history, execution_result=result_text
        )


class SEASQL(SQLProgram):
    """SEA-SQL (Semantic-Enhanced text-to-SQL with Adaptive refinement) as a DSPy program.

    Stages, named after the paper's: ``generate`` (pre-SQL, a ``Generator`` of ``GenerateSQL``),
    ``eliminate`` (:class:`BiasEliminator`) and ``corrector`` (DEA: by default a
    :class:`~sqlweave.programs.stages.correction.CorrectionLoop` with ``reflect`` and ``multi_turn``,
    predictors ``corrector.correct`` and ``corrector.reflector``). A stage that is switched off
    has no predictor, so an optimizer tunes only what runs.

    **Departures from the paper.** The paper's bias eliminator is Mistral-7B fine-tuned with LoRA
    on (question, enhanced schema, pre-SQL, execution result) → target, where the target is the
    pre-SQL itself when its result equals the gold result and the gold SQL otherwise. Here the
    eliminator is a DSPy module over the same inputs, and training it means what DSPy's optimizers
    do: they choose its few-shot demos and rewrite its instruction against execution accuracy
    (EX) on train data. Bootstrapped traces that end in a correct answer are exactly the paper's
    two kinds of target (pre-SQL kept when right, corrected when wrong), but no weights change.
    The generator and the eliminator are the same LM unless one is set per predictor
    (``program.eliminate.set_lm(other_lm)``; the paper's Table 7 backbone swaps map to that, not
    to a switch). DEA defaults to ``execution_rounds=3`` rather than the paper's cap of 10, since
    every round costs two calls of a slow local model. The paper is zero-shot; compiled demos (the
    few-shot variant of its Appendix B) come from the optimizer, not from a retriever.

    Switches (defaults = the full system):

    * ``values_per_column`` (m, paper 2): retrieved values shown per column; 0 = plain schema;
    * ``top_k`` (paper 1000): BM25 candidates per column before bridging and truncation to m;
    * ``fill_values``: columns with no value related to the question show their first m values
      as format examples (off: like a Lucene-style BM25 search, which returns only matching
      values, they show none; the paper's "top-m of each column" can be read either way);
    * ``bias_elimination``: run ABE on the pre-SQL;
    * ``execution_adjustment``: run DEA (the ``corrector``) on the (bias-eliminated) SQL;
    * ``execution_rounds``: DEA's reflect-and-correct rounds (paper ≤ 10);
    * ``second_elimination``: one more ABE pass after DEA (Appendix A, Table 8; off in the
      paper's system because it lowered EX);
    * ``foreign_keys``: append ``# t(col) REFERENCES t2(col)`` lines (not in the paper's prompt);
    * ``linker``, ``selector``, ``corrector``: the stage roles (module docstring), by registry
      name or as a ``dspy.Module``.

    ``ABLATIONS`` mirrors Table 3 (``full``, ``no_abe``, ``no_dea``, ``no_abe_dea``) and Table 4
    (``values_0`` … ``values_3``: pre-SQL only, ABE and DEA off). ``values_2`` is the same
    configuration as ``no_abe_dea``, as in the paper, where the two rows report the same numbers.
    """

    name = "sea"

    #: The switch search's default space (:func:`sqlweave.optimizers.search.default_space`):
    #: switch -> choices, this program's own default among them, so the first trial is the
    #: program as it is.
    SEARCH_SPACE: ClassVar[dict[str, tuple[Any, ...]]] = {
        "bias_elimination": (True, False),
        "execution_adjustment": (True, False),
        "values_per_column": (0, 2, 4),
        "foreign_keys": (False, True),
        "linker": ("none", "values"),
    }
    ABLATIONS: ClassVar[dict[str, dict[str, Any]]] = {
        "full": {},
        "no_abe": {"bias_elimination": False},
        "no_dea": {"execution_adjustment": False},
        "no_abe_dea": dict(_OFF),
        "values_0": {"values_per_column": 0, **_OFF},
        "values_1": {"values_per_column": 1, **_OFF},
        "values_2": {"values_per_column": 2, **_OFF},
        "values_3": {"values_per_column": 3, **_OFF},
    }

    def __init__(
        self,
        values_per_column: int = 2,
        top_k: int = 1000,
        fill_values: bool = False,
        bias_elimination: bool = True,
        execution_adjustment: bool = True,
        execution_rounds: int = 3,
        second_elimination: bool = False,
        foreign_keys: bool = False,
        linker: str | dspy.Module = "none",
        selector: str | dspy.Module = "first",
        corrector: str | dspy.Module = "execution",
    ) -> None:
        if values_per_column < 0:
            raise ValueError("values_per_column must be >= 0")
        if top_k < 1:
            raise ValueError("top_k must be >= 1")
        if execution_rounds < 0:
            raise ValueError("execution_rounds must be >= 0")
        super().__init__()

        self.linker = stage_registry.build("linker", linker)
        self.generate = Generator(GenerateSQL)
        if bias_elimination or second_elimination:
            self.eliminate = BiasEliminator()
        if execution_adjustment:
            dea = {"max_rounds": execution_rounds, "reflect": True, "multi_turn": True}
            self.corrector = stage_registry.build(
                "corrector", corrector, settings={"execution": dea}
            )
        self.selector = stage_registry.build("selector", selector)

    # -- stage 1: semantic-enhanced schema --------------------------------------------------------

    def question_values(self, question: str, db: Database) -> dict[tuple[str, str], list[str]]:
        """The stored values per column that the question points at (empty when m = 0).

        The value index is built once per database and cached in memory and on disk by
        :class:`~sqlweave.values.ValueIndex`, so repeated questions on a database pay only the
        BM25 scoring.
        """
        return question_values(
            question, db, per_column=self.values_per_column, top_k=self.top_k, fill=self.fill_values
        )

    def render(self, schema: Schema, values: dict[tuple[str, str], list[str]]) -> str:
        """The compact schema text with ``values`` beside their columns (and foreign keys)."""
        return render_enhanced(schema, values, foreign_keys=self.foreign_keys)

    def enhanced_schema(
        self, question: str, db: Database
    ) -> tuple[str, dict[tuple[str, str], list[str]]]:
        """The schema text every LM call of this program sees, and the values it shows.

        Introspection is cached per database by :func:`~sqlweave.schema.introspect`; only the
        values depend on the question.
        """
        values = self.question_values(question, db)
        return self.render(introspect(db), values), values

    # -- the pipeline -----------------------------------------------------------------------------

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        """Run the switched-on stages in the paper's order and return every intermediate query.

        Besides the output contract (:mod:`sqlweave.programs.stages`): ``raw``, ``pre_sql``,
        ``eliminated_sql`` (None without ABE), ``eliminator_changed``, ``pre_sql_result`` (what
        ABE was shown), ``adjusted_sql``, ``correction_rounds``, ``schema`` (the prompt's schema
        text) and ``column_values`` (``"table.column" -> [values]``).
        """
        ask = {"db": db, "question": question, "evidence": evidence}
        ran = stage_registry.Ran()
        schema_text, values = self.enhanced_schema(question, db)
        if self.values_per_column > 0:
            ran.record("values")

        linked = stage_registry.link(self.linker, **ask, db_schema=schema_text, ran=ran)
        if linked:
            schema_text = self.render(linked.subset(introspect(db)), values)

        first = ran(
            "generator",
            self.generate,
            dialect=db.dialect,
            db_schema=schema_text,
            question=question,
            evidence=evidence,
        )
        pre_sql = current = first.sql

        eliminated = pre_result = None
        if self.bias_elimination:
            abe = ran("corrector", self.eliminate, sql=current, db_schema=schema_text, **ask)
            eliminated, pre_result = abe.sql, abe.execution_result
            current = eliminated

        adjusted = None
        rounds = 0
        history: list[dict[str, Any]] = []
        if self.execution_adjustment and not stage_registry.is_none(self.corrector):
            dea = ran("corrector", self.corrector, sql=current, db_schema=schema_text, **ask)
            adjusted, rounds, history = dea.sql, dea.rounds, list(dea.history)
            current = adjusted

        if self.second_elimination:
            current = ran(
                "corrector", self.eliminate, sql=current, db_schema=schema_text, **ask
            ).sql

        # The queries the stages wrote, the latest (most refined) first: what a selector that
        # looks at them (not ``picks_first``) chooses among.
        written = list(dict.fromkeys(q for q in (current, adjusted, eliminated, pre_sql) if q))
        candidates = None
        if not stage_registry.declares(self.selector, "picks_first") and len(written) > 1:
            candidates = written
            current = ran(
                "selector", self.selector, candidates=written, db_schema=schema_text, **ask
            ).sql

        logger.debug("sea: %s -> %s (stages %s)", pre_sql[:120], current[:120], ran)
        return stage_registry.result(
            current,
            stages=ran,
            candidates=candidates,
            linked=linked,
            history=history,
            raw=first.raw,
            pre_sql=pre_sql,
            eliminated_sql=eliminated,
            eliminator_changed=eliminated is not None and eliminated != pre_sql,
            pre_sql_result=pre_result,
            adjusted_sql=adjusted,
            correction_rounds=rounds,
            schema=schema_text,
            column_values={f"{t}.{c}": list(v) for (t, c), v in values.items()},
        )


__all__ = [
    "RESULT_ROWS",
    "BiasEliminator",
    "SEASQL",
    "question_values",
    "render_enhanced",
    "render_foreign_keys",
]
