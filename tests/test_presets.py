"""Presets (issue 60): named configurations that every command and the API run by default,
checked end to end through DummyLM (the switches reach the program) and recorded in artefacts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM
from typer.testing import CliRunner

import sqlweave
from sqlweave.cli import app
from sqlweave.data import load_spider
from sqlweave.programs.presets import DEFAULT_PRESET, PRESETS, Preset, get_preset, names, resolve

runner = CliRunner()
COUNT = "SELECT count(*) AS n FROM singer"


@pytest.fixture()
def db_file(tmp_path: Path, demo_concert_db: Path) -> Path:
    return Path(shutil.copy(demo_concert_db, tmp_path / "concert_singer.sqlite"))


def test_the_default_is_a_known_preset_within_the_budget_and_listed_first() -> None:
    assert DEFAULT_PRESET in PRESETS and names()[0] == DEFAULT_PRESET
    assert {"fast", "accurate"} <= set(PRESETS)
    assert PRESETS["fast"].switches == {}  # one call + rules: direct's own defaults


def test_resolve_default_override_and_conflicts() -> None:
    program, switches, preset = resolve(None, None)
    assert (program, preset) == (PRESETS[DEFAULT_PRESET].program, DEFAULT_PRESET)
    assert switches == dict(PRESETS[DEFAULT_PRESET].switches)
    _, switches, _ = resolve(None, "accurate", {"samples": 4})
    assert switches["samples"] == 4  # --set overrides one switch, the rest stay the preset's
    assert resolve("pet", None, {"x": 1}) == ("pet", {"x": 1}, None)  # a program alone: no preset
    with pytest.raises(ValueError, match="configuration of 'direct', not 'pet'"):
        resolve("pet", "fast")
    with pytest.raises(ValueError, match="unknown preset 'nope'; choose one of"):
        get_preset("nope")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_answers_end_to_end_with_its_switches(name: str, db_file: Path) -> None:
    preset = PRESETS[name]
    lm = DummyLM([{"sql": COUNT}] * 16)
    with dspy.context(lm=lm):
        result = sqlweave.ask("How many singers are there?", db_file, preset=name)
    assert result.ok and result.rows == ((6,),)
    program = result.steps  # the program's own outputs: how many candidates it chose among
    # Every answer is the same: a cascade stops at one greedy candidate per prompt (and its
    # probe sample).
    drawn = preset.stopped if preset.switches.get("cascade") else preset.candidates
    assert len(program["candidates"]) == drawn
    assert lm.history  # the model was asked (samples may share one batched call)
    built = sqlweave.api._as_program(None, {}, name)
    for key, value in preset.switches.items():
        assert built.switches[key] == value, key


def test_no_program_options_run_the_default_preset(db_file: Path) -> None:
    lm = DummyLM([{"sql": COUNT}] * 16)
    with dspy.context(lm=lm):
        result = sqlweave.ask("How many singers are there?", db_file)
    preset = PRESETS[DEFAULT_PRESET]
    drawn = preset.stopped if preset.switches.get("cascade") else preset.candidates
    assert len(result.steps["candidates"]) == drawn


def test_cli_preset_flag_and_errors(dummy_model: dict, db_file: Path) -> None:
    dummy_model["lm"] = DummyLM([{"sql": COUNT}] * 16)
    ok = runner.invoke(
        app, ["ask", "How many?", "--db", str(db_file), "--preset", "fast", "--json"]
    )
    assert ok.exit_code == 0, ok.output
    answer = json.loads(ok.output)
    assert answer["rows"] == [[6]] and 0.0 <= answer["confidence"] <= 1.0
    bad = runner.invoke(app, ["ask", "How many?", "--db", str(db_file), "--preset", "nope"])
    assert bad.exit_code != 0 and "unknown preset 'nope'" in bad.output
    clash = runner.invoke(
        app, ["ask", "How many?", "--db", str(db_file), "-p", "pet", "--preset", "fast"]
    )
    assert clash.exit_code != 0 and "give one of --program and --preset" in clash.output


def test_programs_lists_presets_with_the_default_marked() -> None:
    result = runner.invoke(app, ["programs"])
    assert result.exit_code == 0
    assert f"{DEFAULT_PRESET} (default):" in result.output and "fast:" in result.output
    # the switches a compile on the user's own data searches are named under the preset
    assert "a switch-search compile on your data searches: repair, repair_scope" in result.output


def test_an_artefact_records_its_preset_and_inspect_shows_it(tmp_path: Path, spider_root: Path):
    train = load_spider("train", root=spider_root)[:4]
    with dspy.context(lm=DummyLM([])):
        compiled = sqlweave.compile(
            None, train, train[:1], preset="fast", optimizer="labeled", max_demos=1, progress=False
        )
    assert compiled.meta.extra["preset"] == "fast" and compiled.meta.program == "direct"
    path = compiled.save(tmp_path / "fast.json")
    shown = runner.invoke(app, ["inspect", str(path)])
    assert shown.exit_code == 0 and "started from preset 'fast'" in shown.output


def test_inspect_shows_where_the_confidence_comes_from(tmp_path: Path, spider_root: Path):
    """The shipped model's weights and threshold as the package stores them, and the compile's
    own refit when it made one."""
    from sqlweave.confidence import packaged_card

    card = packaged_card()
    train = load_spider("train", root=spider_root)[:4]
    with dspy.context(lm=DummyLM([])):
        compiled = sqlweave.compile(
            None, train, train[:1], preset="fast", optimizer="labeled", max_demos=1, progress=False
        )
    plain = runner.invoke(app, ["inspect", str(compiled.save(tmp_path / "plain.json"))]).output
    agree = card["models"]["pool"]["weights"]["agree"]
    assert f"agree {agree:+.2f}" in plain
    assert f"'not sure' below {card['threshold']:.3f}" in plain
    assert "this compile did not refit it" in plain
    compiled.meta.extra["confidence"] = {"a": 0.8, "b": -0.25, "n": 40.0}
    refit = runner.invoke(app, ["inspect", str(compiled.save(tmp_path / "refit.json"))]).output
    assert "refitted it on 40 validation answers (Platt: a 0.80, b -0.25)" in refit


@pytest.mark.lm
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_answers_with_the_real_local_model(name: str, db_file: Path) -> None:
    """The real 0.5B model behind every preset: a question it answers reliably, the answer's
    rows right, the preset's candidates drawn, a confidence given."""
    from sqlweave.lm import build_lm

    lm = build_lm("local:qwen2.5-coder-0.5b", cache=False)
    with dspy.context(lm=lm):
        result = sqlweave.ask("How many singers are there?", db_file, preset=name)
    assert result.ok and result.rows == ((6,),), result.sql
    preset = PRESETS[name]
    drawn = len(result.steps["candidates"])
    if preset.switches.get("cascade"):  # the greedy answers agree, or every sample is drawn
        assert drawn in (preset.stopped, preset.candidates)
    else:
        assert drawn == preset.candidates
    assert 0.0 <= result.confidence <= 1.0


def test_a_preset_counts_per_generator_samples() -> None:
    """Rule 21's pool: 3 + 3 + 2 candidates from three prompts is 8, as 4 + 4 from two."""
    three = Preset(
        name="t",
        program="ensemble",
        switches={"generators": "direct,dubo_v1,sea", "samples": "direct=3,dubo_v1=3,sea=2"},
    )
    assert three.candidates == 8
    two = Preset(name="m", program="ensemble", switches={"generators": "a,b", "samples": 4})
    assert two.candidates == 8
    assert Preset(name="f", program="direct").candidates == 1
