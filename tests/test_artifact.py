"""Artefacts: what a saved program records, round trips, and clear errors for bad files."""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM

import sqlweave
from sqlweave import programs
from sqlweave.data import load_spider
from sqlweave.optimizers import ArtifactError, load_program
from sqlweave.optimizers.artifact import FORMAT_VERSION


@pytest.fixture(scope="module")
def train(spider_root: Path) -> list[dspy.Example]:
    return load_spider("train", root=spider_root)[:6]


@pytest.fixture()
def saved(train: list[dspy.Example], tmp_path: Path) -> Path:
    answers = {ex.question: {"sql": ex.gold_sql} for ex in train}
    with dspy.context(lm=DummyLM(answers)):
        compiled = sqlweave.compile(
            "direct",
            train[:4],
            train[4:],
            optimizer="bootstrap",
            max_demos=2,
            budget=10,
            progress=False,
        )
    return compiled.save(tmp_path / "direct.json")


def test_artifact_records_provenance(saved: Path, train: list[dspy.Example]) -> None:
    payload = json.loads(saved.read_text())
    assert payload["format"] == "sqlweave-program" and payload["format_version"] == FORMAT_VERSION
    assert payload["versions"] == {"sqlweave": sqlweave.__version__, "dspy": dspy.__version__}
    meta = payload["meta"]
    assert meta["program"] == "direct"
    assert meta["switches"] == programs.get("direct").switches  # every switch, defaults included
    assert meta["switches"]["schema_layout"] == "native" and meta["switches"]["linker"] == "none"
    assert meta["optimizer"] == "bootstrap" and meta["budget"] == 10
    assert meta["lm"] == "dummy"
    assert meta["val_ex_pct"] == 100.0 and meta["n_train"] == 4 and meta["n_val"] == 2
    assert 0 < meta["lm_calls"] <= 10
    assert meta["compile_seconds"] >= 0
    assert len(meta["trainset_hash"]) == 16
    generate = payload["generate"]  # DSPy's layout: one top-level key per predictor
    assert generate["signature"]["instructions"].startswith("Reply with one read-only SQL query")
    assert len(generate["demos"]) == 2
    assert {"db_schema", "dialect", "question", "sql"} <= set(generate["demos"][0])


def test_round_trip_keeps_instructions_and_demos(saved: Path) -> None:
    program, meta = load_program(saved)
    state = json.loads(saved.read_text())
    assert program.dump_state()["generate"]["demos"] == state["generate"]["demos"]
    assert meta.val_ex_pct == 100.0 and meta.val_ex == 1.0


def test_knn_artifact_round_trip(train: list[dspy.Example], tmp_path: Path) -> None:
    with dspy.context(lm=DummyLM([])):
        compiled = sqlweave.compile(
            "direct", train, train[:1], optimizer="knn", max_demos=1, progress=False
        )
    path = compiled.save(tmp_path / "knn.json")
    loaded = sqlweave.load(path)
    target = train[2]
    lm = DummyLM([{"sql": "SELECT 1"}])
    with dspy.context(lm=lm):
        loaded.program(question=target.question, db_path=target.db_path)
    assert json.dumps(target.gold_sql)[1:-1] in json.dumps(lm.history[-1]["messages"])
    assert loaded.program.knn_pool["same_db"] == "turns"
    # an artefact saved before the switch existed showed every demo's schema: it still does
    older = _rewrite(path, lambda p: p["knn"].pop("same_db"))
    assert sqlweave.load(older).program.knn_pool["same_db"] == "full"
    bad = _rewrite(path, lambda p: p["knn"].update(same_db="sideways"))
    with pytest.raises(
        ArtifactError, match="'knn.same_db' must be one of turns, inline, full, not 'sideways'"
    ):
        load_program(bad)


def _rewrite(path: Path, edit: callable) -> Path:
    payload = json.loads(path.read_text())
    edit(payload)
    path.write_text(json.dumps(payload))
    return path


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="compiled program not found: .*nope.json"):
        load_program(tmp_path / "nope.json")


