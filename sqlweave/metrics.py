"""Execution accuracy (EX) as the official Spider and BIRD scripts score it, and stricter variants of
both. Spider hardness lives in :mod:`sqlweave.hardness` (re-exported here).

Four semantics (``docs/metrics.md`` sets them side by side with the reason for each):

* ``official-spider`` (alias ``spider``) — the test-suite evaluation (``taoyds/test-suite-sql-eval``,
  ``eval_exec_match`` with ``plug_value`` and ``keep_distinct`` off), reproduced step by step:
  spaced operators ``> =``, ``< =``, ``! =`` are repaired in both queries; each query keeps only
  its first statement (as ``sqlparse.parse(q)[0]`` does) with every ``DISTINCT`` token removed and
  every other character — whitespace inside literals and comments included — left as it was;
  ``YEAR(CURDATE())`` becomes ``2020``. The gold counts as ordered when the text ``order by``
  occurs anywhere in it (lowercased, so ``ORDER  BY`` with two spaces does not). Results must be
  equal as multisets of rows up to a permutation of columns (as lists when ordered), over **all**
  rows. Comments, leading, trailing or between tokens, stay in the text that runs.
* ``official-bird`` (alias ``bird``) — BIRD's ``evaluation.py``: each query runs as written, and
  ``set(pred_rows) == set(gold_rows)`` over all rows: duplicates and row order are ignored,
  column order matters, DISTINCT is kept, several statements are an error (a comment after the
  first is not a statement).
* ``strict-spider`` / ``strict-bird`` — sqlweave's earlier, stricter reading: the query must be
  exactly one statement (an empty one is an error), no operator repair, DISTINCT tokens are found
  by sqlglot's tokenizer, and Spider's "ordered" means a **top-level** ORDER BY in the AST.

Values are compared as the engine returns them, with Python equality, as both scripts do:
``1 == 1.0``, ``'1' != 1``, ``None == None``, and floats are not rounded.

Results are fetched up to a row cap (``OFFICIAL_MAX_ROWS`` rows and ``OFFICIAL_MAX_BYTES`` for
the official semantics, far above any benchmark answer; ``EX_MAX_ROWS`` and the database layer's
byte cap for the strict ones). A gold result cut by the cap can never
score a match (it is flagged ``gold_truncated``); a cut prediction is a miss, which is exact for
Spider (it has more rows than the gold) and departs from BIRD only for a prediction of more than
``OFFICIAL_MAX_ROWS`` rows whose distinct rows equal the gold's.

A prediction that fails, times out or is refused scores False, and so does one that holds no
statement (empty, only comments) under every semantics: the official scripts run it as an empty
result, which matches an empty gold result, and an optimizer would learn to answer nothing.
An empty gold query (no statement) is a gold failure, never a match. A gold query that fails raises
:class:`GoldQueryError` by default; with ``strict_gold=False`` it is a scored miss whose
:class:`ExecutionMatch` carries the error in ``gold_error``.
"""

from __future__ import annotations

import functools
import logging
import re
import sqlite3
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from sqlweave.db import Database, ExecutionError, QueryResult
from sqlweave.errors import SqlweaveError
from sqlweave.hardness import HARDNESS_LEVELS, spider_hardness  # noqa: F401 - re-exported
from sqlweave.resultmatch import (  # noqa: F401 - the caps re-exported
    MANY_ARRANGEMENTS,
    MAX_ARRANGEMENT_STEPS,
    Rows,
    as_rows,
    spider_equal,
)

logger = logging.getLogger(__name__)

SEMANTICS = ("official-spider", "official-bird", "strict-spider", "strict-bird")
#: Short names: the official semantics, which are what published numbers use.
SEMANTICS_ALIASES = {"spider": "official-spider", "bird": "official-bird"}
#: Row cap of the strict semantics.
EX_MAX_ROWS = 100_000
#: Row cap of the official semantics: the official scripts compare every row, so the cap only
#: guards memory; no benchmark answer comes near it.
OFFICIAL_MAX_ROWS = 2_000_000
#: Byte cap (as the database layer estimates it) of the official semantics, for the same reason.
OFFICIAL_MAX_BYTES = 1 << 30
#: The gold query must run; it gets at least this long whatever the prediction's timeout.
GOLD_MIN_TIMEOUT_S = 120.0


