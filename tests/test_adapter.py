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


def test_sql_prompt_is_a_sql_script_schema_first_question_last():
    messages = SQLAdapter().format(GenerateSQL, [], INPUTS)
    # No system message: instructions in a system turn cost a 1.5B model ~10 points EX.
    assert [m["role"] for m in messages] == ["user"]
    user = messages[0]["content"]
    assert user.startswith("CREATE TABLE singer")
    assert "[[ ##" not in user and "Evidence" not in user
    assert user.index("CREATE TABLE singer") < user.index("How many singers")
    assert "-- Using valid SQLite, answer the following question" in user
    assert user.rstrip().endswith("-- How many singers are there?"), user
    first_line = GenerateSQL.instructions.strip().splitlines()[0]
    assert f"-- {first_line}" in user


def test_other_inputs_become_comments_before_the_question():
    inputs = {**INPUTS, "evidence": "singer means a row of singer\nname is text"}
    user = SQLAdapter().format(GenerateSQL, [], inputs)[0]["content"]
    assert (
        "-- Evidence (external knowledge):\n-- singer means a row of singer\n-- name is text"
        in user
    )
    assert user.index("-- Evidence") < user.index("-- How many singers")


def test_postgres_dialect_is_named_in_the_prompt():
    user = SQLAdapter().format(GenerateSQL, [], {**INPUTS, "dialect": "postgres"})[0]["content"]
    assert "Using valid PostgreSQL" in user


def test_demos_become_user_assistant_turns_and_prefill_is_last():
    demo = dspy.Example(**{**INPUTS, "question": "List names.", "sql": "SELECT name FROM singer"})
    messages = SQLAdapter()._plain_messages(GenerateSQL, [demo], INPUTS, prefill=True)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[1]["content"] == "SELECT name FROM singer"
    assert messages[-1] == {"role": "assistant", "content": "SELECT"}
    # The instructions are said once, in the final turn, not in every demo.
    first_line = GenerateSQL.instructions.strip().splitlines()[0]
    assert first_line not in messages[0]["content"]
    assert first_line in messages[2]["content"]


def test_text_outputs_other_than_sql_keep_a_system_instruction():
    class Explain(dspy.Signature):
        """Explain the query in one sentence."""

        sql: str = dspy.InputField()
        explanation: str = dspy.OutputField()

    messages = SQLAdapter().format(Explain, [], {"sql": "SELECT 1"})
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == "Explain the query in one sentence."
    assert messages[1]["content"].startswith("SQL: SELECT 1")


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


def test_chat_layout_is_a_system_message_and_a_question_line():
    inputs = {**INPUTS, "evidence": "singer means a row of singer"}
    messages = SQLAdapter(layout="chat")._plain_messages(GenerateSQL, [], inputs, prefill=True)
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    system, user = messages[0]["content"], messages[1]["content"]
    assert system.startswith(GenerateSQL.instructions.strip())
    assert system.endswith("The query must run on SQLite.")
    assert user == (
        "CREATE TABLE singer (\n  name TEXT\n);\n\n"
        "Evidence (external knowledge): singer means a row of singer\n"
        "Question: How many singers are there?"
    )
    assert "--" not in user
    assert messages[-1] == {"role": "assistant", "content": "SELECT"}


def test_chat_layout_demos_are_turns_without_the_system_message_repeated():
    demo = dspy.Example(**{**INPUTS, "question": "List names.", "sql": "SELECT name FROM singer"})
    messages = SQLAdapter(layout="chat")._plain_messages(GenerateSQL, [demo], INPUTS, prefill=False)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"].endswith("Question: List names.")
    assert messages[2]["content"] == "SELECT name FROM singer"


def test_unknown_layout_is_refused():
    with pytest.raises(ValueError, match="layout"):
        SQLAdapter(layout="prose")


def test_a_generator_layout_replaces_only_sqlweaves_own_adapter():
    with use_default_adapter():
        with use_default_adapter("chat"):
            assert dspy.settings.adapter.layout == "chat"
        assert dspy.settings.adapter.layout == "script"
    mine = SQLAdapter(layout="script")
    with dspy.context(adapter=mine), use_default_adapter("chat"):
        assert dspy.settings.adapter is mine


def test_a_generator_can_turn_the_prefill_off_for_itself_only():
    with use_default_adapter():
        with use_default_adapter(prefill=False):
            assert dspy.settings.adapter.prefill is False
            assert dspy.settings.adapter.layout == "script"
        assert dspy.settings.adapter.prefill == "auto"
