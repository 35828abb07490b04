"""Dubo-SQL v1 and v2 (BIRD) as DSPy programs composed from sqlweave's stages.

**v1** (:class:`DuboV1`) is one concise call: the schema as ``CREATE TABLE`` statements without
primary keys (foreign keys kept) with up to five sample rows per table in CSV, then the evidence
and the question, answered with bare SQL. When the query fails to execute, one more call shows the
error and asks for a fixed query. The paper fine-tunes gpt-3.5-turbo on the 9,424 BIRD train
examples so that no instruction or demo is needed; sqlweave trains nothing, and the optimizer's
compiled demos and rewritten instruction stand in for that fine-tuning.

**v2** (:class:`DuboV2`) adds what replaced fine-tuning in the paper: one line per column with
its description and up to five example values; four demos retrieved by question embedding with at
most one demo per database (diverse retrieval); demos as earlier user/assistant turns in the same
format as the real question; the answer as a JSON object; an error-correction loop.

Both are a :class:`~sqlweave.programs.base.Generator` followed by the ``execution`` corrector, v2
with a :class:`~sqlweave.programs.stages.demos.DemoSource` in front. The roles of
:mod:`sqlweave.programs.stages` are replaceable: ``linker`` (default ``none``; a link prunes the
schema before the generation, as there is no draft yet), ``selector`` (default ``first``; another
one chooses between the corrected query and the draft) and ``corrector`` (default ``execution``).
Each component is a constructor switch, and ``ABLATIONS`` lists the paper's ablation rows.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Hashable, Iterator
from typing import Any, ClassVar

import dspy

from sqlweave.caches import CACHE, db_key
from sqlweave.db import Database
from sqlweave.programs import stages as stage_registry
from sqlweave.programs.base import Generator, SQLProgram, resolve_database
from sqlweave.programs.stages.demos import DemoSource
from sqlweave.programs.stages.linking import LinkedSchema
from sqlweave.programs.stages.sampling import Sampler
from sqlweave.schema import Schema, introspect, render_columns, render_ddl_with_rows
from sqlweave.signatures import GenerateSQL

logger = logging.getLogger(__name__)

CHARS_PER_TOKEN = 3.0
"""A deliberately low estimate of characters per token (CSV rows and SQL tokenise densely), so a
schema judged to fit a token budget does fit."""


def estimate_tokens(text: str) -> int:
    """Rough token count of ``text``, erring high: v1 trims sample rows against a token budget
    without loading the model's tokenizer."""
    return int(len(text) / CHARS_PER_TOKEN) + 1


def _field(example: Any, key: str) -> Any:
    """A field of a pool example (a ``dspy.Example`` or a mapping); None when absent."""
    getter = getattr(example, "get", None)
    return getter(key, None) if callable(getter) else getattr(example, key, None)


def _link_key(linked: LinkedSchema | None) -> Hashable:
    """What a cached schema text depends on from a link (None: the whole schema)."""
    return tuple(linked.names()) if linked else None


def v1_schema_text(
    db: Database,
    *,
    sample_rows: int = 5,
    max_schema_tokens: int = 3000,
    descriptions: bool = False,
    linked: LinkedSchema | None = None,
) -> tuple[str, int]:
    """Dubo-SQL v1's schema block for ``db`` (only what ``linked`` keeps) and how many sample rows
    per table it shows; cached per database, settings and link. Its generator
    (:class:`~sqlweave.programs.stages.generators.DuboV1Generator`) and :class:`DuboV1` share it.

    Rows are dropped one at a time (for every table alike) until the block fits
    ``max_schema_tokens`` (0: no limit); a schema too large even without rows is shown whole,
    since dropping tables would hide what the question may need. Primary keys and constraints
    are left out, foreign keys kept, as in the paper.
    """
    key = (db_key(db), sample_rows, max_schema_tokens, descriptions, _link_key(linked))

    def render() -> tuple[str, int]:
        schema = introspect(db, sample_rows=max(5, sample_rows))
        if linked:
            schema = linked.subset(schema)
        text = ""
        for rows in range(sample_rows, -1, -1):
            text = render_ddl_with_rows(
                schema, rows=rows, include_pk=False, include_fks=True, descriptions=descriptions
            )
            if not max_schema_tokens or estimate_tokens(text) <= max_schema_tokens:
                return text, rows
        logger.info("%s: schema exceeds %d tokens even without rows", db.name, max_schema_tokens)
        return text, 0

    return CACHE.memo("dubo_v1.schema", key, render)


