"""PET-SQL: a reference-enhanced prompt, PreSQL → table linking → FinSQL, and consistency voting.

The stages (Li et al., 2024, §3), each a switch of :class:`PETSQL`:

1. **Reference-enhanced prompt** (§3.1): ``# table(col, …);`` lines, an optimisation rule asking
   for a query that is cheap to run without losing correctness (``optimization_rule``), sampled
   cell values per column (``cell_values``) and the foreign keys (``foreign_keys``), rendered by
   :func:`sqlweave.schema.render_pet`. The rule is the first line of the schema text rather than
   part of the signature's instruction, so an optimizer that rewrites instructions cannot drop it
   and the ablation stays a prompt difference.
2. **Demo retrieval** (§3.2, no LM): train questions with the most similar *skeleton* (schema names
   and values masked, :class:`~sqlweave.programs.retrieval.MaskedQuestionRetriever`), shown as
   plain question/SQL pairs. ``num_demos`` defaults to 4 because the small local model's context
   is short; the paper used 9.
3. **PreSQL** (§3.2), 1 call on the full schema.
4. **Schema linking** (§3.3, no LM): the tables PreSQL reads
   (:func:`~sqlweave.programs.linking.tables_in_sql`); every other table's columns, values and
   foreign keys leave the prompt.
5. **FinSQL** (§3.3), 1 call per FinSQL LM on the reduced schema, with the same demos.
6. **Consistency** (§3.4): execute the candidates and keep the execution-majority answer
   (:func:`~sqlweave.programs.voting.vote`).

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

Calls per question with the defaults: 1 (PreSQL) + 1 (FinSQL) + 2 (samples) = 4. When linking
keeps every table (or is off) the greedy FinSQL of the current LM would see PreSQL's prompt, so
PreSQL stands in for it and that call is saved.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import dspy

from sqlweave.db import Database
from sqlweave.metrics import spider_hardness
from sqlweave.programs.base import SQLProgram, predict_sql
from sqlweave.programs.linking import tables_in_sql
from sqlweave.programs.voting import vote
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


class _Shared:
    """Read-only resources of one program and all its copies: the demo pool, the retriever, the
    extra FinSQL LMs and rendered schemas. Deep copies (DSPy optimizers copy programs) share it
    instead of copying a 7k-example pool and its embedding matrix."""

    def __init__(self, pool: Sequence[Any] | None, encoder: Any = None) -> None:
        self.pool = None if pool is None else list(pool)
        self.encoder = encoder
        self.retriever: Any = None
        self.lms: dict[int, Any] = {}
        self.schemas: dict[tuple[Any, ...], str] = {}
        self.lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> _Shared:
        return self


def _matches(label: str, voters: Sequence[str]) -> bool:
    """Whether candidate ``label`` (``finsql[0]``, ``sample[2]``, ``presql``) is among ``voters``."""
    kind = label.split("[", 1)[0]
    return label in voters or kind in voters


class PETSQL(SQLProgram):
    """PET-SQL as a DSPy program (module docstring: stages, switches, local stand-ins).

    Switches (defaults = the full local system): ``optimization_rule``, ``cell_values``,
    ``foreign_keys`` (prompt parts, Table 4), ``values_per_column`` (3 rows, as the paper),
    ``num_demos`` (0 = zero-shot), ``retriever`` (a :func:`make_retriever` name),
    ``schema_linking`` (Table 7), ``consistency`` (``none``/``self``/``cross``, Table 8),
    ``samples`` and ``temperature`` (rollouts of the first FinSQL LM), ``finsql_models`` (LM
    specs; an ``LM`` object also works from Python but is not saved with the artefact),
    ``hardness_weighting`` and ``hardness_voters`` (fine-grained voting), ``pool`` (train demo
    pool; default: Spider train, loaded on first use) and ``encoder`` (for the embedding
    retrievers; default all-MiniLM-L6-v2). ``pool`` and ``encoder`` are not saved switches.
    """

    name = "pet"

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
        # The pool and the encoder are not switches: they are data and tools, not configuration.
        super().__init__(
            optimization_rule=optimization_rule,
            cell_values=cell_values,
            foreign_keys=foreign_keys,
            values_per_column=values_per_column,
            num_demos=num_demos,
            retriever=retriever,
            schema_linking=schema_linking,
            consistency=consistency,
            samples=samples,
            temperature=temperature,
            finsql_models=list(finsql_models),
            hardness_weighting=hardness_weighting,
            hardness_voters=None if hardness_voters is None else voters,
        )
        self.optimization_rule = optimization_rule
        self.cell_values = cell_values
        self.foreign_keys = foreign_keys
        self.values_per_column = values_per_column
        self.num_demos = num_demos
        self.retriever_name = retriever
        self.schema_linking = schema_linking
        self.consistency = consistency
        self.samples = samples
        self.temperature = temperature
        self.finsql_models = list(finsql_models)
        self.hardness_weighting = hardness_weighting
        self.hardness_voters = voters
        self._shared = _Shared(pool, encoder)
        self.presql = dspy.Predict(GenerateSQL)
        self.finsql = dspy.Predict(GenerateSQL)

    # -- resources ---------------------------------------------------------------------------------

    def _retriever(self) -> Any:
        shared = self._shared
        if shared.pool is None and shared.encoder is None:
            from sqlweave.programs.pools import default_retriever

            # Every PET configuration of an experiment shares the default-pool retriever.
            return default_retriever(self.retriever_name, "spider")
        with shared.lock:
            if shared.retriever is None:
                from sqlweave.programs.pools import default_pool
                from sqlweave.programs.retrieval import make_retriever

                pool = shared.pool if shared.pool is not None else default_pool("spider")
                options = {} if shared.encoder is None else {"encoder": shared.encoder}
                shared.retriever = make_retriever(self.retriever_name, pool, **options)
            return shared.retriever

    def _finsql_lms(self) -> list[Any]:
        """The LMs that write FinSQL: ``finsql_models`` built once, or the current LM (None)."""
        if not self.finsql_models:
            return [None]
        from sqlweave.lm import build_lm

        out = []
        with self._shared.lock:
            for i, spec in enumerate(self.finsql_models):
                if isinstance(spec, str):
                    if i not in self._shared.lms:
                        self._shared.lms[i] = build_lm(spec)
                    out.append(self._shared.lms[i])
                else:
                    out.append(spec)
        return out

    def schema_text(self, db: Database, schema: Schema, tables: frozenset[str] | None) -> str:
        """The reference-enhanced schema for ``tables`` (None = all), cached per database."""
        key = (db.fingerprint, db.name, db.dialect, tables)
        with self._shared.lock:
            hit = self._shared.schemas.get(key)
        if hit is not None:
            return self._with_rule(hit, db.dialect)
        subset = schema.subset(tables=sorted(tables)) if tables is not None else None
        text = render_pet(
            schema,
            values_per_column=self.values_per_column,
            subset=subset,
            include_values=self.cell_values,
            include_fks=self.foreign_keys,
        )
        with self._shared.lock:
            self._shared.schemas[key] = text
        return self._with_rule(text, db.dialect)

    def _with_rule(self, text: str, dialect: str) -> str:
        return f"{optimization_rule(dialect)}\n{text}" if self.optimization_rule else text

    def retrieve_demos(self, question: str, db: Database, evidence: str) -> list[dspy.Example]:
        """Train question/SQL pairs with the most similar question skeletons, best first."""
        if self.num_demos == 0:
            return []
        from sqlweave.programs.retrieval import as_demos

        query = dspy.Example(
            question=question,
            db_id=db.name,
            evidence=evidence,
            db_path=str(db.path) if db.path is not None else "",
        )
        found = self._retriever().retrieve(query, self.num_demos)
        return as_demos(found, dialect=db.dialect)

    # -- the pipeline ------------------------------------------------------------------------------

    def _same_predictors(self) -> bool:
        """Whether FinSQL would see exactly PreSQL's prompt given the same schema text."""
        return self.presql.signature.instructions == self.finsql.signature.instructions and list(
            self.presql.demos
        ) == list(self.finsql.demos)

    def _sample_lm(self, lm: Any, i: int) -> Any:
        """A copy of ``lm`` (None = current) for rollout ``i`` at the sampling temperature."""
        base = lm if lm is not None else dspy.settings.lm
        if base is None:
            return None
        updates: dict[str, Any] = {"rollout_id": i, "temperature": self.temperature}
        seed = (getattr(base, "kwargs", None) or {}).get("seed")
        if isinstance(seed, int):
            updates["seed"] = seed + i
        return base.copy(**updates)

    def _voters(self, hardness: str | None) -> list[str] | None:
        """The candidate sources allowed to vote, or None for everyone."""
        if not self.hardness_weighting or self.consistency == "none" or hardness is None:
            return None
        return self.hardness_voters.get(hardness) or None

    def _generate(
        self, predictor: dspy.Predict, lm: Any, demos: list[dspy.Example], **inputs: Any
    ) -> str:
        """One SQL call on ``lm`` (None = the current LM) with compiled + retrieved demos."""
        with dspy.context(lm=lm) if lm is not None else contextlib.nullcontext():
            sql, _ = predict_sql(predictor, demos=list(predictor.demos) + demos, **inputs)
        return sql

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        """Run PET-SQL on one question; see the module docstring for the stages.

        Returns ``Prediction(sql, presql, finsql, candidates, sources, vote, votes,
        linked_tables, hardness, demos, schema, stages, n_stages, lm_calls)``: ``sources`` labels
        each candidate (``finsql[i]`` for the i-th FinSQL LM, ``sample[j]``, ``presql``), ``votes``
        the execution classes as ``(member indices, weight)``, ``hardness`` PreSQL's predicted
        Spider grade, ``schema`` the schema text FinSQL saw.
        """
        out: dict[str, Any] = {"vote": None, "votes": None, "linked_tables": [], "finsql": ""}
        stages: list[str] = []
        schema = introspect(db)
        demos = self.retrieve_demos(question, db, evidence)
        if demos:
            stages.append("retrieval")
        inputs = {"dialect": db.dialect, "question": question, "evidence": evidence}

        full_text = self.schema_text(db, schema, None)
        presql = self._generate(self.presql, None, demos, db_schema=full_text, **inputs)
        stages.append("presql")
        calls = 1
        try:
            hardness = spider_hardness(presql, db.dialect) if presql else "extra"
        except ValueError:
            hardness = "extra"  # unparsable PreSQL: trust nothing, let every source vote

        fin_text = full_text
        if self.schema_linking:
            stages.append("linking")
            found = tables_in_sql(presql, schema, db.dialect) if presql else set()
            out["linked_tables"] = [t.name for t in schema.tables if t.name in found]
            if out["linked_tables"] and len(found) < len(schema.tables):
                fin_text = self.schema_text(db, schema, frozenset(found))
            else:
                logger.debug("linking kept every table (or parsed none): FinSQL sees all")

        candidates: list[str] = []
        sources: list[str] = []
        if self.consistency == "none" and not self.schema_linking:
            candidates, sources = [presql], ["presql"]  # Table 7's "w/o SL": PreSQL is the answer
        else:
            voters = self._voters(hardness)
            lms = self._finsql_lms()
            if self.consistency != "cross":
                lms = lms[:1]
            # Same LM, same prompt: asking again would only repeat PreSQL (or hit the cache).
            reuse = lms[0] is None and fin_text == full_text and self._same_predictors()
            labelled = [(f"finsql[{i}]", lm) for i, lm in enumerate(lms)]
            if self.consistency != "none":
                labelled += [
                    (f"sample[{j}]", self._sample_lm(lms[0], j)) for j in range(1, self.samples + 1)
                ]
            for label, lm in labelled:
                if voters is not None and not _matches(label, voters):
                    continue
                if label == "finsql[0]" and reuse:
                    sql = presql
                else:
                    sql = self._generate(self.finsql, lm, demos, db_schema=fin_text, **inputs)
                    calls += 1
                candidates.append(sql)
                sources.append(label)
            if calls > 1:
                stages.append("finsql")
            if "finsql[0]" in sources:
                out["finsql"] = candidates[sources.index("finsql[0]")]
            presql_votes = voters is None or _matches("presql", voters)
            presql_in = reuse and "finsql[0]" in sources
            if self.consistency == "cross" and presql_votes and not presql_in:
                candidates.append(presql)
                sources.append("presql")
            if not candidates:  # a voter table that admits nobody: PreSQL stands alone
                candidates, sources = [presql], ["presql"]

        if self.consistency == "none":
            # An empty FinSQL (unparsable output) falls back to PreSQL rather than to nothing.
            sql = out["finsql"] or presql
        else:
            result = vote(candidates, db)
            stages.append("vote")
            sql = result.sql
            out["vote"] = result
            out["votes"] = [(g.members, g.weight) for g in result.groups]
        return dspy.Prediction(
            sql=sql,
            presql=presql,
            candidates=candidates,
            sources=sources,
            hardness=hardness,
            demos=[d.question for d in demos],
            schema=fin_text,
            stages=stages,
            n_stages=len(stages),
            lm_calls=calls,
            **out,
        )


__all__ = ["CONSISTENCY_MODES", "DEFAULT_HARDNESS_VOTERS", "PETSQL", "optimization_rule"]
