"""A hard cap on the LM calls an optimizer may make, and a record of the calls it did make.

Optimizers such as BootstrapFewShot, random search or MIPROv2 decide for themselves how many
programs to run; on a 2-core CPU, or against a paid API, a compile must be able to stop at a
known cost. :class:`CallBudget` is a DSPy callback that counts every ``LM.__call__`` (cache hits
included, so a resumed compile stops at exactly the same point as an uninterrupted one) and, when
the cap is reached, refuses the next call by raising :class:`BudgetExhausted` *before* the call is
sent (a call that a dead endpoint fails is given back: it did no work, see
:mod:`sqlweave.failures`). That exception derives from ``BaseException`` on purpose: DSPy's optimizers catch
``Exception`` around every example and would otherwise swallow it and carry on. Each sqlweave
optimizer catches it and keeps the best result found so far.

:class:`Budgeted` applies a budget to any optimizer, sqlweave's or DSPy's: it enforces the cap
around ``compile``, hands the :class:`CallBudget` to the optimizers inside (so they can plan with
``remaining``), and where an optimizer lets the refusal escape, returns the student unchanged.

The cap holds across resumes: a budget starts from the calls an earlier, interrupted run of the
same compile already made (``used``, read from its checkpoint) and reports each new count through
``on_count`` *before* the call is sent, so a process killed at any point has already saved every
call it made. A resumed compile therefore never exceeds the budget in total; the price is that the
unit of work in flight when it died is redone and its calls count again, even when DSPy's cache
answers them for free.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import dspy
from dspy.utils.callback import BaseCallback

from sqlweave.failures import endpoint_guard, is_guard, run_failure_kind
from sqlweave.optimizers.base import Wrapper, compile_with

if TYPE_CHECKING:
    from sqlweave.programs import SQLProgram

logger = logging.getLogger(__name__)


class BudgetExhausted(BaseException):  # noqa: N818 - a control-flow signal, like StopIteration
    """Raised in place of the LM call that would exceed the budget."""

    def __init__(self, max_calls: int) -> None:
        super().__init__(f"LM call budget of {max_calls} calls exhausted")
        self.max_calls = max_calls


class CallBudget(BaseCallback):
    """Counts LM calls; with ``max_calls`` set, refuses the call that would exceed it.

    ``max_calls=None`` only counts. ``used`` is the calls already made by earlier runs of the same
    work (they count against the cap; ``calls`` is the total, ``new_calls`` this run's share).
    ``on_count(calls)`` is called with the new total before each call goes out, to persist it.
    Thread-safe, though the compile loop runs optimizers with one thread so that the refusal
    reaches it directly instead of dying in a worker.
    """

    def __init__(
        self,
        max_calls: int | None = None,
        *,
        used: int = 0,
        on_count: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__()
        if max_calls is not None and max_calls < 0:
            raise ValueError("a budget must be a non-negative number of LM calls")
        if used < 0:
            raise ValueError("calls already used must be a non-negative number")
        self.max_calls = max_calls
        self.used = used
        self.calls = used
        self.exhausted = False
        self.on_count = on_count
        self._lock = threading.Lock()

    @property
    def new_calls(self) -> int:
        """Calls made through this budget object (not by the runs it resumes)."""
        return self.calls - self.used

    @property
    def remaining(self) -> int | None:
        """Calls still allowed, or None without a cap."""
        return None if self.max_calls is None else max(0, self.max_calls - self.calls)

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        """Count the call, or refuse it when the budget is spent."""
        with self._lock:
            if self.max_calls is not None and self.calls >= self.max_calls:
                self.exhausted = True
                logger.info("LM budget of %d calls reached; stopping the optimizer", self.max_calls)
                raise BudgetExhausted(self.max_calls)
            self.calls += 1
            if self.on_count is not None:
                self.on_count(self.calls)

    def on_lm_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
        """Give back a call that a dead endpoint failed: it did no work, and the resumed run
        that makes it again must not find it spent (:mod:`sqlweave.failures`, rule 4)."""
        if exception is None or run_failure_kind(exception) is None:
            return
        with self._lock:
            self.calls = max(self.used, self.calls - 1)
            if self.on_count is not None:
                self.on_count(self.calls)


@contextmanager
def enforce(budget: CallBudget) -> Iterator[CallBudget]:
    """Apply ``budget`` to every LM call made inside the block (DSPy's callback mechanism).

    The budget goes before an endpoint guard already in force, so that it sees the end of a call
    the guard turns into a stop (DSPy calls no end handler after one that raises)."""
    current = list(dspy.settings.get("callbacks") or [])
    at = next((i for i, c in enumerate(current) if is_guard(c)), len(current))
    callbacks = [*current[:at], budget, *current[at:]]
    with dspy.settings.context(callbacks=callbacks):
        yield budget


class Budgeted(Wrapper):
    """``inner`` under a cap of ``max_calls`` LM calls (None: count only).

    With a checkpoint set from outside (:class:`~sqlweave.optimizers.checkpoint.Checkpointed`
    around this), the calls of earlier runs count against the cap and each new count is saved
    before its call goes out. ``cap`` is the :class:`CallBudget` of the last compile.
    """

    def __init__(self, inner: Any, max_calls: int | None = None) -> None:
        super().__init__(inner)
        if max_calls is not None and max_calls < 0:
            raise ValueError("a budget must be a non-negative number of LM calls")
        self.max_calls = max_calls
        self.cap: CallBudget | None = None

    def compile(
        self,
        student: SQLProgram,
        *,
        trainset: list[dspy.Example],
        valset: list[dspy.Example] | None = None,
        **kwargs: Any,
    ) -> SQLProgram:
        """Compile ``inner`` under the cap; the student unchanged if the refusal escapes it."""
        (inner,) = self.wrapped
        ckpt = self.checkpoint
        cap = (
            CallBudget(self.max_calls, used=ckpt.calls, on_count=ckpt.record_calls)
            if ckpt is not None
            else CallBudget(self.max_calls)
        )
        if cap.used:
            logger.info("%d LM calls were made by earlier runs of this compile", cap.used)
        self.cap = cap
        self.budget = cap
        self.budget_stopped = False
        # The guard inside the budget: a dead endpoint stops the compile (LMUnavailableError)
        # after the budget has given back the failed call.
        with enforce(cap), endpoint_guard():
            if cap.remaining == 0 and not getattr(inner, "replays", False):
                # Spent by earlier runs, and nothing to replay: no call would be allowed.
                self.budget_stopped = True
                return student.reset_copy()
            try:
                return compile_with(inner, student, trainset, valset, **kwargs)
            except BudgetExhausted:
                self.budget_stopped = True
                return student.reset_copy()
