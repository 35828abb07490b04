"""Each stage role's call, as a :class:`typing.Protocol`, and what a stage may declare.

A role is a set of keyword arguments in and a ``dspy.Prediction`` out (the table in
:mod:`sqlweave.programs.stages`). Writing it once here is the specification every implementation
follows and every program relies on, instead of each selector restating the keywords in its own
``forward``. An implementation accepts and ignores the keywords it does not read (``**_``), so a
program can call any stage of a role the same way.

What a role's *optional* keywords need is declared, not sniffed: a selector that reads
``weights`` declares ``takes_weights``, one that reads ``sources`` declares ``takes_sources``
(:data:`CAPABILITIES`, read with :func:`declares`); a program passes them only to a selector
that declares them, so one that does not is never handed an argument it would reject.

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
    with ``sql`` and ``feedback``. Correctors chain (:class:`~sqlweave.programs.stages.chain.Chain`):
    each sees the SQL the one before returned.
    """

    def __call__(
        self, *, sql: str, db: Database | str | Path, **ask: Unpack[Ask]
    ) -> dspy.Prediction: ...


class Generator(Protocol):
    """A candidate generator (:mod:`sqlweave.programs.stages.generators`): the prompt it asks, and the
    call that answers it (``generate(**prompt.inputs)`` returns ``Prediction(sql, ...)``)."""

    name: str

    def prompt(self, *, question: str, db: Database, evidence: str = "") -> Any: ...

    def generate(self, **inputs: Any) -> dspy.Prediction: ...


# --- what a stage may declare --------------------------------------------------------------------

#: What a stage may declare about itself, as a class attribute or property, with the value a stage
#: that declares nothing has. Programs branch on these, never on a stage's class or registry name,
#: so a user's own stage that declares them is treated like the built-in one.
CAPABILITIES: dict[str, bool] = {
    # It does nothing (the ``none`` linker and corrector): programs skip it and record nothing.
    "is_noop": False,
    # A selector that keeps the first candidate without looking at the others (``first``).
    "picks_first": False,
    # A selector whose answer is the unweighted execution vote's (``vote``): candidates sampled
    # only for it may stop once the vote is settled (voting.settle_for). One that needs every
    # candidate (an LM judge, ``across``, ``ranked``, ``grounded``) leaves this False.
    "settles_early": False,
    # A selector that reads ``weights=`` (one per candidate); others are not given them.
    "takes_weights": False,
    # A selector that reads ``sources=`` (each candidate's generator, ``across``).
    "takes_sources": False,
    # A linker that can link before any draft exists: its ``forward_linker`` (the linker itself
    # when it has no such part) is called without one, and its result passed back to the linker
    # as ``forward_linked``.
    "links_forward": False,
    # A linker that reads the draft SQL (``sql=``); every linker is given one by the protocol.
    "links_backward": True,
    # A generator a Sampler calls with ``db=`` (a whole program, SQLProgram); a predictor is
    # called with its prompt's inputs only.
    "takes_db": False,
}


def declares(stage: Any, capability: str) -> bool:
    """Whether ``stage`` (an instance or a class) declares ``capability`` (:data:`CAPABILITIES`)."""
    try:
        default = CAPABILITIES[capability]
    except KeyError:
        raise ValueError(
            f"unknown stage capability {capability!r}; choose one of {', '.join(CAPABILITIES)}"
        ) from None
    return bool(getattr(stage, capability, default))


__all__ = ["CAPABILITIES", "Ask", "Corrector", "Generator", "Linker", "Selector", "declares"]
