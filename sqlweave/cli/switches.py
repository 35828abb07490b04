"""``--set key=value`` and ``--space key=a,b`` read against a program's constructor, and the
program a command runs: a registry name or preset with switches, or a compiled artefact."""

from __future__ import annotations

import math
from inspect import Parameter, signature
from pathlib import Path
from typing import Any

from sqlweave.cli.common import fail
from sqlweave.switch_types import (
    _TYPE_WORDS,
    INTEGER_OR_TEXT,
    NUMBER_OR_TEXT,
    switch_types,
)


def parse_switches(items: list[str]) -> dict[str, Any]:
    """``key=value`` pairs from ``--set``, values read as bool, int, float or else string."""
    parsed: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"--set needs key=value, got {item!r}")
        parsed[key.strip()] = _parse_value(value.strip())
    return parsed


def _convert_switch(name: str, kind: type, optional: bool, raw: str) -> Any:
    value = raw.strip()
    if optional and value.lower() in ("none", "null"):
        return None
    if kind is str:
        return value
    if kind == NUMBER_OR_TEXT:
        try:
            return float(value)
        except ValueError:
            return value
    if kind == INTEGER_OR_TEXT:
        try:
            return int(value)
        except ValueError:
            if "=" in value:  # one per generator: "direct=3,sea=2", checked by the program
                return value
        fail(f"switch {name} expects an integer or name=integer pairs, got {raw!r}")
    if kind is bool:
        if value.lower() in ("true", "1", "yes", "on"):
            return True
        if value.lower() in ("false", "0", "no", "off"):
            return False
    elif kind is int:
        try:
            return int(value)
        except ValueError:
            pass
    else:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if math.isfinite(number):
            return number
    fail(f"switch {name} expects {_TYPE_WORDS[kind]}, got {raw!r}")


def typed_switches(program: str, items: list[str]) -> dict[str, Any]:
    """``--set key=value`` pairs checked against the constructor of registry program ``program``:
    an unknown switch, or a value of the wrong type (``samples=many`` where the default is an
    int), is a one-line error; each value is converted to the type of the parameter's default
    (or annotation). A program that takes ``**switches`` gets :func:`parse_switches`' reading."""
    from sqlweave import programs

    raw: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"--set needs key=value, got {item!r}")
        raw[key.strip()] = value
    if not raw:
        return {}
    try:
        cls = programs.program_class(program)
    except (ValueError, TypeError, KeyError) as err:
        fail(str(err))
    params = signature(cls.__init__).parameters
    if any(p.kind is Parameter.VAR_KEYWORD for p in params.values()):
        return {key: _parse_value(value.strip()) for key, value in raw.items()}
    types = switch_types(cls)
    parsed: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in types:
            known = ", ".join(n for n, (kind, _) in types.items() if kind is not None)
            fail(f"unknown switch {key!r} for program {program}; its switches: {known or 'none'}")
        kind, optional = types[key]
        if kind is None:
            fail(f"switch {key} of {program} takes a Python object; it cannot be set with --set")
        parsed[key] = _convert_switch(key, kind, optional, value)
    return parsed


def _parse_value(value: str) -> Any:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def program_from(
    program: str | None, switches: list[str], preset: str | None = None
) -> tuple[Any, str]:
    """A registry name or a preset (with --set switches on top; neither: the default preset)
    or a compiled artefact path, as a CompiledProgram, and the program's name."""
    from sqlweave.api import CompiledProgram, preset_meta
    from sqlweave.compiled import is_artifact_path
    from sqlweave.optimizers import ArtifactError, load_program
    from sqlweave.programs.presets import resolve

    if program is not None and is_artifact_path(program):
        if switches or preset:
            fail("--set and --preset apply to a registry program, not to a compiled .json")
        try:
            prog, meta = load_program(Path(program))
        except ArtifactError as err:
            fail(str(err))
        return CompiledProgram(prog, meta), meta.program
    try:
        name = resolve(program, preset)[0]
        parsed = typed_switches(name, switches)
        built, meta = preset_meta(program, preset, parsed)
    except (ValueError, TypeError) as err:
        fail(str(err))
    return CompiledProgram(built, meta), name


def search_space(program: str, items: list[str]) -> dict[str, list[Any]]:
    """``--space switch=a,b,c`` items as switch -> typed choices (checked like ``--set``)."""
    space: dict[str, list[Any]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        choices = [v for v in values.split(",") if v.strip()]
        if not sep or not key or not choices:
            fail(f"--space needs switch=a,b,c, got {item!r}")
        if key in space:
            fail(f"--space gives {key} twice; list every choice in one switch=a,b,c")
        space[key] = [typed_switches(program, [f"{key}={v}"])[key] for v in choices]
    return space
