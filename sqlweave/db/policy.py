"""The read-only policy (layer 1): which query texts may reach an engine at all.

:func:`check_read_only` parses the text with sqlglot and accepts exactly one query statement
(``SELECT`` / ``WITH`` / ``VALUES`` / a set operation; on DuckDB also ``DESCRIBE``, ``SUMMARIZE``
and ``PIVOT``) with no data-modifying node anywhere inside it and no dangerous function call. The
text is bounded in length and nesting first, so parsing is fast and cannot overflow the stack.
What differs by dialect is a table here (:data:`EXTRA_QUERY_ROOTS`, :data:`MAX_FUNCTION_CALLS`),
not a branch. The engines' own guards (layers 2 and 3) stand even where sqlglot misreads a query.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any

from sqlglot import exp
from sqlglot.dialects import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from sqlweave.db.errors import ExecutionError, first_line, refuse
from sqlweave.sqltree import MAX_SQL_CHARS as _PARSE_LIMIT

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_ROWS = 10_000
#: Largest result (sum of value sizes) a query may return; larger results are truncated.
DEFAULT_MAX_BYTES = 64 * 1024 * 1024

#: Longest SQL text accepted. Parsing is linear (a 50,000-character OR chain: ~0.05 s with
#: sqlglot's compiled extension, ~0.12 s in pure Python), so this also bounds the parse time that
#: counts against the timeout to well under a second.
MAX_SQL_CHARS = _PARSE_LIMIT
#: Deepest nesting of parentheses and CASE expressions accepted. sqlglot's recursive-descent
#: parser overflows Python's stack at about 45 levels; real queries stay under 10.
MAX_NESTING = 32

#: Function names refused anywhere in a query: they read files, load code, change settings or
#: talk to other servers.
FORBIDDEN_FUNCTIONS = frozenset(
    {
        "load_extension",
        "readfile",
        "writefile",
        "edit",
        "fts3_tokenizer",
        "zipfile",
        "sqlar_compress",
        "pg_read_file",
        "pg_read_binary_file",
        "pg_ls_dir",
        "pg_stat_file",
        "lo_import",
        "lo_export",
        "lo_unlink",
        "dblink",
        "dblink_exec",
        "pg_terminate_backend",
        "pg_cancel_backend",
        "pg_reload_conf",
        "pg_rotate_logfile",
        "set_config",
        "setseed",  # DuckDB keeps the seed on the pooled connection
        "nextval",
        "setval",
        "pg_advisory_lock",
        "pg_advisory_xact_lock",
        "query_to_xml",
        "read_csv",
        "read_csv_auto",
        "read_parquet",
        "read_json",
        "read_json_auto",
        "read_text",
        "read_blob",
        "glob",  # DuckDB's glob() lists files; SQLite's GLOB operator parses as exp.Glob, not this
    }
)

#: Function-name prefixes refused the same way: session-level advisory locks outlive the
#: rolled-back transaction, and SQLite's pragma_* table-valued functions expose PRAGMA.
FORBIDDEN_PREFIXES = ("pg_advisory", "pg_try_advisory", "pragma_")

#: Most function calls one SQLite query may make in its text (each call is one uninterruptible
#: instruction costing up to ~10 ms on a value of SQLITE_MAX_LENGTH).
SQLITE_MAX_FUNCTION_CALLS = 100


#: sqlglot node types that modify data, schema, settings or sessions.
_WRITE_NODES: tuple[type[exp.Expression], ...] = tuple(
    getattr(exp, name)
    for name in (
        "Insert",
        "Update",
        "Delete",
        "Merge",
        "Create",
        "Drop",
        "Alter",
        "AlterTable",
        "Command",
        "Pragma",
        "Attach",
        "Detach",
        "Into",
        "Lock",
        "Set",
        "Transaction",
        "Commit",
        "Rollback",
        "Use",
        "Copy",
        "TruncateTable",
        "LoadData",
        "Analyze",
        "Grant",
        "Revoke",
    )
    if hasattr(exp, name)
)

_QUERY_ROOTS: tuple[type[exp.Expression], ...] = (
    exp.Select,
    exp.SetOperation,
    exp.Subquery,
    exp.Values,
)
#: Harmless reads that only DuckDB has.
_DUCKDB_QUERY_ROOTS: tuple[type[exp.Expression], ...] = tuple(
    getattr(exp, name) for name in ("Describe", "Summarize", "Pivot") if hasattr(exp, name)
)


#: Statements beyond :data:`_QUERY_ROOTS` that a dialect admits as harmless reads.
EXTRA_QUERY_ROOTS: dict[str, tuple[type[exp.Expression], ...]] = {"duckdb": _DUCKDB_QUERY_ROOTS}
#: Dialects whose engine cannot interrupt a function call midway cap how many a query makes.
MAX_FUNCTION_CALLS: dict[str, int] = {"sqlite": SQLITE_MAX_FUNCTION_CALLS}

#: Longest LIKE / GLOB pattern on SQLite: matching costs up to (value length x pattern length).
SQLITE_MAX_LIKE_PATTERN = 100
#: Pattern characters whose match against a value of SQLite's longest length costs what one
#: function call does (~10 ms; 1,000 characters take ~0.7 s on a 1 MB value).
LIKE_CHARS_PER_CALL = 14
_MATCHES: tuple[type[exp.Expression], ...] = (exp.Like, exp.ILike, exp.Glob)


def _call_weight(node: exp.Expression) -> int:
    """How many calls' worth of uninterruptible work ``node`` may do: a function or ``||``
    one; a pattern match one per :data:`LIKE_CHARS_PER_CALL` characters of its pattern (the
    longest allowed where the pattern is not a literal). SQLite evaluates a row's expression
    without a progress check, so this sum bounds how far past its deadline a query runs."""
    if isinstance(node, exp.Func) and not isinstance(node, exp.Connector | exp.Binary):
        return 1  # sqlglot models AND / OR as functions too
    if isinstance(node, exp.DPipe):
        return 1
    if isinstance(node, _MATCHES):
        pattern = node.expression
        literal = isinstance(pattern, exp.Literal) and pattern.is_string
        chars = len(pattern.this) if literal else SQLITE_MAX_LIKE_PATTERN
        return max(1, math.ceil(chars / LIKE_CHARS_PER_CALL))
    return 0


#: Largest size a query may ask a single call to build: a printf width or precision, a DuckDB
#: list's length. Such a call runs as one uninterruptible step whose time grows with the size
#: (``printf('%.*c', 2147483647, 'x')``: 6 s on SQLite; ``list_resize([1], 1e8)``: 16 s and 6 GB
#: on DuckDB, outside its memory limit), so only sizes a real answer needs are let through.
MAX_BUILT_SIZE = 1_000_000
#: A printf conversion: flags, width and precision (``*`` takes one from the arguments), an
#: optional length modifier, the conversion letter.
_PRINTF_SPEC = re.compile(r"%([^a-zA-Z%]*)(?:ll|l)?([a-zA-Z%])")


def _printf_width(node: exp.Expression) -> str | None:
    """SQLite's ``printf`` / ``format``: a literal format whose widths and precisions, written
    in it or taken from the arguments by ``*``, are literal and under :data:`MAX_BUILT_SIZE`."""
    if isinstance(node, exp.Format):
        fmt, args = node.this, list(node.expressions)
    elif isinstance(node, exp.Anonymous) and node.name.lower() in ("printf", "format"):
        fmt, args = (node.expressions or [None])[0], list(node.expressions[1:])
    else:
        return None
    if not (isinstance(fmt, exp.Literal) and fmt.is_string):
        return "printf() takes a literal format here"
    rest = iter(args)
    for flags, conversion in _PRINTF_SPEC.findall(fmt.this):
        if conversion == "%":
            continue
        if re.search(r"\d{7,}", flags):
            return f"printf() width or precision of {MAX_BUILT_SIZE:,} or more ({flags!r})"
        for _ in range(flags.count("*")):
            if not _small(next(rest, None)):
                return f"printf() takes '*' widths as literals within {MAX_BUILT_SIZE:,}"
        next(rest, None)  # the converted value
    return None


def _small(node: exp.Expression | None) -> bool:
    """A size that is absent, or a number literal within :data:`MAX_BUILT_SIZE` either way."""
    if node is None:
        return True
    if isinstance(node, exp.Neg):
        node = node.this
    if not isinstance(node, exp.Literal) or node.is_string:
        return False
    try:
        return abs(float(node.this)) <= MAX_BUILT_SIZE
    except ValueError:
        return False


_VALUE_BUILDERS: tuple[type[exp.Expression], ...] = (exp.Repeat, exp.Pad)


def _value_size(node: exp.Expression) -> str | None:
    """``repeat`` and ``lpad`` / ``rpad`` (DuckDB, PostgreSQL): a literal size within
    :data:`MAX_BUILT_SIZE`, and a value not itself built by one (``repeat(repeat('x', 1e6),
    1e3)`` is 1 GB from two small sizes). Each builds its value in one step that neither the
    interrupt nor DuckDB's memory limit reaches, and PostgreSQL's ``length()`` over such a value
    ignores a cancel."""
    if isinstance(node, exp.Repeat):
        size, name = node.args.get("times"), "repeat()"
    elif isinstance(node, exp.Pad):
        size, name = node.expression, "lpad() / rpad()"
    else:
        return None
    if not _small(size):
        return f"{name} needs a literal size within {MAX_BUILT_SIZE:,} here"
    if any(isinstance(inner, _VALUE_BUILDERS) for inner in node.this.walk()):
        return f"{name} of a value built by another repeat() or pad is not allowed here"
    return None


def _list_size(node: exp.Expression) -> str | None:
    """DuckDB's list builders take literal sizes within :data:`MAX_BUILT_SIZE`: ``range`` /
    ``generate_series`` as a value, ``list_resize``, ``array_resize`` (``list_resize([1],
    1e8)``: 16 s and 6 GB at a 1 s timeout). As a table (``FROM range(n)``) a series streams
    and is interrupted, so any size goes there."""
    if isinstance(node, exp.GenerateSeries):
        if isinstance(node.parent, exp.Table):
            return None
        sizes, name = [node.args.get(k) for k in ("start", "end", "step")], "range()"
    elif isinstance(node, exp.Anonymous) and node.name.lower() in ("list_resize", "array_resize"):
        sizes, name = node.expressions[1:2] or [exp.null()], f"{node.name.lower()}()"
    else:
        return None
    if all(_small(size) for size in sizes):
        return None
    return f"{name} needs literal sizes within {MAX_BUILT_SIZE:,} here"


def _pivot_values(node: exp.Expression) -> str | None:
    """A DuckDB PIVOT names its values (``ON k IN (...)``): without them DuckDB first builds a
    column per distinct value, a plan the interrupt does not reach (99,000 values: 15 s), and
    leaves a temporary ENUM type on the connection."""
    if not isinstance(node, exp.Pivot) or node.args.get("unpivot"):
        return None
    on = node.args.get("fields") or node.expressions
    if on and all(isinstance(e, exp.In) for e in on):
        return None
    return "PIVOT must list its values (ON column IN (...))"


#: Per dialect, checks of single nodes: each returns why the node is refused, or None.
NODE_CHECKS: dict[str, tuple[Callable[[exp.Expression], str | None], ...]] = {
    "sqlite": (_printf_width,),
    "duckdb": (_value_size, _list_size, _pivot_values),
    "postgres": (_value_size,),
}

_OPENERS = frozenset({TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.CASE})
_CLOSERS = frozenset({TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.END})


def check_length(sql: str) -> None:
    """Refuse a text over :data:`MAX_SQL_CHARS`, before anything parses it."""
    if len(sql) > MAX_SQL_CHARS:
        raise ExecutionError(
            "runtime", f"query too long ({len(sql):,} characters; at most {MAX_SQL_CHARS:,})", sql
        )


def _check_size(sql: str, dialect: str) -> list[Any]:
    """Refuse text too long to parse quickly or nested too deeply for sqlglot's parser.

    Returns the tokens, so the parser does not tokenize the text a second time.
    """
    check_length(sql)
    try:
        tokens = Dialect.get_or_raise(dialect).tokenize(sql)
    except (TokenError, ValueError) as err:
        raise ExecutionError("syntax", first_line(str(err)), sql) from err
    depth = deepest = 0
    for token in tokens:
        if token.token_type in _OPENERS:
            depth += 1
            deepest = max(deepest, depth)
        elif token.token_type in _CLOSERS:
            depth -= 1
    if deepest > MAX_NESTING:
        raise ExecutionError(
            "syntax", f"query nested too deeply ({deepest} levels; at most {MAX_NESTING})", sql
        )
    return tokens


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        return False
    return True


def check_read_only(sql: str, dialect: str = "sqlite") -> exp.Expression:
    """Parse ``sql`` and return its AST if it is exactly one read-only query.

    Raises :class:`ExecutionError` (kind ``syntax``, ``runtime`` for a text over
    :data:`MAX_SQL_CHARS`, or ``not_read_only``) otherwise, never another exception. The check is
    the first of three layers; the engine-level guards stand even where sqlglot misreads a query.
    """
    if not sql or not sql.strip():
        raise ExecutionError("syntax", "empty query", sql)
    if "\x00" in sql or not _encodable(sql):
        raise ExecutionError("syntax", "the query text holds a NUL or an invalid character", sql)
    tokens = _check_size(sql, dialect)
    try:
        parser = Dialect.get_or_raise(dialect).parser()
        # A comment after the last ";" comes back as a Semicolon node holding it: no statement.
        statements = [
            s
            for s in parser.parse(tokens, sql)
            if s is not None and not isinstance(s, exp.Semicolon)
        ]
    except (ParseError, TokenError) as err:
        raise ExecutionError("syntax", _describe_parse_error(err), sql) from err
    except RecursionError as err:
        # Unary chains (NOT NOT NOT ...) nest without parentheses; the stack still overflows.
        raise ExecutionError("syntax", "query nested too deeply to parse", sql) from err
    if len(statements) != 1:
        raise refuse(f"expected exactly one statement, got {len(statements)}", sql)
    tree = statements[0]
    roots = _QUERY_ROOTS + EXTRA_QUERY_ROOTS.get(dialect, ())
    if not isinstance(tree, roots):
        raise refuse(f"only SELECT queries may run, not {tree.key.upper()}", sql)
    calls = 0
    for node in tree.walk():
        calls += _call_weight(node)
        if isinstance(node, _WRITE_NODES):
            raise refuse(f"{node.key.upper()} is not allowed inside a query", sql)
        if isinstance(node, exp.Func):
            name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
            if name in FORBIDDEN_FUNCTIONS or name.startswith(FORBIDDEN_PREFIXES):
                raise refuse(f"function {name}() is not allowed", sql)
        elif isinstance(node, exp.Table) and node.name.lower().startswith("pragma_"):
            # SQLite's argument-less pragma table functions parse as plain table names.
            raise refuse(f"{node.name} (a PRAGMA) is not allowed", sql)
        for check in NODE_CHECKS.get(dialect, ()):
            if (reason := check(node)) is not None:
                raise ExecutionError("runtime", reason, sql)
    most = MAX_FUNCTION_CALLS.get(dialect)
    if most is not None and calls > most:
        raise ExecutionError("runtime", f"too many function calls ({calls}; at most {most})", sql)
    return tree


#: Texts up to this long have their verdict cached, at most :data:`VERDICT_CACHE_SIZE` of them,
#: so the cache holds a few megabytes at worst; longer texts (rare) are checked every time.
VERDICT_CACHE_MAX_CHARS = 2_000
VERDICT_CACHE_SIZE = 4_096


@functools.lru_cache(maxsize=VERDICT_CACHE_SIZE)
def _verdict(check: Callable[[str, str], Any], sql: str, dialect: str) -> tuple[str, str] | None:
    """None when ``check`` accepts ``sql``, else the refusal's kind and message.

    The check itself is part of the key, so a replaced one (tests bypass layer 1 that way) never
    shares verdicts with the real one. A refusal caused by the depth of the caller's stack
    (RecursionError) is raised, not cached: another caller might parse the same text.
    """
    try:
        check(sql, dialect)
    except ExecutionError as err:
        if isinstance(err.__cause__, RecursionError):
            raise
        return err.kind, err.message
    return None


def ensure_read_only(sql: str, dialect: str) -> None:
    """:func:`check_read_only` without the tree, its verdict cached per (SQL text, dialect).

    The verdict depends on nothing but the text, the dialect and this module's constants, so a
    text checked once (a gold query scored against many predictions, the same candidate from
    several programs) is not parsed again.
    """
    if len(sql) > VERDICT_CACHE_MAX_CHARS:
        check_read_only(sql, dialect)
        return
    refusal = _verdict(check_read_only, sql, dialect)
    if refusal is not None:
        raise ExecutionError(*refusal, sql)


def _describe_parse_error(err: Exception) -> str:
    """sqlglot's message plus the offending token and position, which an LM can act on."""
    details = getattr(err, "errors", None) or []
    if details:
        first = details[0]
        near = (first.get("highlight") or "").strip()
        where = f"line {first.get('line')}, col {first.get('col')}"
        desc = first.get("description") or "parse error"
        return f"{desc} near {near!r} ({where})" if near else f"{desc} ({where})"
    return first_line(str(err))


def check_limits(timeout_s: float, max_rows: int | None, max_bytes: int | None) -> None:
    """Refuse limits that would switch a guard off (NaN compares false with everything)."""
    if not isinstance(timeout_s, int | float) or not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ValueError(
            f"timeout_s must be a positive finite number of seconds, not {timeout_s!r}"
        )
    for label, value in (("max_rows", max_rows), ("max_bytes", max_bytes)):
        if value is not None and (not isinstance(value, int) or value < 0):
            raise ValueError(f"{label} must be None or a non-negative integer, not {value!r}")
