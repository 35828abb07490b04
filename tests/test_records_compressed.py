"""Finished runs are committed gzipped (issue 60): their readers name them as written and read
the ``.gz``; a run may not start again beside its compressed records."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave import programs
from sqlweave.evaluate import evaluate
from sqlweave.records import compressed, read_records


def _write(path: Path, n: int) -> bytes:
    raw = "".join(
        json.dumps({"question_id": f"q{i}", "correct": i % 2 == 0}) + "\n" for i in range(n)
    )
    return raw.encode()


def test_a_compressed_run_reads_as_the_file_it_was(tmp_path: Path) -> None:
    plain = tmp_path / "run.jsonl"
    raw = _write(plain, 3)
    plain.write_bytes(raw)
    expected = read_records(plain)
    plain.with_name("run.jsonl.gz").write_bytes(gzip.compress(raw))
    assert compressed(plain) is None  # the plain file wins while it is there
    plain.unlink()
    assert compressed(plain) == tmp_path / "run.jsonl.gz"
    assert read_records(plain) == expected == read_records(tmp_path / "run.jsonl.gz")
    assert read_records(tmp_path / "absent.jsonl") == []


def test_a_run_does_not_start_again_beside_its_compressed_records(
    tmp_path: Path, singers_example: dspy.Example
) -> None:
    ex = singers_example
    out = tmp_path / "direct__spider-dev-200__1.5b.jsonl"
    out.with_name(out.name + ".gz").write_bytes(gzip.compress(_write(out, 1)))
    with dspy.context(lm=DummyLM([{"sql": "SELECT count(*) FROM singer"}])):
        with pytest.raises(ValueError, match="compressed"):
            evaluate(programs.get("direct"), [ex], out_path=out, resume=True, progress=False)
    assert not out.exists()
