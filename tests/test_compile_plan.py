"""The compile plan (issue 61): ``sqlweave.compile`` and ``sqlweave compile`` run one plan, so the
same compile from Python and from the shell saves the same artefact; the plan's data policy
(named sources drawn down, a named slice's databases out of train, no overlap) is the same
for both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from conftest import DEMO_ROOT
from dspy.utils import DummyLM
from typer.testing import CliRunner

import sqlweave
from sqlweave.cli import app
from sqlweave.compile_plan import DEFAULT_N_TRAIN, CompilePlan, Named
from sqlweave.data import DataError, load_questions

runner = CliRunner()
DATABASES = DEMO_ROOT / "spider" / "database"

#: Questions on three bundled databases: default validation holds one of them out.
ROWS = [
    ("concert_singer", "How many singers are there?", "SELECT count(*) FROM singer"),
    ("concert_singer", "How many concerts are there?", "SELECT count(*) FROM concert"),
    ("concert_singer", "How many stadiums are there?", "SELECT count(*) FROM stadium"),
    ("concert_singer", "List the singers' names.", "SELECT name FROM singer"),
    ("pets_1", "How many pets are there?", "SELECT count(*) FROM Pets"),
    ("pets_1", "How many students are there?", "SELECT count(*) FROM Student"),
    ("pets_1", "How many students have a pet?", "SELECT count(DISTINCT StuID) FROM Has_Pet"),
    ("car_1", "How many car makers are there?", "SELECT count(*) FROM car_makers"),
    ("car_1", "How many continents are there?", "SELECT count(*) FROM continents"),
    ("car_1", "How many countries are there?", "SELECT count(*) FROM countries"),
]


def _questions(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    path.write_text(
        "".join(
            json.dumps({"question": q, "sql": s, "db_path": str(DATABASES / d / f"{d}.sqlite")})
            + "\n"
            for d, q, s in rows
        )
    )
    return path


def _lm() -> DummyLM:
    return DummyLM({"": {"sql": "SELECT count(*) FROM singer"}})


def _comparable(path: Path) -> dict[str, Any]:
    """The artefact minus what differs between two runs of the same compile: its timing,
    when it was written, and the checkpoint's path."""
    payload = json.loads(path.read_text(encoding="utf-8"))
    meta = payload["meta"]
    meta.pop("compile_seconds", None)
    meta.pop("created", None)
    payload.pop("created", None)
    return payload


def _cli_compile(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> None:
    monkeypatch.setattr("sqlweave.lm.configure", lambda *a, **k: dspy.configure(lm=_lm()))
    try:
        result = runner.invoke(app, ["compile", *args, "--no-progress"])
    finally:
        dspy.configure(lm=None)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("with_val", [False, True], ids=["default-validation", "given-val"])
def test_the_same_compile_from_the_cli_and_from_python_saves_the_same_artefact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_val: bool
) -> None:
    train_file = _questions(tmp_path / "train.jsonl", ROWS[:-2] if with_val else ROWS)
    val_file = _questions(tmp_path / "val.jsonl", ROWS[-2:])
    options = {"optimizer": "bootstrap", "max_demos": 1, "seed": 3}
    args = ["-p", "direct", "--train", str(train_file), "--optimizer", "bootstrap"]
    args += ["--max-demos", "1", "--seed", "3", "--out", str(tmp_path / "shell.json")]
    args += ["--val", str(val_file)] if with_val else []
    _cli_compile(monkeypatch, args)

    valset = load_questions(val_file) if with_val else None
    with dspy.context(lm=_lm()):
        compiled = sqlweave.compile(
            "direct",
            load_questions(train_file),
            valset,
            checkpoint=tmp_path / "python.ckpt.json",
            progress=False,
            **options,
        )
    compiled.save(tmp_path / "python.json")

    shell, python = _comparable(tmp_path / "shell.json"), _comparable(tmp_path / "python.json")
    assert shell == python
    how = shell["meta"]["extra"]["validation"]
    assert how == "given" if with_val else "held-out train database" in how


