"""What LM to run: model spec strings, and the local engine's settings read from the environment.

Model specs are strings so that a compiled artefact can record which LM it was compiled with and
rebuild it later (``build_lm(spec_of(lm))``):

- ``local:NAME``  a model from :data:`sqlweave.models.REGISTRY`, fetched on first use;
- ``gguf:PATH``   any GGUF file on disk;
- anything else   a LiteLLM model string handed to ``dspy.LM`` (``openai/<model>`` with
                  ``api_base=`` for an OpenAI-compatible server such as vLLM or llama-server).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from sqlweave import models
from sqlweave.errors import SqlweaveError

DEFAULT_MODEL = "local:qwen2.5-coder-1.5b"
"""The default LM spec: the 1.5B coder model, run locally."""

SMALL_MODEL = "local:qwen2.5-coder-0.5b"
"""The small local model CI uses."""

DEFAULT_N_CTX = 8192
"""Context window for local models: a Spider/BIRD schema plus demos fits; Qwen2.5 allows 32k."""

SpecKind = Literal["local", "gguf", "litellm"]


class LMSpecError(SqlweaveError, ValueError):
    """A model spec string that cannot be understood."""


@dataclass(frozen=True)
class LMSpec:
    """A parsed model spec; ``str(spec)`` gives back the string it was parsed from."""

    kind: SpecKind
    target: str

    @classmethod
    def parse(cls, spec: str) -> LMSpec:
        """Parse ``local:NAME``, ``gguf:PATH`` or a LiteLLM model string."""
        if not isinstance(spec, str) or not spec.strip():
            raise LMSpecError("a model spec must be a non-empty string")
        spec = spec.strip()
        prefix, sep, rest = spec.partition(":")
        if sep and prefix == "local":
            if rest not in models.REGISTRY:
                known = ", ".join(f"local:{name}" for name in sorted(models.REGISTRY))
                raise LMSpecError(f"unknown local model {rest!r}; known: {known}, or use gguf:PATH")
            return cls("local", rest)
        if sep and prefix == "gguf":
            if not rest:
                raise LMSpecError("gguf: needs a path, e.g. gguf:/models/model.gguf")
            return cls("gguf", rest)
        return cls("litellm", spec)

    def __str__(self) -> str:
        return self.target if self.kind == "litellm" else f"{self.kind}:{self.target}"

    @property
    def is_local(self) -> bool:
        """Whether the model runs in this process (no server, no cost)."""
        return self.kind in ("local", "gguf")


THREADS_ENV = "SQLWEAVE_N_THREADS"


def default_threads() -> int:
    """llama.cpp threads when none are given: ``$SQLWEAVE_N_THREADS`` (read at call time), else
    every core but one (at least one).

    llama.cpp's threads meet at a barrier after every layer, so one thread that loses its core to
    another busy process stalls all of them: with as many threads as cores, one competing process
    cut throughput about tenfold on a 2-core machine (issue 15), while with one core left free
    the same job kept its pace. The cost when the machine is idle is the last core's share.
    """
    raw = os.environ.get(THREADS_ENV, "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise LMSpecError(f"{THREADS_ENV} must be a positive integer, not {raw!r}") from None
        if value < 1:
            raise LMSpecError(f"{THREADS_ENV} must be a positive integer, not {raw!r}")
        return value
    return max(1, (os.cpu_count() or 1) - 1)


LOOKUP_ENV = "SQLWEAVE_PROMPT_LOOKUP"


def check_lookup(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LMSpecError(f"{where} must be a number of draft tokens (0 = off), not {value!r}")
    return value


def default_prompt_lookup() -> int:
    """Draft tokens of prompt-lookup decoding when none are given: ``$SQLWEAVE_PROMPT_LOOKUP``
    (read at call time), else 0 (off).

    Off by default until ``experiments/bench_lm.py`` shows it pays on the default model: each
    decode step then evaluates the draft too, which on a CPU costs more than one token unless
    most drafted tokens are kept.
    """
    raw = os.environ.get(LOOKUP_ENV, "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise LMSpecError(f"{LOOKUP_ENV} must be a number of draft tokens, not {raw!r}") from None
    return check_lookup(value, LOOKUP_ENV)


def spec_of(lm: Any) -> str:
    """The spec string that rebuilds ``lm`` with :func:`~sqlweave.lm.build_lm` (its model string)."""
    return str(LMSpec.parse(lm.model))
