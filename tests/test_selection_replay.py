"""sqlweave.programs.stages.replay (what experiments/selection_replay.py runs): selections replayed over
recorded candidates, on a real Spider database (no LM)."""

from __future__ import annotations

from types import SimpleNamespace

from conftest import concert_question, recorded

from sqlweave.programs.stages import replay

RIGHT = "SELECT count(*) FROM singer WHERE country = 'France'"
LOWER = "SELECT count(*) FROM singer WHERE country = 'france'"
OTHER = "SELECT count(*) FROM singer"


def _question(spider_root, qid: str) -> SimpleNamespace:
    """A concert_singer question whose gold is RIGHT."""
    return concert_question(spider_root, RIGHT, qid=qid)


_record = recorded


def _replay(spider_root, *candidates: tuple[str, str]) -> dict:
    """The replay of one question's ``(sql, origin)`` candidates."""
    return replay.replay_selections([_record(*candidates)], {"q": _question(spider_root, "q")})


def test_rules_first_repairs_candidates_before_the_vote(spider_root) -> None:
    result = _replay(
        spider_root,
        (OTHER, "direct:greedy"),
        (OTHER, "direct:sampled"),
        (LOWER, "sea:greedy"),
        (RIGHT, "sea:sampled"),
        (LOWER, "pet:greedy"),
    )
    assert result["n"] == 1 and result["generators"] == ["direct", "pet", "sea"]
    ex = result["ex"]
    # the plain vote: OTHER 2, LOWER 2 (a count of 0), RIGHT 1; the tie goes to the first, OTHER
    assert ex["direct,pet,sea | vote | greedy=1"] == 0.0
    # repaired first, LOWER joins RIGHT: 3 against 2
    assert ex["direct,pet,sea | rules-first | greedy=1"] == 100.0
    # sea alone: LOWER wins the tie, and the rules then repair the winner either way
    assert ex["sea | vote | greedy=1"] == 100.0 == ex["sea | rules-first | greedy=1"]
    # the greedy candidates weighing 2: LOWER (two greedy) 4 against OTHER 3, then repaired
    assert ex["direct,pet,sea | vote | greedy=2"] == 100.0
    assert result["oracle"]["direct | vote"] == 0.0 and result["oracle"]["sea | vote"] == 100.0


def test_across_prefers_the_answer_most_generators_hold(spider_root) -> None:
    ex = _replay(
        spider_root,
        (OTHER, "direct:greedy"),
        (OTHER, "direct:sampled"),
        (OTHER, "direct:sampled"),
        (RIGHT, "sea:greedy"),
        (RIGHT, "pet:greedy"),
    )["ex"]
    assert ex["direct,pet,sea | vote | greedy=1"] == 0.0  # three samples of one prompt
    assert ex["direct,pet,sea | across | greedy=1"] == 100.0  # two prompts


def test_fewer_samples_per_generator_are_replayed_from_the_first_drawn(spider_root) -> None:
    cands = [{"origin": o} for o in ("a:greedy", "a:sampled", "a:sampled", "b:greedy", "b:sampled")]
    kept = replay.first_per_generator(cands, 1)
    assert [c["origin"] for c in kept] == ["a:greedy", "b:greedy"]
    assert replay.first_per_generator(cands, None) == cands
    record = _record((OTHER, "direct:greedy"), (RIGHT, "direct:sampled"), (RIGHT, "direct:sampled"))
    result = replay.replay_selections([record], {"q": _question(spider_root, "q")}, [None, 1])
    assert result["ex"]["direct | vote | greedy=1"] == 100.0
    assert result["ex"]["direct | vote | greedy=1 | samples=1"] == 0.0
    assert result["oracle"]["direct | vote | samples=1"] == 0.0


def test_runoff_replay_asks_the_lm_only_on_a_close_vote(spider_root) -> None:
    import dspy
    from dspy.utils import DummyLM

    example = _question(spider_root, "q")
    example.question = "How many singers are from France?"
    close = _record((OTHER, "direct:greedy"), (OTHER, "direct:sampled"), (RIGHT, "sea:greedy"))
    strategies = [replay.strategy_of("direct,sea | vote | greedy=1")]
    assert strategies == [(("direct", "sea"), None, 1.0)]
    # OTHER 2 against RIGHT 1: at threshold 0.5 the LM is asked and picks the runner-up (2),
    # at threshold 1 the vote stands
    with dspy.context(lm=DummyLM([{"choice": "2"}])):
        result = replay.replay_runoff([close], {"q": example}, strategies, [0.5, 1.0])
    assert result["ex"]["direct,sea | runoff=0.5 | greedy=1"] == 100.0
    assert result["asked"]["direct,sea | runoff=0.5 | greedy=1"] == 100.0
    assert result["ex"]["direct,sea | runoff=1 | greedy=1"] == 0.0
    assert result["asked"]["direct,sea | runoff=1 | greedy=1"] == 0.0
    key = replay.strategy_of("a,b | vote | greedy=2 | samples=2")
    assert key == (("a", "b"), 2, 2.0)
    assert replay.strategy_key(("a", "b"), "vote", 2.0, 2) == "a,b | vote | greedy=2 | samples=2"