def v2_schema_text(
    db: Database,
    *,
    example_values: int = 5,
    tables: frozenset[str] | None = None,
    linked: LinkedSchema | None = None,
) -> str:
    """Dubo-SQL v2's per-column lines for ``db`` (only ``tables``, or what ``linked`` keeps),
    with ``example_values`` stored values per column; cached per database, setting and subset.
    Its generator (:class:`~sqlweave.programs.stages.generators.DuboV2Generator`) and :class:`DuboV2`
    share it."""
    key = (db_key(db), example_values, tables, _link_key(linked))

    def build() -> str:
        schema = introspect(db, distinct_values=max(5, example_values))
        if tables is not None:
            schema = schema.subset(tables=sorted(tables))
        if linked:
            schema = linked.subset(schema)
        return render_columns(schema, examples=example_values)

    return CACHE.memo("dubo_v2.schema", key, build)


class _Dubo(SQLProgram):
    """What both versions share: the role stages and generate → correct → select."""

    def _build_stages(
        self,
        linker: str | dspy.Module,
        selector: str | dspy.Module,
        corrector: str | dspy.Module,
        correction: dict[str, Any] | None,
        samples: int = 1,
        temperature: float = 0.7,
    ) -> None:
        """The linker, the generator, the sampler of extra candidates (``samples - 1`` at
        ``temperature``), the corrector (``correction``: the execution corrector's options, None
        when the version's correction switch is off) and the selector."""
        self.samples = stage_registry.check_samples(samples, selector)
        self.linker = stage_registry.build("linker", linker)
        self.generate = Generator(GenerateSQL)
        self.sampler = Sampler(
            self.generate, n=max(1, samples - 1), temperature=float(temperature), greedy_first=False
        )
        if correction is not None:
            self.corrector = stage_registry.build(
                "corrector", corrector, settings={"execution": correction}
            )
        self.selector = stage_registry.build("selector", selector)

    def _correct(
        self, draft: str, schema_text: str, ran: stage_registry.Ran, **ask: Any
    ) -> tuple[str, int, list[dict[str, Any]]]:
        """``(sql, rounds, history)`` from the corrector, or the draft when it is off."""
        corrector = getattr(self, "corrector", None)
        if corrector is None:
            return draft, 0, []
        fixed = ran("corrector", corrector, sql=draft, db_schema=schema_text, **ask)
        return fixed.sql, fixed.rounds, list(fixed.history)

    def _extra(self, ran: stage_registry.Ran, db: Database, **inputs: Any) -> list[str]:
        """``samples - 1`` sampled queries for the selector besides the greedy draft (none with
        the default ``samples=1``); they are not corrected: the vote skips those that fail."""
        if self.samples < 2:
            return []
        ran.record("sampler")
        return self.sampler(db=db, **inputs)

    def _select(
        self, written: list[str], schema_text: str, ran: stage_registry.Ran, **ask: Any
    ) -> tuple[str, list[str] | None]:
        """The selector's choice among the queries written (latest first), when it looks at
        them (not ``picks_first``) and they differ; returns ``(sql, candidates or None)``."""
        distinct = list(dict.fromkeys(q for q in written if q))
        if stage_registry.declares(self.selector, "picks_first") or len(distinct) < 2:
            return written[0], None
        picked = ran("selector", self.selector, candidates=distinct, db_schema=schema_text, **ask)
        return picked.sql, distinct


# --- v1 -------------------------------------------------------------------------------------------


