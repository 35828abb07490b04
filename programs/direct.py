"""The zero-shot baseline: the full schema as CREATE TABLE statements, the question, one LM call.

Every experiment reports this line first; a pipeline that cannot beat it has not earned its calls.

With its defaults ``direct`` is one generator call. Its other switches make it the smallest
pipeline the stages can build (:mod:`sqlweave.programs.stages`), which is what the switch search
(``sqlweave compile --optimizer search``) explores: a ``linker`` that prunes the schema,
``samples`` candidates (the first greedy, the others at ``temperature``) chosen by a ``selector``,
and a ``corrector`` on the answer.
"""

from __future__ import annotations

import dspy

from sqlweave.adapter import check_layout
from sqlweave.db import Database
from sqlweave.programs import stages as stage_registry
from sqlweave.programs.base import Generator, SQLProgram
from sqlweave.programs.naive import prompt_schema
from sqlweave.programs.voting import Sampler
from sqlweave.signatures import GenerateSQL


class DirectSQL(SQLProgram):
    """Full DDL schema + question (+ evidence) → SQL in one call.

    ``schema_layout``: ``compact`` (sqlweave's one-line CREATE TABLE per table, keys declared
    after the columns), ``native`` (the database's own CREATE TABLE statements, as ``naive``
    shows them) or ``pretty`` (one column per line). ``compact`` is the default because it did
    best of the three as one greedy call on both validation samples of ``spider-train-val``
    (first 60: 65.0 vs native 61.7; the switch search's first 40: 65.0 vs 62.5), chosen there
    before any dev run of it.
    ``prompt_layout``: ``script`` (sqlweave's SQL-script prompt: the schema, then the instructions
    and the question as ``--`` comments, as every program writes it) or ``chat`` (a system
    message and a ``Question:`` line, the way ``naive``'s hand-written prompt is laid out); see
    :mod:`sqlweave.adapter`. ``prefill`` (default on): the answer starts with a prefilled
    ``SELECT`` on the local llama.cpp engine (other engines cannot continue a turn).
    ``linker`` (default ``none``), ``samples`` / ``temperature`` / ``selector`` (default one
    greedy call; the selector is used only with ``samples > 1``) and ``corrector`` (default
    ``none``; ``execution`` fixes SQL that fails or returns nothing, one round) are stages of
    :mod:`sqlweave.programs.stages`, by name or instance.
    """

    name = "direct"
    ABLATIONS = {"full": {}, "native_schema": {"schema_layout": "native"}}
    SCHEMA_LAYOUTS = ("native", "compact", "pretty")

    def __init__(
        self,
        schema_layout: str = "compact",
        prompt_layout: str = "script",
        prefill: bool = True,
        linker: str | dspy.Module = "none",
        samples: int = 1,
        temperature: float = 0.7,
        selector: str | dspy.Module = "vote",
        corrector: str | dspy.Module = "none",
    ) -> None:
        if schema_layout not in self.SCHEMA_LAYOUTS:
            raise ValueError(
                f"unknown schema_layout {schema_layout!r}; "
                f"choose one of {', '.join(self.SCHEMA_LAYOUTS)}"
            )
        check_layout(prompt_layout, "prompt_layout")
        if not isinstance(samples, int) or samples < 1:
            raise ValueError(f"samples must be an integer >= 1, got {samples!r}")
        super().__init__(
            schema_layout=schema_layout,
            prompt_layout=prompt_layout,
            prefill=bool(prefill),
            samples=samples,
            temperature=temperature,
            **stage_registry.role_switches(linker=linker, selector=selector, corrector=corrector),
        )
        self.schema_layout = schema_layout
        self.samples = samples
        self.prompt_layout = prompt_layout
        self.generate = Generator(GenerateSQL, layout=prompt_layout, prefill=bool(prefill))
        self.sampler = Sampler(self.generate, n=samples, temperature=float(temperature))
        self.linker = stage_registry.build("linker", linker)
        self.selector = stage_registry.build("selector", selector)
        self.corrector = stage_registry.build(
            "corrector",
            corrector,
            settings={"execution": {"max_rounds": 1, "retry_on_empty": True}},
        )

    def schema_text(self, db: Database, tables: set[str] | None = None) -> str:
        """The schema as the prompt shows it; ``tables`` (linked) keeps only theirs."""
        return prompt_schema(db, self.schema_layout, tables)

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        stages: list[str] = []
        schema_text = self.schema_text(db)
        linked = stage_registry.link(
            self.linker, question=question, db=db, db_schema=schema_text, evidence=evidence
        )
        if linked is not None:
            stages.append("linking")
            if linked:
                schema_text = self.schema_text(db, linked.all_tables)
        inputs = {
            "dialect": db.dialect,
            "db_schema": schema_text,
            "question": question,
            "evidence": evidence,
        }
        candidates = self.sampler(db=db, **inputs)
        stages.append("generate")
        sql = candidates[0]
        if self.samples > 1:
            sql = self.selector(
                candidates=candidates,
                db=db,
                question=question,
                evidence=evidence,
                db_schema=schema_text,
            ).sql
            stages.append("select")
        fixed = self.corrector(
            sql=sql, db=db, question=question, evidence=evidence, db_schema=schema_text
        )
        if fixed.sql != sql or fixed.rounds:
            stages.append("correct")
        return stage_registry.result(
            fixed.sql,
            stages=stages,
            candidates=candidates,
            linked=linked,
            history=fixed.history,
            schema=schema_text,
        )
