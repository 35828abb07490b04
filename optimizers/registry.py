"""Optimizers by name, and optimizers in sequence.

Every optimizer is a :class:`~sqlweave.optimizers.base.SQLTeleprompter` registered under a
name, the way programs are (:func:`sqlweave.programs.get`):

```python
from sqlweave.optimizers import registry

registry.available()                      # ['bootstrap', 'gepa', 'knn', 'labeled', ...]
tp = registry.get("bootstrap", max_demos=2)
tp = registry.get("search+bootstrap", n_trials=8, max_demos=2)   # a Sequential
compiled = tp.compile(program, trainset=train, valset=val)
registry.register("mine", MyTeleprompter)  # any SQLTeleprompter subclass
```

``a+b`` names a :class:`Sequential`: ``a`` compiles the student, ``b`` compiles what ``a``
returned. Options go to each optimizer whose constructor takes them (``max_demos`` to bootstrap,
``n_trials`` to search); an option no optimizer in the sequence takes is an error, so a typo
does not silently do nothing. Budget and checkpoint are not options but wrappers
(:class:`~sqlweave.optimizers.budget.Budgeted`,
:class:`~sqlweave.optimizers.checkpoint.Checkpointed`) around whatever this returns.
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

import dspy

from sqlweave.errors import SqlweaveError
from sqlweave.optimizers.base import SQLTeleprompter, Wrapper, compile_with
from sqlweave.optimizers.budget import BudgetExhausted
from sqlweave.registry import Registry

if TYPE_CHECKING:
    from sqlweave.programs import SQLProgram

logger = logging.getLogger(__name__)

#: Options that every compile passes along (:func:`sqlweave.optimizers.compile.run_optimizer`);
#: an optimizer that takes one of them gets it, the others ignore it.
COMMON_OPTIONS = frozenset({"metric", "seed", "progress", "max_demos", "candidates", "proposer_lm"})


class UnknownOptimizerError(SqlweaveError, ValueError):
    """A name that is not a registered optimizer (nor a ``+`` sequence of them)."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"unknown optimizer {name!r}; choose one of {', '.join(available())} "
            "or a sequence such as search+bootstrap"
        )
        self.name = name


#: name -> ``module:Class`` (imported on first use) or a class given to :func:`register`.
_REGISTRY = Registry(
    "optimizer",
    {
        "labeled": "sqlweave.optimizers.teleprompters:Labeled",
        "bootstrap": "sqlweave.optimizers.teleprompters:Bootstrap",
        "random_search": "sqlweave.optimizers.teleprompters:RandomSearch",
        "knn": "sqlweave.optimizers.teleprompters:KNNDemos",
        "mipro": "sqlweave.optimizers.teleprompters:MIPRO",
        "gepa": "sqlweave.optimizers.teleprompters:GEPA",
        "search": "sqlweave.optimizers.search:SwitchSearch",
    },
    base=SQLTeleprompter,
    unknown=UnknownOptimizerError,
)

#: The built-in optimizer names, in the registry's order (``OPTIMIZERS`` of
#: :mod:`sqlweave.optimizers.compile`); :func:`available` also lists those registered later.
BUILTIN: tuple[str, ...] = tuple(_REGISTRY)


def available() -> list[str]:
    """The registered optimizer names."""
    return _REGISTRY.names()


def register(name: str, cls: type[SQLTeleprompter], *, replace: bool = False) -> None:
    """Register ``cls`` under ``name`` (``replace=True`` to overwrite an existing entry)."""
    _REGISTRY.register(name, cls, replace=replace)


def optimizer_class(name: str) -> type[SQLTeleprompter]:
    """The class registered as ``name``."""
    return _REGISTRY.load(name)


def stage_names(spec: str) -> list[str]:
    """The optimizer names in ``spec`` (``search+bootstrap`` -> search, bootstrap), checked."""
    names = [part.strip() for part in spec.split("+")]
    for name in names:
        optimizer_class(name)  # raises for an unknown (or empty) name
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(
            f"optimizer {', '.join(twice)} appears twice in {spec!r}; "
            "each runs once in a sequence (their checkpointed units would mix)"
        )
    return names


def _accepted(cls: type) -> tuple[set[str], bool]:
    """The keyword options ``cls`` takes, following ``**options`` up the class hierarchy."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names |= {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)} - {
            "self"
        }
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return names, False
    return names, True


def get(spec: str, **options: Any) -> SQLTeleprompter:
    """The optimizer ``spec`` names (``bootstrap``; ``search+bootstrap``), built with the
    ``options`` each takes. An option that none of them takes raises ``ValueError``, except the
    :data:`COMMON_OPTIONS` every compile passes along."""
    names = stage_names(spec)
    stages: list[SQLTeleprompter] = []
    used: set[str] = set()
    for name in names:
        cls = optimizer_class(name)
        takes, anything = _accepted(cls)
        mine = {k: v for k, v in options.items() if anything or k in takes}
        used |= set(mine)
        stages.append(cls(**mine))
    stray = set(options) - used - COMMON_OPTIONS
    if stray:
        raise ValueError(
            f"option{'s' if len(stray) > 1 else ''} {', '.join(sorted(stray))} "
            f"{'do' if len(stray) > 1 else 'does'} not apply to optimizer {spec!r}"
        )
    return stages[0] if len(stages) == 1 else Sequential(*stages)


class Sequential(Wrapper):
    """Optimizers one after the other: each compiles what the one before returned.

    They share the budget and the checkpoint set on the sequence (units are keyed by optimizer,
    so they do not mix). When the budget stops one of them, the sequence keeps what that one
    returned (its best so far) and the optimizers after it do not run, except those that can
    rebuild their result from the checkpoint without an LM call.
    """

    def __init__(self, *stages: Any) -> None:
        if len(stages) < 2:
            raise ValueError("a sequence needs at least two optimizers")
        super().__init__(*stages)
        self.name = "+".join(getattr(s, "name", "") or type(s).__name__ for s in stages)

    def compile(
        self,
        student: SQLProgram,
        *,
        trainset: list[dspy.Example],
        valset: list[dspy.Example] | None = None,
        **kwargs: Any,
    ) -> SQLProgram:
        """Compile with each stage in turn; the student itself is never changed."""
        program = student
        for stage in self.wrapped:
            spent = self.budget is not None and self.budget.remaining == 0
            if spent and not getattr(stage, "replays", False):
                logger.info("budget spent: %s does not run", getattr(stage, "name", stage))
                self.budget_stopped = True
                continue
            try:
                program = compile_with(stage, program, trainset, valset, **kwargs)
            except BudgetExhausted:
                self.budget_stopped = True
        return program if program is not student else student.reset_copy()
