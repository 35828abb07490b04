"""Per-call accounting of LM usage: tokens, wall seconds and cost, from DSPy's own hooks."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import dspy
from dspy.utils.callback import BaseCallback
from dspy.utils.callback_context import ACTIVE_CALL_ID
from dspy.utils.usage_tracker import UsageTracker

from sqlweave.lm.engine import is_local


@dataclass
class CallRecord:
    """One LM call: tokens, wall seconds (lock waits included) and cost when known.

    ``cost`` is 0 for local models, DSPy's estimate for priced API models, and None when unknown
    (e.g. a self-hosted server). ``cached`` marks a DSPy cache hit, which costs no tokens.
    """

    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cost: float | None = None
    cached: bool = False
    cached_prompt_tokens: int = 0
    error: str | None = None


@dataclass
class _Pending:
    model: str
    instance: Any
    started: float
    local: bool
    usage: dict[str, Any] | None = None


class Usage(UsageTracker, BaseCallback):
    """Accumulated LM usage inside :func:`track_usage`; thread-safe.

    It is both DSPy's usage tracker (DSPy hands it each call's token usage, on the calling
    thread, except on cache hits) and a DSPy callback (start/end of every ``LM.__call__``, which
    gives the seconds). The two are joined by DSPy's active call id, so concurrent calls from
    DSPy's worker threads, or from coroutines, never mix.
    """

    def __init__(self, parent: UsageTracker | None = None) -> None:
        super().__init__()
        self._parent = parent
        self._lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}
        self.records: list[CallRecord] = []

    # DSPy usage-tracker side
    def add_usage(self, lm: str, usage_entry: dict[str, Any]) -> None:
        """Record ``usage_entry`` for the call in flight on this thread/context."""
        call_id = ACTIVE_CALL_ID.get()
        with self._lock:
            super().add_usage(lm, usage_entry)
            pending = self._pending.get(call_id) if call_id else None
            if pending is not None:
                pending.usage = usage_entry
        if self._parent is not None:
            self._parent.add_usage(lm, usage_entry)

    # DSPy callback side
    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        """Start the clock for ``call_id``."""
        pending = _Pending(
            model=getattr(instance, "model", "?"),
            instance=instance,
            started=time.perf_counter(),
            local=is_local(instance),
        )
        with self._lock:
            self._pending[call_id] = pending

    def on_lm_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
        """Close ``call_id`` into a :class:`CallRecord`."""
        with self._lock:
            pending = self._pending.pop(call_id, None)
        if pending is None:
            return
        seconds = time.perf_counter() - pending.started
        usage = pending.usage or {}
        details = usage.get("prompt_tokens_details") or {}
        record = CallRecord(
            model=pending.model,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            seconds=seconds,
            cost=0.0 if pending.local else _history_cost(pending.instance, pending.usage),
            cached=pending.usage is None and exception is None,
            cached_prompt_tokens=int(details.get("cached_tokens") or 0)
            if isinstance(details, dict)
            else 0,
            error=None if exception is None else f"{type(exception).__name__}: {exception}",
        )
        with self._lock:
            self.records.append(record)

    # summaries
    @property
    def calls(self) -> int:
        """Number of LM calls, cache hits included."""
        return len(self.records)

    @property
    def cached_calls(self) -> int:
        """Calls answered from DSPy's cache."""
        return sum(record.cached for record in self.records)

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens over all calls."""
        return sum(record.prompt_tokens for record in self.records)

    @property
    def completion_tokens(self) -> int:
        """Completion tokens over all calls."""
        return sum(record.completion_tokens for record in self.records)

    @property
    def seconds(self) -> float:
        """Wall seconds spent inside LM calls (summed, so parallel calls add up)."""
        return sum(record.seconds for record in self.records)

    @property
    def cost(self) -> float:
        """Known cost in USD; calls of unknown price count as 0 (see ``cost_known``)."""
        return sum(record.cost or 0.0 for record in self.records)

    @property
    def cost_known(self) -> bool:
        """Whether every non-cached call had a known price."""
        return all(record.cost is not None for record in self.records if not record.cached)

    def as_dict(self, *, records: bool = False) -> dict[str, Any]:
        """Totals as plain data for JSONL logs; ``records=True`` adds every call."""
        data: dict[str, Any] = {
            "calls": self.calls,
            "cached_calls": self.cached_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "seconds": round(self.seconds, 4),
            "cost": self.cost,
            "cost_known": self.cost_known,
        }
        if records:
            data["records"] = [asdict(record) for record in self.records]
        return data


def _history_cost(instance: Any, usage: dict[str, Any] | None) -> float | None:
    """DSPy's own cost estimate for this call, found by identity of its usage dict.

    DSPy writes the same usage object it gave the tracker into the LM's history entry, next to
    the cost; matching by identity is exact even when threads interleave history entries.
    """
    if usage is None:
        return None
    for entry in reversed(list(getattr(instance, "history", [])[-64:])):
        if entry.get("usage") is usage:
            cost = entry.get("cost")
            return float(cost) if isinstance(cost, (int, float)) else None
    return None


@contextmanager
def track_usage() -> Iterator[Usage]:
    """Account every LM call made inside the block (this thread and DSPy workers it starts).

    Nested blocks each see their own calls and pass usage up, as ``dspy.track_usage`` does.
    Usage: ``with track_usage() as usage: program(question=...)`` then ``usage.as_dict()``.
    """
    parent = dspy.settings.usage_tracker
    usage = Usage(parent=parent)
    callbacks = [*(dspy.settings.get("callbacks") or []), usage]
    with dspy.settings.context(usage_tracker=usage, callbacks=callbacks):
        yield usage


def prompt_tokens_per_call(
    make_program: Callable[[], Callable[..., Any]],
    examples: Iterable[Any],
    count: Callable[[str], int],
) -> list[float]:
    """The mean prompt size of a program's LM calls on each example: every call counted, no model.

    Each example (``question``, ``db_path``, ``evidence``) is asked of a fresh ``make_program()``
    under a stand-in LM that answers ``SELECT 1`` and keeps every call's messages; ``count``
    sizes a message's text (a tokenizer's token count; words for a rough look). Schema filters
    and the like run as in a real run, so this is what a real run sends. A run answered partly
    from DSPy's cache records tokens only for its cold calls: this counts them all. An example
    whose program made no call counts 0.
    """
    from dspy.utils import DummyLM

    per_question = []
    for ex in examples:
        lm = DummyLM({"": {"sql": "SELECT 1"}})
        with dspy.context(lm=lm):
            make_program()(question=ex.question, db=ex.db_path, evidence=ex.evidence or "")
        calls = [
            sum(count(str(m.get("content", ""))) for m in call.get("messages") or [])
            for call in lm.history
        ]
        per_question.append(statistics.mean(calls) if calls else 0.0)
    return per_question
