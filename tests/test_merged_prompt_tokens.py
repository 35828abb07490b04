"""sqlweave.lm.usage.prompt_tokens_per_call (what experiments/merged_prompt_tokens.py measures)
counts every call's prompt (a stand-in LM, no model)."""

from __future__ import annotations

from types import SimpleNamespace

from conftest import DEMO_CONCERT_DB

from sqlweave import programs
from sqlweave.lm.usage import prompt_tokens_per_call


def test_every_call_is_counted_and_a_bigger_schema_costs_more():
    ask = SimpleNamespace(db_id="concert_singer", db_path=str(DEMO_CONCERT_DB), evidence="")
    short = SimpleNamespace(**{**vars(ask), "question": "How many singers?"})
    long = SimpleNamespace(**{**vars(ask), "question": "How many singers? " * 40})
    words = prompt_tokens_per_call(
        lambda: programs.get("direct"), [short, long], lambda t: len(t.split())
    )
    assert len(words) == 2 and 0 < words[0] < words[1]
    assert words[1] - words[0] >= 3 * 39  # the 39 extra copies of the question are all counted
