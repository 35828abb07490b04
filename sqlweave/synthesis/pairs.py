"""Synthesized training pairs for a database nobody labelled: SQL from templates, questions by the LM.

A user has a database, not a train set. Demos and validation questions from *other* databases cost
a small model 12-17 EX points here (the README's compile tables), so the pairs a compile learns
from should come from the user's own database. This module makes them, in the spirit of
OmniSQL's SynSQL and SENSE, scaled to a 2-core CPU:

1. **SQL from structures, re-targeted to this schema.** A table of templates (:data:`TEMPLATES`)
   covers Spider's hardness mix (counts, filters, aggregates, GROUP BY/HAVING, ORDER BY/LIMIT,
   joins along one foreign key or two through a link table, nested and set queries). Each is
   filled with this schema's tables, keys, typed columns and *stored* values, drawn with a
   seeded RNG. No LM call, no gold question.
2. **Kept only if it is a good label.** Every query is executed read-only with a time limit and
   kept only if it runs, returns rows (at most :data:`MAX_ROWS`), is deterministic (no tie at an
   ORDER BY ... LIMIT boundary), is not a duplicate (same normalised SQL, or same template and
   result) and is not trivial (a bare ``SELECT *``).
3. **The question is written by the LM** from the SQL, the DDL of the tables it reads and the
   template's *meaning*: what the SQL returns in plain words, built from the same drawn parts
   (:class:`~sqlweave.signatures.DescribeSQL`). Reading the SQL alone, the 1.5B model misread
   the templates whose meaning their surface hides (a HAVING asked as a count, a count of child
   rows named as a count of parents); paraphrasing the meaning, it writes what the SQL asks.
4. **Round trip.** A program (``direct`` by default) answers the written question; the pair is
   kept only when its SQL returns the template SQL's result. That filters questions the LM wrote
   badly, at the price of keeping fewer of the hardest pairs (recorded per difficulty).
   With ``accept="any"`` a pair is kept when *any* candidate the program weighed returns that
   result (a sampling program's pool: ``direct`` with ``samples=8``): a question some reading of
   which gives the label, not only the reading the program settles on (checked by the answer
   alone, the set holds only what the program already solves). Measured on validation it
   admitted more wrong questions than hard right ones and did not help a compile (README,
   "Your own questions"), so ``"answer"`` stays the default.

Output is the questions-file format :func:`sqlweave.data.load_questions` reads (JSON Lines, one
pair per line, ``db_path``, ``question``, ``gold_sql``, ``difficulty``, ``source: "synthetic"``).
Runs are resumable: every tried query's verdict goes to ``<out>.tried.jsonl``, and a second run
skips what it already tried and stops when the file holds ``n`` pairs.

Steps 1 and 2 live in :mod:`sqlweave.synthesis.templates` and :mod:`sqlweave.synthesis.drafts`;
this module writes the questions, runs the round trip and keeps the file.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlweave.caches import share_database
from sqlweave.db import Database
from sqlweave.db.errors import without_password
from sqlweave.schema import introspect
from sqlweave.synthesis.drafts import (
    MAX_ROWS,
    TIMEOUT_S,
    Draft,
    SynthesisError,
    _normal,
    check_draft,
    draft_queries,
)
from sqlweave.synthesis.templates import TEMPLATES

logger = logging.getLogger(__name__)

ROUND_TRIP_DRAFTS = 6
"""Checked drafts tried per wanted pair before a run settles for fewer pairs."""
ROUND_TRIP_ACCEPT = ("answer", "any")
"""What the round trip compares with the label: the program's answer, or any of its candidates."""
ROUND_TRIP_REJECTED = "round trip: the question leads to another answer"
"""The ``why`` of a written question the round trip rejected, in ``<out>.tried.jsonl``."""


