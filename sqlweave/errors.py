"""The root of sqlweave's exceptions.

Every error sqlweave raises on purpose derives from :class:`SqlweaveError` (as DSPy's from
``DSPyError`` and sqlglot's from ``SqlglotError``), so a caller can catch them all in one clause.
Each keeps its older base too (``DataError`` is still a ``ValueError``, ``ExecutionError`` still
only an ``Exception`` underneath), so existing ``except`` clauses keep working.

This module imports nothing from sqlweave: every layer may raise these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class SqlweaveError(Exception):
    """Root of every error sqlweave raises on purpose.

    :attr:`context` says what the error is about: the public attributes the subclass set (a
    file, a query, a database name, an error kind...), plus anything passed as ``context=`` or
    added on the way up with :meth:`add_context`.
    """

    def __init__(self, *args: object, context: Mapping[str, Any] | None = None) -> None:
        super().__init__(*args)
        self._context: dict[str, Any] = dict(context or {})

    @property
    def context(self) -> dict[str, Any]:
        """What the error is about, by name."""
        own = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        return {**own, **getattr(self, "_context", {})}

    def add_context(self, **items: Any) -> SqlweaveError:
        """Record more of what the error is about (returns the error, to re-raise it)."""
        if not hasattr(self, "_context"):
            self._context = {}
        self._context.update(items)
        return self


__all__ = ["SqlweaveError"]