def test_a_named_train_source_is_drawn_down_and_a_list_is_used_whole(tmp_path: Path) -> None:
    rows = [
        ("concert_singer", f"How many singers are older than {age}?",
         f"SELECT count(*) FROM singer WHERE age > {age}")
        for age in range(DEFAULT_N_TRAIN + 6)
    ]  # fmt: skip
    questions = _questions(tmp_path / "many.jsonl", rows)
    val = load_questions(_questions(tmp_path / "val.jsonl", ROWS[7:]))
    named = CompilePlan("direct", Named(str(questions)), val).build()
    given = CompilePlan("direct", load_questions(questions), val).build()
    assert len(named.trainset) == DEFAULT_N_TRAIN
    assert len(given.trainset) == len(rows)
    assert (
        len(CompilePlan("direct", load_questions(questions), val, n_train=5).build().trainset) == 5
    )


def test_overlap_is_an_error_for_data_the_plan_reads_and_a_warning_for_lists_given(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    train = _questions(tmp_path / "train.jsonl", ROWS)
    val = _questions(tmp_path / "val.jsonl", ROWS[:2])
    with pytest.raises(DataError, match="also in train"):
        CompilePlan("direct", Named(str(train)), Named(str(val))).build()
    built = CompilePlan("direct", load_questions(train), load_questions(val)).build()
    assert len(built.valset) == 2 and "overlaps train" in caplog.text


def test_the_cli_fails_on_overlapping_files_before_any_model_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = []
    monkeypatch.setattr("sqlweave.lm.configure", lambda *a, **k: loaded.append(a))
    train = _questions(tmp_path / "train.jsonl", ROWS)
    val = _questions(tmp_path / "val.jsonl", ROWS[:2])
    args = ["compile", "--train", str(train), "--val", str(val), "--out", str(tmp_path / "x.json")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "also in train" in result.output
    assert not loaded


def test_the_plan_passes_every_optimizer_setting_under_run_optimizers_own_names() -> None:
    """The plan hands its optimizer fields to ``run_optimizer`` by name: a setting added to one
    and not the other (or renamed in one) would be dropped or fail only when a compile runs."""
    import dataclasses
    import inspect

    from sqlweave.compile_plan import OPTIMIZER_FIELDS
    from sqlweave.optimizers.compile import run_optimizer

    keyword_only = {
        name
        for name, param in inspect.signature(run_optimizer).parameters.items()
        if param.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert set(OPTIMIZER_FIELDS) == keyword_only
    assert set(OPTIMIZER_FIELDS) <= {f.name for f in dataclasses.fields(CompilePlan)}


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"budget": "5"}, "budget must be a whole number of LM calls or None, not '5'"),
        ({"optimizer": None}, "optimizer must be an optimizer's name"),
        ({"max_demos": 2.5}, "max_demos must be a whole number"),
        ({"seed": True}, "seed must be a whole number, not True"),
        ({"progress": "yes"}, "progress must be True or False"),
        ({"checkpoint": 3}, "checkpoint must be a path or None"),
        ({"options": [("n_trials", 2)]}, "options must be a dict"),
        ({"metric": "ex"}, "metric must be a function or None"),
    ],
)
def test_a_compile_setting_of_the_wrong_type_is_named_before_anything_runs(
    setting: dict, message: str
) -> None:
    """Found by review: budget="5" or optimizer=None raised from inside the optimizer."""
    import re

    import sqlweave

    if "options" in setting:  # the facade copies options into a dict; the plan checks it
        from sqlweave.compile_plan import CompilePlan

        with pytest.raises(TypeError, match=re.escape(message)):
            CompilePlan("direct", trainset=[], **setting).build()
        return
    with pytest.raises(TypeError, match=re.escape(message)):
        sqlweave.compile("direct", trainset=[], **setting)


def test_build_opens_the_questions_databases_before_any_model(tmp_path) -> None:
    """The command line builds the plan before it loads the model: a database that does not
    open must fail there, not after a local model has loaded."""
    from sqlweave.compile_plan import CompilePlan
    from sqlweave.data import DataError

    bad = tmp_path / "shop.sqlite"
    bad.write_bytes(b"no database here" * 64)
    train = [{"question": f"How many {i}?", "sql": "SELECT 1", "db": str(bad)} for i in range(3)]
    with pytest.raises(DataError, match="does not open"):
        CompilePlan("direct", trainset=train, valset=train[:1]).build()


def test_a_compile_cannot_write_more_demos_than_an_artefact_may_hold() -> None:
    from sqlweave.compile_plan import CompilePlan
    from sqlweave.optimizers.artifact import MAX_DEMOS

    with pytest.raises(ValueError, match=f"max_demos must be at most {MAX_DEMOS}"):
        CompilePlan("direct", trainset=[], max_demos=MAX_DEMOS + 1).build()
