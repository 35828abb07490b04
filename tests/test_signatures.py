"""The signatures are complete prompts: an instruction, described fields, the dialect where SQL is
written, and outputs that the chat adapter parses into the declared types."""

from __future__ import annotations

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave import signatures
from sqlweave.signatures import (
    CorrectSQL,
    ExtractElements,
    GenerateSQL,
    LinkSchema,
    ReflectOnError,
    ReviewSQL,
    SelectCandidate,
)

MINE = [LinkSchema, ExtractElements, SelectCandidate, CorrectSQL, ReflectOnError, ReviewSQL]
#: Signatures whose LM call reads or writes SQL, so it must know the dialect.
SQL_WRITING = [LinkSchema, SelectCandidate, CorrectSQL, ReflectOnError, ReviewSQL, GenerateSQL]


@pytest.mark.parametrize("sig", MINE, ids=lambda s: s.__name__)
def test_instruction_and_field_descriptions(sig: type[dspy.Signature]) -> None:
    assert sig.__doc__ and len(sig.instructions.split()) >= 8
    fields = {**sig.input_fields, **sig.output_fields}
    assert sig.output_fields, "a signature must produce something"
    for name, info in fields.items():
        desc = (info.json_schema_extra or {}).get("desc", "")
        # DSPy fills a missing desc with "${name}"; ours must be real prose.
        assert desc and not desc.startswith("${"), f"{sig.__name__}.{name} has no desc"


@pytest.mark.parametrize("sig", SQL_WRITING, ids=lambda s: s.__name__)
def test_dialect_is_an_input_where_sql_is_involved(sig: type[dspy.Signature]) -> None:
    assert "dialect" in sig.input_fields


def test_declared_field_names() -> None:
    # Pipelines and blocks read these by name; renaming one is an API change.
    assert list(LinkSchema.output_fields) == ["columns"]
    assert list(ExtractElements.output_fields) == ["elements", "conditions", "keywords"]
    assert list(SelectCandidate.output_fields) == ["choice"]
    assert list(CorrectSQL.input_fields)[-2:] == ["sql", "feedback"]
    assert list(CorrectSQL.output_fields) == ["corrected_sql"]
    assert list(ReflectOnError.output_fields) == ["reason"]
    assert "execution_result" in ReviewSQL.input_fields
    assert list(ReviewSQL.output_fields) == ["reviewed_sql"]
    assert set(signatures.__all__) >= {s.__name__ for s in MINE}


def test_typed_outputs_parse_through_the_chat_adapter() -> None:
    lm = DummyLM(
        [
            {"columns": '["singer.name", "singer.age"]'},
            {"elements": '["singer.name"]', "conditions": '["singer.age > 30"]', "keywords": "[]"},
            {"choice": "2"},
        ]
    )
    base = {"db_schema": "CREATE TABLE singer(name text, age int)", "question": "q", "evidence": ""}
    with dspy.context(lm=lm):
        linked = dspy.Predict(LinkSchema)(dialect="sqlite", **base)
        parts = dspy.Predict(ExtractElements)(**base)
        chosen = dspy.Predict(SelectCandidate)(dialect="sqlite", candidates="1. ...", **base)
    assert linked.columns == ["singer.name", "singer.age"]
    assert parts.conditions == ["singer.age > 30"] and parts.keywords == []
    assert chosen.choice == 2
