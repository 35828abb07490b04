"""Which tables a view of a database shows, and under which names.

A linker or a schema filter narrows what the LM sees to a few tables; a merged database (tables
named ``<namespace>__<table>``) may show them under their short names. :class:`TableScope` says
both, and :meth:`sqlweave.db.Database.scoped` returns a handle carrying it: schema readers
(:mod:`sqlweave.schema`, :mod:`sqlweave.values`) show only the scope's tables, and queries are
mapped back to real names before they run. The view shares the handle's connections and caches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlweave.tablenames import short_names


@dataclass(frozen=True)
class TableScope:
    """The tables a view shows (lower-cased real names) and, optionally, their display names.

    ``display_names`` maps real names (lower-cased) to what the schema shows; ``table_aliases``
    maps those shown names (lower-cased) back to real ones, applied to SQL before it runs. Both
    are None for a scope that keeps real names. Treat the mappings as read-only.
    """

    tables: frozenset[str]
    display_names: Mapping[str, str] | None = None
    table_aliases: Mapping[str, str] | None = None

    @classmethod
    def of(cls, tables: Iterable[str], *, short: bool = False) -> TableScope:
        """The scope showing ``tables``; with ``short``, tables sharing one ``<namespace>__``
        prefix are shown under their short names (:func:`sqlweave.tablenames.short_names`)."""
        tables = list(tables)
        names = short_names(tables) if short else {}
        return cls(
            tables=frozenset(t.lower() for t in tables),
            display_names={real.lower(): s for real, s in names.items()} or None,
            table_aliases={s.lower(): real for real, s in names.items()} or None,
        )