class GoldQueryError(SqlweaveError, RuntimeError):
    """The gold query could not run: the data or the database is broken, not the prediction."""

    def __init__(self, sql: str, db_name: str, error: ExecutionError) -> None:
        super().__init__(f"gold query failed on {db_name}: {error} -- SQL: {sql}")
        self.sql = sql
        self.db_name = db_name
        self.error = error


def resolve_semantics(semantics: str) -> str:
    """The canonical name of ``semantics`` (``spider`` -> ``official-spider``, ...)."""
    name = SEMANTICS_ALIASES.get(semantics, semantics)
    if name not in SEMANTICS:
        known = (*SEMANTICS, *SEMANTICS_ALIASES)
        raise ValueError(f"unknown semantics {semantics!r}; choose from {known}")
    return name


def _is_bird(semantics: str) -> bool:
    return semantics.endswith("bird")


# --- comparing results ------------------------------------------------------------------------


def results_match(
    pred: QueryResult | Rows,
    gold: QueryResult | Rows,
    semantics: str = "spider",
    ordered: bool = False,
) -> bool:
    """Whether a predicted result denotes the same answer as the gold one (pure; no database).

    ``ordered`` says the gold query sorts its rows; only the Spider semantics use it. The
    official and strict variants of a benchmark compare results alike: they differ in how the
    queries are prepared and run (:func:`check_execution`).
    """
    sem = resolve_semantics(semantics)
    pred_rows, gold_rows = as_rows(pred), as_rows(gold)
    if _is_bird(sem):
        return set(pred_rows) == set(gold_rows)
    return spider_equal(gold_rows, pred_rows, ordered)


# --- the official text passes -----------------------------------------------------------------

#: sqlparse's lexer, reduced to what decides a statement's end and its DISTINCT tokens: the
#: alternatives are tried in sqlparse's order, so strings, comments, quoted names and
#: placeholders are single tokens exactly where sqlparse makes them so.
_NAME_START = "A-ZÀ-Ü"
_LEXER = re.compile(
    "|".join(
        (
            r"(?P<comment>(?:--|# ).*?(?:\r\n|\r|\n|$))",
            r"(?P<block>/\*[\s\S]*?\*/)",
            r"(?P<newline>\r\n|\r|\n)",
            r"(?P<space>\s)",
            r"(?P<dollar>(?P<tag>\$(?:[_" + _NAME_START + r"]\w*)?\$)[\s\S]*?(?P=tag))",
            r"(?P<opaque>:=|::|\*|`(?:``|[^`])*`|´(?:´´|[^´])*´|\?|%(?:\(\w+\))?s"
            r"|(?<!\w)[$:?]\w+|\\\w+|(?:@|\#\#|\#)[" + _NAME_START + r"]\w+)",
            r"(?P<kw>(?:CASE|IN|VALUES|USING|FROM|AS)\b)",
            r"(?P<name>[" + _NAME_START + r"]\w*(?=\s*\.(?!\d))|(?<=\.)[" + _NAME_START + r"]\w*"
            r"|[" + _NAME_START + r"]\w*(?=\())",
            r"(?P<number>-?0x[\dA-F]+|-?\d+(?:\.\d+)?E-?\d+"
            r"|(?![_" + _NAME_START + r"])-?(?:\d+(?:\.\d*)|\.\d+)(?![_" + _NAME_START + r"])"
            r"|(?![_" + _NAME_START + r"])-?\d+(?![_" + _NAME_START + r"]))",
            r"(?P<string>'(?:''|\\'|[^'])*'|\"(?:\"\"|\\\"|[^\"])*\"|\"\"|\".*?[^\\]\""
            r"|(?<![\w\])])\[[^\]\[]+\])",
            r"(?P<end>END\b(?!\s+(?:IF|LOOP|WHILE|FOR|CASE)\b))",
            r"(?P<go>GO\s\d+\b)",
            r"(?P<word>\w[$#\w]*)",
            r"(?P<punct>[;:()\[\],.])",
            r"(?P<op>->>?|#>>?|@>|<@|\?\|?|\?&|-|#-|[<>=~!]+|[+/@#%^&|^-]+)",
            r"(?P<other>[\s\S])",
        )
    ),
    re.IGNORECASE,
)


