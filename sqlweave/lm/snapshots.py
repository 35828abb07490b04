"""KV snapshots of sampled prompts, so the samples of one prompt evaluate it once.

llama.cpp reuses only the previous call's KV cache; :class:`PromptStates` keeps the state right
after a sampled prompt was evaluated and :class:`~sqlweave.lm.decoding.DecodingLlama` restores
it when another call came between two samples.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_PROMPT_CACHE_BYTES = 1024 * 2**20
"""RAM for KV snapshots of sampled prompts (about 28 KB per token for the 1.5B model): room for
every prompt the ``ensemble``'s five generators send on one database. On spider's 11-table
``store_1`` those prompts are 812 + 2,667 + 2,881 + 273 + 1,629 = 8,262 tokens (~230 MB), within
a few percent of the former 256 MiB, so a longer question or a bigger schema evicted a prompt the
next question needed. Seen on the 1.5B model, five generators x 4 candidates on ``store_1``
(spider-train-val, one run resumed across the change, not a controlled comparison): 100-370 s
per question at 256 MiB; at 1 GiB two cold questions, then 9-45 s (median ~27)."""

RESTORE_MIN_GAIN = 16
"""A snapshot is restored only when it covers this many more prompt tokens than the live KV
cache: copying a state back costs about as much as evaluating a few tokens."""


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    m = min(len(a), len(b))
    if not m:
        return 0
    differ = np.flatnonzero(np.asarray(a[:m]) != np.asarray(b[:m]))
    return int(differ[0]) if differ.size else m


@dataclass
class PromptState:
    """The llama.cpp context state right after ``tokens`` were evaluated (``nbytes`` of
    ``state``)."""

    tokens: Any
    state: Any
    nbytes: int


class PromptStates:
    """KV snapshots of evaluated prompts, the least recently used dropped first past
    ``capacity_bytes``.

    llama.cpp reuses only the previous call's KV cache, so a call in between (another question
    on an evaluation thread, a second stage of a multi-call program) makes the next sample of a
    prompt evaluate it again. A snapshot taken right after the prompt was evaluated is restored
    instead. Not thread-safe: it lives in one loaded model, used under that model's lock.
    """

    def __init__(self, capacity_bytes: int = 0) -> None:
        self.capacity_bytes = capacity_bytes
        self._states: OrderedDict[bytes, PromptState] = OrderedDict()

    def __len__(self) -> int:
        return len(self._states)

    @property
    def nbytes(self) -> int:
        """Bytes held by every snapshot."""
        return sum(state.nbytes for state in self._states.values())

    @staticmethod
    def _key(tokens: Sequence[int]) -> bytes:
        return np.asarray(tokens, dtype=np.int64).tobytes()

    def holds(self, tokens: Sequence[int]) -> bool:
        """Whether a snapshot of exactly ``tokens`` is kept."""
        return self._key(tokens) in self._states

    def best(self, tokens: Sequence[int]) -> tuple[PromptState | None, int]:
        """The snapshot sharing the longest prefix with ``tokens``, and that prefix's length."""
        best: PromptState | None = None
        shared = 0
        for state in self._states.values():
            length = common_prefix(state.tokens, tokens)
            if length > shared:
                best, shared = state, length
        if best is not None:
            self._states.move_to_end(self._key(best.tokens))
        return best, shared

    def add(self, tokens: Sequence[int], state: Any, nbytes: int) -> bool:
        """Keep a snapshot (dropping the oldest to make room); False when it cannot fit."""
        if nbytes > self.capacity_bytes:
            return False
        key = self._key(tokens)
        self._states.pop(key, None)
        self._states[key] = PromptState(np.array(tokens, dtype=np.intc), state, nbytes)
        self.shrink()
        return True

    def shrink(self) -> None:
        """Drop the oldest snapshots until the rest fit ``capacity_bytes``."""
        while self._states and self.nbytes > self.capacity_bytes:
            self._states.popitem(last=False)

    def clear(self) -> None:
        """Forget every snapshot."""
        self._states.clear()
