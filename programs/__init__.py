"""Text-to-SQL programs: shared blocks and the seed pipelines, with a registry by name."""

from __future__ import annotations

from typing import Any

from sqlweave.programs.base import SQLProgram, resolve_database
from sqlweave.registry import Registry

#: name -> ``module:Class`` (imported on first use) or a class given to :func:`register`.
PROGRAMS = Registry(
    "program",
    {
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
        "ensemble": "sqlweave.programs.ensemble:EnsembleSQL",
    },
    base=SQLProgram,
)


def available() -> list[str]:
    """Names accepted by :func:`get`."""
    return PROGRAMS.names()


def program_class(name: str) -> type[SQLProgram]:
    """The class registered as ``name`` (imported on first use)."""
    return PROGRAMS.load(name)


def register(name: str, cls: type[SQLProgram], *, replace: bool = False) -> None:
    """Register ``cls`` (a :class:`SQLProgram` subclass) as ``name``, for :func:`get`, the CLI's
    program arguments and compiled artefacts (``replace=True`` to overwrite an entry)."""
    PROGRAMS.register(name, cls, replace=replace)


def get(name: str, **switches: Any) -> SQLProgram:
    """Build the program registered as ``name`` with its ablation ``switches``."""
    return program_class(name)(**switches)


__all__ = [
    "PROGRAMS",
    "SQLProgram",
    "available",
    "get",
    "program_class",
    "register",
    "resolve_database",
]
