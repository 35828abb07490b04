"""PET-SQL's question skeletons: schema mentions become ``<mask>``, values ``<unk>``.

"How many singers are from France?" and "How many cars are from Japan?" share the skeleton
"how many <mask> are from <unk> ?", so a retriever embedding skeletons
(:class:`~sqlweave.programs.stages.retrieval.MaskedQuestionRetriever`) finds questions of the same
shape on other databases rather than other questions about singers. The masking is text work
with no model: :func:`mask_question` against the phrases :func:`schema_phrases` makes of a
database's names, read once per database file (:func:`database_phrases`).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from pathlib import Path

from sqlweave.caches import CACHE

logger = logging.getLogger(__name__)

MASK = "<mask>"
UNK = "<unk>"

_SCHEMA_NAMES: dict[str, frozenset[tuple[str, ...]]] = {}
_SCHEMA_LOCK = threading.Lock()
_CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NAME_SPLIT_RE = re.compile(r"[^A-Za-z0-9]+")
_Q_TOKEN_RE = re.compile(
    r"\"[^\"]*\"|“[^”]*”|‘[^’]*’|(?<!\w)'[^']+'(?!\w)|\d+(?:[.,:/-]\d+)*|\w+|[^\w\s]"
)
_SENTENCE_END = frozenset(".?!:;")
_QUOTES = "\"“‘'"
_NAME_STOP = frozenset("a an the of to in on at for by with from and or is are as".split())


def _singular(word: str) -> str:
    """A crude English singular, enough to match "singers" with a ``singer`` table."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("ches", "shes", "sses", "xes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def name_phrase(name: str) -> tuple[str, ...]:
    """A schema name as the words a question would use: ``singer_id`` → ``("singer", "id")``."""
    words = _NAME_SPLIT_RE.split(_CAMEL_RE.sub(" ", name))
    return tuple(_singular(w.lower()) for w in words if w)


def schema_phrases(names: Iterable[str]) -> frozenset[tuple[str, ...]]:
    """Word phrases of table and column names that may be masked (not pure function words)."""
    phrases = {name_phrase(n) for n in names}
    return frozenset(p for p in phrases if p and not all(w in _NAME_STOP for w in p))


def mask_question(question: str, phrases: Iterable[tuple[str, ...]]) -> str:
    """PET-SQL's question skeleton: schema mentions → ``<mask>``, values → ``<unk>``.

    Values are quoted spans, numbers and capitalised words that do not start a sentence (names such
    as "France" or "John Smith"; no database lookup, which keeps a 7k pool cheap). Schema mentions
    are the longest runs of words that, singularised, spell a table or column name of the
    question's own database (``phrases``, see :func:`schema_phrases`). Adjacent equal markers
    collapse into one, so "John Smith" is one ``<unk>``.
    """
    phrase_set = set(phrases)
    longest = max((len(p) for p in phrase_set), default=0)
    raw = _Q_TOKEN_RE.findall(question)
    out: list[str] = []
    i = 0
    while i < len(raw):
        tok = raw[i]
        if (tok[0] in _QUOTES and len(tok) > 1) or tok[0].isdigit():
            out.append(UNK)
            i += 1
            continue
        matched = 0
        for n in range(min(longest, len(raw) - i), 0, -1):
            span = raw[i : i + n]
            if not all(t[0].isalnum() or t[0] == "_" for t in span):
                continue
            if tuple(_singular(t.lower()) for t in span) in phrase_set:
                matched = n
                break
        if matched:
            out.append(MASK)
            i += matched
            continue
        starts_sentence = not out or out[-1] in _SENTENCE_END
        if tok[0].isupper() and not starts_sentence and tok != "I":
            out.append(UNK)
        else:
            out.append(tok.lower())
        i += 1
    collapsed = [t for j, t in enumerate(out) if not (t in (MASK, UNK) and j and out[j - 1] == t)]
    return " ".join(collapsed)


def database_phrases(target: str | None, label: str | None = None) -> frozenset[tuple[str, ...]]:
    """Maskable phrases of the database ``target`` names (a file or a dataset's database id),
    cached per database file; none, with a warning naming ``label``, when there is no such
    database."""
    from sqlweave.data import DataError, database_path, open_database
    from sqlweave.schema import introspect

    try:
        if not target:
            raise DataError(None, "the example has neither db_path nor db_id")
        path = str(Path(database_path(str(target))).resolve())
    except DataError as err:
        logger.warning("no database for %s, masking values only: %s", label, err)
        return frozenset()
    with _SCHEMA_LOCK:
        hit = _SCHEMA_NAMES.get(path)
    if hit is not None:
        return hit
    schema = introspect(open_database(path), sample_rows=0, distinct_values=0)
    names = [t.name for t in schema.tables] + [c.name for _, c in schema.all_columns()]
    phrases = schema_phrases(names)
    with _SCHEMA_LOCK:
        _SCHEMA_NAMES[path] = phrases
    return phrases


# Part of sqlweave.caches.CACHE.clear().
CACHE.register(_SCHEMA_NAMES.clear)

__all__ = ["MASK", "UNK", "database_phrases", "mask_question", "name_phrase", "schema_phrases"]
