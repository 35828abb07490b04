"""One root exception (issue 14): every exception class sqlweave defines derives from
:class:`sqlweave.SqlweaveError`, keeps its older base, and carries its context."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import sqlweave
from sqlweave.errors import SqlweaveError

#: The package's folders (pyproject maps the root folders into one package).
PACKAGES = (
    "sqlweave",
    "sqlweave.programs",
    "sqlweave.signatures",
    "sqlweave.optimizers",
    "sqlweave.gnn",
)

#: Control-flow signals, not errors: they derive from BaseException on purpose so that no
#: ``except Exception`` in DSPy's loops swallows them, which a SqlweaveError base would undo.
SIGNALS = {"sqlweave.optimizers.budget.BudgetExhausted", "sqlweave.failures.EndpointDown"}


def package_modules() -> list[str]:
    """Every module of the package's folders, subpackages (``sqlweave.lm``) included."""
    names = []
    for package in PACKAGES:
        names.append(package)
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, prefix=f"{package}."):
            names.append(info.name)
    return sorted(set(names))


def exception_classes() -> dict[str, type[BaseException]]:
    found = {}
    for name in package_modules():
        module = importlib.import_module(name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if obj.__module__ == name and issubclass(obj, BaseException):
                found[f"{name}.{obj.__qualname__}"] = obj
    return found


def test_the_walk_finds_the_known_exceptions() -> None:
    found = exception_classes()
    for name in (
        "sqlweave.data.DataError",
        "sqlweave.db.ExecutionError",
        "sqlweave.embeddings.EmbeddingError",
        "sqlweave.lm.spec.LMSpecError",
        "sqlweave.metrics.GoldQueryError",
        "sqlweave.models.ModelError",
        "sqlweave.models.UnknownModelError",
        "sqlweave.optimizers.artifact.ArtifactError",
        "sqlweave.failures.LMUnavailableError",
        "sqlweave.failures.ProgramError",
        "sqlweave.gnn.graph.GraphError",
        *SIGNALS,
    ):
        assert name in found


def test_every_exception_class_derives_from_sqlweave_error() -> None:
    outside = [
        name
        for name, cls in exception_classes().items()
        if not issubclass(cls, SqlweaveError) and name not in SIGNALS
    ]
    assert outside == [], f"exception classes outside SqlweaveError: {outside}"


def test_signals_stay_outside_exception() -> None:
    for name, cls in exception_classes().items():
        if name in SIGNALS:
            assert not issubclass(cls, Exception), name


def test_older_bases_are_kept() -> None:
    from sqlweave.data import DataError
    from sqlweave.embeddings import EmbeddingError
    from sqlweave.gnn.graph import GraphError
    from sqlweave.lm import LMSpecError
    from sqlweave.metrics import GoldQueryError
    from sqlweave.models import ModelError, UnknownModelError

    assert issubclass(DataError, ValueError) and issubclass(LMSpecError, ValueError)
    assert issubclass(GraphError, ValueError)
    assert issubclass(EmbeddingError, RuntimeError) and issubclass(GoldQueryError, RuntimeError)
    assert issubclass(ModelError, RuntimeError) and issubclass(UnknownModelError, KeyError)


def test_exported_from_the_package() -> None:
    assert sqlweave.SqlweaveError is SqlweaveError
    assert "SqlweaveError" in sqlweave.__all__


def test_errors_carry_their_context() -> None:
    from sqlweave.data import DataError
    from sqlweave.db import ExecutionError

    err = DataError("dev.json", "item 3 has no string field 'question'")
    assert str(err) == "dev.json: item 3 has no string field 'question'"
    assert err.context["problem"].startswith("item 3")
    assert str(err.context["path"]) == "dev.json"

    failed = ExecutionError("unknown_column", "no such column: nme", "SELECT nme FROM singer")
    assert str(failed) == "unknown_column: no such column: nme"
    assert failed.context == {
        "kind": "unknown_column",
        "message": "no such column: nme",
        "sql": "SELECT nme FROM singer",
    }
    assert failed.add_context(db="concert_singer") is failed
    assert failed.context["db"] == "concert_singer"


def test_one_clause_catches_them_all() -> None:
    from sqlweave.lm import LMSpec, LMSpecError

    with pytest.raises(SqlweaveError) as caught:
        LMSpec.parse("")
    assert isinstance(caught.value, LMSpecError)
    root = SqlweaveError("bad input", context={"field": "n"})
    assert root.context == {"field": "n"} and str(root) == "bad input"
