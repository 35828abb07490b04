"""Generators: the SQL-writing step of each seed paper, as a stage role of its own.

A seed pipeline is a prompt (a view of the schema, perhaps values, rows or demos) followed by
stages that check and choose. The prompt is where the papers differ most, and different prompts
make different mistakes: CHASE-SQL and XiYan-SQL draw candidates from several generators because
that raises the share of questions some candidate answers right more than more samples of one
prompt do. So each seed's prompt is registered here by name, callable on its own and from any
program (:class:`~sqlweave.programs.ensemble.EnsembleSQL` pools them):

===========  ==============================================================================
name         the prompt
===========  ==============================================================================
``direct``   the database's own CREATE TABLE statements, chat layout (``direct``'s default)
``dubo_v1``  Dubo-SQL v1: DDL without keys' constraints, with sample rows as CSV per table
``dubo_v2``  Dubo-SQL v2: one line per column with example stored values (no demos, plain SQL)
``sea``      SEA-SQL: compact schema with the stored values the question names per column
``pet``      PET-SQL: the reference-enhanced schema (values, foreign keys) after the
             optimisation rule; ``num_demos`` train demos by question similarity (default none)
===========  ==============================================================================

MageSQL's generator (demos retrieved by the structure of a draft) and RSL-SQL's (a linked schema
with hints an LM extracted) need earlier LM calls; they stay inside their programs for now.

A generator splits its call in two so a caller can sample it: :meth:`PromptGenerator.prompt`
builds the predictor's inputs once (schema text, values, demos), and the caller runs the
predictor (``prompt.predictor(**prompt.inputs)``) greedy or sampled, e.g. through a
:class:`~sqlweave.programs.stages.sampling.Sampler`. Calling the generator itself does both, greedily.
A new generator is one subclass with :meth:`~PromptGenerator.schema_text` and one
:func:`register` call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import dspy

from sqlweave.db import Database
from sqlweave.programs.base import Generator, resolve_database
from sqlweave.registry import Registry
from sqlweave.signatures import GenerateSQL

#: name -> ``module:Class`` (imported on first use) or a class given to :func:`register`.
GENERATORS = Registry(
    "generator",
    {
        "direct": "sqlweave.programs.stages.generators:DirectGenerator",
        "dubo_v1": "sqlweave.programs.stages.generators:DuboV1Generator",
        "dubo_v2": "sqlweave.programs.stages.generators:DuboV2Generator",
        "sea": "sqlweave.programs.stages.generators:SeaGenerator",
        "pet": "sqlweave.programs.stages.generators:PetGenerator",
    },
)


@dataclass(frozen=True)
class Prompt:
    """One question's prompt for a generator: the predictor to call and its inputs.

    ``schema`` is the schema text the prompt shows, for the stages after it (a selector or a
    corrector shows the LM the same view); ``demos`` the examples given as demos (also in
    ``inputs["demos"]`` when there are any).
    """

    predictor: Generator
    inputs: dict[str, Any]
    schema: str
    demos: list[Any] = field(default_factory=list)

    def messages(self) -> list[dict[str, str]]:
        """The chat messages the predictor's call sends for these inputs, built without a
        call: its compiled demos and these, formatted by the adapter its call would use. What
        a likelihood of an answer to this prompt is scored against
        (:func:`~sqlweave.programs.stages.confidence.likelihood`)."""
        from sqlweave.adapter import use_default_adapter

        inputs = dict(self.inputs)
        demos = [*self.predictor.demos, *inputs.pop("demos", [])]
        with use_default_adapter(self.predictor.layout, self.predictor.prefill):
            return dspy.settings.adapter.format(self.predictor.signature, demos, inputs)


class PromptGenerator(dspy.Module):
    """A generator stage: a question's prompt (:meth:`prompt`) and one SQL-writing predictor.

    The predictor is a :class:`~sqlweave.programs.base.Generator` of ``GenerateSQL`` under the
    attribute ``generate``, so optimizers tune it like any predictor; ``layout`` and ``prefill``
    choose sqlweave's prompt layout for it (None: the adapter's own, the SQL-script layout every
    seed uses). Calling the stage returns ``Prediction(sql, raw, schema)``.
    """

    #: The registry name (:data:`GENERATORS`); a user's subclass may set its own.
    name: ClassVar[str] = "generator"
    #: Constructor settings a pool of generators may pass on to this one (a program's switch
    #: such as ``ensemble``'s ``sample_rows`` reaches the generators that declare it here, and no
    #: other: a generator that shows no rows is built as before).
    options: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, layout: str | None = None, prefill: bool | None = None) -> None:
        super().__init__()
        self.generate = Generator(GenerateSQL, layout=layout, prefill=prefill)

    def schema_text(self, question: str, db: Database) -> str:
        """The schema as this generator's prompt shows it for ``question``."""
        raise NotImplementedError

    def demos(self, question: str, db: Database, evidence: str) -> list[Any]:
        """Examples shown as demos for ``question`` (none unless a generator retrieves some)."""
        return []

    def prompt(self, *, question: str, db: Database, evidence: str = "") -> Prompt:
        """The predictor and its inputs for one question (built once, called as often as the
        caller samples it)."""
        schema = self.schema_text(question, db)
        inputs: dict[str, Any] = {
            "dialect": db.dialect,
            "db_schema": schema,
            "question": question,
            "evidence": evidence or "",
        }
        demos = self.demos(question, db, evidence or "")
        if demos:
            inputs["demos"] = demos
        return Prompt(self.generate, inputs, schema, demos)

    def forward(
        self, question: str, db: Database | str | Path, evidence: str = ""
    ) -> dspy.Prediction:
        """One greedy call: ``Prediction(sql, raw, schema)``."""
        prompt = self.prompt(question=question, db=resolve_database(db), evidence=evidence)
        out = prompt.predictor(**prompt.inputs)
        return dspy.Prediction(sql=out.sql, raw=out.raw, schema=prompt.schema)