def describe(draft: Draft, db: Database, describer: Any, *, sample_rows: int = 0) -> str:
    """The LM's question for ``draft.sql``, from the DDL of the tables it reads and the draft's
    meaning in plain words ("" on garbage).

    ``sample_rows > 0`` shows that many stored rows under each table (Dubo-SQL v1's layout): a
    column whose name alone misleads (an episode's ``Number_in_season`` read as a count of
    seasons) is told apart by what it holds.
    """
    import sqlglot
    from sqlglot import exp

    from sqlweave.adapter import use_default_adapter
    from sqlweave.schema import render_ddl_with_rows

    schema = introspect(db)  # with up to five stored rows per table
    try:
        tree = sqlglot.parse_one(draft.sql, read="sqlite")
        schema = schema.subset(tables=[t.name for t in tree.find_all(exp.Table)])
    except sqlglot.errors.SqlglotError:
        pass
    ddl = render_ddl_with_rows(schema, rows=sample_rows, layout="pretty")  # 0: the DDL alone
    with use_default_adapter():
        try:
            out = describer(db_schema=ddl, sql=draft.sql, meaning=draft.meaning or "(not given)")
        except Exception as err:  # noqa: BLE001 - a garbage reply rejects the pair, not the run
            from sqlweave.failures import raise_if_run_failure

            raise_if_run_failure(err)
            logger.debug("describe failed: %s", err)
            return ""
    question = " ".join(str(getattr(out, "question", "") or "").split())
    return question if _plausible_question(question) else ""


def _plausible_question(text: str) -> bool:
    """A sentence, not SQL echoed back or a fragment."""
    low = text.lower()
    looks_like_sql = low.startswith("select") or ("select " in low and " from " in low)
    return 12 <= len(text) <= 400 and not looks_like_sql


def round_trip(
    question: str, draft: Draft, db: Database, program: Any, accept: str = "answer"
) -> bool:
    """Whether ``program`` answers ``question`` with SQL that returns ``draft.sql``'s result;
    with ``accept="any"``, whether its answer or any candidate it weighed does."""
    from sqlweave.evaluate import candidates_of
    from sqlweave.metrics import check_execution, pred_sql_of

    try:
        pred = program(question=question, db=db)
    except Exception as err:  # noqa: BLE001 - one failed answer rejects the pair
        from sqlweave.failures import raise_if_run_failure

        raise_if_run_failure(err)
        logger.debug("round trip failed: %s", err)
        return False
    sqls = [pred_sql_of(pred)]
    if accept == "any":
        sqls += [c["sql"] for c in candidates_of(pred) if c["sql"].strip()]
    return any(
        check_execution(sql, draft.sql, db, "spider", timeout_s=TIMEOUT_S).correct
        for sql in dict.fromkeys(sqls)  # each distinct query run once, the answer first
    )


def database_ref(database: Database) -> str:
    """What a pair's ``db_path`` holds: a SQLite file's path, else the URL (a DuckDB file too:
    its bare path would be opened as SQLite) without its password.

    A password is never written to a file. In this process the reference opens ``database``
    itself (:func:`~sqlweave.caches.share_database`, done by :func:`synthesize`); a later one
    reopens the URL with the password the environment gives (``PGPASSWORD`` or ``~/.pgpass`` on
    PostgreSQL). A masked ``***`` in its place could be opened by neither."""
    if database.dialect == "sqlite" and database.path is not None:
        return str(database.path)
    return without_password(database.url)


