"""SQLAdapter: plain prompts for single-text-output signatures, ChatAdapter for the rest."""

from __future__ import annotations

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave.adapter import SQLAdapter, use_default_adapter
from sqlweave.signatures import GenerateSQL, LinkSchema

INPUTS = {
    "dialect": "sqlite",
    "db_schema": "CREATE TABLE singer (\n  name TEXT\n);",
    "question": "How many singers are there?",
    "evidence": "",
}


def test_plain_prompt_puts_question_last_and_skips_empty_fields():
    messages = SQLAdapter().format(GenerateSQL, [], INPUTS)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == GenerateSQL.instructions.strip()
    user = messages[1]["content"]
    assert "[[ ##" not in user and "Evidence" not in user
    assert user.index("CREATE TABLE singer") < user.index("How many singers")
    assert user.rstrip().endswith(")."), user
    assert "sqlite SQL query only" in user


def test_demos_become_user_assistant_turns_and_prefill_is_last():
    demo = dspy.Example(**{**INPUTS, "question": "List names.", "sql": "SELECT name FROM singer"})
    messages = SQLAdapter()._plain_messages(GenerateSQL, [demo], INPUTS, prefill=True)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[2]["content"] == "SELECT name FROM singer"
    assert messages[-1] == {"role": "assistant", "content": "SELECT"}


def test_prefill_auto_is_off_for_engines_that_cannot_continue():
    adapter = SQLAdapter()
    assert not adapter._wants_prefill(DummyLM([{"sql": "x"}]), GenerateSQL)
    assert SQLAdapter(prefill=True)._wants_prefill(object(), GenerateSQL)
    assert not SQLAdapter(prefill=True)._wants_prefill(object(), LinkSchema)


@pytest.mark.parametrize(
    "reply",
    [
        "SELECT count(*) FROM singer",
        "```sql\nSELECT count(*) FROM singer;\n```\nThis counts singers.",
        "[[ ## sql ## ]]\nSELECT count(*) FROM singer\n\n[[ ## completed ## ]]",
    ],
)
def test_parse_cleans_sql_replies(reply):
    lm = DummyLM([{"sql": reply}])
    with dspy.context(lm=lm, adapter=SQLAdapter()):
        out = dspy.Predict(GenerateSQL)(**INPUTS)
    assert out.sql == "SELECT count(*) FROM singer"


def test_typed_outputs_fall_back_to_chat_adapter_without_json_retry():
    lm = DummyLM([{"columns": ["singer.name"]}])
    with dspy.context(lm=lm, adapter=SQLAdapter()):
        out = dspy.Predict(LinkSchema)(**INPUTS)
    assert out.columns == ["singer.name"]
    assert "[[ ## columns ## ]]" in str(lm.history[-1]["messages"])
    assert SQLAdapter().use_json_adapter_fallback is False


def test_default_adapter_yields_to_a_user_adapter():
    with use_default_adapter():
        assert isinstance(dspy.settings.adapter, SQLAdapter)
    mine = dspy.JSONAdapter()
    with dspy.context(adapter=mine), use_default_adapter():
        assert dspy.settings.adapter is mine
