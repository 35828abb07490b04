"""Text-to-SQL programs: shared blocks and the seed pipelines, with a registry by name."""

from __future__ import annotations

from typing import Any

from sqlweave.programs.base import SQLProgram, resolve_database

_REGISTRY: dict[str, str] = {
    "naive": "sqlweave.programs.naive:NaiveSQL",
    "direct": "sqlweave.programs.direct:DirectSQL",
    "sea": "sqlweave.programs.sea:SEASQL",
    "pet": "sqlweave.programs.pet:PETSQL",
    "mage": "sqlweave.programs.mage:MageSQL",
    "dubo": "sqlweave.programs.dubo:DuboV2",
    "dubo_v1": "sqlweave.programs.dubo:DuboV1",
    "dubo_v2": "sqlweave.programs.dubo:DuboV2",
    "rsl": "sqlweave.programs.rsl:RSLSQL",
    "weave": "sqlweave.programs.weave:WeaveSQL",
}


def available() -> list[str]:
    """Names accepted by :func:`get`."""
    return sorted(_REGISTRY)


def program_class(name: str) -> type[SQLProgram]:
    """The class registered as ``name`` (imported on first use)."""
    import importlib

    try:
        target = _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown program {name!r}; choose one of {', '.join(available())}"
        ) from None
    module_name, cls_name = target.split(":")
    return getattr(importlib.import_module(module_name), cls_name)


def get(name: str, **switches: Any) -> SQLProgram:
    """Build the program registered as ``name`` with its ablation ``switches``."""
    return program_class(name)(**switches)


__all__ = ["SQLProgram", "available", "get", "program_class", "resolve_database"]
