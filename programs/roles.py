"""Each stage role's call, as a :class:`typing.Protocol`: what a program may pass and read.

A role is a set of keyword arguments in and a ``dspy.Prediction`` out (the table in
:mod:`sqlweave.programs.stages`). Writing it once here is the specification every implementation
follows and every program relies on, instead of each selector restating the keywords in its own
``forward``. An implementation accepts and ignores the keywords it does not read (``**_``), so a
program can call any stage of a role the same way.

What a role's *optional* keywords need is declared, not sniffed: a selector that reads
``weights`` declares ``takes_weights``, one that reads ``sources`` declares ``takes_sources``
(:data:`sqlweave.programs.stages.CAPABILITIES`); a program passes them only to a selector that
declares them, so one that does not is never handed an argument it would reject.

These are structural types for annotations and type checkers: nothing is checked at run time,
so a user's stage needs no base class, only the call.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, Unpack

import dspy

if TYPE_CHECKING:
    from sqlweave.db import Database
    from sqlweave.schema import Schema


class Ask(TypedDict, total=False):
    """What every stage may be told about the question besides its own inputs: the question,
    its evidence (BIRD's hint) and the schema text the generator was shown."""

    question: str
    evidence: str
    db_schema: str | None


class Linker(Protocol):
    """The ``linker`` role: the schema elements a question needs.

    Returns ``Prediction(linked=LinkedSchema, schema=pruned Schema, ...)``; an empty link keeps
    the whole schema. ``sql`` is a draft the linker may read (``links_backward``); a linker that
    declares ``links_forward`` is also called without one and gets its own earlier result back
    as ``forward_linked``.
    """

    def __call__(
        self,
        *,
        question: str,
        schema: Schema,
        sql: str = "",
        db_schema: str = "",
        evidence: str = "",
        dialect: str = "sqlite",
        db: Database | None = None,
        **more: Any,
    ) -> dspy.Prediction: ...


class Selector(Protocol):
    """The ``selector`` role: one of ``candidates``.

    Returns ``Prediction(sql, choice, lm_called, ...)`` (``choice``: 1-based position of
    ``sql``). ``weights`` (one per candidate) is passed only to a selector that declares
    ``takes_weights``; ``sources`` (the generator of each candidate) only to one that declares
    ``takes_sources``.
    """

    def __call__(
        self,
        *,
        candidates: Sequence[str],
        db: Database | str | Path,
        weights: Sequence[float] | None = None,
        sources: Sequence[str] | None = None,
        **ask: Unpack[Ask],
    ) -> dspy.Prediction: ...


class Corrector(Protocol):
    """The ``corrector`` role (and a pool's ``repair``): ``sql`` checked and perhaps changed.

    Returns ``Prediction(sql, rounds, history, ...)``; ``history`` holds the attempts as dicts
    with ``sql`` and ``feedback``. Correctors chain (:class:`~sqlweave.programs.chain.Chain`):
    each sees the SQL the one before returned.
    """

    def __call__(
        self, *, sql: str, db: Database | str | Path, **ask: Unpack[Ask]
    ) -> dspy.Prediction: ...


class Generator(Protocol):
    """A candidate generator (:mod:`sqlweave.programs.generators`): the prompt it asks, and the
    call that answers it (``generate(**prompt.inputs)`` returns ``Prediction(sql, ...)``)."""

    name: str

    def prompt(self, *, question: str, db: Database, evidence: str = "") -> Any: ...

    def generate(self, **inputs: Any) -> dspy.Prediction: ...


__all__ = ["Ask", "Corrector", "Generator", "Linker", "Selector"]
