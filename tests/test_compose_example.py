"""The README's "compose a new pipeline" example runs as printed (DummyLM, bundled SQLite).

The code between the ``compose-example`` markers of README.md is executed here, then the
pipeline it defines is called and compiled, so the README cannot drift from the API.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave.db import Database

README = Path(__file__).resolve().parents[1] / "README.md"


def _example_code() -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(
        r"<!-- compose-example -->\s*```python\n(.*?)```\s*<!-- /compose-example -->", text, re.S
    )
    assert match, "README.md lost its compose-example block"
    return match.group(1)


@pytest.fixture()
def db(tmp_path: Path, demo_concert_db: Path) -> Database:
    copy = tmp_path / "concert_singer.sqlite"
    shutil.copy(demo_concert_db, copy)
    return Database.open(copy)


def test_readme_pipeline_composes_stages_and_runs(db: Database) -> None:
    scope: dict = {}
    exec(compile(_example_code(), "README.md", "exec"), scope)  # noqa: S102 - our own README
    program = scope["LinkVoteRepair"]()
    answers = [{"columns": '["singer.Name", "singer.Age"]'}]
    answers += [{"sql": "SELECT count(*) FROM singers"}]  # greedy: fails
    answers += [{"sql": "SELECT count(*) FROM singer"}] * 4
    with dspy.context(lm=DummyLM(answers)):
        pred = program(question="How many singers are there?", db=db)
    assert pred.sql == "SELECT count(*) FROM singer"
    assert pred.stages == ["link", "sample", "vote", "repair"]
    assert len(pred.candidates) == 5 and "singer.Name" in pred.linked
    # Its predictors are visible to optimizers like any DSPy program's.
    names = [name for name, _ in program.named_predictors()]
    assert "generate" in names and any(n.startswith("linker") for n in names)


def test_readme_pipeline_compiles_like_a_registered_program() -> None:
    import sqlweave
    from sqlweave.data import load_spider

    scope: dict = {}
    exec(compile(_example_code(), "README.md", "exec"), scope)  # noqa: S102 - our own README
    train = load_spider("train")[:4]  # the shared data, else the bundled demo pool
    with dspy.context(lm=DummyLM([{"sql": "SELECT 1"}] * 200)):
        compiled = sqlweave.compile(
            scope["LinkVoteRepair"](),
            train[:3],
            train[3:],
            optimizer="labeled",
            max_demos=2,
            progress=False,
        )
    assert len(compiled.program.generate.demos) == 2
    assert all(d.sql for d in compiled.program.generate.demos)  # gold SQL, traced through it
