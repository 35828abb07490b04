"""sqlweave: published text-to-SQL pipelines as declarative, compilable DSPy programs."""

from __future__ import annotations

from sqlweave.db import Database, ExecutionError, QueryResult

__version__ = "0.1.0"

__all__ = ["Database", "ExecutionError", "QueryResult", "__version__"]
