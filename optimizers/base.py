"""What every sqlweave optimizer is: a DSPy ``Teleprompter`` that can share a budget and a
checkpoint with the wrappers around it.

:class:`SQLTeleprompter` is the contract of :mod:`sqlweave.optimizers.registry`:
``compile(student, *, trainset, valset=None)`` returns an optimized copy and never changes the
student. Two attributes are set from outside, by the wrappers of
:mod:`~sqlweave.optimizers.budget` and :mod:`~sqlweave.optimizers.checkpoint`, never by the
optimizer itself:

- ``budget``: the :class:`~sqlweave.optimizers.budget.CallBudget` in force (or None), so an
  optimizer can plan with ``budget.remaining`` and stop at it keeping its best result so far;
- ``checkpoint``: the :class:`~sqlweave.optimizers.checkpoint.Checkpoint` (or None) where it
  records each finished unit of work and from which a rerun replays them.

After ``compile`` an optimizer reports ``details`` (plain data for the artefact) and
``budget_stopped`` (it stopped at the budget). ``replays`` says whether a rerun on a spent budget
can rebuild its result from the checkpoint alone, without an LM call.

:class:`Wrapper` is the base of optimizers that wrap another (the budget, the checkpoint, a
sequence): setting ``budget`` or ``checkpoint`` on a wrapper sets it on what it wraps, and its
report is the wrapped optimizer's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

import dspy
from dspy.teleprompt import Teleprompter

if TYPE_CHECKING:
    from sqlweave.optimizers.budget import CallBudget
    from sqlweave.optimizers.checkpoint import Checkpoint
    from sqlweave.programs import SQLProgram


class SQLTeleprompter(Teleprompter):
    """A sqlweave optimizer: ``compile(student, *, trainset, valset=None)`` on a copy.

    ``metric`` defaults to execution accuracy (:func:`sqlweave.metrics.ex_metric`). Subclasses
    set ``name`` (their registry name) and extend :meth:`config` with every setting that changes
    their result, so that a checkpoint is reused only by the same compile.
    """

    name: ClassVar[str] = ""
    replays: ClassVar[bool] = False

    def __init__(
        self,
        *,
        metric: Callable[..., Any] | None = None,
        seed: int = 0,
        progress: bool = False,
    ) -> None:
        super().__init__()
        if metric is None:
            from sqlweave.metrics import ex_metric

            metric = ex_metric
        self.metric = metric
        self.seed = seed
        self.progress = progress
        self.budget: CallBudget | None = None
        self.checkpoint: Checkpoint | None = None
        self.details: dict[str, Any] = {}
        self.budget_stopped = False

    def config(self) -> dict[str, Any]:
        """The settings that identify this optimization (for checkpoint keys)."""
        return {
            "optimizer": self.name,
            "seed": self.seed,
            "metric": getattr(self.metric, "__qualname__", repr(self.metric)),
        }

    def compile(
        self,
        student: SQLProgram,
        *,
        trainset: list[dspy.Example],
        valset: list[dspy.Example] | None = None,
        **kwargs: Any,
    ) -> SQLProgram:
        """The optimized copy of ``student``."""
        raise NotImplementedError

    def budget_spent(self) -> bool:
        """Whether a budget is in force and no call is left (earlier runs may have spent it)."""
        return self.budget is not None and self.budget.remaining == 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def compile_with(
    teleprompter: Any,
    student: Any,
    trainset: list[dspy.Example],
    valset: list[dspy.Example] | None,
    **kwargs: Any,
) -> Any:
    """``teleprompter.compile(student, trainset=..., valset=...)``, leaving ``valset`` out for a
    DSPy optimizer whose ``compile`` takes none (``BootstrapFewShot``)."""
    import inspect

    try:
        params = inspect.signature(teleprompter.compile).parameters
    except (TypeError, ValueError):
        params = {}
    takes_val = "valset" in params or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
    )
    if valset is not None and takes_val:
        kwargs["valset"] = valset
    return teleprompter.compile(student, trainset=trainset, **kwargs)


def optimizers_in(teleprompter: Any) -> Iterator[Any]:
    """``teleprompter`` and every optimizer it wraps, outermost first."""
    yield teleprompter
    for inner in getattr(teleprompter, "wrapped", ()):
        yield from optimizers_in(inner)


def spec_of(teleprompter: Any) -> str:
    """The name a teleprompter answers to: its registry name, ``a+b`` for a sequence."""
    if isinstance(teleprompter, Wrapper):
        return teleprompter.spec()
    return getattr(teleprompter, "name", "") or type(teleprompter).__name__


def config_of(teleprompter: Any) -> dict[str, Any]:
    """``teleprompter.config()``, or its class name for an optimizer that is not sqlweave's."""
    config = getattr(teleprompter, "config", None)
    if callable(config):
        return config()
    return {"optimizer": type(teleprompter).__qualname__}


class _PassedDown:
    """A setting of a :class:`Wrapper` (``budget``, ``checkpoint``) that reaches every sqlweave
    optimizer it wraps: the wrapper keeps it as ``_<name>`` and sets it on each wrapped
    :class:`SQLTeleprompter` too."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.held = f"_{name}"

    def __get__(self, wrapper: Any, owner: type | None = None) -> Any:
        return self if wrapper is None else getattr(wrapper, self.held)

    def __set__(self, wrapper: Any, value: Any) -> None:
        setattr(wrapper, self.held, value)
        for inner in wrapper.wrapped:
            if isinstance(inner, SQLTeleprompter):
                setattr(inner, self.name, value)


class Wrapper(SQLTeleprompter):
    """An optimizer around others (``wrapped``): ``budget`` and ``checkpoint`` set on it reach
    every sqlweave optimizer inside; ``details`` and ``budget_stopped`` gather theirs."""

    def __init__(self, *wrapped: Any) -> None:
        self.wrapped: tuple[Any, ...] = wrapped
        self._budget: CallBudget | None = None
        self._checkpoint: Checkpoint | None = None
        self._stopped = False
        self.metric = next(
            (w.metric for w in wrapped if getattr(w, "metric", None) is not None), None
        )
        self.seed = next((w.seed for w in wrapped if hasattr(w, "seed")), 0)
        self.progress = any(getattr(w, "progress", False) for w in wrapped)

    @property
    def replays(self) -> bool:  # type: ignore[override]
        return all(getattr(w, "replays", False) for w in self.wrapped)

    budget = _PassedDown()
    checkpoint = _PassedDown()

    @property
    def details(self) -> dict[str, Any]:  # type: ignore[override]
        merged: dict[str, Any] = {}
        for inner in self.wrapped:
            merged.update(getattr(inner, "details", None) or {})
        return merged

    @details.setter
    def details(self, value: dict[str, Any]) -> None:
        pass  # a wrapper's details are those of what it wraps

    @property
    def budget_stopped(self) -> bool:  # type: ignore[override]
        return self._stopped or any(getattr(w, "budget_stopped", False) for w in self.wrapped)

    @budget_stopped.setter
    def budget_stopped(self, value: bool) -> None:
        self._stopped = value

    def spec(self) -> str:
        """The name of what this wraps (a wrapper adds no step of its own)."""
        return "+".join(spec_of(w) for w in self.wrapped)

    def config(self) -> dict[str, Any]:
        """The wrapped optimizers' settings."""
        if len(self.wrapped) == 1:
            return config_of(self.wrapped[0])
        return {"optimizer": self.spec(), "stages": [config_of(w) for w in self.wrapped]}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(repr(w) for w in self.wrapped)})"
