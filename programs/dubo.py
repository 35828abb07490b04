"""Dubo-SQL v1 and v2 (BIRD) as DSPy programs.

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

Each component is a constructor switch, and ``ABLATIONS`` lists the paper's ablation rows.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import dspy

from sqlweave.db import Database
from sqlweave.programs.base import SQLProgram, predict_sql, resolve_database
from sqlweave.programs.correction import CorrectionLoop
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


class _SharedCache:
    """Per-program caches that every copy of the program shares.

    DSPy optimizers deep-copy programs many times; the demo pool, the retriever (an embedding
    matrix over thousands of questions) and rendered schemas are read-only and would only cost
    memory and time if copied, so ``deepcopy`` returns the same object.
    """

    def __init__(self, pool: list[Any] | None = None, encoder: Any = None) -> None:
        self.pool = pool
        self.encoder = encoder
        self.retriever: Any = None
        self.texts: dict[tuple[Any, ...], Any] = {}
        self.lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> _SharedCache:
        return self

    def __copy__(self) -> _SharedCache:
        return self

    def memo(self, key: tuple[Any, ...], build: Any) -> Any:
        """``build()`` once per ``key`` (schema texts repeat: questions share databases)."""
        with self.lock:
            if key in self.texts:
                return self.texts[key]
        value = build()
        with self.lock:
            self.texts.setdefault(key, value)
            return self.texts[key]


def _db_key(db: Database) -> tuple[str, str]:
    return (db.fingerprint, db.name)


def _field(example: Any, key: str) -> Any:
    """A field of a pool example (a ``dspy.Example`` or a mapping); None when absent."""
    getter = getattr(example, "get", None)
    return getter(key, None) if callable(getter) else getattr(example, key, None)


# --- v1 -------------------------------------------------------------------------------------------


def _draft_then_fix(
    generate: dspy.Predict,
    fixer: CorrectionLoop | None,
    *,
    db: Database,
    schema_text: str,
    question: str,
    evidence: str,
    demos: list[Any] | None = None,
) -> tuple[str, str, str, int, list[Any]]:
    """Both versions' core: one generation call, then ``fixer`` (if any) on the draft.

    Returns ``(draft, raw, sql, correction rounds, correction history)``.
    """
    per_call = {} if demos is None else {"demos": demos}
    draft, raw = predict_sql(
        generate,
        **per_call,
        dialect=db.dialect,
        db_schema=schema_text,
        question=question,
        evidence=evidence,
    )
    if fixer is None:
        return draft, raw, draft, 0, []
    fixed = fixer(sql=draft, db=db, question=question, evidence=evidence, db_schema=schema_text)
    return draft, raw, fixed.sql, fixed.rounds, fixed.history


class DuboV1(SQLProgram):
    """Dubo-SQL v1: concise DDL with sample rows + evidence + question → bare SQL; one retry.

    Switches:

    * ``sample_rows`` (5): sample rows shown per table, as CSV under each ``CREATE TABLE``;
    * ``max_schema_tokens`` (3000): like the paper, which had 4,096 tokens of context and kept
      1,000 for the answer, fewer rows are shown (down to none) when the schema would exceed this
      estimated size; 0 disables the limit;
    * ``descriptions`` (False): BIRD column descriptions as DDL comments (the paper's v1 prompt has
      none; v2 adds them);
    * ``retry_on_error`` (True): when the SQL fails to execute, one more call with the SQL and the
      error (:class:`~sqlweave.programs.correction.CorrectionLoop` with ``max_rounds=1``). The
      paper continues the chat (prompt, answer, error); here the same content - schema, question,
      evidence, failed SQL, error - goes into one correction prompt.

    Primary keys and constraints are left out, foreign keys kept, as in the paper. The paper's
    prompt has no instruction and no demos because its model was fine-tuned on BIRD train; here
    ``GenerateSQL``'s short instruction is the starting point and the optimizer's demos and
    instruction stand in for fine-tuning.
    """

    name = "dubo_v1"

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
    ) -> None:
        if sample_rows < 0:
            raise ValueError("sample_rows must be >= 0")
        if max_schema_tokens < 0:
            raise ValueError("max_schema_tokens must be >= 0 (0 = no limit)")
        super().__init__(
            sample_rows=sample_rows,
            retry_on_error=retry_on_error,
            max_schema_tokens=max_schema_tokens,
            descriptions=descriptions,
        )
        self.sample_rows = sample_rows
        self.retry_on_error = retry_on_error
        self.max_schema_tokens = max_schema_tokens
        self.descriptions = descriptions
        self._cache = _SharedCache()
        self.generate = dspy.Predict(GenerateSQL)
        if retry_on_error:
            self.retry = CorrectionLoop(max_rounds=1, multi_turn=True)

    def schema_text(self, db: Database) -> tuple[str, int]:
        """The v1 schema block for ``db`` and how many sample rows per table it shows.

        Rows are dropped one at a time (for every table alike) until the block fits
        ``max_schema_tokens``; a schema too large even without rows is shown whole, since dropping
        tables would hide what the question may need.
        """
        return self._cache.memo(("v1", *_db_key(db)), lambda: self._render(db))

    def _render(self, db: Database) -> tuple[str, int]:
        schema = introspect(db, sample_rows=max(5, self.sample_rows))
        text = ""
        for rows in range(self.sample_rows, -1, -1):
            text = render_ddl_with_rows(
                schema,
                rows=rows,
                include_pk=False,
                include_fks=True,
                descriptions=self.descriptions,
            )
            if not self.max_schema_tokens or estimate_tokens(text) <= self.max_schema_tokens:
                return text, rows
        logger.info(
            "%s: schema exceeds %d tokens even without rows", db.name, self.max_schema_tokens
        )
        return text, 0

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        """One generation call, then (``retry_on_error``) one correction call if the SQL fails."""
        schema_text, rows = self.schema_text(db)
        draft, raw, sql, rounds, history = _draft_then_fix(
            self.generate,
            self.retry if self.retry_on_error else None,
            db=db,
            schema_text=schema_text,
            question=question,
            evidence=evidence,
        )
        return dspy.Prediction(
            sql=sql,
            draft_sql=draft,
            raw=raw,
            schema=schema_text,
            sample_rows=rows,
            correction_rounds=rounds,
            correction_history=history,
            stages=1 + int(self.retry_on_error),
            lm_calls=1 + rounds,
        )


# --- v2 -------------------------------------------------------------------------------------------


class DuboV2(SQLProgram):
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
      SQL fails to execute, show the error and ask for a fix;
    * ``example_values`` (5): example values per column in the schema lines;
    * ``demo_schema`` (``"used"``): the schema shown in each demo turn: ``"full"`` (the paper: the
      demo's whole database, in the same format as the question's), ``"used"`` (only the tables its
      gold SQL reads, to keep four demo schemas within a small local model's context) or
      ``"none"``;
    * ``pool_source`` (``"spider"``): the train pool (:func:`~sqlweave.programs.pools.default_pool`)
      used when no ``pool`` is passed; ``"bird"`` falls back to Spider where no BIRD train set is
      installed.

    ``pool`` (train examples) and ``encoder`` (anything with ``encode(texts)``) may be injected;
    they are not switches and are not saved with a compiled program. Questions are embedded with
    the local all-MiniLM-L6-v2 instead of the paper's text-embedding-3-large.

    The paper's remaining ablation rows swap the LM (v1's fine-tuned model; GPT-3.5 Turbo): that is
    a choice of LM, not of program, so ``ABLATIONS`` leaves them to the experiment runner.
    """

    name = "dubo_v2"

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
        super().__init__(
            num_demos=num_demos,
            diverse=diverse,
            json_output=json_output,
            error_correction=error_correction,
            correction_rounds=correction_rounds,
            example_values=example_values,
            demo_schema=demo_schema,
            pool_source=pool_source,
        )
        self.num_demos = num_demos
        self.diverse = diverse
        self.json_output = json_output
        self.error_correction = error_correction
        self.correction_rounds = correction_rounds
        self.example_values = example_values
        self.demo_schema = demo_schema
        self.pool_source = pool_source
        self._cache = _SharedCache(list(pool) if pool is not None else None, encoder)
        self.generate = dspy.Predict(GenerateSQL)
        if error_correction:
            self.correction = CorrectionLoop(max_rounds=correction_rounds, multi_turn=True)

    # -- lazily built, shared state --------------------------------------------------------------

    def pool(self) -> list[Any]:
        """The demo pool: the injected one, else the default train pool (loaded on first use)."""
        cache = self._cache
        if cache.pool is None:
            from sqlweave.programs.pools import default_pool

            with cache.lock:
                if cache.pool is None:
                    cache.pool = default_pool(self.pool_source)
        return cache.pool

    def retriever(self) -> Any:
        """Question-embedding retriever over the pool, built once (embedding the pool is slow)."""
        cache = self._cache
        if cache.retriever is None:
            from sqlweave.programs.retrieval import make_retriever

            pool = self.pool()
            with cache.lock:
                if cache.retriever is None:
                    cache.retriever = make_retriever(
                        "question",
                        pool,
                        encoder=cache.encoder,
                        one_per_db=self.diverse,
                        exclude_same_db=True,
                    )
        return cache.retriever

    def _schema(self, db: Database) -> Schema:
        return introspect(db, distinct_values=max(5, self.example_values))

    def schema_text(self, db: Database, tables: frozenset[str] | None = None) -> str:
        """Per-column lines for ``db`` (only ``tables`` when given), cached per database."""
        key = ("v2", *_db_key(db), tables)

        def build() -> str:
            schema = self._schema(db)
            if tables is not None:
                schema = schema.subset(tables=sorted(tables))
            return render_columns(schema, examples=self.example_values)

        return self._cache.memo(key, build)

    def _demo_schema_text(self, example: Any) -> str:
        """The schema shown in a demo turn, in the same format as the question's own."""
        if self.demo_schema == "none":
            return ""
        from sqlweave.db import ExecutionError
        from sqlweave.programs.linking import tables_in_sql

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
        if self.num_demos == 0:
            return [], []
        from sqlweave.programs.retrieval import as_demos

        query = {"question": question, "db_id": db.name, "evidence": evidence}
        found = list(reversed(self.retriever().retrieve(query, self.num_demos)))
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
        """Retrieve demos, generate (JSON), then correct while the SQL fails to execute."""
        schema_text = self.schema_text(db)
        found, retrieved = self.retrieve_demos(question, db, evidence)
        demos = list(self.generate.demos) + retrieved
        with self._answer_format():
            draft, raw, sql, rounds, history = _draft_then_fix(
                self.generate,
                self.correction if self.error_correction else None,
                db=db,
                schema_text=schema_text,
                question=question,
                evidence=evidence,
                demos=demos,
            )
        return dspy.Prediction(
            sql=sql,
            draft_sql=draft,
            raw=raw,
            schema=schema_text,
            demo_questions=[d.question for d in retrieved],
            demo_db_ids=[str(_field(ex, "db_id") or "") for ex in found],
            correction_rounds=rounds,
            correction_history=history,
            stages=int(self.num_demos > 0) + 1 + int(self.error_correction),
            lm_calls=1 + rounds,
        )


__all__ = ["DuboV1", "DuboV2", "estimate_tokens"]
