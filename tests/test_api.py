"""The Python API: load / call / ask with Results, composition as a DSPy module, light import,
and (marked ``lm``) a compile → save → load-in-a-fresh-process round trip with the 0.5B model."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM

import sqlweave
from sqlweave.data import load_spider
from sqlweave.db import ExecutionError


@pytest.fixture()
def db_file(tmp_path: Path, demo_concert_db: Path) -> Path:
    return Path(shutil.copy(demo_concert_db, tmp_path / "concert_singer.sqlite"))


@pytest.fixture()
def artefact(tmp_path: Path, spider_root: Path) -> Path:
    train = load_spider("train", root=spider_root)[:5]
    with dspy.context(lm=DummyLM([])):
        compiled = sqlweave.compile(
            "direct", train, train[:1], optimizer="labeled", max_demos=2, progress=False
        )
    return compiled.save(tmp_path / "direct.json")


def test_import_is_light() -> None:
    code = "import sys, sqlweave; print(sorted(m for m in ('dspy', 'torch', 'llama_cpp') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_loaded_program_answers_with_rows(artefact: Path, db_file: Path) -> None:
    p = sqlweave.load(artefact)
    assert isinstance(p, sqlweave.CompiledProgram) and isinstance(p, dspy.Module)
    with dspy.context(lm=DummyLM([{"sql": "SELECT count(*) AS n FROM singer"}])):
        r = p("How many singers are there?", db=str(db_file))
    assert isinstance(r, sqlweave.Result) and isinstance(r, dspy.Prediction)
    assert r.sql == "SELECT count(*) AS n FROM singer"
    assert r.columns == ("n",) and r.rows == ((6,),) and r.error is None and r.ok
    assert "CREATE TABLE" in r.steps["schema"] and r.prediction.sql == r.sql
    assert r.table().splitlines() == ["n", "6"]


def test_failed_sql_is_a_result_error_not_an_exception(artefact: Path, db_file: Path) -> None:
    p = sqlweave.load(artefact)
    # a name no rule can map to a column (the default corrector would mend "nme" -> "Name")
    with dspy.context(lm=DummyLM([{"sql": "SELECT zzzq FROM singer"}])):
        r = p.ask("Names?", db=db_file)
    assert not r.ok and r.rows == ()
    assert r.error.kind == "unknown_column" or "zzzq" in r.error.feedback()


def test_writes_never_run(artefact: Path, db_file: Path) -> None:
    p = sqlweave.load(artefact)
    with dspy.context(lm=DummyLM([{"sql": "DELETE FROM singer"}])):
        r = p("Delete them all", db=db_file)
    # extract_sql keeps queries only, and execution refuses writes anyway: nothing runs.
    assert r.error is not None and r.error.kind in ("syntax", "not_read_only") and not r.ok
    from sqlweave.db import Database

    assert Database.open(db_file).execute("SELECT count(*) FROM singer").rows == ((6,),)


def test_missing_database_is_a_clear_error(artefact: Path, tmp_path: Path) -> None:
    p = sqlweave.load(artefact)
    lm = DummyLM([])
    with dspy.context(lm=lm), pytest.raises(ExecutionError, match="SQLite database not found"):
        p("How many?", db=str(tmp_path / "nope.sqlite"))
    assert not lm.history  # no LM call was spent


def test_ask_by_program_name(db_file: Path) -> None:
    with dspy.context(lm=DummyLM([{"sql": "SELECT name FROM stadium ORDER BY name LIMIT 1"}])):
        r = sqlweave.ask("First stadium?", db=db_file, program="direct")
    assert r.columns == ("Name",) and len(r.rows) == 1


def test_compiled_program_composes_in_a_user_module(artefact: Path, db_file: Path) -> None:
    class TwoAnswers(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.sql = sqlweave.load(artefact)

        def forward(self, question: str) -> dspy.Prediction:
            first = self.sql(question, db=db_file)
            return dspy.Prediction(answer=first.rows[0][0] if first.ok else None)

    module = TwoAnswers()
    assert [n for n, _ in module.named_predictors()] == ["sql.program.generate"]
    with dspy.context(lm=DummyLM([{"sql": "SELECT count(*) FROM concert"}])):
        assert module(question="How many concerts?").answer == 6


def test_compile_records_validation_ex(spider_root: Path) -> None:
    train = load_spider("train", root=spider_root)[:6]
    answers = {ex.question: {"sql": ex.gold_sql} for ex in train[:4]}
    answers[""] = {"sql": "SELECT 1"}
    with dspy.context(lm=DummyLM(answers)):
        compiled = sqlweave.compile(
            "direct", train[:4], train[4:], optimizer="bootstrap", max_demos=2, progress=False
        )
    assert compiled.meta.val_ex == 0.0  # the LM is wrong on the two validation questions
    assert compiled.meta.extra["val_lm_calls"] == 2
    assert compiled.meta.lm_calls == 2  # two traces were enough


ROUND_TRIP = """
import json, sys
import dspy
import sqlweave
from sqlweave.lm import configure
configure("local:qwen2.5-coder-0.5b", cache=False)
p = sqlweave.load(sys.argv[1])
out = []
for q, db in json.loads(sys.argv[2]):
    out.append(p(q, db=db).sql)
print(json.dumps({"sql": out, "prompt": dspy.settings.lm.history[-1]["messages"]}))
"""


@pytest.mark.lm
def test_round_trip_with_local_model_in_a_fresh_process(tmp_path: Path) -> None:
    from sqlweave.lm import build_lm

    # Small schemas and one demo keep this to a handful of short 0.5B calls on a 2-core CPU.
    lm = build_lm("local:qwen2.5-coder-0.5b", cache=False)
    train = [ex for ex in load_spider("train") if ex.db_id == "department_management"][:3]
    dev = [ex for ex in load_spider("dev") if ex.db_id == "concert_singer"][:2]
    if len(train) < 3 or len(dev) < 2:
        # The demo bundle a bare checkout falls back to has no department_management questions.
        pytest.skip("needs the benchmark data (../shared/data or SQLWEAVE_DATA)")
    with dspy.context(lm=lm):
        compiled = sqlweave.compile(
            "direct", train[:2], train[2:], optimizer="bootstrap", max_demos=1, progress=False
        )
        path = compiled.save(tmp_path / "direct.json")
        here = [compiled(ex.question, db=ex.db_path).sql for ex in dev]
        prompt = lm.history[-1]["messages"]
    assert len(compiled.program.generate.demos) == 1
    assert compiled.meta.val_ex is not None and compiled.meta.lm == "local:qwen2.5-coder-0.5b"
    inputs = json.dumps([[ex.question, ex.db_path] for ex in dev])
    done = subprocess.run(
        [sys.executable, "-c", ROUND_TRIP, str(path), inputs],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    there = json.loads(done.stdout.strip().splitlines()[-1])
    assert there["sql"] == here
    assert there["prompt"] == prompt