class DirectGenerator(PromptGenerator):
    """``direct``'s prompt: the schema as ``schema_layout`` (``native``: the database's own
    CREATE TABLE statements), in the ``chat`` layout, no prefill (``direct``'s defaults)."""

    name = "direct"

    def __init__(
        self, schema_layout: str = "native", prompt_layout: str = "chat", prefill: bool = False
    ) -> None:
        super().__init__(layout=prompt_layout, prefill=prefill)
        self.schema_layout = schema_layout

    def schema_text(self, question: str, db: Database) -> str:
        from sqlweave.schema import prompt_schema

        return prompt_schema(db, self.schema_layout)


class DuboV1Generator(PromptGenerator):
    """Dubo-SQL v1's prompt: concise DDL with ``sample_rows`` rows per table, fewer rows when the
    block would pass ``max_schema_tokens`` (:func:`sqlweave.programs.dubo.v1_schema_text`)."""

    name = "dubo_v1"
    options = frozenset({"sample_rows"})

    def __init__(
        self, sample_rows: int = 5, max_schema_tokens: int = 3000, descriptions: bool = False
    ) -> None:
        if sample_rows < 0 or max_schema_tokens < 0:
            raise ValueError("sample_rows and max_schema_tokens must be >= 0")
        super().__init__()
        self.sample_rows = sample_rows
        self.max_schema_tokens = max_schema_tokens
        self.descriptions = descriptions

    def schema_text(self, question: str, db: Database) -> str:
        from sqlweave.programs.dubo import v1_schema_text

        text, _ = v1_schema_text(
            db,
            sample_rows=self.sample_rows,
            max_schema_tokens=self.max_schema_tokens,
            descriptions=self.descriptions,
        )
        return text


class DuboV2Generator(PromptGenerator):
    """Dubo-SQL v2's schema lines: one per column with ``example_values`` stored values
    (:func:`sqlweave.programs.dubo.v2_schema_text`); plain SQL out, no demos (cross-database
    demos cost a small model points here: README, "The papers do not add up")."""

    name = "dubo_v2"

    def __init__(self, example_values: int = 5) -> None:
        if example_values < 0:
            raise ValueError("example_values must be >= 0")
        super().__init__()
        self.example_values = example_values

    def schema_text(self, question: str, db: Database) -> str:
        from sqlweave.programs.dubo import v2_schema_text

        return v2_schema_text(db, example_values=self.example_values)