def read_pairs(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON Lines file this module wrote ([] when there is none); a line cut
    short by an interrupted write is skipped with a warning."""
    return _read_jsonl(path)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise SynthesisError(
            f"{path} is not a pairs file of sqlweave's (not UTF-8: {err})"
        ) from err
    for line in text.splitlines():
        line = line.strip()
        if line:
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                logger.warning("%s: skipped a broken line (an interrupted write)", path)
                continue
            if not isinstance(item, dict):
                raise SynthesisError(
                    f"{path} is not a pairs file of sqlweave's (a line holds {type(item).__name__}"
                    ", not an object); give another --out"
                )
            out.append(item)
    return out


def _append(path: Path, record: dict[str, Any]) -> None:
    from sqlweave.records import json_line

    with path.open("a", encoding="utf-8") as fh:
        fh.write(json_line(record))  # a lone surrogate the LM wrote is escaped, not fatal
        fh.flush()


def synthesize(
    db: Database | str | Path,
    n: int,
    *,
    out: str | Path | None = None,
    seed: int = 0,
    program: Any = "direct",
    check: bool = True,
    progress: bool = True,
    sample_rows: int = 0,
    accept: str = "answer",
) -> list[dict[str, Any]]:
    """``n`` question/SQL pairs for ``db``, in the questions-file format (see the module doc).

    ``db`` is an open :class:`~sqlweave.db.Database`, a SQLite path or a SQLAlchemy URL.
    ``program`` (a registry name or a program) answers each written question for the round trip;
    ``check=False`` skips it (every question the LM writes is kept). With ``out``, pairs are
    appended to that JSON Lines file as they are accepted and every tried query's verdict to
    ``<out>.tried.jsonl``: an interrupted run resumes where it stopped. ``sample_rows`` shows the
    question writer that many stored rows per table (:func:`describe`). ``accept`` (one of
    :data:`ROUND_TRIP_ACCEPT`): the round trip keeps a pair when the program's answer returns
    the label's rows (``"answer"``) or when any candidate it weighed does (``"any"``; give it a
    sampling program). Uses DSPy's configured LM. Returns the pairs (all of ``out``'s).
    """
    import dspy
    from tqdm.auto import tqdm

    from sqlweave.programs import get
    from sqlweave.programs.base import resolve_database
    from sqlweave.signatures import DescribeSQL

    _check_request(n, accept)
    database = resolve_database(db)
    out_path = Path(out) if out is not None else None
    tried_path = out_path.with_name(out_path.name + ".tried.jsonl") if out_path else None
    pairs = _read_jsonl(out_path) if out_path else []
    tried = _read_jsonl(tried_path) if tried_path else []
    if out_path is not None:
        _same_database(out_path, pairs, database.name)
        name = program if isinstance(program, str) else type(program).__name__
        settings = {"seed": seed, "check": check, "program": name}
        _hold_settings(out_path, settings | {"sample_rows": sample_rows, "accept": accept}, pairs)
    if len(pairs) >= n:
        return pairs[:n]
    judge = _Judge(
        database,
        describer=dspy.Predict(DescribeSQL),
        answerer=get(program) if isinstance(program, str) else program,
        check=check,
        sample_rows=sample_rows,
        accept=accept,
    )
    judge.asked.update(_asked(str(p.get("question", ""))) for p in pairs)
    bar = tqdm(
        total=n, initial=len(pairs), desc=f"synthesize {database.name}", disable=not progress
    )
    try:
        # Up to ROUND_TRIP_DRAFTS drafts per pair still wanted: the round trip rejects many.
        wanted = (n - len(pairs)) * ROUND_TRIP_DRAFTS
        skip = {_normal(t["sql"]) for t in tried if "sql" in t}
        for item in draft_queries(database, wanted, seed=seed + len(tried), skip=skip):
            verdict, pair = judge(item, len(pairs))
            if pair is not None:
                pairs.append(pair)
                if out_path:
                    _append(out_path, pair)
                bar.update(1)
            if tried_path:
                _append(tried_path, verdict)
            if len(pairs) >= n:
                break
    finally:
        bar.close()
    if len(pairs) < n:
        why = shortfall_reason(tried_path) if tried_path else "few drafts were kept"
        logger.warning(
            "%s: %d of %d pairs (%s); going on with those", database.name, len(pairs), n, why
        )
    return pairs


def shortfall_reason(tried: Path) -> str:
    """Why fewer pairs were kept than asked, from the verdicts in ``tried`` (its most common
    reason a draft was turned down), not a guess: a round trip that kept 1 of 77 drafts had
    been reported as a schema offering too few queries."""
    reasons: dict[str, int] = {}
    kept = 0
    for verdict in _read_jsonl(tried) if tried.is_file() else []:
        if verdict.get("kept"):
            kept += 1
            continue
        why = str(verdict.get("why") or "rejected")
        reasons[why] = reasons.get(why, 0) + 1
    if not reasons:
        return "the schema offered too few usable queries"
    why, count = max(reasons.items(), key=lambda item: item[1])
    turned = sum(reasons.values())
    return f"{turned} of {turned + kept} drafts turned down, {count} of them: {why}"


def _same_database(out: Path, pairs: list[dict[str, Any]], name: str) -> None:
    """Refuse to add to a pairs file of another database (a reused ``--out``): its pairs would
    be counted as this one's."""
    others = sorted({str(p.get("db_id")) for p in pairs} - {name})
    if others:
        raise SynthesisError(
            f"{out} holds pairs of {', '.join(others)}, not of {name}: give another "
            "pairs file (or delete this one)"
        )


