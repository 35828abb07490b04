"""Switches are declared once: the constructor's parameters (issue 36).

:class:`~sqlweave.programs.base.SQLProgram` wraps every subclass's ``__init__`` so the bound
arguments (defaults applied) become attributes and ``switches``, the record a compiled artefact is
rebuilt from, while the signature and its type hints stay what the CLI and the switch search read.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

import dspy
import pytest

from sqlweave import programs
from sqlweave.programs import SQLProgram, stages
from sqlweave.programs.dubo import DuboV1
from sqlweave.programs.stages.linking import DraftTablesLinker

NAMES = [name for name in programs.available() if programs.program_class(name).name == name]


def _switch_params(cls: type[SQLProgram]) -> dict[str, inspect.Parameter]:
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    # ``**switches`` (``naive``, which has none, inherits SQLProgram's) takes anything.
    return {p.name: p for p in params if p.name not in cls.INJECTED and p.kind != p.VAR_KEYWORD}


@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_but_the_injected_ones_is_a_recorded_switch(name: str) -> None:
    cls = programs.program_class(name)
    program = programs.get(name)
    assert list(program.switches) == list(_switch_params(cls))
    for key in program.switches:
        if key not in stages.ROLES:  # roles are recorded by name and built into stages
            assert hasattr(program, key), key
    # What the artefact saves rebuilds the same program.
    rebuilt = programs.get(name, **program.switches)
    assert rebuilt.switches == program.switches
    assert [n for n, _ in rebuilt.named_predictors()] == [n for n, _ in program.named_predictors()]


@pytest.mark.parametrize("name", NAMES)
def test_the_signature_and_its_hints_are_the_constructors_own(name: str) -> None:
    """What the CLI reads (``inspect.signature`` + ``typing.get_type_hints``) survives the wrap."""
    init = programs.program_class(name).__init__
    hints = typing.get_type_hints(init)
    for key, param in _switch_params(programs.program_class(name)).items():
        assert param.default is not inspect.Parameter.empty, key
        assert key in hints, key
    if name == "direct":
        assert hints["samples"] is int and hints["prefill"] is bool
        assert inspect.signature(init).parameters["schema_layout"].default == "native"


def test_positional_and_keyword_arguments_bind_alike() -> None:
    assert DuboV1(3).switches == DuboV1(sample_rows=3).switches
    assert DuboV1(3).sample_rows == 3 and DuboV1(3).switches["sample_rows"] == 3
    with pytest.raises(TypeError):
        DuboV1(no_such_switch=1)


def test_a_stage_instance_is_recorded_by_its_registry_name() -> None:
    program = programs.get("direct", linker=DraftTablesLinker(), corrector="none")
    assert program.switches["linker"] == "tables" and program.switches["corrector"] == "none"
    assert isinstance(program.linker, DraftTablesLinker)  # the attribute is the built stage


def test_normalised_switches_are_saved_normalised() -> None:
    assert programs.get("direct", prefill=1).switches["prefill"] is True
    assert programs.get("mage", temperature=1, strategy="none").switches["temperature"] == 1.0
    assert programs.get("mage", strategy="none").switches["retriever_options"] == {}
    pet = programs.get("pet", finsql_models=["local:model", object()])
    assert pet.switches["finsql_models"] == ["local:model"]  # an LM object cannot be saved
    assert pet.switches["retriever"] == "masked_question"  # a retriever name is a switch here


class Small(SQLProgram):
    """A user's program in the declared-once style."""

    def __init__(self, k: int = 2, label: str = "x", *, pool: Any = None) -> None:
        super().__init__()
        self.seen = (self.k, self.label)  # set before the body runs

    def answer(self, **_: Any) -> dspy.Prediction:
        return stages.result("SELECT 1", stages=[])


class Larger(Small):
    """A subclass adding a switch and passing the rest on."""

    def __init__(self, extra: bool = False, **rest: Any) -> None:
        super().__init__(**rest)


class OldStyle(SQLProgram):
    """A subclass written the way programs were before: naming its switches itself."""

    def __init__(self, k: int = 2) -> None:
        super().__init__(k=k * 10)


def test_a_users_program_records_its_switches_without_writing_them() -> None:
    small = Small(k=5, pool=[1])
    assert small.switches == {"k": 5, "label": "x"} and small.seen == (5, "x")
    assert not hasattr(small, "pool")


def test_a_subclass_keeps_its_own_switches_and_its_parents() -> None:
    larger = Larger(extra=True, k=7)
    assert larger.switches == {"k": 7, "label": "x", "extra": True}
    assert (larger.extra, larger.k) == (True, 7)


def test_the_older_style_still_names_its_switches() -> None:
    assert OldStyle(k=3).switches == {"k": 30}