class SeaGenerator(PromptGenerator):
    """SEA-SQL's semantic-enhanced schema: the compact schema with the ``values_per_column``
    stored values the question points at beside their columns
    (:func:`sqlweave.programs.sea.question_values`, BM25 over the database's values)."""

    name = "sea"

    def __init__(
        self,
        values_per_column: int = 2,
        top_k: int = 1000,
        fill_values: bool = False,
        foreign_keys: bool = False,
    ) -> None:
        if values_per_column < 0 or top_k < 1:
            raise ValueError("values_per_column must be >= 0 and top_k >= 1")
        super().__init__()
        self.values_per_column = values_per_column
        self.top_k = top_k
        self.fill_values = fill_values
        self.foreign_keys = foreign_keys

    def schema_text(self, question: str, db: Database) -> str:
        from sqlweave.programs.sea import question_values, render_enhanced
        from sqlweave.schema import introspect

        values = question_values(
            question,
            db,
            per_column=self.values_per_column,
            top_k=self.top_k,
            fill=self.fill_values,
        )
        return render_enhanced(introspect(db), values, foreign_keys=self.foreign_keys)


class PetGenerator(PromptGenerator):
    """PET-SQL's reference-enhanced prompt: the optimisation rule, then the schema with
    ``values_per_column`` stored values and foreign keys
    (:func:`sqlweave.programs.pet.pet_schema_text`), and ``num_demos`` train demos whose masked
    questions are nearest (default none: demos from other databases cost a small model points)."""

    name = "pet"

    def __init__(self, values_per_column: int = 3, num_demos: int = 0) -> None:
        if values_per_column < 0 or num_demos < 0:
            raise ValueError("values_per_column and num_demos must be >= 0")
        super().__init__()
        self.values_per_column = values_per_column
        self.num_demos = num_demos
        if num_demos:
            from sqlweave.programs.stages.demos import DemoSource

            self.demo_source = DemoSource("masked_question", num_demos)

    def schema_text(self, question: str, db: Database) -> str:
        from sqlweave.programs.pet import pet_schema_text

        return pet_schema_text(db, values_per_column=self.values_per_column)

    def demos(self, question: str, db: Database, evidence: str) -> list[Any]:
        if not self.num_demos:
            return []
        from sqlweave.programs.stages.retrieval import as_demos

        return as_demos(self.demo_source.retrieve(question, db, evidence), dialect=db.dialect)


def available() -> list[str]:
    """The registered generator names."""
    return GENERATORS.names()


def register(name: str, cls: type, *, replace: bool = False) -> None:
    """Register ``cls`` (a :class:`PromptGenerator` subclass) as ``name``, so pooling programs
    take it by name and compiled artefacts save it (``replace=True`` to overwrite)."""
    if not (isinstance(cls, type) and issubclass(cls, PromptGenerator)):
        raise TypeError(f"{cls!r} is not a PromptGenerator subclass")
    GENERATORS.register(name, cls, replace=replace)


def build(name: str, **options: Any) -> PromptGenerator:
    """The generator registered as ``name``, built with ``options``; unknown names raise a
    ``ValueError`` naming the choices."""
    return GENERATORS.load(name)(**options)


def build_shared(name: str, shared: dict[str, Any]) -> PromptGenerator:
    """The generator registered as ``name``, given those of a pool's ``shared`` settings it
    declares in :attr:`PromptGenerator.options` (the others are not its concern)."""
    cls = GENERATORS.load(name)
    return cls(**{key: value for key, value in shared.items() if key in cls.options})


__all__ = [
    "GENERATORS",
    "DirectGenerator",
    "DuboV1Generator",
    "DuboV2Generator",
    "PetGenerator",
    "Prompt",
    "PromptGenerator",
    "SeaGenerator",
    "available",
    "build",
    "build_shared",
    "register",
]
