"""Evaluation runs as a report reads them: each record's error class, a run's figures, its
provenance.

:mod:`sqlweave.report` renders pages from these; they are apart from the page so a figure (EX
per difficulty, error classes, a paired comparison) can be computed, or tested, without HTML or
matplotlib. The names stay importable from :mod:`sqlweave.report`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlweave.data import BIRD_LEVELS, SPIDER_LEVELS
from sqlweave.records import compressed, read_records
from sqlweave.stats import Interval, PairedComparison, bootstrap_ci, outcomes_by_id, paired
from sqlweave.summary import has_candidates, oracle_hit

CORRECT = "correct"
WRONG_RESULT = "wrong result"
SYNTAX = "syntax error"
UNKNOWN_NAME = "unknown column/table"
TIMEOUT = "timeout"
LM_FAILURE = "LM failure"
OTHER = "other"

#: Every class a record falls in, in the order the plots show them.
ERROR_CLASSES = (CORRECT, WRONG_RESULT, SYNTAX, UNKNOWN_NAME, TIMEOUT, LM_FAILURE, OTHER)

#: ``error_kind`` values written by the evaluator (``sqlweave.db.QueryError.kind``) and their class.
_KIND_CLASSES: Mapping[str, str] = {
    "syntax": SYNTAX,
    "unknown_column": UNKNOWN_NAME,
    "unknown_table": UNKNOWN_NAME,
    "timeout": TIMEOUT,
    "lm": LM_FAILURE,
    "lm_error": LM_FAILURE,
}

#: A program failure (``error_kind`` ``program``) whose text says the model, not the SQL, failed:
#: a server down, a timeout or rate limit of the endpoint, a prompt over the context window.
_LM_TEXT = re.compile(
    r"APIConnectionError|APIError|ServiceUnavailable|RateLimit|AuthenticationError|"
    r"Connection (refused|error|reset)|context (window|length)|ContextWindowExceeded|"
    r"litellm|openai\.|llama_cpp|\bLM\b|language model|BadRequestError",
    re.I,
)

#: For records without a known kind (older files, other engines): the error text decides.
_TEXT_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (TIMEOUT, re.compile(r"timed out|timeout|interrupt|canceling statement", re.I)),
    (
        SYNTAX,
        re.compile(r"syntax error|parse error|incomplete input|unrecognized token", re.I),
    ),
    (
        UNKNOWN_NAME,
        re.compile(
            r"no such (column|table)|unknown (column|table)|(column|relation) .* does not exist",
            re.I,
        ),
    ),
)


def error_class(record: Mapping[str, Any]) -> str:
    """The :data:`ERROR_CLASSES` entry of one evaluation record.

    A correct record is ``correct``; a miss whose SQL ran is a ``wrong result``; a miss with an
    error is classed by its ``error_kind`` when the evaluator recorded one it knows, else by the
    error text, else ``other`` (no SQL, a program failure, a runtime error such as an ambiguous
    column). A failed model call (the endpoint down, rate-limited, a prompt over the context
    window) is an ``LM failure``, its own class: it says nothing about the program's SQL.
    """
    if record.get("correct"):
        return CORRECT
    error = record.get("error")
    if not error:
        return WRONG_RESULT
    if record.get("error_kind") == "program" and _LM_TEXT.search(str(error)):
        return LM_FAILURE
    kind = _KIND_CLASSES.get(str(record.get("error_kind") or ""))
    if kind is not None:
        return kind
    for name, pattern in _TEXT_RULES:
        if pattern.search(str(error)):
            return name
    return OTHER


@dataclass
class Run:
    """One evaluation run: a display name, its records and its provenance (may be empty)."""

    name: str
    records: list[dict[str, Any]]
    path: Path | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    _ex: Interval | None = field(default=None, init=False, repr=False, compare=False)
    _by_level: dict[str, Interval] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def n(self) -> int:
        return len(self.records)

    def outcomes(self) -> dict[str, bool]:
        """``{question_id: correct}``."""
        return outcomes_by_id(self.records)

    def ex(self) -> Interval:
        """EX over all records, with its 95% bootstrap interval (computed once: the report asks
        for it in several places, and 2,000 resamples of 10,000 records take a while)."""
        if self._ex is None:
            self._ex = bootstrap_ci([bool(r.get("correct")) for r in self.records])
        return self._ex

    def ex_by_level(self) -> dict[str, Interval]:
        """EX per difficulty level (benchmark order), with intervals (computed once)."""
        if self._by_level is None:
            levels: dict[str, list[bool]] = {}
            for r in self.records:
                levels.setdefault(level_of(r), []).append(bool(r.get("correct")))
            self._by_level = {lv: bootstrap_ci(levels[lv]) for lv in ordered_levels(levels)}
        return self._by_level

    def classes(self) -> dict[str, int]:
        """How many records fall in each error class."""
        counts = dict.fromkeys(ERROR_CLASSES, 0)
        for r in self.records:
            counts[error_class(r)] += 1
        return counts

    def tokens(self) -> list[float]:
        """Prompt + completion tokens per question, for records that carry usage."""
        out = []
        for r in self.records:
            usage = _usage(r)
            if "prompt_tokens" in usage or "completion_tokens" in usage:
                out.append(
                    _number(usage.get("prompt_tokens")) + _number(usage.get("completion_tokens"))
                )
        return out

    def seconds(self) -> list[float]:
        """Seconds the program took per question."""
        return [float(r["seconds"]) for r in self.records if r.get("seconds") is not None]

    def calls(self, field: str = "calls") -> list[float]:
        """LM calls per question (``field="cached_calls"``: those answered from DSPy's cache)."""
        values = [_usage(r).get(field) for r in self.records]
        return [_number(v) for v in values if v is not None]

    def ex_by_database(self) -> dict[str, Interval]:
        """EX per ``db_id`` (sorted by name), with intervals."""
        dbs: dict[str, list[bool]] = {}
        for r in self.records:
            dbs.setdefault(str(r.get("db_id") or "?"), []).append(bool(r.get("correct")))
        return {db: bootstrap_ci(dbs[db]) for db in sorted(dbs)}

    def oracle_ex(self) -> Interval | None:
        """EX had the best candidate been chosen: a question counts when its answer or any of
        its ``candidates`` is correct. None when no record carries candidates."""
        if not has_candidates(self.records):
            return None
        return bootstrap_ci([oracle_hit(r) for r in self.records])


def level_of(record: Mapping[str, Any]) -> str:
    """A record's difficulty level; records without one are grouped as ``unknown``."""
    return str(record.get("difficulty") or "unknown")


def ordered_levels(levels: Any) -> list[str]:
    """``levels`` in benchmark order (Spider's, then BIRD's), unknown ones after by name."""
    known = (*SPIDER_LEVELS, *BIRD_LEVELS)
    return sorted(levels, key=lambda lv: (known.index(lv) if lv in known else len(known), lv))


def load_run(path: str | Path, name: str | None = None) -> Run:
    """A :class:`Run` from an evaluation JSONL file (named after the file unless ``name``)."""
    path = Path(path)
    if path.suffix == ".gz":  # a finished run kept compressed: named as it was written
        path = path.with_suffix("")
    if not path.is_file() and compressed(path) is None:
        raise FileNotFoundError(f"no evaluation records at {path}")
    records = read_records(path)
    if not records:
        raise ValueError(f"{path} holds no evaluation records")
    return Run(name or path.stem, records, path, read_provenance(path))


#: Provenance fields shown per run, in order.
PROVENANCE_FIELDS = ("program", "switches", "model", "artifact", "commit")


def read_provenance(path: str | Path) -> dict[str, Any]:
    """What a run was: program, switches, model, the artefact's content hash, the commit.

    From ``<path>.run.json`` (written by ``evaluate``: its ``_run`` identity, and the commit the
    CLI adds beside it), else from an experiment's summary ``<stem>.json`` with the same keys;
    empty when neither exists or neither reads. Never raises: a report without provenance is
    still a report.
    """
    path = Path(path)
    found: dict[str, Any] = {}
    for candidate, part in (
        (path.with_name(path.name + ".run.json"), "_run"),
        (path.with_suffix(".json"), None),
    ):
        if not candidate.is_file() or candidate == path:
            continue
        try:
            payload = json.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(payload, dict):
            continue
        body = payload.get(part) if part else payload
        if not isinstance(body, dict):
            continue
        found = {k: body.get(k) for k in PROVENANCE_FIELDS if body.get(k) is not None}
        extra = payload.get("provenance") if isinstance(payload.get("provenance"), dict) else {}
        found.update({k: v for k, v in extra.items() if k in PROVENANCE_FIELDS and v})
        if found:
            break
    return found


def paired_against_first(runs: Sequence[Run]) -> list[tuple[Run, PairedComparison | None]]:
    """Each run after the first compared with the first (``None`` when they share no question)."""
    base = runs[0].outcomes()
    out: list[tuple[Run, PairedComparison | None]] = []
    for run in runs[1:]:
        try:
            out.append((run, paired(run.outcomes(), base)))
        except ValueError:
            out.append((run, None))
    return out


def judged(run: Run) -> tuple[list[float], list[bool]]:
    """The run's answers that carry a confidence: (confidences, right or not)."""
    rows = [r for r in run.records if isinstance(r.get("confidence"), int | float)]
    return [float(r["confidence"]) for r in rows], [bool(r.get("correct")) for r in rows]


def _usage(record: dict[str, Any]) -> dict[str, Any]:
    """A record's usage, or {} where it holds none or something that is no usage object."""
    usage = record.get("usage")
    return usage if isinstance(usage, dict) else {}


def _number(value: Any) -> float:
    """A usage count as a number; what is none (or no number) counts as 0."""
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0
