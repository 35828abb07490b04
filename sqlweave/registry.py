"""Classes by name, imported on first use: the one registry behind programs, stages and optimizers.

An entry is a ``"module:Class"`` string, imported the first time the class is asked for (so
listing the names, as ``--help`` and ``sqlweave programs`` do, imports nothing), or a class that
a user registered at run time with :meth:`Registry.register`:

```python
from sqlweave.registry import Registry

PROGRAMS = Registry("program", {"direct": "sqlweave.programs.direct:DirectSQL"}, base=SQLProgram)
PROGRAMS.load("direct")             # the class; an unknown name is a ValueError naming the choices
PROGRAMS.register("mine", MyProgram)
```

It is a read-only :class:`~collections.abc.Mapping` from names to classes, so ``in``, ``len``
and iteration behave as for a dict; changes go through :meth:`register`. An entry may name a
class in an optional extra (the ``graph`` retriever needs the GNN stack): ``missing`` turns the
failed import into an error that says what to install or choose instead.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator, Mapping

#: What a registered name may hold: letters, digits and ``_`` (``+`` joins optimizer names).
_NAME = re.compile(r"^\w+$", re.ASCII)


class Registry(Mapping[str, type]):
    """Names of one ``kind`` of class (``"program"``, ``"linker"``, ``"optimizer"``).

    ``base``: the class every registered class must subclass (checked by :meth:`register`).
    ``unknown``: builds the exception for a name that is not registered (default: a
    ``ValueError`` listing the choices). ``missing``: builds the exception for a registered
    name whose module cannot be imported, from the name and the import error (default: the
    import error itself).
    """

    def __init__(
        self,
        kind: str,
        entries: Mapping[str, str | type] | None = None,
        *,
        base: type | None = None,
        unknown: Callable[[str], Exception] | None = None,
        missing: Callable[[str, Exception], Exception] | None = None,
    ) -> None:
        self.kind = kind
        self.base = base
        self._unknown = unknown
        self._missing = missing
        self._entries: dict[str, str | type] = dict(entries or {})

    # -- the Mapping protocol (names -> classes) ----------------------------------------------------

    def __getitem__(self, name: str) -> type:
        return _resolve(self._entries[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._entries)})"

    # -- lookups ---------------------------------------------------------------------------------------

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def load(self, name: str) -> type:
        """The class registered as ``name`` (imported on first use); unknown names raise."""
        try:
            target = self._entries[name]
        except (KeyError, TypeError):
            raise self._error(name) from None
        try:
            return _resolve(target)
        except (ImportError, AttributeError) as err:
            if self._missing is None:
                raise
            raise self._missing(name, err) from err

    def check(self, name: str) -> str:
        """``name`` when it is registered (nothing is imported); the registry's error for an
        unknown name otherwise, as :meth:`load` raises it."""
        if not isinstance(name, str) or name not in self._entries:
            raise self._error(name)
        return name

    def where(self, name: str) -> str:
        """Where ``name``'s class lives, as ``module:Class`` (nothing is imported)."""
        target = self._entries[name]
        return target if isinstance(target, str) else f"{target.__module__}:{target.__qualname__}"

    def name_of(self, obj: object) -> str | None:
        """The name whose class is exactly ``type(obj)``, else None (a subclass is not its
        parent: it may behave differently, so it is not saved under the parent's name)."""
        for name in self._entries:
            if type(obj) is self[name]:
                return name
        return None

    def register(self, name: str, cls: type, *, replace: bool = False) -> None:
        """Register ``cls`` under ``name`` (``replace=True`` to overwrite an existing entry)."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"a {self.kind} name is letters, digits and '_', not {name!r}")
        if not isinstance(cls, type) or (self.base is not None and not issubclass(cls, self.base)):
            what = f"a {self.base.__name__} subclass" if self.base is not None else "a class"
            raise TypeError(f"{cls!r} is not {what}")
        if name in self._entries and not replace:
            raise ValueError(f"{self.kind} {name!r} is already registered (pass replace=True)")
        self._entries[name] = cls

    def copy(self) -> Registry:
        """An independent registry with the same entries (for tests that register classes)."""
        return Registry(
            self.kind, self._entries, base=self.base, unknown=self._unknown, missing=self._missing
        )

    def _error(self, name: str) -> Exception:
        if self._unknown is not None:
            return self._unknown(name)
        return ValueError(f"unknown {self.kind} {name!r}; choose one of {', '.join(self.names())}")


def _resolve(target: str | type) -> type:
    """The class a registry entry names (``"module:Class"`` is imported now)."""
    if isinstance(target, str):
        module_name, _, cls_name = target.partition(":")
        return getattr(importlib.import_module(module_name), cls_name)
    return target


__all__ = ["Registry"]
