"""``experiments/cascade_replay.py``: rules 27 and 29 replayed on recorded pools. The stop it
replays is the program's own (:func:`sqlweave.programs.stages.cascade.greedy_agree`), read
from each prompt's greedy candidate as recorded."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(EXPERIMENTS))  # the script imports its sibling scripts, as when it runs
spec = importlib.util.spec_from_file_location("cascade_replay", EXPERIMENTS / "cascade_replay.py")
cascade_replay = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cascade_replay)

RIGHT = "SELECT count(*) FROM singer WHERE country = 'France'"
SAME = 'SELECT count(*) FROM singer WHERE country = "France"'
OTHER = "SELECT count(*) FROM singer"
GUESS = "SELECT count(*) FROM singer WHERE country = 'Atlantis'"


def record(*pairs: tuple[str, str]) -> dict:
    return {"question_id": "1", "candidates": [{"origin": o, "sql": s} for o, s in pairs]}


@pytest.fixture()
def judge(spider_root: Path):
    path = spider_root / "database" / "concert_singer" / "concert_singer.sqlite"
    if not path.is_file():
        pytest.skip("Spider's concert_singer is not bundled")
    example = SimpleNamespace(db_path=path, gold_sql=RIGHT, source="spider", semantics=None)
    made = cascade_replay.Judge(example)
    yield made
    made.db.close()


def test_the_pair_is_each_prompts_first_greedy_candidate() -> None:
    pool = record(
        ("direct:greedy", RIGHT),
        ("direct:sampled", OTHER),
        ("dubo_v1:greedy:repaired", SAME),
        ("dubo_v1:sampled", OTHER),
    )
    pair = cascade_replay.greedy_pair(pool)
    assert [c["origin"] for c in pair] == ["direct:greedy", "dubo_v1:greedy:repaired"]


def test_stops_where_the_program_would(judge) -> None:
    def stops(a: str, b: str, origin_b: str = "dubo_v1:greedy", grounded: bool = False):
        pool = record(("direct:greedy", a), ("direct:sampled", OTHER), (origin_b, b))
        return cascade_replay.stops(pool, judge, grounded)[0]

    assert stops(RIGHT, SAME)  # two texts, one answer
    assert not stops(RIGHT, OTHER)
    assert not stops(RIGHT, SAME, origin_b="dubo_v1:greedy:repaired")  # its original failed
    assert stops(GUESS, GUESS)  # rule 27 alone takes a guessed literal's count of 0
    assert not stops(GUESS, GUESS, grounded=True)  # rule 29 does not
    assert stops(RIGHT, SAME, grounded=True)
