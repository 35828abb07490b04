"""PET-SQL: a reference-enhanced prompt, PreSQL → table linking → FinSQL, and consistency voting.

The stages (Li et al., 2024, §3), each a switch of :class:`PETSQL`:

1. **Reference-enhanced prompt** (§3.1): ``# table(col, …);`` lines, an optimisation rule asking
   for a query that is cheap to run without losing correctness (``optimization_rule``), sampled
   cell values per column (``cell_values``) and the foreign keys (``foreign_keys``), rendered by
   :func:`sqlweave.schema.render_pet`. The rule is the first line of the schema text rather than
   part of the signature's instruction, so an optimizer that rewrites instructions cannot drop it
   and the ablation stays a prompt difference.
2. **Demo retrieval** (§3.2, no LM): train questions with the most similar *skeleton* (schema names
   and values masked, :class:`~sqlweave.programs.stages.retrieval.MaskedQuestionRetriever`), shown as
   plain question/SQL pairs. ``num_demos`` defaults to 4 because the small local model's context
   is short; the paper used 9.
3. **PreSQL** (§3.2), 1 call on the full schema.
4. **Schema linking** (§3.3, no LM): the tables PreSQL reads
   (:func:`~sqlweave.programs.stages.linking.tables_in_sql`); every other table's columns, values and
   foreign keys leave the prompt.
5. **FinSQL** (§3.3), 1 call per FinSQL LM on the reduced schema, with the same demos.
6. **Consistency** (§3.4): execute the candidates and keep the execution-majority answer
   (:func:`~sqlweave.programs.stages.voting.vote`).

Local equivalents of what the paper did with five different LLMs (say so when reporting):

* ``finsql_models`` lists LM specs (:func:`sqlweave.lm.build_lm`) that each write one greedy FinSQL;
  empty (the default) means the current LM only. True *cross*-model consistency needs several
  entries here.
* ``samples`` adds temperature rollouts of the first FinSQL LM (``SelfConsistency``-style: distinct
  ``rollout_id`` per sample, so DSPy's cache does not return the same answer).
* ``consistency="cross"`` votes over the FinSQLs, the samples and PreSQL. With no
  ``finsql_models`` its diversity comes from PreSQL's different (full-schema) prompt and from
  sampling, not from different models: an honest but weaker stand-in for the paper's vote.
  ``"self"`` votes over one LM's greedy FinSQL plus its samples (the paper's self-consistency
  baseline: CodeLlama ×5 at T=0.5; here the first rollout is greedy). ``"none"`` returns the
  single FinSQL (PreSQL without linking).
* Candidate order is FinSQLs, then samples, then PreSQL: :func:`vote` breaks ties toward the
  earliest candidate, and the linked FinSQL is the one the paper expects to improve on PreSQL.
* ``hardness_weighting`` is the paper's fine-grained vote: PreSQL's Spider hardness (predicted
  from PreSQL, never from gold) selects which candidate sources vote. The paper does not say
  which LMs vote at which grade; :data:`DEFAULT_HARDNESS_VOTERS` is our choice (easy and medium:
  greedy candidates only, since sampling adds noise where the greedy answer is usually right;
  hard and extra: everyone). Sources that do not vote at the predicted grade are not generated.

Calls per question with the defaults: 1 (PreSQL) + 1 (FinSQL) + 2 (samples) = 4 (count them with
:func:`sqlweave.lm.track_usage`). When linking keeps every table (or is off) the greedy FinSQL of
the current LM would see PreSQL's prompt, so PreSQL stands in for it and that call is saved.

**Stages** (:mod:`sqlweave.programs.stages`): a :class:`~sqlweave.programs.stages.demos.DemoSource`, two
:class:`~sqlweave.programs.base.Generator` predictors (``presql``, ``finsql``) and three roles, each
a registry name or a module. ``linker`` (default ``tables``) reads PreSQL as its draft; a table
link keeps its tables whole (the paper), a column-level link keeps its columns plus the keys and
bridge tables joins need; an empty link keeps the whole schema; ``none`` skips linking.
``selector`` (default ``vote``) chooses among the candidates ``consistency`` and the hardness
voters let through (none with ``consistency="none"``). ``corrector`` (default ``none``: the paper
has no correction) runs on the chosen SQL.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import dspy

from sqlweave.caches import CACHE, db_key
from sqlweave.db import Database
from sqlweave.metrics import spider_hardness
from sqlweave.programs import stages as stage_registry
from sqlweave.programs.base import Generator, SQLProgram
from sqlweave.programs.stages.demos import DemoSource
from sqlweave.programs.stages.linking import LinkedSchema
from sqlweave.programs.stages.retrieval import as_demos
from sqlweave.programs.stages.sampling import Sampler, sample_lm
from sqlweave.schema import Schema, introspect, render_pet
from sqlweave.signatures import GenerateSQL

logger = logging.getLogger(__name__)

CONSISTENCY_MODES = ("none", "self", "cross")
HARDNESS_GRADES = ("easy", "medium", "hard", "extra")

#: Which candidate sources vote at each predicted hardness of PreSQL (fine-grained voting). Entries
#: are source kinds (``presql``, ``finsql``, ``sample``) or exact labels (``finsql[1]``).
DEFAULT_HARDNESS_VOTERS: dict[str, list[str]] = {
    "easy": ["finsql", "presql"],
    "medium": ["finsql", "presql"],
    "hard": ["finsql", "sample", "presql"],
    "extra": ["finsql", "sample", "presql"],
}

_DIALECT_NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL", "duckdb": "DuckDB"}


def optimization_rule(dialect: str) -> str:
    """PET-SQL's optimisation rule (OR), in our own words, as a ``###`` prompt line.

    The paper found that asking for an efficient query, with correctness first, helps the model
    avoid needless joins and subqueries (Table 4, about -1 to -3 EX without it).
    """
    name = _DIALECT_NAMES.get(dialect, dialect)
    return (
        f"### Reply with a single {name} query and nothing else. Among correct queries, prefer "
        "the one that runs fastest: no joins, subqueries or columns the answer does not need."
    )


def _matches(label: str, voters: Sequence[str]) -> bool:
    """Whether candidate ``label`` (``finsql[0]``, ``sample[2]``, ``presql``) is among ``voters``."""
    kind = label.split("[", 1)[0]
    return label in voters or kind in voters


def _finsql_lm(ref: tuple[str, str]) -> Any:
    """The LM of a ``finsql_models`` entry: a spec built once per process, or a stored object."""
    kind, value = ref
    if kind == "object":
        return CACHE.get(value)
    from sqlweave import lm as lm_module

    return CACHE.memo("lm", value, lambda: lm_module.build_lm(value))


def pet_schema_text(
    db: Database,
    *,
    values_per_column: int = 3,
    cell_values: bool = True,
    foreign_keys: bool = True,
    rule: bool = True,
    linked: LinkedSchema | None = None,
) -> str:
    """PET-SQL's reference-enhanced schema (stored values per column, foreign keys), reduced to
    ``linked`` (None = all), after the optimisation rule (``rule``); cached per database. Shared
    by :class:`PETSQL` and its generator (:class:`~sqlweave.programs.stages.generators.PetGenerator`).

    A table link keeps its tables whole (the paper); single columns keep their tables with
    those columns plus the keys joins need.
    """
    parts = (values_per_column, cell_values, foreign_keys)
    tables = None if linked is None else frozenset(linked.tables)
    columns = None if linked is None else frozenset(linked.columns)
    key = (db_key(db), parts, tables, columns)

    def build() -> str:
        schema = introspect(db)
        subset: Schema | None = None
        if linked is not None:
            if linked.columns:
                subset = linked.subset(schema, fallback=False)
            else:
                subset = schema.subset(tables=sorted(linked.tables))
        return render_pet(
            schema,
            values_per_column=values_per_column,
            subset=subset,
            include_values=cell_values,
            include_fks=foreign_keys,
        )

    text = CACHE.memo("pet.schema", key, build)
    return f"{optimization_rule(db.dialect)}\n{text}" if rule else text


def _check_retriever(name: str) -> None:
    """Refuse, when the program is built, a retriever PET cannot use: its demos are chosen from
    the question before any SQL exists, so ``graph`` (which reads a draft SQL) would fail at
    every question, as an unknown name would."""
    from sqlweave.programs.stages.retrieval import RETRIEVERS

    RETRIEVERS.check(name)
    if name == "graph":
        usable = ", ".join(n for n in RETRIEVERS if n != "graph")
        raise ValueError(
            f"pet chooses its demos before any SQL exists; the graph retriever needs a draft "
            f"SQL (MageSQL's): choose one of {usable}"
        )


class PETSQL(SQLProgram):
    """PET-SQL as a DSPy program (module docstring: stages, switches, local stand-ins).

    Switches (defaults = the full local system): ``optimization_rule``, ``cell_values``,
    ``foreign_keys`` (prompt parts, Table 4), ``values_per_column`` (3 rows, as the paper),
    ``num_demos`` (0 = zero-shot), ``retriever`` (a :func:`make_retriever` name),
    ``schema_linking`` (Table 7), ``consistency`` (``none``/``self``/``cross``, Table 8),
    ``samples`` and ``temperature`` (rollouts of the first FinSQL LM), ``finsql_models`` (LM
    specs; an ``LM`` object also works from Python but is not saved with the artefact),
    ``hardness_weighting`` and ``hardness_voters`` (fine-grained voting), and the stage roles
    ``linker`` (``tables``), ``selector`` (``vote``) and ``corrector`` (``none``). ``pool`` (train
    demo pool; default: Spider train, loaded on first use) and ``encoder`` (for the embedding
    retrievers; default all-MiniLM-L6-v2) are not saved switches.
    """

    name = "pet"
    #: ``retriever`` is a switch here (a retriever name); the pool and the encoder are data and
    #: tools, not configuration.
    INJECTED = frozenset({"pool", "encoder"})

    #: The switch search's default space (:func:`sqlweave.optimizers.search.default_space`):
    #: switch -> choices, this program's own default among them, so the first trial is the
    #: program as it is.
    SEARCH_SPACE: ClassVar[dict[str, tuple[Any, ...]]] = {
        "num_demos": (0, 2, 4),
        "schema_linking": (True, False),
        "consistency": ("cross", "self", "none"),
        "cell_values": (True, False),
        "corrector": ("none", "execution"),
    }
    #: Configurations mirroring the paper's ablation tables. Table 4 is a zero-shot, single-call
    #: study of the prompt parts, so its rows drop demos, linking and voting as the paper did.
    #: Table 7 compares one LM with and without linking; Table 8 compares one LM, its
    #: self-consistency and the cross-LM vote (here PreSQL + FinSQL + samples unless
    #: ``finsql_models`` names other models), and the fine-grained vote.
    ABLATIONS: ClassVar[dict[str, dict[str, Any]]] = {
        "full": {},
        "zero_shot": {"num_demos": 0, "schema_linking": False, "consistency": "none"},
        "no_or": {
            "num_demos": 0,
            "schema_linking": False,
            "consistency": "none",
            "optimization_rule": False,
        },
        "no_cv": {
            "num_demos": 0,
            "schema_linking": False,
            "consistency": "none",
            "cell_values": False,
        },
        "no_fk": {
            "num_demos": 0,
            "schema_linking": False,
            "consistency": "none",
            "foreign_keys": False,
        },
        "no_linking": {"schema_linking": False, "consistency": "none"},
        "single": {"consistency": "none"},
        "self_consistency": {"consistency": "self", "samples": 4},
        "fine_grained": {"hardness_weighting": True},
    }

    def __init__(
        self,
        *,
        optimization_rule: bool = True,
        cell_values: bool = True,
        foreign_keys: bool = True,
        values_per_column: int = 3,
        num_demos: int = 4,
        retriever: str = "masked_question",
        schema_linking: bool = True,
        consistency: str = "cross",
        samples: int = 2,
        temperature: float = 0.5,
        finsql_models: Sequence[Any] = (),
        hardness_weighting: bool = False,
        hardness_voters: Mapping[str, Sequence[str]] | None = None,
        linker: str | dspy.Module = "tables",
        selector: str | dspy.Module = "vote",
        corrector: str | dspy.Module = "none",
        pool: Sequence[Any] | None = None,
        encoder: Any = None,
    ) -> None:
        if consistency not in CONSISTENCY_MODES:
            raise ValueError(
                f"consistency must be one of {', '.join(CONSISTENCY_MODES)}, got {consistency!r}"
            )
        if num_demos < 0 or samples < 0 or values_per_column < 1:
            raise ValueError("num_demos and samples must be >= 0, values_per_column >= 1")
        voters = {k: list(v) for k, v in (hardness_voters or DEFAULT_HARDNESS_VOTERS).items()}
        unknown = set(voters) - set(HARDNESS_GRADES)
        if unknown:
            raise ValueError(f"hardness_voters has unknown grades {sorted(unknown)}")
        # An LM object is kept by token (copies share it); only specs are saved as switches.
        refs = [
            ("spec", spec) if isinstance(spec, str) else ("object", CACHE.put(spec))
            for spec in finsql_models
        ]
        super().__init__()
        self.switches["finsql_models"] = [value for kind, value in refs if kind == "spec"]
        self.switches["hardness_voters"] = None if hardness_voters is None else voters
        self.finsql_models = refs
        self.hardness_voters = voters
        _check_retriever(retriever)
        self.demo_source = DemoSource(retriever, num_demos, pool=pool, encoder=encoder)
        self.presql = Generator(GenerateSQL)
        self.finsql = Generator(GenerateSQL)
        self.linker = stage_registry.build("linker", linker)
        self.selector = stage_registry.build("selector", selector)
        self.corrector = stage_registry.build("corrector", corrector)

    # -- the prompt parts --------------------------------------------------------------------------

    def schema_text(self, db: Database, linked: LinkedSchema | None = None) -> str:
        """The reference-enhanced schema, reduced to ``linked`` (None = all), cached per database.

        A table link keeps its tables whole (the paper); single columns keep their tables with
        those columns plus the keys joins need.
        """
        return pet_schema_text(
            db,
            values_per_column=self.values_per_column,
            cell_values=self.cell_values,
            foreign_keys=self.foreign_keys,
            rule=self.optimization_rule,
            linked=linked,
        )

    def retrieve_demos(self, question: str, db: Database, evidence: str) -> list[dspy.Example]:
        """Train question/SQL pairs with the most similar question skeletons, best first."""
        found = self.demo_source.retrieve(question, db, evidence)
        return as_demos(found, dialect=db.dialect)

    # -- the pipeline ------------------------------------------------------------------------------

    def _same_predictors(self) -> bool:
        """Whether FinSQL would see exactly PreSQL's prompt given the same schema text."""
        return self.presql.signature.instructions == self.finsql.signature.instructions and list(
            self.presql.demos
        ) == list(self.finsql.demos)

    def _voters(self, hardness: str | None) -> list[str] | None:
        """The candidate sources allowed to vote, or None for everyone."""
        if not self.hardness_weighting or self.consistency == "none" or hardness is None:
            return None
        return self.hardness_voters.get(hardness) or None

    def _generate(self, generator: Generator, lm: Any, **inputs: Any) -> str:
        """One SQL call on ``lm`` (None = the current LM)."""
        with dspy.context(lm=lm) if lm is not None else contextlib.nullcontext():
            return generator(**inputs).sql

    def _finsqls(
        self, db: Database, presql: str, hardness: str, fin_text: str, full_text: str, **inputs: Any
    ) -> tuple[list[str], list[str], bool]:
        """FinSQL candidates, their source labels (in voting order, §3.3-3.4) and whether any
        was generated (rather than PreSQL standing in)."""
        if self.consistency == "none" and not self.schema_linking:
            return [presql], ["presql"], False  # Table 7's "w/o SL": PreSQL is the answer
        voters = self._voters(hardness)
        lms = [_finsql_lm(ref) for ref in self.finsql_models] or [None]
        if self.consistency != "cross":
            lms = lms[:1]
        # Same LM, same prompt: asking again would only repeat PreSQL (or hit the cache).
        reuse = lms[0] is None and fin_text == full_text and self._same_predictors()
        labelled = [(f"finsql[{i}]", lm) for i, lm in enumerate(lms)]
        if self.consistency != "none":
            labelled += [
                (f"sample[{j}]", sample_lm(j, self.temperature, lms[0], greedy_first=False))
                for j in range(1, self.samples + 1)
            ]
        labelled = [
            (label, lm) for label, lm in labelled if voters is None or _matches(label, voters)
        ]
        # PreSQL stands in for the current LM's greedy FinSQL (always first) on PreSQL's prompt.
        stands_in = reuse and any(label == "finsql[0]" for label, _ in labelled)
        calls = labelled[1:] if stands_in else labelled
        drawn: Sequence[str] = []
        if calls:
            # The samples share FinSQL's prompt: a local model decodes them together, beside
            # FinSQL's own greedy call when it comes first.
            drawn = Sampler(self.finsql, n=len(calls), temperature=self.temperature).draw(
                db,
                {"db_schema": fin_text, **inputs},
                lambda i: calls[i][1],
                n=len(calls),
                samples=sum(label.startswith("sample[") for label, _ in calls),
                greedy=self.temperature > 0,
            )
        candidates = [presql] * stands_in + list(drawn)
        sources = [label for label, _ in labelled]
        generated = bool(calls)
        presql_votes = voters is None or _matches("presql", voters)
        presql_in = reuse and "finsql[0]" in sources
        if self.consistency == "cross" and presql_votes and not presql_in:
            candidates.append(presql)
            sources.append("presql")
        if not candidates:  # a voter table that admits nobody: PreSQL stands alone
            return [presql], ["presql"], generated
        return candidates, sources, generated

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        """Run PET-SQL on one question; see the module docstring for the stages.

        Returns the output contract (:func:`sqlweave.programs.stages.result`) plus ``presql``,
        ``finsql``, ``sources`` (each candidate's label: ``finsql[i]`` for the i-th FinSQL LM,
        ``sample[j]``, ``presql``), ``vote`` and ``votes`` (the execution classes as
        ``(member indices, weight)``; None without a vote), ``linked_tables``, ``hardness``
        (PreSQL's predicted Spider grade) and ``schema`` (the schema text FinSQL saw).
        """
        ran = stage_registry.Ran()
        demos = self.retrieve_demos(question, db, evidence)
        ran.record("demos", self.demo_source)
        inputs = {"dialect": db.dialect, "question": question, "evidence": evidence, "demos": demos}

        full_text = self.schema_text(db)
        presql = self._generate(self.presql, None, db_schema=full_text, **inputs)
        ran.record("generator")
        try:
            hardness = spider_hardness(presql, db.dialect) if presql else "extra"
        except ValueError:
            hardness = "extra"  # unparsable PreSQL: trust nothing, let every source vote

        # §3.3: the linker reads PreSQL as its draft.
        linked = None
        if self.schema_linking:
            ask = {"question": question, "db": db, "evidence": evidence, "db_schema": full_text}
            linked = stage_registry.link(self.linker, **ask, sql=presql, ran=ran)
        fin_text = full_text
        if linked and (linked.columns or len(linked.tables) < len(introspect(db).tables)):
            fin_text = self.schema_text(db, linked)

        candidates, sources, generated = self._finsqls(
            db, presql, hardness, fin_text, full_text, **inputs
        )
        if generated:
            ran.record("generator")
        if any(source.startswith("sample[") for source in sources):
            ran.record("sampler")
        finsql = candidates[sources.index("finsql[0]")] if "finsql[0]" in sources else ""

        picked = None
        ask = {"db": db, "question": question, "evidence": evidence, "db_schema": fin_text}
        if self.consistency == "none":
            # An empty FinSQL (unparsable output) falls back to PreSQL rather than to nothing.
            sql = finsql or presql
        else:
            picked = ran("selector", self.selector, candidates=candidates, **ask)
            sql = picked.sql

        history: list[Any] = []
        if sql:
            fixed = ran("corrector", self.corrector, sql=sql, **ask)
            history, sql = list(fixed.history), fixed.sql

        result = getattr(picked, "vote", None)
        return stage_registry.result(
            sql,
            stages=ran,
            candidates=candidates,
            linked=linked,
            demos=demos,
            history=history,
            presql=presql,
            finsql=finsql,
            sources=sources,
            vote=result,
            votes=None if result is None else [(g.members, g.weight) for g in result.groups],
            linked_tables=[] if linked is None else _ordered_tables(introspect(db), linked),
            hardness=hardness,
            schema=fin_text,
        )


def _ordered_tables(schema: Schema, linked: LinkedSchema) -> list[str]:
    """The linked tables in the database's order."""
    touched = linked.all_tables
    return [t.name for t in schema.tables if t.name in touched]


__all__ = [
    "CONSISTENCY_MODES",
    "DEFAULT_HARDNESS_VOTERS",
    "PETSQL",
    "optimization_rule",
    "pet_schema_text",
]
