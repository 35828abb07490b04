"""SEA-SQL: semantic-enhanced schema, pre-SQL, adaptive bias elimination, execution adjustment.

Four stages (SEA-SQL §4), each behind a constructor switch so the paper's ablations are
configurations of one program:

1. **semantic-enhanced schema** (no LM): every text column shows the ``values_per_column`` stored
   values most related to the question (BM25 over the column's values, ``top_k`` candidates, then
   "bridging" moves values quoted verbatim in the question to the front), rendered as compact
   ``# table(col ['v1', 'v2'], ...)`` lines. Only text columns carry values: the value index
   leaves numbers and dates out, as they would flood BM25 with digit tokens;
2. **pre-SQL** (1 call): question + enhanced schema → SQL, zero-shot unless compiled demos exist;
3. **adaptive bias elimination** (ABE, 1 call): a reviewer sees the pre-SQL and what it returned
   when executed (rows or error) and answers with a corrected query or the same one;
4. **dynamic execution adjustment** (DEA, 0 calls when the query runs, else 2 per round): execute,
   reflect on the error, correct; earlier attempts, errors and reasons are carried along.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import dspy

from sqlweave.db import Database
from sqlweave.programs.base import SQLProgram, predict_sql
from sqlweave.programs.correction import CorrectionLoop
from sqlweave.programs.feedback import describe_execution
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
    return "\n".join(
        f"# {ident(fk.table)}({ident(fk.column)}) REFERENCES "
        f"{ident(fk.ref_table)}({ident(fk.ref_column)})"
        for fk in schema.foreign_keys
    )


class SEASQL(SQLProgram):
    """SEA-SQL (Semantic-Enhanced text-to-SQL with Adaptive refinement) as a DSPy program.

    Sub-predictors, named after the paper's stages: ``generate`` (pre-SQL, ``GenerateSQL``),
    ``eliminate`` (adaptive bias eliminator, ``ReviewSQL``) and ``adjust`` (dynamic execution
    adjustment, a :class:`~sqlweave.programs.correction.CorrectionLoop` with ``reflect`` and
    ``multi_turn``: its ``adjust.reflector`` and ``adjust.correct`` predictors). A stage that is
    switched off has no predictor, so an optimizer tunes only what runs.

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
    * ``execution_adjustment``: run DEA on the (bias-eliminated) SQL;
    * ``execution_rounds``: DEA's reflect-and-correct rounds (paper ≤ 10);
    * ``second_elimination``: one more ABE pass after DEA (Appendix A, Table 8; off in the
      paper's system because it lowered EX);
    * ``foreign_keys``: append ``# t(col) REFERENCES t2(col)`` lines (not in the paper's prompt).

    ``ABLATIONS`` mirrors Table 3 (``full``, ``no_abe``, ``no_dea``, ``no_abe_dea``) and Table 4
    (``values_0`` … ``values_3``: pre-SQL only, ABE and DEA off). ``values_2`` is the same
    configuration as ``no_abe_dea``, as in the paper, where the two rows report the same numbers.
    """

    name = "sea"

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
    ) -> None:
        if values_per_column < 0:
            raise ValueError("values_per_column must be >= 0")
        if top_k < 1:
            raise ValueError("top_k must be >= 1")
        if execution_rounds < 0:
            raise ValueError("execution_rounds must be >= 0")
        super().__init__(
            values_per_column=values_per_column,
            top_k=top_k,
            fill_values=fill_values,
            bias_elimination=bias_elimination,
            execution_adjustment=execution_adjustment,
            execution_rounds=execution_rounds,
            second_elimination=second_elimination,
            foreign_keys=foreign_keys,
        )
        self.values_per_column = values_per_column
        self.top_k = top_k
        self.fill_values = fill_values
        self.bias_elimination = bias_elimination
        self.execution_adjustment = execution_adjustment
        self.execution_rounds = execution_rounds
        self.second_elimination = second_elimination
        self.foreign_keys = foreign_keys

        self.generate = dspy.Predict(GenerateSQL)
        if bias_elimination or second_elimination:
            self.eliminate = dspy.Predict(ReviewSQL)
        if execution_adjustment:
            self.adjust = CorrectionLoop(max_rounds=execution_rounds, reflect=True, multi_turn=True)

    # -- stage 1: semantic-enhanced schema --------------------------------------------------------

    def question_values(self, question: str, db: Database) -> dict[tuple[str, str], list[str]]:
        """The stored values per column that the question points at (empty when m = 0).

        The value index is built once per database and cached in memory and on disk by
        :class:`~sqlweave.values.ValueIndex`, so repeated questions on a database pay only the
        BM25 scoring.
        """
        if self.values_per_column <= 0:
            return {}
        index = ValueIndex.build(db)
        return index.retrieve(
            question, top_k=self.top_k, keep=self.values_per_column, fill=self.fill_values
        )

    def enhanced_schema(
        self, question: str, db: Database
    ) -> tuple[str, dict[tuple[str, str], list[str]]]:
        """The schema text every LM call of this program sees, and the values it shows.

        Introspection is cached per database by :func:`~sqlweave.schema.introspect`; only the
        values depend on the question.
        """
        schema = introspect(db)
        values = self.question_values(question, db)
        text = render_compact(schema, values=values)
        if self.foreign_keys and schema.foreign_keys:
            text += "\n" + render_foreign_keys(schema)
        return text, values

    # -- stage 3: adaptive bias elimination -------------------------------------------------------

    def _eliminate(
        self, sql: str, *, db: Database, schema_text: str, question: str, evidence: str
    ) -> tuple[str, str]:
        """One ABE call: ``(reviewed SQL, execution result text shown)``.

        An eliminator that answers with no usable SQL is read as "unchanged": the paper's
        eliminator copies a query it judges right, and losing the query to a formatting slip
        would be worse than keeping it.
        """
        _, result_text = describe_execution(db, sql, max_rows=RESULT_ROWS)
        reviewed, _raw = predict_sql(
            self.eliminate,
            field="reviewed_sql",
            dialect=db.dialect,
            db_schema=schema_text,
            question=question,
            evidence=evidence,
            sql=sql,
            execution_result=result_text,
        )
        return (reviewed or sql), result_text

    # -- the pipeline -----------------------------------------------------------------------------

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        """Run the switched-on stages in the paper's order and return every intermediate query.

        Prediction fields: ``sql`` (final), ``pre_sql``, ``eliminated_sql`` (None without ABE),
        ``eliminator_changed``, ``pre_sql_result`` (what ABE was shown), ``adjusted_sql``,
        ``correction_rounds``, ``correction_history``, ``schema`` (the prompt's schema text),
        ``column_values`` (``"table.column" -> [values]``), ``stages`` (names of the stages that
        ran), ``lm_calls`` (calls this answer made).
        """
        stages: list[str] = ["schema"]
        schema_text, values = self.enhanced_schema(question, db)

        pre_sql, raw = predict_sql(
            self.generate,
            dialect=db.dialect,
            db_schema=schema_text,
            question=question,
            evidence=evidence,
        )
        stages.append("pre_sql")
        lm_calls = 1
        current = pre_sql

        eliminated: str | None = None
        pre_result: str | None = None
        if self.bias_elimination:
            eliminated, pre_result = self._eliminate(
                current, db=db, schema_text=schema_text, question=question, evidence=evidence
            )
            stages.append("bias_elimination")
            lm_calls += 1
            current = eliminated

        adjusted: str | None = None
        rounds = 0
        history: list[dict[str, Any]] = []
        if self.execution_adjustment:
            out = self.adjust(
                sql=current, db=db, question=question, evidence=evidence, db_schema=schema_text
            )
            stages.append("execution_adjustment")
            adjusted, rounds, history = out.sql, out.rounds, out.history
            lm_calls += 2 * rounds
            current = adjusted

        if self.second_elimination:
            current, _ = self._eliminate(
                current, db=db, schema_text=schema_text, question=question, evidence=evidence
            )
            stages.append("second_elimination")
            lm_calls += 1

        logger.debug("sea: %s -> %s (stages %s)", pre_sql[:120], current[:120], stages)
        return dspy.Prediction(
            sql=current,
            raw=raw,
            pre_sql=pre_sql,
            eliminated_sql=eliminated,
            eliminator_changed=eliminated is not None and eliminated != pre_sql,
            pre_sql_result=pre_result,
            adjusted_sql=adjusted,
            correction_rounds=rounds,
            correction_history=history,
            schema=schema_text,
            column_values={f"{t}.{c}": list(v) for (t, c), v in values.items()},
            stages=stages,
            lm_calls=lm_calls,
        )
