"""RSL-SQL (robust schema linking) as a DSPy program: Alg. 1 of the paper, step by step.

The prompt (§III-A) holds the schema (tables, columns, foreign keys), **value samples** (a few rows
per table, drawn at random with a fixed seed and truncated by the renderer), **demos** (train
question/SQL pairs retrieved by masked-question similarity, the PET-SQL selector the paper reuses),
the question and BIRD's evidence. Then:

1. **Bidirectional schema linking** (§III-B): a forward :class:`~sqlweave.signatures.LinkSchema`
   call on the full schema (plus columns named in the evidence) → ``SQL1`` written on the full
   schema with that list as hints → backward link = every column named in ``SQL1`` → the union
   prunes schema and samples (the *simplified schema*).
2. **Contextual information augmentation** (§III-C): one
   :class:`~sqlweave.signatures.ExtractElements` call on the simplified schema gives elements,
   conditions and keywords; ``SQL2`` is written on the simplified schema with them as hints. Column
   descriptions go into the simplified schema only, as in the paper; the paper generates them
   offline with an LM (TA-SQL's method), which we do not: they are shown only when the database
   ships its own (BIRD's ``database_description/``), so on Spider this part is absent.
3. **Binary selection** (§III-D): ``SQL1`` and ``SQL2`` are executed and the LM picks one seeing
   both results (:class:`~sqlweave.programs.stages.selection.CandidateSelector`; no call when they agree).
4. **Multi-turn self-correction** (§III-E): while the query fails or returns nothing, the LM gets
   the error and every earlier attempt, at most ``correction_rounds`` times.

Per question: 4 calls (+1 selection when the two answers differ, + 0..N corrections).

The steps are the stages of :mod:`sqlweave.programs.stages`, each replaceable by registry name or
instance: ``linker`` (default ``bidirectional``; a linker that declares ``links_forward``, such
as ``bidirectional`` with ``use_forward`` or ``forward``, also gives ``SQL1`` its hints, and one
that declares ``links_backward``, every linker but ``forward``, reads ``SQL1`` as its draft:
:data:`sqlweave.programs.stages.CAPABILITIES`), ``selector`` (default ``lm``: the binary selection; ``vote`` or
``first`` choose between the same two candidates) and ``corrector`` (default ``execution``: the
multi-turn loop). Value-sampled schemas live in :data:`sqlweave.caches.CACHE`, the demo pool and
its retriever in a :class:`~sqlweave.programs.stages.demos.DemoSource`.

Departures, for local models: the selection and correction prompts carry no demos (the paper
adds them); descriptions are never LM-generated (see step 2); demos are question/SQL pairs
without their own schemas, which keeps a small model's prompt short.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import dspy
from dspy.utils.exceptions import AdapterParseError

from sqlweave.caches import CACHE, db_key
from sqlweave.db import Database, ExecutionError
from sqlweave.programs import stages as stage_registry
from sqlweave.programs.base import Generator, SQLProgram
from sqlweave.programs.stages.demos import DemoSource
from sqlweave.programs.stages.linking import LinkedSchema, columns_in_text, union
from sqlweave.schema import Schema, introspect, quote, render_ddl_with_rows
from sqlweave.signatures import ExtractElements, GenerateSQLWithHints

logger = logging.getLogger(__name__)

#: Seed of the value-sample draw: the same rows for the same table on every run.
SAMPLE_SEED = 0
_SAMPLE_TIMEOUT_S = 10.0

# The incremental rows of Table IV, each the one before plus one part.
_BASE: dict[str, Any] = {
    "num_demos": 0,
    "value_samples": 0,
    "schema_linking": False,
    "augmentation": False,
    "selection": False,
    "self_correction": False,
}
_DEMOS = {**_BASE, "num_demos": 3}
_SAMPLES = {**_DEMOS, "value_samples": 3}
_STEP1 = {**_SAMPLES, "schema_linking": True}
_STEP2 = {**_STEP1, "augmentation": True}
_STEP3 = {**_STEP2, "selection": True}
_NO_COMPONENTS = {"elements": False, "conditions": False, "keywords": False}


# --- value samples --------------------------------------------------------------------------------


def random_rows(
    db: Database, table: str, columns: Sequence[str], k: int, seed: int = SAMPLE_SEED
) -> list[tuple[Any, ...]]:
    """Up to ``k`` rows of ``table`` drawn at random, the same ones on every run.

    RSL-SQL shows randomly chosen rows, not the first ones (which in many tables are the oldest,
    least typical entries). Rows are picked by seeded offsets, so prompts, caches and compiled
    demos stay reproducible. Raises :class:`ExecutionError` when the table cannot be read.
    """
    if k <= 0 or not columns:
        return []
    cols = ", ".join(quote(c) for c in columns)
    source = quote(table)
    count = db.execute(
        f"SELECT COUNT(*) FROM {source}", timeout_s=_SAMPLE_TIMEOUT_S, use_cache=False
    ).rows[0][0]
    if count <= k:
        sql = f"SELECT {cols} FROM {source} LIMIT {int(k)}"
        return list(db.execute(sql, timeout_s=_SAMPLE_TIMEOUT_S, max_rows=k, use_cache=False).rows)
    rng = random.Random(f"{seed}:{db.name}:{table}")
    rows = []
    for offset in sorted(rng.sample(range(int(count)), k)):
        sql = f"SELECT {cols} FROM {source} LIMIT 1 OFFSET {offset}"
        rows += db.execute(sql, timeout_s=_SAMPLE_TIMEOUT_S, max_rows=1, use_cache=False).rows
    return rows


def with_random_rows(schema: Schema, db: Database, k: int, seed: int = SAMPLE_SEED) -> Schema:
    """``schema`` whose tables carry ``k`` random rows each (the first rows where drawing fails)."""
    tables = []
    for table in schema.tables:
        try:
            rows = random_rows(db, table.name, table.column_names, k, seed)
        except ExecutionError as err:
            logger.warning("random rows of %s.%s unavailable (%s)", db.name, table.name, err)
            rows = list(table.sample_rows[:k])
        tables.append(replace(table, sample_rows=rows))
    return replace(schema, tables=tables)


# --- hints ------------------------------------------------------------------------------------------


def as_items(value: Any) -> list[str]:
    """A list of non-empty strings from a list, or from text with one item per line.

    Small models return components as prose as often as lists; either must become hint lines.
    """
    if value is None:
        return []
    if isinstance(value, str):
        parts: Iterable[Any] = value.splitlines()
    elif isinstance(value, Iterable):
        parts = value
    else:
        parts = [value]
    out = []
    for part in parts:
        text = str(part).strip().strip("-*•").strip().strip("[]'\"").strip()
        if text:
            out.append(text)
    return out


def linking_hint(linked: LinkedSchema) -> str:
    """The forward link as SQL1's hint (the paper adds it as extra context to the prompt)."""
    names = linked.names()
    return f"Columns likely needed: {', '.join(names)}" if names else ""


