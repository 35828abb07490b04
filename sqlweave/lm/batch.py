"""Sample batches: the sampled calls of one prompt decoded together, and when they may stop.

Inside :func:`batched_samples` (self-consistency's sampled rollouts), the first sampled call of
a prompt decodes k continuations of it together, one llama.cpp batch per step with one token per
sequence; the calls after it that ask for the same prompt and settings are answered from those.
A block opened with ``greedy=True`` lets its first call be the greedy one: it decodes as one
more sequence of the same batch, beside the k samples. The block is the local engine's only
side channel; :class:`sqlweave.programs.stages.sampling.Sampler` is the one caller that opens it.

:class:`EarlyStop` is the typed contract between that caller and the engine for ending a batch
early: the caller judges *candidates*, the parser of the calls' output says how a call's answer
becomes one, and the engine only says what each call would answer.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from dspy.lm15 import Response

logger = logging.getLogger(__name__)


class CandidateJudge(Protocol):
    """Whether the candidates a batch has produced so far are enough for the caller.

    Called with one entry per sequence of the batch, in this order: first the call that made
    the batch (the greedy call hosting it, or the first sample), then the other samples in the
    order the next calls will take them. An entry is that sequence's candidate once it has
    finished, or None while it is still decoding (or after it was given up for lack of KV cells).

    Returns True when the candidates so far settle the caller's question; the engine then gives
    up the sequences after the first that are still decoding and keeps the finished ones in the
    same order, so the next calls take them with the unfinished ones closed up. False or None:
    decode on. The batch may hold more samples than the caller will still take (some of its
    calls were answered elsewhere, e.g. by DSPy's cache, which the engine never sees): the judge
    trims the entries to the calls it has left; the engine does not know how many those are.
    """

    def __call__(self, candidates: Sequence[str | None], /) -> bool | None: ...


@dataclass(frozen=True)
class EarlyStop:
    """How a batch of samples may end early: ``judge`` (:class:`CandidateJudge`) rules on
    candidates, and ``candidate_of`` turns what a call answers with (the whole assistant message,
    a prefilled start included) into the candidate the caller will take from that call.

    ``candidate_of`` comes from whoever parses the calls' output (a generator under sqlweave's
    adapter, :meth:`sqlweave.programs.base.Generator.candidate_reader`), never from the engine:
    the engine knows text, not candidates. A caller whose candidates the answer text alone does
    not decide passes no ``EarlyStop`` and checks its candidates as they come back instead.
    """

    judge: CandidateJudge
    candidate_of: Callable[[str], str]

    def settled(self, answers: Sequence[str | None]) -> bool:
        """The judge's verdict on the batch's answers (one per sequence, None while decoding),
        each read as a candidate first."""
        candidates = [None if text is None else self.candidate_of(text) for text in answers]
        return bool(self.judge(candidates))


class SampleBatch:
    """What a :func:`batched_samples` block holds: how many samples to decode together, and
    the samples decoded ahead for the calls still to come.

    The first sampled call the local engine receives in the block (at ``temperature``, when
    given) decodes ``k`` continuations of its prompt together and answers with the first; the
    others wait here under the call's prompt and settings (its seed left out: rollouts vary
    it) until calls asking the same take them. A block makes one batch: a sampled call on
    another prompt, or one after the stash ran dry, runs as usual. Thread-safe.

    With ``greedy`` the block's first call may instead be a greedy one (temperature 0): it
    then decodes as one more sequence beside the ``k`` samples, answers with the greedy
    completion, and all ``k`` samples wait for the calls that follow with the same prompt and
    settings at ``temperature``.

    ``early_stop`` (:class:`EarlyStop`), when given, lets the caller end the batch once the
    candidates decoded so far answer its question: the sequences still decoding are then given
    up (never stashed) and the finished samples wait in sequence order, so a caller that stops
    asking once its candidates suffice never pays for the rest. Self-consistency uses it to stop
    once its vote is decided (:class:`sqlweave.programs.stages.sampling.Sampler`). A sample given up and
    asked for all the same is decoded by an ordinary call.
    """

    def __init__(
        self,
        k: int,
        temperature: float | None = None,
        greedy: bool = False,
        early_stop: EarlyStop | None = None,
    ) -> None:
        if greedy and (temperature is None or temperature <= 0):
            raise ValueError("a block hosting its greedy call needs the samples' temperature > 0")
        self.k = k
        self.temperature = None if temperature is None else float(temperature)
        self.greedy = greedy
        self.early_stop = early_stop
        #: The rollout index of the next call (set by the Sampler before each rollout): the
        #: call that makes the batch seeds its sequences from it (``arm_batch(seed_offset=)``).
        self.rollout = 0
        self.cancelled = 0
        self.spent = False
        self.decoded = 0
        self.served = 0
        self._stash: dict[tuple[Any, ...], list[Response]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Samples waiting to be taken."""
        with self._lock:
            return sum(len(responses) for responses in self._stash.values())

    def wants(self, temperature: float) -> bool:
        """Whether a call at ``temperature`` is one of the block's samples."""
        if temperature <= 0:
            return False
        return self.temperature is None or temperature == self.temperature

    def hosts(self, temperature: float) -> bool:
        """Whether a call at ``temperature`` is the greedy call that may decode the samples
        beside its own answer (a ``greedy`` block whose batch is not made yet)."""
        return self.greedy and temperature <= 0 and not self.spent

    @staticmethod
    def key(model: Any, messages: list[dict[str, str]], options: dict[str, Any]) -> tuple:
        """The stash key of a call: the loaded model, the messages its prompt is rendered from,
        and its settings but the seed."""
        settings = sorted((name, repr(value)) for name, value in options.items() if name != "seed")
        return (model, repr(messages), tuple(settings))

    def take(self, key: tuple[Any, ...]) -> Response | None:
        """A waiting sample for ``key``, or None."""
        with self._lock:
            waiting = self._stash.get(key)
            if not waiting:
                return None
            self.served += 1
            response = waiting.pop(0)
            if not waiting:
                del self._stash[key]
            return response

    def claim(self) -> bool:
        """True once: the call that makes the block's batch."""
        with self._lock:
            if self.spent:
                return False
            self.spent = True
            return True

    def put(self, key: tuple[Any, ...], responses: list[Response], *, caller: bool = True) -> None:
        """Keep ``responses`` for the next calls on ``key`` (``caller``: the call that made the
        batch took one more sample; a hosting greedy call took none)."""
        with self._lock:
            self.decoded += len(responses) + int(caller)
            self._stash.setdefault(key, []).extend(responses)

    def gave_up(self, n: int) -> None:
        """Count ``n`` samples the batch stopped decoding once ``early_stop`` said so."""
        with self._lock:
            self.cancelled += n

    def clear(self) -> None:
        """Drop the samples nobody took."""
        with self._lock:
            self._stash.clear()


