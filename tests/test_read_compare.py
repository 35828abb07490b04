"""``experiments/read_compare.py``: an adopted design's read paired against recorded runs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(EXPERIMENTS))
spec = importlib.util.spec_from_file_location("read_compare", EXPERIMENTS / "read_compare.py")
read_compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(read_compare)


def write(path: Path, right: list[bool]) -> Path:
    rows = [{"question_id": f"q{i}", "correct": r} for i, r in enumerate(right)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_the_read_is_paired_on_shared_questions(tmp_path: Path, monkeypatch) -> None:
    mine = write(tmp_path / "mine.jsonl", [True] * 8 + [False] * 2)
    other = write(tmp_path / "other.jsonl", [True] * 4 + [False] * 6)
    out = tmp_path / "out.json"
    argv = ["read_compare.py", str(mine), "--against", f"older={other}", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    read_compare.main()
    (line,) = json.loads(out.read_text())["against"]
    assert (line["ex"], line["ex_against"], line["delta"]) == (80.0, 40.0, 40.0)
    assert (line["gained"], line["lost"]) == (4, 0) and line["p_value"] == 0.125
