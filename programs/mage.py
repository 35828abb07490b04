"""MageSQL: demonstrations chosen by the structure of a draft query, then rule and prompt repair.

The pipeline (MageSQL §III), one question at a time:

1. **draft** (1 call, zero-shot): DDL schema + question (+ evidence) → a first SQL. It is only the
   probe for structure-based demo selection and is never the answer; strategies that select by
   the question alone (``random``, ``question``, ``jaccard``) or no demos (``none``) skip it.
2. **demo selection** (no LM): the ``num_demos`` best train pairs by ``strategy``:

   ============  ============================================================================
   ``none``      zero-shot: no demos, no draft (Table IV "Zero-shot Learning")
   ``random``    a per-question deterministic random sample (Table IV "Random")
   ``hardness``  random among pool items whose Spider hardness equals the *draft's* predicted
                 hardness (Table IV "Hardness"; the paper reads Spider's gold tag, we never do)
   ``jaccard``   question token Jaccard (Table IV "Question Similarity", the paper's metric)
   ``question``  sentence-embedding cosine of questions (a stronger question baseline)
   ``skeleton``  token similarity of SQL skeletons, draft vs gold (DAIL-SQL style, extra)
   ``pqgram``    pq-gram distance of node-type ASTs, draft vs gold (Table IV "Struct-Tree")
   ``graph``     GNN embedding of SQL graphs (Table IV "Struct-Graph", the full system)
   ============  ============================================================================

3. **generate** (1 call): demos + DDL schema + question + BIRD evidence → SQL. Demos are
   question/SQL pairs without their schemas (DAIL-SQL's organisation, which MageSQL follows;
   ``demo_schema=True`` adds each demo's own DDL), most similar demo closest to the question.
   No database content is shown anywhere: the schema is DDL only.
4. **error correction** (0 or 1 call, no execution): the rule table of
   :mod:`sqlweave.programs.stages.rules` first (``rule_correction``); if no rule fired and the generated
   SQL looks hard (:func:`~sqlweave.programs.stages.rules.is_hard_case`, read from the generated SQL,
   never from gold), one zero-shot **correct** call with guideline hints chosen by heuristics
   (:func:`choose_guidelines`; ``prompt_correction``).

As stages (:mod:`sqlweave.programs.stages`): the draft and the generation are
:class:`~sqlweave.programs.base.Generator` stages, demo selection a :class:`MageDemos` source, the
correction the ``mage`` corrector (:class:`MageCorrector`). MageSQL links nothing and selects
nothing (``linker="none"``, ``selector="first"`` over the generation and the draft), so another
linker, selector or corrector is a constructor argument: ``get("mage", linker="bidirectional")``.

Defaults: ``num_demos=4``. The paper tunes k per method up to 10 (more did not help with GPT-4);
four keeps a 1.5B local model's prompt short (each demo costs context and seconds), and the
ablation runner may raise it. Calls per question: 1 (zero-shot, easy) to 3 (structure strategy,
hard case, no rule fired), plus ``samples - 1`` with the sampling switch (not in the paper; see
:class:`MageSQL`).

``ABLATIONS`` mirrors Table IV (demo selection, all with error correction on, as the paper's
Struct-Graph row equals its full system) and the error-correction ablation (w/o → with). The
paper runs GPT-4; here every row uses the one configured LM, so the numbers compare strategies,
not models.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import dspy
import numpy as np
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from sqlweave.caches import CACHE, db_key
from sqlweave.db import Database
from sqlweave.metrics import spider_hardness
from sqlweave.programs import stages as stage_registry
from sqlweave.programs.base import Generator, SQLProgram, predict_sql, resolve_database
from sqlweave.programs.stages.correction import RuleCorrector
from sqlweave.programs.stages.demos import DemoSource
from sqlweave.programs.stages.linking import LinkedSchema
from sqlweave.programs.stages.retrieval import DemoRetriever, RandomRetriever, as_demos
from sqlweave.programs.stages.rules import is_hard_case
from sqlweave.programs.stages.sampling import Sampler
from sqlweave.schema import introspect, render_ddl
from sqlweave.signatures import CorrectSQL, GenerateSQL
from sqlweave.sqltree import parse_sql

logger = logging.getLogger(__name__)

#: Strategies whose ranking reads the draft SQL: only these pay for the draft call.
DRAFT_STRATEGIES = frozenset({"hardness", "skeleton", "pqgram", "graph"})
STRATEGIES = ("none", "random", "hardness", "jaccard", "question", "skeleton", "pqgram", "graph")
#: The pool is Spider train (SQLite gold SQL): structure retrievers parse in this dialect, and a
#: draft written for another engine is transpiled to it first.
POOL_DIALECT = "sqlite"


# --- guideline hints for the prompt-based correction ------------------------------------------------

GUIDELINES: dict[str, str] = {
    "join": (
        "Check that every JOIN is needed: when all selected and filtered columns come from one "
        "table, drop the other tables; join only through matching key columns."
    ),
    "order": (
        "For 'most', 'highest', 'largest', 'top' or 'latest' sort with ORDER BY ... DESC; for "
        "'least', 'lowest', 'fewest' or 'earliest' sort ascending; LIMIT to the number asked."
    ),
    "distinct": "Use DISTINCT when the question asks for different or unique values.",
    "set_operator": (
        "Consider a set operator: INTERSECT for items that satisfy both conditions, EXCEPT for "
        "those that satisfy one but not the other, UNION for either."
    ),
    "columns": "Return exactly the columns the question asks for, in the order it asks.",
}

_ORDER_WORDS = re.compile(
    r"\b(most|highest|largest|biggest|greatest|maximum|top|latest|newest|oldest|youngest|"
    r"least|lowest|smallest|fewest|minimum|earliest|descending|ascending|sorted|order(ed)?)\b",
    re.I,
)
_DISTINCT_WORDS = re.compile(r"\b(different|distinct|unique)\b", re.I)
_SET_WORDS = re.compile(
    r"\b(both|but not|except|neither|never|without|either|and also|as well as|do not|does not|"
    r"did not|don't|doesn't|didn't|not have|no\b)",
    re.I,
)


def _has_unneeded_join(tree: exp.Expression) -> bool:
    """Whether some SELECT joins a table whose columns are used only in join conditions.

    Unqualified columns cannot be attributed without the schema, so a SELECT that has any counts
    as needing a look when it joins at all: the hint is cheap, a missed one is not.
    """
    for select in tree.find_all(exp.Select):
        joins = select.args.get("joins") or []
        if not joins:
            continue
        from_ = select.args.get("from_")
        sources = [from_.this] if from_ is not None else []
        sources += [j.this for j in joins]
        names = {s.alias_or_name.lower() for s in sources if isinstance(s, exp.Table)}
        used: set[str] = set()
        for col in select.find_all(exp.Column):
            if any(isinstance(a, exp.Join) for a in _ancestors(col, select)):
                continue
            if not col.table:
                return True
            used.add(col.table.lower())
        if names - used:
            return True
    return False


def _ancestors(node: exp.Expression, stop: exp.Expression) -> Iterable[exp.Expression]:
    parent = node.parent
    while parent is not None and parent is not stop:
        yield parent
        parent = parent.parent


def choose_guidelines(question: str, sql: str, dialect: str = "sqlite") -> list[str]:
    """Names of the :data:`GUIDELINES` worth showing for this question and generated SQL.

    MageSQL picks its correction hints with rule-based heuristics rather than sending all of
    them: a short, relevant list is what a model can act on. Joins that may be unnecessary get the
    join hint; ordering or superlative words the ordering hint; "different/distinct/unique" the
    DISTINCT hint; negation, "both" or "either" (or a set operator already written) the set-operator
    hint. With nothing specific, the column hint keeps the prompt meaningful.
    """
    tree = parse_sql(sql, dialect, several="block")
    chosen: list[str] = []
    if tree is not None and _has_unneeded_join(tree):
        chosen.append("join")
    if _ORDER_WORDS.search(question):
        chosen.append("order")
    has_distinct = tree is not None and tree.find(exp.Distinct) is not None
    if _DISTINCT_WORDS.search(question) and not has_distinct:
        chosen.append("distinct")
    if _SET_WORDS.search(question) or (tree is not None and tree.find(exp.SetOperation)):
        chosen.append("set_operator")
    return chosen or ["columns"]


def guideline_feedback(names: Iterable[str]) -> str:
    """The ``feedback`` text of the correction call: no execution result, only guidelines."""
    lines = [f"- {GUIDELINES[n]}" for n in names]
    return (
        "The query was not executed. Review it against these guidelines and change it only "
        "where one applies; otherwise return it unchanged:\n" + "\n".join(lines)
    )


# --- the hardness retriever (Table IV "Hardness") ---------------------------------------------------


class HardnessRetriever(RandomRetriever):
    """Random demos from the pool items of the same Spider hardness as the query's draft SQL.

    Pool hardness is the example's ``difficulty`` label (train data) or computed from its gold
    SQL; the query's is computed from ``draft_sql`` only, so no dev/test label is read. A draft
    that does not parse leaves the plain random order.
    """

    name = "hardness"

    def __init__(self, pool: Iterable[Any], seed: int = 0, **options: Any) -> None:
        super().__init__(pool, seed=seed, **options)
        self._levels = np.array([self._level_of(ex) for ex in self.pool], dtype=object)

    @staticmethod
    def _level_of(ex: Any) -> str:
        label = ex.get("difficulty") if hasattr(ex, "get") else getattr(ex, "difficulty", None)
        if label:
            return str(label)
        gold = ex.get("gold_sql", "") if hasattr(ex, "get") else getattr(ex, "gold_sql", "")
        try:
            return spider_hardness(str(gold or ""), POOL_DIALECT)
        except ValueError:
            return ""

    def scores(self, example: Any) -> np.ndarray:
        """The random permutation, lifted by ``len(pool)`` for pool items of the draft's level."""
        base = super().scores(example)
        draft = example.get("draft_sql", "") if hasattr(example, "get") else ""
        try:
            level = spider_hardness(str(draft or ""), POOL_DIALECT)
        except ValueError:
            return base
        return base + (self._levels == level) * float(len(self.pool))