def _official_first_statement(sql: str) -> list[tuple[str, str]]:
    """The tokens ``(kind, text)`` of the first statement, split as ``sqlparse.parse`` splits.

    A statement ends at a ``;`` outside parentheses (where sqlparse also counts every ``END``
    as a closing level) or after the keyword ``GO``, and keeps the spaces and ``--`` comments
    that follow on its line. sqlparse's rules for procedural blocks (``BEGIN ... END``) are left
    out: no query that runs has them.
    """
    tokens: list[tuple[str, str]] = []
    level, ended = 0, False
    for m in _LEXER.finditer(sql):
        kind, text = m.lastgroup or "other", m.group()
        if ended:
            if kind in ("space", "comment") and not text.startswith(("--+", "# +")):
                tokens.append((kind, text))
                continue
            break
        tokens.append((kind, text))
        if text == "(":
            level += 1
        elif text == ")" or kind == "end":
            level -= 1
        elif text == ";" and level <= 0:
            ended = True
        elif kind in ("go", "word") and text.split()[0] == "GO":
            ended = True  # sqlparse also ends a statement at the keyword GO (as written)
    return tokens


def repair_spaced_operators(sql: str) -> str:
    """``> =``, ``< =`` and ``! =`` written as one operator, anywhere in the text (official)."""
    return sql.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")


def remove_distinct(sql: str) -> str:
    """The official ``remove_distinct``: the first statement, without its DISTINCT tokens.

    Every other character stays as written, so whitespace inside string literals and comments is
    kept and a ``--`` comment still ends at its line. Text with no ``;``, ``GO`` or ``distinct``
    is returned as is without lexing.
    """
    if ";" not in sql and "GO" not in sql and "distinct" not in sql.lower():
        return sql
    tokens = _official_first_statement(sql)
    return "".join(t for _, t in tokens if t.lower() != "distinct")


_CUR_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.IGNORECASE)


def replace_cur_year(sql: str) -> str:
    """``YEAR(CURDATE())`` replaced by ``2020``, as the official Spider execution does."""
    return _CUR_YEAR.sub("2020", sql) if "curdate" in sql.lower() else sql


def prepare_official_spider(sql: str, keep_distinct: bool = False) -> str:
    """A query as the official Spider evaluation runs it (before ``YEAR(CURDATE())``)."""
    sql = repair_spaced_operators(sql)
    return sql if keep_distinct else remove_distinct(sql)


def gold_is_ordered(prepared_gold: str) -> bool:
    """The official test: the text ``order by`` anywhere in the (prepared) gold query."""
    return "order by" in prepared_gold.lower()


#: A block comment: it ends at its first ``*/``, or runs to the end of an unterminated text.
#: (Its body may not hold ``*/``: a lazy ``.*?`` with an end-of-text alternative let
#: ``/* c */ SELECT 1`` read as one unterminated comment, scoring the query as no statement.)
_BLOCK_COMMENT = r"/\*(?:[^*]|\*(?!/))*(?:\*/|\Z)"
#: Nothing SQLite would run: whitespace, comments and empty statements.
_NO_STATEMENT = re.compile(r"(?:\s|;|--[^\n]*(?:\n|\Z)|" + _BLOCK_COMMENT + ")*")
#: What Python's sqlite3 accepts after a statement: blanks and comments (no second ``;``).
_QUIET_TAIL = re.compile(r"(?:[ \t\n\r]|--[^\n]*(?:\n|\Z)|" + _BLOCK_COMMENT + ")*")


def has_no_statement(sql: str) -> bool:
    """True when SQLite would run nothing: only whitespace, comments and ``;``."""
    return _NO_STATEMENT.fullmatch(sql) is not None


def drop_open_comment(sql: str) -> str:
    """``sql`` without a block comment left open at its end.

    SQLite reads an unterminated ``/*`` as a comment to the end of the text, so both official
    scripts run ``SELECT 1 /* note`` as ``SELECT 1``; sqlglot's tokenizer, which the read-only
    check uses, refuses it. Only a ``/*`` outside strings and ``--`` comments counts (SQLite's
    own tokenizer decides, through ``complete_statement``).
    """
    at = sql.rfind("/*")
    if at < 0 or "*/" in sql[at + 2 :]:
        return sql
    return sql[:at] if sqlite3.complete_statement(sql[:at] + ";") else sql