_SAMPLE_BATCH: contextvars.ContextVar[SampleBatch | None] = contextvars.ContextVar(
    "sqlweave_sample_batch", default=None
)


@contextmanager
def batched_samples(
    k: int,
    *,
    temperature: float | None = None,
    greedy: bool = False,
    early_stop: EarlyStop | None = None,
) -> Iterator[SampleBatch | None]:
    """Decode the next ``k`` sampled calls on one prompt together (local models only).

    Self-consistency asks the same prompt for several samples; one at a time, each costs a
    full decode. One llama.cpp batch holding one token of each of k sequences reads the
    weights once; where decoding is memory-bound that costs little more than one token, on a
    2-vCPU machine (compute-bound) about 1.5x less than k separate steps (docs/lm.md). Inside
    the block, the first sampled (temperature > 0; ``temperature`` only, when given) call the
    local engine receives decodes ``min(k, n_seq_max)`` continuations of its prompt that way
    and the next calls with the same messages and settings (the seed may differ) are answered
    from them; samples nobody asked for are dropped when the block ends (a DSPy cache hit
    never reaches the engine). Greedy calls, served models and calls outside a block are not
    affected. ``k < 2`` makes the block a no-op (yields None).

    ``greedy=True`` (``temperature`` required) is for a greedy answer and its samples, as
    self-consistency asks them: the block's first call, when it is greedy (temperature 0),
    decodes its answer as one more sequence of the batch, sharing rows with the samples while
    they agree, so the greedy answer costs no decode of its own; the k samples then answer the
    calls that follow with the same messages and settings at ``temperature``. The greedy answer
    is that of an ordinary greedy call except where the batch's floating-point sums tip a
    near-tie. Such a block is worth making for one sample too (``k >= 1``).

    ``early_stop`` lets the caller end the batch once its candidates suffice (:class:`EarlyStop`).
    """
    if k < (1 if greedy else 2):
        yield None
        return
    batch = SampleBatch(k, temperature, greedy, early_stop)
    token = _SAMPLE_BATCH.set(batch)
    try:
        yield batch
    finally:
        _SAMPLE_BATCH.reset(token)
        batch.clear()


_KEEP_PROMPTS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "sqlweave_keep_prompts", default=False
)


@contextmanager
def kept_prompts() -> Iterator[None]:
    """Keep the evaluated prompt of every local call in this block, greedy ones too.

    A sampled call keeps its prompt (its samples follow); a lone greedy call does not, since no
    call on its prompt usually follows. A cascade breaks that: ``ensemble`` asks each prompt
    greedily first and draws its samples only after the other prompts, when the live KV cache
    holds another prompt; kept, the first prompt is restored, not evaluated again."""
    token = _KEEP_PROMPTS.set(True)
    try:
        yield
    finally:
        _KEEP_PROMPTS.reset(token)


def prompts_kept() -> bool:
    """Whether a :func:`kept_prompts` block is open in this context."""
    return _KEEP_PROMPTS.get()


def current_batch() -> SampleBatch | None:
    """The innermost :func:`batched_samples` block open in this context, if any."""
    return _SAMPLE_BATCH.get()
