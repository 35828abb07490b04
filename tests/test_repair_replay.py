"""sqlweave.programs.stages.replay's repair_joins and repair_scopes (what experiments/repair_replay.py
runs): the join repair replayed over recorded candidates, on a real Spider database (no LM)."""

from __future__ import annotations

from conftest import concert_question, recorded

from sqlweave.programs.stages import replay

QUESTION = "How many singers performed in the concert Super bootcamp?"
GOLD = (
    "SELECT count(*) FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.Singer_ID = "
    "T2.Singer_ID JOIN concert AS T3 ON T2.concert_ID = T3.concert_ID "
    "WHERE T3.concert_Name = 'Super bootcamp'"
)
STRAY = "SELECT count(*) FROM singer WHERE concert_Name = 'Super bootcamp'"
OTHER = "SELECT count(*) FROM singer"


def _question(spider_root):
    return concert_question(spider_root, GOLD, QUESTION)


_record = recorded


def test_failing_candidates_are_joined_and_marked(spider_root) -> None:
    records = [_record((STRAY, "direct:greedy"), (OTHER, "direct:sampled"))]
    (mended,) = replay.repair_joins(records, {"q": _question(spider_root)})
    first, second = mended["candidates"]
    assert first["origin"] == "direct:greedy:repaired" and first["sql"].count("JOIN") == 2
    assert second == records[0]["candidates"][1]  # it ran: left as it was


def test_the_scopes_differ_where_something_ran(spider_root) -> None:
    examples = {"q": _question(spider_root)}
    # STRAY (greedy, weight 2) fails; OTHER runs once: only "all" repairs STRAY, which then wins
    mixed = [_record((STRAY, "direct:greedy"), (OTHER, "direct:sampled"))]
    scores = replay.repair_scopes(mixed, examples, [("direct",)])
    assert scores["direct | none"]["ex"] == 0.0 == scores["direct | fallback"]["ex"]
    assert scores["direct | all"]["ex"] == 100.0 and scores["direct | all"]["oracle"] == 100.0
    # nothing runs: the fallback repairs too
    failing = [_record((STRAY, "direct:greedy"), (STRAY, "direct:sampled"))]
    scores = replay.repair_scopes(failing, examples, [("direct",)])
    assert scores["direct | fallback"]["ex"] == 100.0 and scores["direct | none"]["oracle"] == 0.0