def sqlite_statement(sql: str) -> str | None:
    """What Python's ``sqlite3`` runs for ``sql``: None for no statement, else the text to run.

    A first statement followed only by blanks and comments is returned without them (sqlite3
    accepts that tail; sqlweave's read-only check would count it as a second statement). Any
    other text is returned whole, so a real second statement fails as it does officially.
    """
    if has_no_statement(sql):
        return None
    if ";" not in sql:
        return sql
    for i, ch in enumerate(sql):
        if ch != ";" or not sqlite3.complete_statement(sql[: i + 1]):
            continue
        if has_no_statement(sql[: i + 1]):
            continue
        tail = sql[i + 1 :]
        return sql[: i + 1] if _QUIET_TAIL.fullmatch(tail) else sql
    return sql


# --- SQL-level helpers (strict semantics, voting, selection) ----------------------------------


@functools.lru_cache(maxsize=65536)
def has_top_level_order_by(sql: str, dialect: str = "sqlite") -> bool:
    """True when the outermost query sorts its rows (ORDER BY on the top SELECT or set operation).

    Unparsable SQL falls back to the official substring test.
    """
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except (ParseError, TokenError):
        return "order by" in " ".join(sql.lower().split())
    while isinstance(tree, exp.Subquery) and not tree.args.get("order"):
        tree = tree.this
    return bool(tree.args.get("order"))


@functools.lru_cache(maxsize=65536)
def strip_distinct(sql: str, dialect: str = "sqlite") -> str:
    """``sql`` without its DISTINCT keywords as sqlglot's tokenizer finds them (strict semantics).

    Only the keyword goes; every other character, whitespace included, stays as written.
    """
    try:
        tokens = sqlglot.tokenize(sql, read=dialect)
    except TokenError:
        return sql
    spans = [(t.start, t.end) for t in tokens if t.token_type == TokenType.DISTINCT]
    if not spans:
        return sql
    out, last = [], 0
    for start, end in spans:
        out.append(sql[last:start])
        last = end + 1
    out.append(sql[last:])
    return "".join(out)


# --- executing and scoring --------------------------------------------------------------------


@dataclass(frozen=True)
class ExecutionMatch:
    """The verdict on one prediction, with the prediction's error when it did not run.

    ``gold_error`` is set when the gold query failed (and ``strict_gold`` was off);
    ``gold_truncated`` when the gold result exceeded the row cap. Both are scored misses.
    """

    correct: bool
    error: ExecutionError | None = None
    pred_result: QueryResult | None = None
    gold_result: QueryResult | None = None
    gold_error: ExecutionError | None = None
    gold_truncated: bool = False


_EMPTY = QueryResult((), ())


@dataclass(frozen=True)
class _Prepared:
    """A query made ready to run: the text to execute, or None for an empty result."""

    run: str | None
    text: str


def _prepare(sql: str, semantics: str, keep_distinct: bool | None, dialect: str) -> _Prepared:
    if dialect == "sqlite":
        sql = drop_open_comment(sql)
    if semantics == "official-spider":
        text = prepare_official_spider(sql, keep_distinct=bool(keep_distinct))
        run = replace_cur_year(text)
    elif semantics == "official-bird":
        text = run = remove_distinct(sql) if keep_distinct is False else sql
    else:
        strip = (semantics == "strict-spider") if keep_distinct is None else not keep_distinct
        text = run = strip_distinct(sql, dialect) if strip else sql
        return _Prepared(run, text)
    if dialect == "sqlite":
        return _Prepared(sqlite_statement(run), text)
    return _Prepared(None if has_no_statement(run) else run, text)


def _execute(
    db: Database, prepared: _Prepared, timeout_s: float, max_rows: int, official: bool
) -> QueryResult:
    if prepared.run is None:
        return _EMPTY
    if official:
        return db.execute(
            prepared.run, timeout_s=timeout_s, max_rows=max_rows, max_bytes=OFFICIAL_MAX_BYTES
        )
    return db.execute(prepared.run, timeout_s=timeout_s, max_rows=max_rows)


