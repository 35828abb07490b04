"""``experiments/protocol.py --skip``: a pilot on spider-train-select's questions after the
decision set (its first 1,000), in records of its own."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(EXPERIMENTS))
spec = importlib.util.spec_from_file_location("protocol", EXPERIMENTS / "protocol.py")
protocol = importlib.util.module_from_spec(spec)
spec.loader.exec_module(protocol)


def test_skip_leaves_out_the_first_questions_then_limit_counts() -> None:
    ids = list(range(1600))
    assert protocol.questions(ids, skip=1000) == list(range(1000, 1600))
    assert protocol.questions(ids, skip=1000, limit=10) == list(range(1000, 1010))
    assert protocol.questions(ids, limit=3) == [0, 1, 2]
    assert protocol.questions(ids) == ids
    with pytest.raises(SystemExit, match="--skip"):
        protocol.questions(ids, skip=-1)


def test_a_pilot_never_shares_the_records_file_of_a_run_over_the_first_questions() -> None:
    assert protocol.config_label("pilot", 0) == "pilot"
    assert protocol.config_label("pilot", 1000) == "pilot-from1001"
    assert protocol.config_label(None, 1000) == "default-from1001"
    assert protocol.config_label(None, 0) is None
