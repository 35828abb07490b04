"""One lazy ``"module:Class"`` registry (:mod:`sqlweave.registry`) behind programs, stages and
optimizers, and the ``register()`` each layer offers on it (issue 36)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave import programs
from sqlweave.db import Database
from sqlweave.optimizers import registry as optimizer_registry
from sqlweave.optimizers.artifact import ArtifactMeta, load_program, save_program
from sqlweave.programs import SQLProgram, stages
from sqlweave.programs.stages.linking import DraftTablesLinker
from sqlweave.registry import Registry


class Base:
    pass


class Child(Base):
    pass


class GrandChild(Child):
    pass


def test_names_are_listed_without_importing_their_modules() -> None:
    reg = Registry("widget", {"lazy": "sqlweave_no_such_module:Widget", "base": Base})
    assert reg.names() == ["base", "lazy"] and "lazy" in reg and len(reg) == 2
    assert "sqlweave_no_such_module" not in sys.modules
    with pytest.raises(ModuleNotFoundError):  # imported on first use, not before
        reg.load("lazy")
    assert reg.load("base") is Base


def test_a_string_entry_resolves_to_its_class() -> None:
    reg = Registry("registry", {"itself": "sqlweave.registry:Registry"})
    assert reg.load("itself") is Registry and reg["itself"] is Registry


def test_an_unknown_name_names_the_choices() -> None:
    reg = Registry("widget", {"a": Base, "b": Child})
    with pytest.raises(ValueError, match=r"unknown widget 'c'; choose one of a, b"):
        reg.load("c")
    with pytest.raises(KeyError):  # the Mapping protocol keeps KeyError
        reg["c"]


def test_register_checks_the_name_the_base_and_duplicates() -> None:
    reg = Registry("widget", {"a": Child}, base=Base)
    reg.register("b", GrandChild)
    assert reg.load("b") is GrandChild
    with pytest.raises(ValueError, match="letters, digits"):
        reg.register("a+b", Child)
    with pytest.raises(TypeError, match="not a Base subclass"):
        reg.register("c", int)
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a", GrandChild)
    reg.register("a", GrandChild, replace=True)
    assert reg.load("a") is GrandChild


def test_name_of_is_the_exact_class_not_a_parent() -> None:
    reg = Registry("widget", {"child": Child})
    assert reg.name_of(Child()) == "child"
    assert reg.name_of(GrandChild()) is None  # may behave differently: not saved as its parent


def test_copy_is_independent() -> None:
    reg = Registry("widget", {"a": Child})
    other = reg.copy()
    other.register("b", Base)
    assert "b" in other and "b" not in reg


def test_programs_stages_and_optimizers_share_the_helper() -> None:
    assert isinstance(programs.PROGRAMS, Registry)
    assert all(isinstance(names, Registry) for names in stages.STAGES.values())
    assert isinstance(optimizer_registry._REGISTRY, Registry)
    with pytest.raises(optimizer_registry.UnknownOptimizerError, match="search\\+bootstrap"):
        optimizer_registry.optimizer_class("no_such_optimizer")


# --- programs.register and stages.register ----------------------------------------------------------


class OneCall(SQLProgram):
    """A user's program: one generator call, with a switch and an injected tool."""

    name = "one_call"

    def __init__(self, prefix: str = "", *, pool: Any = None) -> None:
        super().__init__()
        from sqlweave.programs.base import Generator

        self.generate = Generator()

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        out = self.generate(dialect=db.dialect, db_schema="", question=question, evidence=evidence)
        return stages.result(self.prefix + out.sql, stages=["generator"])


@pytest.fixture()
def own_registries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(programs, "PROGRAMS", programs.PROGRAMS.copy())
    monkeypatch.setitem(stages.STAGES, "linker", stages.STAGES["linker"].copy())


def test_a_registered_program_is_built_saved_and_loaded_by_name(
    own_registries: None, tmp_path: Path, demo_concert_db: Path
) -> None:
    programs.register("one_call", OneCall)
    assert "one_call" in programs.available()
    with pytest.raises(TypeError, match="SQLProgram subclass"):
        programs.register("other", Base)  # type: ignore[arg-type]
    program = programs.get("one_call", prefix="-- mine\n", pool=[1, 2])
    assert program.switches == {"prefix": "-- mine\n"} and program.prefix == "-- mine\n"
    program.generate.demos = [dspy.Example(question="q", sql="SELECT 1").with_inputs("question")]
    path = save_program(program, tmp_path / "one.json", ArtifactMeta("one_call", program.switches))
    loaded, meta = load_program(path)
    assert isinstance(loaded, OneCall) and loaded.switches == program.switches
    assert len(loaded.generate.demos) == 1
    with dspy.context(lm=DummyLM([{"sql": "SELECT count(*) FROM singer"}])):
        pred = loaded(question="How many singers?", db=str(demo_concert_db))
    assert pred.sql == "-- mine\nSELECT count(*) FROM singer"


class MyTablesLinker(DraftTablesLinker):
    """A user's linker: a subclass is not its parent, so it needs its own name to be saved."""


def test_a_registered_stage_is_saved_by_its_name(own_registries: None) -> None:
    assert programs.get("direct", linker=MyTablesLinker()).switches["linker"] is None
    stages.register("linker", "my_tables", MyTablesLinker)
    assert "my_tables" in stages.available("linker")
    program = programs.get("direct", linker=MyTablesLinker())
    assert program.switches["linker"] == "my_tables"
    rebuilt = programs.get("direct", **program.switches)
    assert type(rebuilt.linker) is MyTablesLinker
    with pytest.raises(ValueError, match="unknown stage role"):
        stages.register("ranker", "mine", MyTablesLinker)
    with pytest.raises(TypeError, match="Module subclass"):
        stages.register("linker", "plain", Base)