# --- the demo source and the corrector of MageSQL (stages of sqlweave.programs.stages) -------------


class MageDemos(DemoSource):
    """:class:`~sqlweave.programs.stages.demos.DemoSource` that also knows the ``hardness`` strategy.

    :class:`HardnessRetriever` is MageSQL's own, so :func:`make_retriever` does not build it; it is
    built here on first use, once per process for each pool and options, like every retriever.
    """

    def retriever(self) -> DemoRetriever:
        """The retriever of ``strategy``, built on first use and shared process-wide."""
        if self.strategy != "hardness" or self._retriever is not None:
            return super().retriever()
        key = (self._pool or self.source, tuple(sorted(self.options.items())))
        return CACHE.memo(
            "mage.hardness_retriever", key, lambda: HardnessRetriever(self.pool(), **self.options)
        )


class MageCorrector(dspy.Module):
    """The ``mage`` corrector: MageSQL's error correction (§III-D), no execution.

    The rule table first (``rule_correction``: the ``rules`` corrector,
    :class:`~sqlweave.programs.stages.correction.RuleCorrector`); if no rule fired and the SQL looks hard
    (:func:`~sqlweave.programs.stages.rules.is_hard_case`), one zero-shot **correct** call whose feedback
    lists the guidelines :func:`choose_guidelines` picks (``prompt_correction``). Follows the
    corrector protocol of :mod:`sqlweave.programs.stages` and returns ``Prediction(sql, rounds,
    history, stages, fired, hard_case, guidelines, corrected_sql)``; ``hard_case`` is None when
    the prompt step was not considered (switched off, or a rule fired).
    """

    def __init__(self, rule_correction: bool = True, prompt_correction: bool = True) -> None:
        super().__init__()
        self.rule_correction = rule_correction
        self.prompt_correction = prompt_correction
        self.rules = RuleCorrector()
        self.correct = dspy.Predict(CorrectSQL)

    @property
    def is_noop(self) -> bool:
        """The stage capability: with both halves off it changes nothing."""
        return not (self.rule_correction or self.prompt_correction)

    def forward(
        self,
        sql: str,
        db: Database | str | Path,
        question: str = "",
        evidence: str = "",
        db_schema: str | None = None,
        **_: Any,
    ) -> dspy.Prediction:
        from sqlweave.adapter import use_default_adapter

        database = resolve_database(db)
        dialect = database.dialect
        stages: list[str] = []
        history: list[dict[str, Any]] = []
        fired: list[str] = []
        if self.rule_correction and sql:
            ruled = self.rules(sql=sql, db=database, question=question)
            fired, sql = list(ruled.fired), ruled.sql
            history += ruled.history
            stages.append("rules")

        hard: bool | None = None
        guidelines: list[str] = []
        corrected = ""
        if self.prompt_correction and not fired:
            hard = is_hard_case(sql, dialect)
            if hard:
                guidelines = choose_guidelines(question, sql, dialect)
                feedback = guideline_feedback(guidelines)
                if db_schema is None:
                    db_schema = render_ddl(introspect(database), descriptions=False)
                with use_default_adapter():
                    corrected, _raw = predict_sql(
                        self.correct,
                        field="corrected_sql",
                        dialect=dialect,
                        db_schema=db_schema,
                        question=question,
                        sql=sql,
                        feedback=feedback,
                        evidence=evidence,
                    )
                history.append({"sql": sql, "feedback": feedback})
                stages.append("correct")
                sql = corrected or sql
        return dspy.Prediction(
            sql=sql,
            rounds=int(bool(fired)) + int(bool(guidelines)),
            history=history,
            stages=stages,
            fired=fired,
            hard_case=hard,
            guidelines=guidelines,
            corrected_sql=corrected,
        )