class DuboV1(_Dubo):
    """Dubo-SQL v1: concise DDL with sample rows + evidence + question → bare SQL; one retry.

    Switches:

    * ``sample_rows`` (5): sample rows shown per table, as CSV under each ``CREATE TABLE``;
    * ``max_schema_tokens`` (3000): like the paper, which had 4,096 tokens of context and kept
      1,000 for the answer, fewer rows are shown (down to none) when the schema would exceed this
      estimated size; 0 disables the limit;
    * ``descriptions`` (False): BIRD column descriptions as DDL comments (the paper's v1 prompt has
      none; v2 adds them);
    * ``retry_on_error`` (True): when the SQL fails to execute, one more call with the SQL and the
      error (the ``execution`` corrector with ``max_rounds=1``). The paper continues the chat
      (prompt, answer, error); here the same content - schema, question, evidence, failed SQL,
      error - goes into one correction prompt;
    * ``samples`` (1) and ``temperature`` (0.7): not in the paper; with ``samples > 1``,
      ``samples - 1`` more queries are sampled at ``temperature`` and the ``selector`` (which must
      then choose: ``vote`` or ``lm``) picks among them, the greedy draft and its correction:
      PET-SQL's and weave's execution vote on v1's prompt, for the switch search to weigh;
    * ``linker``, ``selector``, ``corrector``: the stage roles (module docstring).

    Primary keys and constraints are left out, foreign keys kept, as in the paper. The paper's
    prompt has no instruction and no demos because its model was fine-tuned on BIRD train; here
    ``GenerateSQL``'s short instruction is the starting point and the optimizer's demos and
    instruction stand in for fine-tuning.
    """

    name = "dubo_v1"

    #: The switch search's default space (:func:`sqlweave.optimizers.search.default_space`):
    #: switch -> choices, this program's own default among them, so the first trial is the
    #: program as it is.
    SEARCH_SPACE: ClassVar[dict[str, tuple[Any, ...]]] = {
        "samples": (1, 8),
        "selector": ("first", "vote"),
        "sample_rows": (0, 3, 5),
        "retry_on_error": (True, False),
        "descriptions": (False, True),
    }
    ABLATIONS: ClassVar[dict[str, dict[str, Any]]] = {
        "full": {},
        "no_retry": {"retry_on_error": False},
    }

    def __init__(
        self,
        sample_rows: int = 5,
        retry_on_error: bool = True,
        max_schema_tokens: int = 3000,
        descriptions: bool = False,
        samples: int = 1,
        temperature: float = 0.7,
        linker: str | dspy.Module = "none",
        selector: str | dspy.Module = "first",
        corrector: str | dspy.Module = "execution",
    ) -> None:
        if sample_rows < 0:
            raise ValueError("sample_rows must be >= 0")
        if max_schema_tokens < 0:
            raise ValueError("max_schema_tokens must be >= 0 (0 = no limit)")
        super().__init__()
        retry = {"max_rounds": 1, "multi_turn": True} if retry_on_error else None
        self._build_stages(linker, selector, corrector, retry, samples, temperature)

    def schema_text(self, db: Database, linked: LinkedSchema | None = None) -> tuple[str, int]:
        """The v1 schema block for ``db`` (:func:`v1_schema_text` with this program's switches)."""
        return v1_schema_text(
            db,
            sample_rows=self.sample_rows,
            max_schema_tokens=self.max_schema_tokens,
            descriptions=self.descriptions,
            linked=linked,
        )

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        """One generation call, then (``retry_on_error``) one correction call if the SQL fails.

        Besides the output contract (:mod:`sqlweave.programs.stages`): ``draft_sql``, ``raw``,
        ``schema``, ``sample_rows`` (rows shown per table) and ``correction_rounds``.
        """
        ask = {"db": db, "question": question, "evidence": evidence}
        ran = stage_registry.Ran()
        schema_text, rows = self.schema_text(db)
        linked = stage_registry.link(self.linker, **ask, db_schema=schema_text, ran=ran)
        if linked:
            schema_text, rows = self.schema_text(db, linked)

        inputs = {
            "dialect": db.dialect,
            "db_schema": schema_text,
            "question": question,
            "evidence": evidence,
        }
        draft = ran("generator", self.generate, **inputs)
        extra = self._extra(ran, db, **inputs)
        sql, rounds, history = self._correct(draft.sql, schema_text, ran, **ask)
        sql, candidates = self._select([sql, draft.sql, *extra], schema_text, ran, **ask)

        return stage_registry.result(
            sql,
            stages=ran,
            candidates=candidates,
            linked=linked,
            history=history,
            draft_sql=draft.sql,
            raw=draft.raw,
            schema=schema_text,
            sample_rows=rows,
            correction_rounds=rounds,
        )