def check_execution(
    pred_sql: str,
    gold_sql: str,
    db: Database,
    semantics: str = "spider",
    *,
    timeout_s: float = 30.0,
    keep_distinct: bool | None = None,
    max_rows: int | None = None,
    strict_gold: bool = True,
) -> ExecutionMatch:
    """Run gold and prediction on ``db`` and compare them under ``semantics``.

    ``keep_distinct=None`` follows each benchmark's official default (Spider strips DISTINCT,
    BIRD keeps it). ``max_rows=None`` takes the semantics' cap. Gold results come from ``db``'s
    own cache, so a gold query runs once per handle. A failing gold raises
    :class:`GoldQueryError` unless ``strict_gold=False``, which makes it a miss with
    ``gold_error`` set.
    """
    sem = resolve_semantics(semantics)
    official = sem.startswith("official")
    cap = max_rows if max_rows is not None else (OFFICIAL_MAX_ROWS if official else EX_MAX_ROWS)
    if not isinstance(gold_sql, str) or has_no_statement(gold_sql):
        # Nothing to score against: an empty result from no gold would "match" every prediction
        # that returns nothing, an empty one included.
        err = ExecutionError("syntax", "the gold query is empty: nothing to score against")
        if strict_gold:
            raise GoldQueryError(str(gold_sql or ""), db.name, err)
        logger.warning("empty gold query on %s (scored as a miss)", db.name)
        return ExecutionMatch(False, gold_error=err)
    gold_prep = _prepare(gold_sql, sem, keep_distinct, db.dialect)
    try:
        gold = _execute(db, gold_prep, max(timeout_s, GOLD_MIN_TIMEOUT_S), cap, official)
    except ExecutionError as err:
        if strict_gold:
            raise GoldQueryError(gold_sql, db.name, err) from err
        logger.warning("gold query failed on %s (scored as a miss): %s", db.name, err)
        return ExecutionMatch(False, gold_error=err)
    if gold.truncated:
        logger.warning("gold result over %d rows on %s, not compared: %s", cap, db.name, gold_sql)
        return ExecutionMatch(False, gold_result=gold, gold_truncated=True)

    if not isinstance(pred_sql, str) or has_no_statement(pred_sql):
        # Never rewarded, under any semantics: officially no statement runs as an empty result,
        # which would match every empty gold result (sqlweave departs here, docs/metrics.md).
        return ExecutionMatch(False, ExecutionError("syntax", "empty query"), None, gold)
    pred_prep = _prepare(pred_sql, sem, keep_distinct, db.dialect)
    try:
        pred = _execute(db, pred_prep, timeout_s, cap, official)
    except ExecutionError as err:
        return ExecutionMatch(False, err, None, gold)
    if pred.truncated:
        return ExecutionMatch(False, None, pred, gold)
    if sem == "official-spider":
        # the official text, an unterminated comment included: its "order by" counts there
        ordered = gold_is_ordered(prepare_official_spider(gold_sql, bool(keep_distinct)))
    else:
        ordered = sem == "strict-spider" and has_top_level_order_by(gold_sql, db.dialect)
    return ExecutionMatch(results_match(pred, gold, sem, ordered), None, pred, gold)


def execution_match(
    pred_sql: str,
    gold_sql: str,
    db: Database,
    semantics: str = "spider",
    timeout_s: float = 30.0,
    *,
    keep_distinct: bool | None = None,
) -> bool:
    """EX of one prediction: True when it returns the gold answer under ``semantics``.

    A failing or timed-out prediction is False; a failing gold raises :class:`GoldQueryError`.
    """
    return check_execution(
        pred_sql, gold_sql, db, semantics, timeout_s=timeout_s, keep_distinct=keep_distinct
    ).correct


def semantics_for(example: Any) -> str:
    """The official semantics for an example: BIRD's for BIRD questions, Spider's otherwise."""
    return "official-bird" if getattr(example, "source", "") == "bird" else "official-spider"


def pred_sql_of(pred: Any) -> str:
    """The SQL of a program output: a ``dspy.Prediction`` (``.sql``), a dict or a string."""
    if pred is None:
        return ""
    if isinstance(pred, str):
        return pred
    sql = pred.get("sql") if isinstance(pred, dict) else getattr(pred, "sql", None)
    return sql if isinstance(sql, str) else ""


def ex_metric(example: Any, pred: Any, trace: Any = None) -> float | bool:
    """DSPy metric: execution match of ``pred.sql`` against ``example.gold_sql``.

    Returns a bool while bootstrapping (``trace`` set), a float otherwise, per DSPy's contract.
    """
    from sqlweave.data import open_database

    db = open_database(example)
    ok = execution_match(pred_sql_of(pred), example.gold_sql, db, semantics_for(example))
    return ok if trace is not None else float(ok)