def settings_path(out: Path) -> Path:
    """``<out>.settings.json``: how the pairs in ``out`` were made (seed, round trip, program,
    rows shown, acceptance), so that a resume under other settings cannot mix two kinds."""
    return out.with_name(out.name + ".settings.json")


def _hold_settings(out: Path, settings: dict[str, Any], pairs: list[dict[str, Any]]) -> None:
    """Write ``settings`` beside a new pairs file; refuse to add to one made under others (the
    record would say ``check: True`` of pairs no round trip checked). A file of an older
    release, which kept no settings, resumes as before, with a warning."""
    path = settings_path(out)
    if pairs and path.is_file():
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise SynthesisError(f"cannot read {path}: {err}") from err
        if not isinstance(kept, dict):
            kept = {}  # no settings object: every setting counts as changed
        changed = sorted(k for k in settings if kept.get(k) != settings[k])
        if changed:
            was = {k: kept.get(k) for k in changed}
            now = {k: settings[k] for k in changed}
            raise SynthesisError(
                f"{out} holds pairs made with {was}, not {now}: "
                "give another pairs file, or the same settings to resume it"
            )
        return
    if pairs:
        logger.warning("%s keeps no settings (an older release): resuming it as it is", out)
        return
    path.write_text(json.dumps(settings, sort_keys=True) + "\n", encoding="utf-8")


def _check_request(n: Any, accept: Any) -> None:
    """Refuse a number of pairs or an ``accept`` that :func:`synthesize` cannot work with."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise SynthesisError(f"n must be a positive integer, got {n!r}")
    if accept not in ROUND_TRIP_ACCEPT:
        raise SynthesisError(
            f"accept must be one of {', '.join(ROUND_TRIP_ACCEPT)}, not {accept!r}"
        )


#: The verdict on a question a kept pair already asks.
DUPLICATE_QUESTION = "a kept pair already asks this question"


def _asked(question: str) -> str:
    return " ".join(question.lower().split())


@dataclass
class _Judge:
    """One draft's fate: its question written, the round trip run; the verdict recorded in
    ``<out>.tried.jsonl`` and the pair kept (None when rejected)."""

    database: Database
    describer: Any
    answerer: Any
    check: bool
    sample_rows: int
    accept: str
    db_ref: str = field(init=False)
    #: The questions of the pairs kept so far (normalised): each is kept once.
    asked: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.db_ref = database_ref(self.database)
        share_database(self.db_ref, self.database)  # the pairs' db_path opens this handle

    def __call__(
        self, item: Draft | tuple[str, str, str], index: int
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        if isinstance(item, tuple):  # a draft the execution checks rejected
            return {"template": item[0], "sql": item[1], "kept": False, "why": item[2]}, None
        database = self.database
        question = describe(item, database, self.describer, sample_rows=self.sample_rows)
        if not question:
            why = "the LM wrote no usable question"
        elif _asked(question) in self.asked:  # one question twice could be in train and in val
            why = DUPLICATE_QUESTION
        elif self.check and not round_trip(question, item, database, self.answerer, self.accept):
            why = ROUND_TRIP_REJECTED
        else:
            why = ""
        verdict = {
            "template": item.template,
            "sql": item.sql,
            "meaning": item.meaning,
            "question": question,
            "kept": not why,
            "why": why or "kept",
        }
        if why:
            return verdict, None
        self.asked.add(_asked(question))
        return verdict, {
            "question_id": f"syn_{database.name}_{index:05d}",
            "db_id": database.name,
            "db_path": self.db_ref,
            "question": question,
            "gold_sql": item.sql,
            "difficulty": item.difficulty,
            "template": item.template,
            "meaning": item.meaning,
            "source": "synthetic",
        }


__all__ = [
    "MAX_ROWS",
    "ROUND_TRIP_ACCEPT",
    "ROUND_TRIP_DRAFTS",
    "ROUND_TRIP_REJECTED",
    "TEMPLATES",
    "TIMEOUT_S",
    "Draft",
    "SynthesisError",
    "check_draft",
    "database_ref",
    "describe",
    "draft_queries",
    "read_pairs",
    "round_trip",
    "synthesize",
]