# --- v2 -------------------------------------------------------------------------------------------


class DuboV2(_Dubo):
    """Dubo-SQL v2: per-column schema lines, diverse retrieved demos, JSON answer, correction loop.

    Switches (defaults = the full system):

    * ``num_demos`` (4): demos retrieved per question (the paper tried 1-8 and kept 4); 0 = none;
    * ``diverse`` (True): at most one demo per database. Off = the plain nearest questions (the
      paper's "non-diverse RAG" row). Both settings skip the question's own database: the paper's
      train and dev databases are disjoint, so this only matters when the program answers train
      questions (optimizer bootstrapping), where same-database near-duplicates would leak answers;
    * ``json_output`` (True): the generation (and correction) calls answer with a JSON object
      ``{"sql": ...}`` through DSPy's :class:`~dspy.JSONAdapter`, which also shows the demos'
      answers as JSON. Off = the adapter configured for all programs, i.e. plain SQL;
    * ``error_correction`` (True) and ``correction_rounds`` (3, not stated in the paper): while the
      SQL fails to execute, show the error and ask for a fix (the ``execution`` corrector);
    * ``example_values`` (5): example values per column in the schema lines;
    * ``demo_schema`` (``"used"``): the schema shown in each demo turn: ``"full"`` (the paper: the
      demo's whole database, in the same format as the question's), ``"used"`` (only the tables its
      gold SQL reads, to keep four demo schemas within a small local model's context) or
      ``"none"``;
    * ``pool_source`` (``"spider"``): the train pool (:func:`~sqlweave.programs.stages.pools.default_pool`)
      used when no ``pool`` is passed; ``"bird"`` falls back to Spider where no BIRD train set is
      installed;
    * ``linker``, ``selector``, ``corrector``: the stage roles (module docstring).

    ``pool`` (train examples) and ``encoder`` (anything with ``encode(texts)``) may be injected;
    they are not switches and are not saved with a compiled program. The :class:`DemoSource`
    (``demo_source``) keeps them in the process cache, so copies share them. Questions are embedded
    with the local all-MiniLM-L6-v2 instead of the paper's text-embedding-3-large.

    The paper's remaining ablation rows swap the LM (v1's fine-tuned model; GPT-3.5 Turbo): that is
    a choice of LM, not of program, so ``ABLATIONS`` leaves them to the experiment runner.
    """

    name = "dubo_v2"

    #: The switch search's default space (:func:`sqlweave.optimizers.search.default_space`):
    #: switch -> choices, this program's own default among them, so the first trial is the
    #: program as it is.
    SEARCH_SPACE: ClassVar[dict[str, tuple[Any, ...]]] = {
        "num_demos": (0, 2, 4),
        "diverse": (True, False),
        "json_output": (True, False),
        "error_correction": (True, False),
    }
    ABLATIONS: ClassVar[dict[str, dict[str, Any]]] = {
        "full": {},
        "no_error_correction": {"error_correction": False},
        "no_json": {"json_output": False},
        "non_diverse_retrieval": {"diverse": False},
    }

    DEMO_SCHEMAS: ClassVar[tuple[str, ...]] = ("full", "used", "none")

    def __init__(
        self,
        num_demos: int = 4,
        diverse: bool = True,
        json_output: bool = True,
        error_correction: bool = True,
        correction_rounds: int = 3,
        example_values: int = 5,
        demo_schema: str = "used",
        pool_source: str = "spider",
        linker: str | dspy.Module = "none",
        selector: str | dspy.Module = "first",
        corrector: str | dspy.Module = "execution",
        *,
        pool: list[Any] | None = None,
        encoder: Any = None,
    ) -> None:
        if num_demos < 0:
            raise ValueError("num_demos must be >= 0")
        if correction_rounds < 0:
            raise ValueError("correction_rounds must be >= 0")
        if demo_schema not in self.DEMO_SCHEMAS:
            raise ValueError(
                f"demo_schema must be one of {', '.join(self.DEMO_SCHEMAS)}, got {demo_schema!r}"
            )
        if pool_source not in ("spider", "bird"):
            raise ValueError(f"pool_source must be 'spider' or 'bird', got {pool_source!r}")
        super().__init__()
        self.demo_source = DemoSource(
            "question",
            num_demos,
            source=pool_source,
            pool=pool,
            encoder=encoder,
            options={"one_per_db": diverse, "exclude_same_db": True},
        )
        loop = {"max_rounds": correction_rounds, "multi_turn": True} if error_correction else None
        self._build_stages(linker, selector, corrector, loop)

    def _schema(self, db: Database) -> Schema:
        return introspect(db, distinct_values=max(5, self.example_values))

    def schema_text(
        self,
        db: Database,
        tables: frozenset[str] | None = None,
        linked: LinkedSchema | None = None,
    ) -> str:
        """Per-column lines for ``db`` (:func:`v2_schema_text` with this program's setting)."""
        return v2_schema_text(db, example_values=self.example_values, tables=tables, linked=linked)

    def _demo_schema_text(self, example: Any) -> str:
        """The schema shown in a demo turn, in the same format as the question's own."""
        if self.demo_schema == "none":
            return ""
        from sqlweave.db import ExecutionError
        from sqlweave.programs.stages.linking import tables_in_sql

        path = _field(example, "db_path")
        try:
            demo_db = resolve_database(db_path=path)
        except ExecutionError as err:
            logger.warning("demo database %s unavailable, no schema shown: %s", path, err)
            return ""
        if self.demo_schema == "full":
            return self.schema_text(demo_db)
        gold = str(_field(example, "gold_sql") or "")
        used = tables_in_sql(gold, self._schema(demo_db), demo_db.dialect)
        return self.schema_text(demo_db, frozenset(used) if used else None)

    def retrieve_demos(
        self, question: str, db: Database, evidence: str
    ) -> tuple[list[Any], list[dspy.Example]]:
        """``(pool examples, GenerateSQL demos)``, ``num_demos`` of each, the most similar last
        (nearest to the question: the turn the model reads just before answering)."""
        from sqlweave.programs.stages.retrieval import as_demos

        found = list(reversed(self.demo_source.retrieve(question, db, evidence)))
        return found, as_demos(found, dialect=db.dialect, schema_text=self._demo_schema_text)

    @contextlib.contextmanager
    def _answer_format(self) -> Iterator[None]:
        """JSON answers are one of the paper's components, so this program picks that adapter
        itself; otherwise the adapter configured for every program applies."""
        if self.json_output:
            with dspy.context(adapter=dspy.JSONAdapter()):
                yield
        else:
            yield

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        """Retrieve demos, generate (JSON), then correct while the SQL fails to execute.

        Besides the output contract (:mod:`sqlweave.programs.stages`; ``demos`` are the retrieved
        questions, most similar last): ``draft_sql``, ``raw``, ``schema``, ``demo_db_ids`` and
        ``correction_rounds``.
        """
        ask = {"db": db, "question": question, "evidence": evidence}
        ran = stage_registry.Ran()
        schema_text = self.schema_text(db)
        found, demos = self.retrieve_demos(question, db, evidence)
        ran.record("demos", self.demo_source)
        linked = stage_registry.link(self.linker, **ask, db_schema=schema_text, ran=ran)
        if linked:
            schema_text = self.schema_text(db, linked=linked)

        with self._answer_format():
            draft = ran(
                "generator",
                self.generate,
                demos=demos,
                dialect=db.dialect,
                db_schema=schema_text,
                question=question,
                evidence=evidence,
            )
            sql, rounds, history = self._correct(draft.sql, schema_text, ran, **ask)
        sql, candidates = self._select([sql, draft.sql], schema_text, ran, **ask)

        return stage_registry.result(
            sql,
            stages=ran,
            candidates=candidates,
            linked=linked,
            demos=demos,
            history=history,
            draft_sql=draft.sql,
            raw=draft.raw,
            schema=schema_text,
            demo_db_ids=[str(_field(ex, "db_id") or "") for ex in found],
            correction_rounds=rounds,
        )


__all__ = ["DuboV1", "DuboV2", "estimate_tokens", "v1_schema_text", "v2_schema_text"]