def component_hints(components: dict[str, list[str]]) -> str:
    """Step 2's components as SQL2's hints, one labelled line per non-empty component."""
    labels = {"elements": "Elements", "conditions": "Conditions", "keywords": "Keywords"}
    lines = [f"{labels[k]}: {'; '.join(v)}" for k, v in components.items() if v]
    return "\n".join(lines)


# --- the program --------------------------------------------------------------------------------------


class RSLSQL(SQLProgram):
    """RSL-SQL: bidirectional linking, augmented regeneration, binary selection, self-correction.

    Switches (defaults = the full system):

    * ``num_demos`` (3; 0 = zero-shot): masked-question demos for SQL1 and SQL2 (the paper's k is
      not stated; PET-SQL, whose selector it reuses, takes 9, too many for a 1.5B model's context);
    * ``value_samples`` (3; 0 = none): random rows per table ("a few" in the paper);
    * ``schema_linking`` (step 1) with ``forward_linking`` / ``backward_linking`` (Table III,
      Fig. 8: forward-only and backward-only linking); evidence columns join the forward list;
    * ``augmentation`` (step 2: SQL2 on the simplified schema) with ``elements``, ``conditions``,
      ``keywords`` (Table VII) and ``descriptions`` (Table VI; only where the database has them);
      with all three components off no extraction call is made (Table VI "w/o components");
    * ``selection`` (step 3) and ``self_correction`` (step 4, ``correction_rounds`` rounds);
    * ``pool_source`` ("spider"): which train pool demos come from when no ``pool`` is passed;
    * ``linker`` / ``selector`` / ``corrector``: the stage of steps 1, 3 and 4, a registry name of
      :mod:`sqlweave.programs.stages` or a ``dspy.Module`` used as given (module docstring). The
      step switches still decide whether a step runs; ``forward_linking`` / ``backward_linking``
      configure the default ``bidirectional`` linker only.

    ``pool`` (train examples) and ``retriever`` (anything with ``retrieve(example, k)``) are
    injected, not switches; by default the pool is loaded and the retriever built on first use.

    ABLATIONS mirror the paper with one local model in place of DeepSeek / GPT-4o:

    * Table IV, incremental: ``base`` (schema + question + evidence, one call), ``demos``,
      ``value_samples``, ``step1`` (output = SQL1, written with the forward hints), ``step2``
      (output = SQL2), ``step3`` (selection), ``full`` (+ self-correction).
    * Table VI / VII, measured after step 2 as in the paper (so steps 3 and 4 are off):
      ``step2_no_descriptions`` (same as ``step2`` on databases without descriptions, e.g.
      Spider), ``step2_no_components`` (Table VI "w/o SQL components" = Table VII "w/o all"),
      ``step2_no_augmentation`` ("w/o both"), ``step2_no_elements``, ``step2_no_conditions``,
      ``step2_no_keywords``.
    * Fig. 8 / Table III, on the full system: ``forward_linking_only``, ``backward_linking_only``.
    """

    name = "rsl"

    #: The switch search's default space (:func:`sqlweave.optimizers.search.default_space`):
    #: switch -> choices, this program's own default among them, so the first trial is the
    #: program as it is.
    SEARCH_SPACE: ClassVar[dict[str, tuple[Any, ...]]] = {
        "num_demos": (0, 3),
        "schema_linking": (True, False),
        "augmentation": (True, False),
        "selection": (True, False),
        "selector": ("lm", "vote"),
        "self_correction": (True, False),
    }
    ABLATIONS: ClassVar[dict[str, dict[str, Any]]] = {
        "base": dict(_BASE),
        "demos": dict(_DEMOS),
        "value_samples": dict(_SAMPLES),
        "step1": dict(_STEP1),
        "step2": dict(_STEP2),
        "step3": dict(_STEP3),
        "full": {},
        "step2_no_descriptions": {**_STEP2, "descriptions": False},
        "step2_no_components": {**_STEP2, **_NO_COMPONENTS},
        "step2_no_augmentation": {**_STEP2, **_NO_COMPONENTS, "descriptions": False},
        "step2_no_elements": {**_STEP2, "elements": False},
        "step2_no_conditions": {**_STEP2, "conditions": False},
        "step2_no_keywords": {**_STEP2, "keywords": False},
        "forward_linking_only": {"backward_linking": False},
        "backward_linking_only": {"forward_linking": False},
    }

    def __init__(
        self,
        *,
        num_demos: int = 3,
        value_samples: int = 3,
        schema_linking: bool = True,
        forward_linking: bool = True,
        backward_linking: bool = True,
        augmentation: bool = True,
        elements: bool = True,
        conditions: bool = True,
        keywords: bool = True,
        descriptions: bool = True,
        selection: bool = True,
        self_correction: bool = True,
        correction_rounds: int = 2,
        pool_source: str = "spider",
        linker: str | dspy.Module = "bidirectional",
        selector: str | dspy.Module = "lm",
        corrector: str | dspy.Module = "execution",
        pool: Sequence[Any] | None = None,
        retriever: Any = None,
    ) -> None:
        if num_demos < 0 or value_samples < 0 or correction_rounds < 0:
            raise ValueError("num_demos, value_samples and correction_rounds must be >= 0")
        super().__init__()
        self.forward_linking = schema_linking and forward_linking
        self.backward_linking = schema_linking and backward_linking
        self.components = {"elements": elements, "conditions": conditions, "keywords": keywords}
        self.demo_source = DemoSource(
            "masked_question", num_demos, source=pool_source, pool=pool, retriever=retriever
        )

        # Stages exist only for the steps switched on, so an optimizer tunes what runs.
        self.linker: dspy.Module | None = None
        if schema_linking:
            # Evidence columns belong to the forward list in the paper (§III-B).
            options = {
                "use_forward": self.forward_linking,
                "use_backward": self.backward_linking,
                "use_evidence": self.forward_linking,
            }
            built = stage_registry.build("linker", linker, settings={"bidirectional": options})
            self.linker = None if stage_registry.is_none(built) else built
        self.preliminary_sql = Generator(GenerateSQLWithHints)
        self.extract_components: dspy.Predict | None = None
        self.augmented_sql: Generator | None = None
        self.selector: dspy.Module | None = None
        if augmentation:
            if any(self.components.values()):
                self.extract_components = dspy.Predict(ExtractElements)
            self.augmented_sql = Generator(GenerateSQLWithHints)
            if selection:
                self.selector = stage_registry.build("selector", selector)
        self.corrector: dspy.Module | None = None
        if self_correction and correction_rounds > 0:
            options = {"max_rounds": correction_rounds, "retry_on_empty": True, "multi_turn": True}
            self.corrector = stage_registry.build(
                "corrector", corrector, settings={"execution": options}
            )

    # -- per-database and per-question context ------------------------------------------------------

    def schema_for(self, db: Database) -> Schema:
        """The introspected schema with this program's value samples, cached per database."""

        def build() -> Schema:
            schema = introspect(db)
            if self.value_samples:
                schema = with_random_rows(schema, db, self.value_samples)
            return schema

        return CACHE.memo("rsl.schema", (db_key(db), self.value_samples), build)

    def full_schema_text(self, db: Database) -> str:
        """The full schema as SQL1 and forward linking see it (no descriptions, §III-B), cached."""
        return CACHE.memo(
            "rsl.full_schema_text",
            (db_key(db), self.value_samples),
            lambda: self.render(self.schema_for(db), descriptions=False),
        )

    def render(self, schema: Schema, *, descriptions: bool) -> str:
        """Schema text for a prompt: DDL with foreign keys, then the value samples of each table."""
        return render_ddl_with_rows(schema, rows=self.value_samples, descriptions=descriptions)

    def retrieve_demos(self, question: str, db: Database, evidence: str) -> list[dspy.Example]:
        """The ``num_demos`` train examples whose masked questions are nearest to this one."""
        return self.demo_source.retrieve(question, db, evidence)

    def forward_part(self) -> dspy.Module | None:
        """The forward linker whose list is SQL1's hint, or None when the linker has none
        (its ``links_forward`` capability: :data:`sqlweave.programs.stages.CAPABILITIES`)."""
        if self.linker is None or not stage_registry.declares(self.linker, "links_forward"):
            return None
        return getattr(self.linker, "forward_linker", self.linker)

    # -- the pipeline ---------------------------------------------------------------------------------

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        """Run the switched-on steps of Alg. 1 and return the final SQL with every intermediate."""
        from sqlweave.programs.stages.retrieval import as_demos

        schema = self.schema_for(db)
        full_text = self.full_schema_text(db)
        found = self.retrieve_demos(question, db, evidence)
        demos = as_demos(found, dialect=db.dialect, extra_fields={"hints": ""})
        common = {"dialect": db.dialect, "question": question, "evidence": evidence}
        link_inputs = {**common, "schema": schema, "db_schema": full_text}
        ran = stage_registry.Ran()

        # Step 1: forward link -> SQL1 on the full schema -> backward link -> simplified schema.
        forward = self._forward_link(link_inputs, ran)
        hints1 = linking_hint(forward) if forward is not None else ""
        first = ran(
            "generator",
            self.preliminary_sql,
            demos=demos,
            db_schema=full_text,
            hints=hints1,
            **common,
        )
        sql1 = first.sql

        linked, backward, simple = self._backward_link(link_inputs, sql1, db, forward, ran)
        simple_text = self.render(simple, descriptions=self.descriptions)

        # Step 2: components on the simplified schema -> SQL2.
        sql2 = ""
        components: dict[str, list[str]] = {}
        hints2 = ""
        if self.augmented_sql is not None:
            if self.extract_components is not None:
                components = self._components(simple_text, question, evidence)
                ran.record("extractor")
            hints2 = component_hints(components)
            sql2 = ran(
                "generator",
                self.augmented_sql,
                demos=demos,
                db_schema=simple_text,
                hints=hints2,
                **common,
            ).sql
        candidates = [sql1, sql2] if self.augmentation else [sql1]

        # Step 3: selection between the full-schema and the simplified-schema answers.
        ask = {"db": db, "question": question, "evidence": evidence, "db_schema": simple_text}
        sql3, choice = candidates[-1], None
        if self.selector is not None:
            picked = ran("selector", self.selector, candidates=candidates, **ask)
            sql3, choice = picked.sql, picked.choice

        # Step 4: self-correction (multi-turn, on error or empty result, by default).
        final, rounds, history = sql3, 0, []
        if self.corrector is not None:
            fixed = ran("corrector", self.corrector, sql=sql3, **ask)
            final, rounds, history = fixed.sql, fixed.rounds, fixed.history

        return stage_registry.result(
            final,
            stages=ran,
            candidates=candidates,
            linked=linked,
            demos=found,
            history=history,
            sql1=sql1,
            sql2=sql2,
            sql3=sql3,
            raw=first.raw,
            choice=choice,
            forward_linked=forward.names() if forward is not None else [],
            backward_linked=backward.names() if backward else [],
            simplified_tables=[t.name for t in simple.tables],
            components=components,
            hints=[hints1, hints2],
            correction_rounds=rounds,
        )

    def _forward_link(self, inputs: dict[str, Any], ran: stage_registry.Ran) -> LinkedSchema | None:
        """Step 1's forward list (the LM's columns plus the evidence's), or None without one."""
        forward_linker = self.forward_part()
        if forward_linker is None:
            return None
        schema, evidence = inputs["schema"], inputs["evidence"]
        forward = ran("linker", forward_linker, **inputs).linked
        return union(forward, columns_in_text(evidence, schema) if evidence else None)

    def _backward_link(
        self,
        inputs: dict[str, Any],
        sql1: str,
        db: Database,
        forward: LinkedSchema | None,
        ran: stage_registry.Ran,
    ) -> tuple[LinkedSchema | None, LinkedSchema | None, Schema]:
        """``(linked, backward, simplified schema)`` after SQL1; ``backward`` is None when no
        linker read SQL1 (no linking, or a linker that does not read drafts), and an empty link
        keeps the whole schema. The forward link goes back to the linker (``forward_linked``), so
        one with a forward part does not ask the LM again; ``backward`` is what the linker says it
        read in SQL1, else its whole link."""
        schema = inputs["schema"]
        if self.linker is None:
            return None, None, schema
        if not stage_registry.declares(self.linker, "links_backward"):
            return forward, None, forward.subset(schema) if forward is not None else schema
        link = ran("linker", self.linker, **inputs, sql=sql1, db=db, forward_linked=forward)
        backward = link.backward if "backward" in link else link.linked
        return link.linked, backward or LinkedSchema(), link.schema if link.linked else schema

    def _components(self, schema_text: str, question: str, evidence: str) -> dict[str, list[str]]:
        """Elements, conditions and keywords from one call; switched-off parts are dropped."""
        try:
            out = self.extract_components(
                db_schema=schema_text, question=question, evidence=evidence
            )
            values = {k: getattr(out, k, None) for k in self.components}
        except AdapterParseError as err:
            logger.debug("components not parsed: %s", (err.lm_response or "")[:200])
            values = {}
        return {k: as_items(values.get(k)) for k, on in self.components.items() if on}