def test_truncated_file(saved: Path) -> None:
    text = saved.read_text()
    saved.write_text(text[: len(text) // 2])
    with pytest.raises(
        ArtifactError, match=r"direct.json is not a sqlweave program file \(invalid JSON"
    ):
        load_program(saved)


def test_not_json(saved: Path) -> None:
    saved.write_bytes(b"\x89PNG\r\n")
    with pytest.raises(ArtifactError, match="invalid JSON"):
        load_program(saved)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: p.update(format="other"), "no 'sqlweave-program' header"),
        (
            lambda p: p.update(format_version=FORMAT_VERSION + 1),
            f"newer than the {FORMAT_VERSION} this sqlweave reads",
        ),
        (lambda p: p.pop("format_version"), "format_version is missing"),
        (
            lambda p: p.update(generate=[1, 2]),
            r"bad predictor state for 'generate' \(not an object\)",
        ),
        (lambda p: p.pop("meta"), "'meta.program' is missing"),
        (lambda p: p["meta"].update(program="nope"), "program 'nope' is unknown to this sqlweave"),
        (
            lambda p: p.update(extra_step=p["generate"]),
            r"predictors \['extra_step', 'generate'\] do not match",
        ),
        (lambda p: p["meta"].update(switches={"bogus": 1}), "cannot build 'direct' with switches"),
        (lambda p: p["generate"].update(demos=5), "bad predictor state"),
        (lambda p: p.update(knn={"k": "two"}), "'knn' needs an int k"),
        # A hand-edited state key is set on the predictor by DSPy: another model, no call.
        (lambda p: p["generate"].update(lm={"model": "openai/gpt-4o"}), "'lm' must be null"),
        (lambda p: p["generate"].update(forward=1), r"unknown keys \['forward'\]"),
        # "false" is a true string; a switch's type is its constructor's.
        (lambda p: p["meta"]["switches"].update(prefill="false"), "switch prefill expects"),
        (lambda p: p["meta"]["switches"].update(temperature="hot"), "switch temperature"),
        (lambda p: p["meta"].update(val_ex_pct="x"), "meta.val_ex_pct must be a finite number"),
        (
            lambda p: p["meta"]["extra"].update(confidence={"n": 40}),
            "meta.extra.confidence must hold finite numbers",
        ),
        (lambda p: p["meta"]["extra"].update(details=[1]), "meta.extra.details must be an object"),
        (lambda p: p["meta"]["extra"].update(preset=["x"]), "meta.extra.preset must be a name"),
        # each demo goes into every prompt: thousands would fill the window
        (
            lambda p: p["generate"].update(demos=[{"question": "q", "sql": "s"}] * 65),
            r"65 demos \(a predictor shows at most 64\)",
        ),
        (lambda p: p.update(knn={"k": 65, "pool": []}), r"'knn.k' must be a number of demos"),
    ],
)
def test_bad_artifacts_name_the_file_and_the_problem(saved: Path, edit, message: str) -> None:
    _rewrite(saved, edit)
    with pytest.raises(ArtifactError, match=message) as info:
        load_program(saved)
    assert str(saved) in str(info.value)


def test_an_artefact_saved_before_a_switch_existed_keeps_the_value_it_was_compiled_with(
    saved: Path,
) -> None:
    # direct's prompt_layout and prefill came after artefacts were saved without them, and their
    # defaults changed since: such a file must rebuild the program it was compiled as.
    payload = json.loads(saved.read_text())
    for switch in ("prompt_layout", "prefill"):
        payload["meta"]["switches"].pop(switch)
    payload["meta"]["switches"]["schema_layout"] = "compact"
    saved.write_text(json.dumps(payload))
    program, meta = load_program(saved)
    assert program.switches["prompt_layout"] == "script" and program.switches["prefill"] is True
    assert program.switches["schema_layout"] == "compact"  # what the file names, it keeps
    assert program.generate.prefill == "auto"
    fresh = programs.get("direct")  # a new program gets today's defaults
    assert fresh.switches["prompt_layout"] == "chat" and fresh.switches["prefill"] is False


def test_the_committed_compiled_direct_loads_as_it_was_measured() -> None:
    committed = (
        Path(__file__).resolve().parents[1]
        / "experiments/results/compile/direct__search__1.5b.artefact.json"
    )
    program, meta = load_program(committed)
    assert "prompt_layout" not in meta.switches  # saved before the switch existed
    assert program.switches["prompt_layout"] == "script" and program.switches["prefill"] is True
    assert program.switches["corrector"] == "none" and program.switches["samples"] == 8


def test_json_that_python_cannot_read_is_an_artifact_error(saved: Path) -> None:
    for text in ('{"format_version": ' + "9" * 5000 + "}", "[" * 100_000 + "]" * 100_000):
        saved.write_text(text)
        with pytest.raises(ArtifactError, match="invalid JSON"):
            load_program(saved)


def test_a_preset_program_saves_every_switch_it_was_built_with(tmp_path: Path) -> None:
    from sqlweave.api import CompiledProgram, preset_meta

    program, meta = preset_meta(None, "fast", {"samples": 3})
    path = CompiledProgram(program, meta).save(tmp_path / "fast.json")
    loaded = sqlweave.load(path).program
    assert loaded.switches == program.switches  # not the legacy values of unnamed switches


def test_a_failed_save_leaves_no_temporary_file_and_a_saved_one_is_readable(
    saved: Path, tmp_path: Path
) -> None:
    from sqlweave.optimizers.artifact import ArtifactMeta, save_program

    program, meta = load_program(saved)
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(ArtifactError, match="it is a folder"):
        save_program(program, folder, meta)
    bad = ArtifactMeta(program="direct", extra={(1, 2): "a tuple key JSON cannot hold"})
    with pytest.raises(ArtifactError, match="cannot save"):
        save_program(program, tmp_path / "x.json", bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["direct.json", "out"]
    written = save_program(program, tmp_path / "y.json", meta)
    assert written.stat().st_mode & 0o777 == 0o644


def test_a_file_named_like_a_program_does_not_hide_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlweave.compiled import is_artifact_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "direct").write_text("not an artefact")
    (tmp_path / "mine").write_text("{}")
    assert not is_artifact_path("direct") and is_artifact_path("mine")
    assert is_artifact_path("anything.json")
