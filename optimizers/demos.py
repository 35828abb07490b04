"""Complete demos from a program's own trace, and demos trimmed to what a prompt reads.

Benchmark examples carry ``question, db_id, evidence, db_path, gold_sql``, but a predictor such
as ``GenerateSQL`` reads ``dialect`` and ``db_schema`` too. :func:`gold_demos` runs the program
itself on an example with a stub LM that answers every call with the gold SQL, under a DSPy
trace: the trace holds exactly the inputs each predictor receives (the schema rendered the way
that program renders it), and the gold SQL becomes the ``sql`` output. Only predictors whose sole
output is ``sql`` get demos (the stub cannot label other outputs). The stub's calls are not LM
calls: no callback (budget, usage tracker) sees them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dspy
from dspy.utils.dummies import DummyLM
from tqdm.auto import tqdm

from sqlweave.programs import SQLProgram

logger = logging.getLogger(__name__)


class _GoldLM(DummyLM):
    """Answers every call with the gold SQL in an ``sql`` field (and nothing else)."""

    def __init__(self, gold_sql: str) -> None:
        # Dict mode keyed by "": the empty string is in every prompt, so every call matches.
        super().__init__({"": {"sql": gold_sql}})


def _sql_only(predictor: Any) -> bool:
    return set(predictor.signature.output_fields) == {"sql"}


def gold_demos(program: SQLProgram, example: dspy.Example) -> dict[str, dspy.Example]:
    """Per predictor name, a complete demo for ``example``: the inputs the program gives that
    predictor, and the gold SQL as its ``sql`` output.

    The program runs for real (schema introspection and rendering included) with a stub LM that
    returns the gold SQL, so the demo holds what the predictor would see at inference time. A
    program that fails on stub outputs part-way keeps the demos traced before the failure.
    """
    trace: list[Any] = []
    names = {id(p): n for n, p in program.named_predictors()}
    # No callbacks and no usage tracker: a budget or a call count must not see the stub.
    with dspy.context(lm=_GoldLM(example.gold_sql), trace=trace, callbacks=[], usage_tracker=None):
        try:
            program(**example.inputs())
        except Exception as err:  # a stub answer may not suit a later stage; keep what we have
            logger.debug("gold trace stopped early on %r: %s", example.get("question"), err)
    demos: dict[str, dspy.Example] = {}
    for predictor, inputs, _outputs in trace:
        name = names.get(id(predictor))
        if name is None or not _sql_only(predictor):
            continue
        demos[name] = dspy.Example(**inputs, sql=example.gold_sql)
    return demos


@dataclass
class Completed:
    """Train examples completed for a program: ``examples`` (with the final SQL predictor's
    inputs and ``sql``) and, per example, ``demos`` by predictor name."""

    examples: list[dspy.Example]
    demos: list[dict[str, dspy.Example]]


def complete_examples(
    program: SQLProgram, examples: Sequence[dspy.Example], *, progress: bool = False
) -> Completed:
    """Train examples with the fields of the program's final SQL predictor filled in.

    Each returned example keeps its original inputs (so the program can still be called on it and
    the metric still finds ``gold_sql`` and ``db_path``) and gains that predictor's other inputs
    (``dialect``, ``db_schema``, ...) plus ``sql`` = the gold SQL, so it is a complete demo.
    """
    out: list[dspy.Example] = []
    per_example: list[dict[str, dspy.Example]] = []
    for ex in tqdm(examples, desc="demos", disable=not progress, leave=False):
        demos = gold_demos(program, ex)
        fields = dict(ex.toDict())
        if demos:
            fields.update(list(demos.values())[-1].toDict())
        fields.setdefault("sql", ex.gold_sql)
        out.append(dspy.Example(**fields).with_inputs(*ex.inputs().keys()))
        per_example.append(demos)
    return Completed(out, per_example)


def demo_to_dict(demo: dspy.Example) -> dict[str, Any]:
    """A demo as plain data (for a checkpoint or an artefact)."""
    return dict(demo.toDict().items())


def trim_demos(program: SQLProgram) -> None:
    """Keep only the fields each predictor's signature reads (and DSPy's ``augmented`` flag):
    labeled demos come from whole benchmark examples, whose paths and ids do not belong in a
    prompt or an artefact."""
    for _, predictor in program.named_predictors():
        keep = {*predictor.signature.input_fields, *predictor.signature.output_fields, "augmented"}
        predictor.demos = [
            dspy.Example(**{k: v for k, v in demo.items() if k in keep})
            if isinstance(demo, dspy.Example)
            else demo
            for demo in predictor.demos
        ]