# --- the pipeline ----------------------------------------------------------------------------------


class MageSQL(SQLProgram):
    """MageSQL (draft → structure-aware demos → few-shot SQL → rule / guideline correction).

    Switches (defaults = the paper's final system): ``strategy`` (see the module docstring),
    ``num_demos`` (k), ``rule_correction``, ``prompt_correction`` (the two halves of the ``mage``
    corrector), ``demo_schema`` (show each demo's own DDL), ``column_descriptions`` (BIRD column
    descriptions as DDL comments; off, as the paper's DDL has none), ``pool_source`` (``spider``
    or ``bird`` train pool) and ``retriever_options`` (passed to the retriever, e.g. the GNN
    checkpoint for ``graph``), ``samples`` (1) and ``temperature`` (0.7). The last two are not in
    the paper: with ``samples > 1`` the few-shot generation is sampled ``samples - 1`` more times
    at ``temperature`` (one prompt, batched by a local engine) and the ``selector``, which must
    then choose (``vote`` or ``lm``), picks among the generation, the samples and the draft before
    the correction: PET-SQL's execution vote on MageSQL's prompt, for the switch search to weigh.
    ``pool`` and ``retriever`` (not switches: they are data) replace
    the default train pool and the retriever built over it for ``strategy``.

    The roles of :mod:`sqlweave.programs.stages` are replaceable by name or instance. The paper's
    choices are the defaults: ``linker="none"`` (MageSQL links nothing; another linker runs
    after the draft, reads it, and prunes the schema the generation and correction see),
    ``selector="first"`` (over the generated SQL and the draft: the draft only stands in for an
    empty generation) and ``corrector="mage"`` (:class:`MageCorrector`; ``"rules"`` is the rule
    half alone, ``"execution"`` Dubo-SQL's loop).

    ``graph`` needs :class:`sqlweave.gnn.retriever.GraphRetriever` and a trained model: one
    ``sqlweave gnn train`` wrote, else the checkpoint shipped in the package (trained on Spider
    train, with the saved index of that pool and of the bundled train subset), or
    ``retriever_options={"model_path": ...}``. When the module or a named model is missing the
    first question raises (``ImportError`` / ``FileNotFoundError``) rather than quietly running
    another strategy. An empty draft gives no graph to compare, so that question is zero-shot.
    """

    name = "mage"

    #: The switch search's default space (:func:`sqlweave.optimizers.search.default_space`):
    #: switch -> choices, this program's own default among them, so the first trial is the
    #: program as it is.
    SEARCH_SPACE: ClassVar[dict[str, tuple[Any, ...]]] = {
        "samples": (1, 8),
        "selector": ("first", "vote"),
        "strategy": ("graph", "question", "random", "none"),
        "num_demos": (2, 4),
        "rule_correction": (True, False),
        "prompt_correction": (True, False),
    }
    ABLATIONS: ClassVar[dict[str, dict[str, Any]]] = {
        # Table IV, demo selection (error correction on in every row, as in the paper).
        "full": {},
        "zero_shot": {"strategy": "none"},
        "random": {"strategy": "random"},
        "hardness": {"strategy": "hardness"},
        "question_jaccard": {"strategy": "jaccard"},
        "question_similarity": {"strategy": "question"},
        "struct_tree": {"strategy": "pqgram"},
        "struct_graph": {"strategy": "graph"},
        # §IV-C error correction, w/o → with (the "with" row is "full"), and its two halves.
        "no_correction": {"rule_correction": False, "prompt_correction": False},
        "rules_only": {"prompt_correction": False},
        "prompt_only": {"rule_correction": False},
    }

    def __init__(
        self,
        strategy: str = "graph",
        num_demos: int = 4,
        rule_correction: bool = True,
        prompt_correction: bool = True,
        demo_schema: bool = False,
        column_descriptions: bool = False,
        pool_source: str = "spider",
        retriever_options: dict[str, Any] | None = None,
        linker: str | dspy.Module = "none",
        selector: str | dspy.Module = "first",
        corrector: str | dspy.Module = "mage",
        samples: int = 1,
        temperature: float = 0.7,
        *,
        pool: Iterable[dspy.Example] | None = None,
        retriever: DemoRetriever | None = None,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(
                f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}"
            )
        if num_demos < 0:
            raise ValueError(f"num_demos must be >= 0, got {num_demos}")
        samples = stage_registry.check_samples(samples, selector)
        super().__init__()
        self.switches["retriever_options"] = self.retriever_options = dict(retriever_options or {})
        self.switches["temperature"] = self.temperature = float(temperature)
        options = dict(self.retriever_options)
        if strategy in ("skeleton", "pqgram"):
            options.setdefault("dialect", POOL_DIALECT)
        self.demo_source = MageDemos(
            strategy, num_demos, source=pool_source, pool=pool, retriever=retriever, options=options
        )
        self.draft = Generator(GenerateSQL)
        self.generate = Generator(GenerateSQL)
        # Not in the paper: samples - 1 more few-shot generations at ``temperature`` for the
        # selector (batched by the local engine: one prompt, several continuations).
        self.sampler = Sampler(
            self.generate, n=max(1, samples - 1), temperature=float(temperature), greedy_first=False
        )
        self.linker = stage_registry.build("linker", linker)
        self.selector = stage_registry.build("selector", selector)
        halves = {"rule_correction": rule_correction, "prompt_correction": prompt_correction}
        self.corrector = stage_registry.build("corrector", corrector, settings={"mage": halves})

    @property
    def uses_draft(self) -> bool:
        """Whether demo selection reads a draft SQL (so the draft call is made)."""
        return self.strategy in DRAFT_STRATEGIES and self.num_demos > 0

    def schema_text(self, db: Database, linked: LinkedSchema | None = None) -> str:
        """The DDL of ``db`` as the prompts show it (only the ``linked`` part when one is given)."""
        if linked:
            return render_ddl(linked.subset(introspect(db)), descriptions=self.column_descriptions)
        return CACHE.memo(
            "mage.schema",
            (*db_key(db), self.column_descriptions),
            lambda: render_ddl(introspect(db), descriptions=self.column_descriptions),
        )

    def _demo_schema(self, example: Any) -> str:
        return self.schema_text(resolve_database(db_path=example.get("db_path")))

    # --- the pipeline -----------------------------------------------------------------------------

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        """Draft (if needed), demo selection, [linking], few-shot generation, [selection],
        error correction."""
        ran = stage_registry.Ran()
        inputs = {"dialect": db.dialect, "db_schema": self.schema_text(db), "question": question}
        draft_sql = ""
        if self.uses_draft:
            draft_sql = ran("generator", self.draft, evidence=evidence, **inputs).sql

        found: list[Any] = []
        # graph without a draft has no graph to compare: zero-shot (a draft that does not parse
        # gets the same from the graph retriever; the tree retrievers fall back to question words)
        if self.demo_source.active and (draft_sql or self.strategy != "graph"):
            pool_sql = _to_pool_dialect(draft_sql, db.dialect)
            found = self.demo_source.retrieve(question, db, evidence, pool_sql)
            ran.record("demos")
        demos = as_demos(
            list(reversed(found)),  # best last: nearest the question it should resemble
            dialect=db.dialect,
            schema_text=self._demo_schema if self.demo_schema else None,
        )

        linked = stage_registry.link(
            self.linker,
            question=question,
            db=db,
            db_schema=inputs["db_schema"],
            evidence=evidence,
            sql=draft_sql,
            ran=ran,
        )
        if linked is not None:
            inputs["db_schema"] = self.schema_text(db, linked)

        generated = ran("generator", self.generate, demos=demos, evidence=evidence, **inputs)
        sampled: list[str] = []
        if self.samples > 1:
            sampled = self.sampler(db=db, demos=demos, evidence=evidence, **inputs)
            ran.record("sampler")
        candidates = (
            [generated.sql, *sampled, draft_sql] if draft_sql else [generated.sql, *sampled]
        )
        ask = {
            "db": db,
            "question": question,
            "evidence": evidence,
            "db_schema": inputs["db_schema"],
        }
        if stage_registry.declares(self.selector, "picks_first"):
            # The draft only stands in for an empty generation: no choice made, none recorded.
            picked = self.selector(candidates=candidates, **ask)
        else:
            picked = ran("selector", self.selector, candidates=candidates, **ask)
        fixed = ran("corrector", self.corrector, sql=picked.sql, **ask)

        return stage_registry.result(
            fixed.sql,
            stages=ran,
            candidates=candidates,
            linked=linked,
            demos=found,
            history=fixed.history,
            draft_sql=draft_sql,
            generated_sql=picked.sql,
            raw=generated.raw,
            strategy=self.strategy,
            demo_sql=[str(ex.get("gold_sql", "")) for ex in found],
            rules_fired=list(fixed.get("fired", [])),
            hard_case=fixed.get("hard_case"),
            guidelines=list(fixed.get("guidelines", [])),
            corrected_sql=fixed.get("corrected_sql", ""),
            schema=inputs["db_schema"],
        )


def _to_pool_dialect(sql: str, dialect: str) -> str:
    """``sql`` rewritten for the pool's dialect, so structure is compared like for like."""
    if not sql or dialect == POOL_DIALECT:
        return sql
    try:
        return sqlglot.transpile(sql, read=dialect, write=POOL_DIALECT)[0]
    except (ParseError, TokenError, IndexError):
        return sql


__all__ = [
    "DRAFT_STRATEGIES",
    "GUIDELINES",
    "STRATEGIES",
    "HardnessRetriever",
    "MageCorrector",
    "MageDemos",
    "MageSQL",
    "choose_guidelines",
    "guideline_feedback",
]
