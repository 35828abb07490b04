"""When a pool may stop at its greedy candidates: rules 27 and 29 of ``docs/decisions.md``.

A pool of several prompts (``ensemble``) spends most of its calls on questions its prompts
already agree on. The cascade draws each prompt's greedy candidate first and stops there when
they all ran, returned a non-empty result, form one execution class (the vote's equivalence,
:func:`~sqlweave.programs.stages.voting.group_outcomes`) and compare no text a column does not
store (rule 29); otherwise the samples are drawn and the selection sees the whole pool. An
empty result is not agreement: two prompts returning nothing is the commonest way wrong queries
agree (the vote's rule 2). Nor is a count over a guessed literal (``country = 'Holland'`` where
the table says ``'Netherlands'``): both prompts may guess alike, and the ``grounded`` selection
that would drop the guess needs the samples.

The same predicate decides the replay on recorded pools (``experiments/cascade_replay.py``) and
the program, so what was measured is what runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlweave.db import ExecutionError, QueryResult
from sqlweave.programs.stages.feedback import is_empty
from sqlweave.programs.stages.grounding import ValueLookup, is_grounded
from sqlweave.programs.stages.voting import group_outcomes


def greedy_agree(
    sqls: Sequence[str],
    outcomes: Sequence[QueryResult | ExecutionError | None],
    dialect: str,
    lookup: ValueLookup | None = None,
) -> bool:
    """Whether the greedy candidates ``sqls`` (one per prompt, with their ``outcomes``) settle
    the pool: at least two, every one ran and is non-empty, and all are one execution class;
    with ``lookup``, also every one grounded (:func:`~sqlweave.programs.stages.grounding.is_grounded`:
    the texts it compares with ``=`` are stored in those columns)."""
    if len(sqls) < 2 or len(outcomes) != len(sqls):
        return False
    if any(not isinstance(o, QueryResult) or is_empty(o) for o in outcomes):
        return False
    groups = group_outcomes(list(sqls), list(outcomes), dialect)
    if len(groups) != 1 or len(groups[0].members) != len(sqls):
        return False
    return lookup is None or all(is_grounded(sql, lookup) for sql in sqls)


__all__ = ["greedy_agree"]
