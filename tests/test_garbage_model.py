"""Every program, and every preset, answered by a model that writes garbage: an answer comes back
(its SQL perhaps empty, its failure recorded), never an exception.

The model here is a DummyLM whose every reply is text hypothesis picks: empty, prose, broken
fences and field markers, JSON of the wrong shape, SQL that writes, SQL that does not parse,
control characters. A program that raised on any of them would reach a user of ``sqlweave ask``
as a :class:`~sqlweave.failures.ProgramError` (one line, but no answer) and end an evaluation's
question as a crash; the mission asks for a recorded failure instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import dspy
import pytest
from conftest import DEMO_CONCERT_DB
from dspy.utils import DummyLM
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sqlweave
from sqlweave.programs import available
from sqlweave.programs.presets import PRESETS

#: Replies a small model really writes, or that break a parser: each is tried alone, then
#: hypothesis mixes them with text of its own.
FIXED = (
    "",
    " ",
    "I don't know.",
    "```sql\nSELECT\n```",
    "```sql\nSELECT count(*) FROM singer;\n```",
    "[[ ## sql ## ]]\n",
    "[[ ## sql ## ]]\nSELECT count(*) FROM singer\n[[ ## completed ## ]]",
    "[[ ## reasoning ## ]]\n[[ ## sql ## ]]\nSELECT 1",
    "[[ ## choice ## ]]\nZ",
    "[[ ## tables ## ]]\n['singer', 5]",
    '{"sql": 5}',
    '{"sql": "SELECT name FROM singer"}',
    "null",
    "[]",
    "{",
    "Answer: B",
    "SELECT * FROM nowhere",
    "SELECT (((",
    "DROP TABLE singer",
    "DELETE FROM singer; SELECT 1",
    "\x00\x01\x1b[31m",
)
REPLIES = st.one_of(st.sampled_from(FIXED), st.text(max_size=60))


class GarbageLM(DummyLM):
    """A DummyLM whose replies are ``replies`` in turn, as raw text (no field formatting)."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__([])
        self.answers: Iterator[dict[str, Any]] = itertools.repeat({})
        self._replies = itertools.cycle(replies)

    def _format_answer_fields(self, field_names_and_values: dict[str, Any]) -> str:
        return next(self._replies)


PROGRAMS = [("program", name) for name in available()] + [("preset", name) for name in PRESETS]


@pytest.mark.parametrize(("kind", "name"), PROGRAMS, ids=[f"{k}:{n}" for k, n in PROGRAMS])
def test_garbage_from_the_model_is_an_answer_not_a_crash(kind: str, name: str) -> None:
    def answer(replies: list[str]) -> None:
        with dspy.context(lm=GarbageLM(replies)):
            result = sqlweave.ask("How many singers are there?", DEMO_CONCERT_DB, **{kind: name})
        assert isinstance(result.sql, str)
        if result.sql and result.error is None:  # whatever ran, ran read-only
            assert result.rows is not None
        assert result.confidence is None or 0.0 <= result.confidence <= 1.0

    for reply in FIXED:
        answer([reply])

    @settings(
        max_examples=12,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(st.lists(REPLIES, min_size=1, max_size=4))
    def check(replies: list[str]) -> None:
        answer(replies)

    check()
    with sqlweave.db.Database.open(DEMO_CONCERT_DB) as db:
        assert db.execute("SELECT count(*) FROM singer", use_cache=False).rows == ((6,),)
