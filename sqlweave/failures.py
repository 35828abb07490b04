"""Failures of the run, not of the question: a model endpoint that cannot answer at all.

Four rules:

1. An LM error that no question can avoid ends the run: the connection refused or reset, the
   key or the account refused, a model the server does not know, a client left unconfigured, and
   timeouts, server errors and rate limits that outlast DSPy's own retries (``num_retries``
   tries with exponential backoff, 1 s, 2 s, 4 s ...). :func:`run_failure_kind` names them.
2. Anything else a program raises (a prompt over the context window, a reply that cannot be
   parsed, a bug) is the failure of one question: recorded as a miss with its error.
3. A run failure must cross every ``except Exception`` between the LM call and the top of the
   run (DSPy's bootstrap loop counts errors and carries on; the optimizers score a failing
   trial as a miss). So inside :func:`endpoint_guard` a DSPy callback replaces it, at the end of
   the failed call, by :class:`EndpointDown`, a ``BaseException`` as the budget's refusal is;
   the outermost guard turns it back into :class:`LMUnavailableError`, an ordinary
   :class:`~sqlweave.errors.SqlweaveError` that names the endpoint.
4. Nothing that met a run failure is recorded as finished: not a JSONL record, not a checkpoint
   unit, not a spent call of a budget; a resumed run asks again.

:func:`as_program_error` is the one door from "the program raised" to a sqlweave error, used
alike by :func:`sqlweave.api.ask` and the command line.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dspy
from dspy.utils.callback import BaseCallback
from dspy.utils.exceptions import (
    LMAuthError,
    LMBillingError,
    LMConfigurationError,
    LMError,
    LMLockTimeoutError,
    LMRateLimitError,
    LMServerError,
    LMTimeoutError,
    LMTransportError,
    LMUnexpectedError,
    LMUnsupportedModelError,
)

from sqlweave.errors import SqlweaveError

logger = logging.getLogger(__name__)

#: DSPy's LM errors that end a run, most specific first, with what they say about the endpoint.
RUN_FAILURES: tuple[tuple[type[LMError], str], ...] = (
    (LMTransportError, "is unreachable"),
    (LMAuthError, "refused the credentials"),
    (LMBillingError, "refused the account (billing or quota)"),
    (LMUnsupportedModelError, "does not serve the model"),
    (LMTimeoutError, "timed out"),
    (LMRateLimitError, "kept rate-limiting"),
    (LMServerError, "kept failing (server errors)"),
    (LMLockTimeoutError, "could not take its credential lock"),
    (LMConfigurationError, "is not configured"),
)
#: HTTP statuses of a provider error that no other request would escape.
RUN_FAILURE_STATUSES = {401: "refused the credentials", 403: "refused the credentials",
                        404: "does not serve the model"}  # fmt: skip
#: Client errors by class name, for LM clients whose errors DSPy has not projected (LiteLLM,
#: openai, httpx) and Python's own socket errors under a custom engine.
RUN_FAILURE_NAMES = {
    "APIConnectionError": "is unreachable",
    "ConnectError": "is unreachable",
    "ConnectionError": "is unreachable",
    "ConnectionRefusedError": "is unreachable",
    "ConnectionResetError": "is unreachable",
    "ConnectionAbortedError": "is unreachable",
    "AuthenticationError": "refused the credentials",
    "PermissionDeniedError": "refused the credentials",
    "NotFoundError": "does not serve the model",
    "Timeout": "timed out",
    "APITimeoutError": "timed out",
    "ConnectTimeout": "timed out",
    "ServiceUnavailableError": "kept failing (server errors)",
    "InternalServerError": "kept failing (server errors)",
    "ModelNotFoundError": "does not serve the model",
}


#: Where those classes come from: a program's own ``NotFoundError`` is not the endpoint's.
CLIENTS = frozenset({"litellm", "openai", "httpx", "httpcore", "requests", "urllib3", "builtins"})


def run_failure_kind(error: BaseException | None) -> str | None:
    """What ``error`` says about the endpoint when it ends the run (rule 1), else None.

    Only an error of the LM client counts: DSPy's ``LMError`` (and, for one that DSPy could not
    classify, such as a custom engine's socket error wrapped as ``LMUnexpectedError``, what it
    wraps), or a LiteLLM/openai/httpx exception raised past DSPy. A context overflow or an
    unparsable reply never does, nor a socket error of a database the program reads.
    """
    if isinstance(error, EndpointDown | LMUnavailableError):
        return error.kind
    if isinstance(error, LMError):
        if isinstance(error, LMTransportError) and "timed out" in str(error).lower():
            return "timed out"  # a read timeout travels as a transport error
        for cls, kind in RUN_FAILURES:
            if isinstance(error, cls):
                return kind
        status = getattr(error, "status", None)
        if status in RUN_FAILURE_STATUSES:
            return RUN_FAILURE_STATUSES[status]
        if isinstance(error, LMUnexpectedError):
            return _client_kind(error.__cause__, with_builtins=True)
        return None
    return _client_kind(error, with_builtins=False)


def _client_kind(error: BaseException | None, *, with_builtins: bool) -> str | None:
    """The kind of a client exception by class name, looking down its causes."""
    modules = CLIENTS if with_builtins else CLIENTS - {"builtins"}
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, SqlweaveError):
            return None  # sqlweave's own error (a database, a file): not the LM's
        for cls in type(error).__mro__:
            if cls.__name__ in RUN_FAILURE_NAMES and cls.__module__.split(".")[0] in modules:
                return RUN_FAILURE_NAMES[cls.__name__]
        error = error.__cause__ or error.__context__
    return None


def endpoint_of(lm: Any) -> str:
    """Where ``lm`` sends its calls: ``api_base`` and the model (``http://host:port (openai/x)``),
    or the model alone for a provider's default endpoint or a local model."""
    model = str(getattr(lm, "model", "") or "") or type(lm).__name__
    kwargs = getattr(lm, "kwargs", None) or {}
    base = kwargs.get("api_base") or kwargs.get("base_url") or getattr(lm, "api_base", None)
    return f"{base} ({model})" if base else model


def _tries(lm: Any, error: BaseException | None) -> int:
    """How many times the failed call was sent: DSPy retries the transient failures."""
    from dspy.utils.exceptions import is_retryable_lm_error

    retries = getattr(lm, "num_retries", 0)
    transient = isinstance(error, Exception) and is_retryable_lm_error(error)
    return 1 + retries if transient and isinstance(retries, int) else 1


def _first_line(text: str, limit: int = 300) -> str:
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


class LMUnavailableError(SqlweaveError, RuntimeError):
    """The model endpoint failed the run: ``endpoint`` ``kind`` (unreachable, refused the
    credentials...) after ``tries`` tries; ``error`` is the LM client's own exception."""

    def __init__(self, endpoint: str, kind: str, error: BaseException | None, tries: int = 1):
        after = f" after {tries} tries" if tries > 1 else ""
        detail = f": {type(error).__name__}: {_first_line(str(error))}" if error else ""
        super().__init__(f"the model endpoint {endpoint} {kind}{after}{detail}")
        self.endpoint = endpoint
        self.kind = kind
        self.tries = tries
        self.error = error


class ProgramError(SqlweaveError, RuntimeError):
    """A program raised while answering (the LM or the program itself); ``error`` is what it
    raised. The message is the line the command line prints."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"the program failed: {type(error).__name__}: {_first_line(str(error))}")
        self.error = error


class EndpointDown(BaseException):  # noqa: N818 - a control-flow signal, like the budget's
    """Raised in place of an LM error that ends the run, so that no ``except Exception`` on the
    way up treats it as one question's miss (rule 3). Carries the public error."""

    def __init__(self, error: LMUnavailableError) -> None:
        super().__init__(str(error))
        self.error = error

    @property
    def kind(self) -> str:
        return self.error.kind


def as_program_error(error: BaseException) -> SqlweaveError:
    """The sqlweave error for anything a program raised: a sqlweave error stays itself, a run
    failure becomes :class:`LMUnavailableError`, anything else :class:`ProgramError`."""
    if isinstance(error, EndpointDown):
        return error.error
    if isinstance(error, SqlweaveError):
        return error
    kind = run_failure_kind(error)
    if kind is not None:
        lm = dspy.settings.lm
        return LMUnavailableError(endpoint_of(lm) if lm is not None else "?", kind, error)
    return ProgramError(error)


class _Guard(BaseCallback):
    """Turns a run failure at the end of an LM call into :class:`EndpointDown` (rule 3)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._calls: dict[str, Any] = {}

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        with self._lock:
            self._calls[call_id] = instance

    def on_lm_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
        with self._lock:
            lm = self._calls.pop(call_id, None)
        if exception is None or isinstance(exception, EndpointDown):
            return
        kind = run_failure_kind(exception)
        if kind is None:
            return
        error = LMUnavailableError(endpoint_of(lm), kind, exception, _tries(lm, exception))
        logger.info("%s", error)
        raise EndpointDown(error) from exception


_GUARDED: contextvars.ContextVar[bool] = contextvars.ContextVar("sqlweave_guarded", default=False)


def is_guard(callback: Any) -> bool:
    """Whether ``callback`` is the guard's (callbacks added later go before it: once it raises,
    DSPy calls no other end handler of that call)."""
    return isinstance(callback, _Guard)


@contextmanager
def endpoint_guard() -> Iterator[None]:
    """Stop the work inside at the first run failure of an LM call (rules 3 and 4).

    Inside, such a failure travels as :class:`EndpointDown`; the outermost guard raises it as
    :class:`LMUnavailableError`. Nested guards add nothing.
    """
    if _GUARDED.get():
        yield
        return
    token = _GUARDED.set(True)
    try:
        callbacks = [*(dspy.settings.get("callbacks") or []), _Guard()]
        with dspy.settings.context(callbacks=callbacks):
            yield
    except EndpointDown as down:
        raise down.error from down.error.error
    finally:
        _GUARDED.reset(token)


def is_run_failure_record(record: dict[str, Any]) -> bool:
    """Whether an evaluation record holds a run failure as its answer (written by a sqlweave
    from before rule 4): ``error_kind`` ``program`` with the error of a run-failure class."""
    if record.get("error_kind") != "program":
        return False
    name = str(record.get("error") or "").split(":", 1)[0].strip()
    return name in _RUN_FAILURE_CLASS_NAMES


_RUN_FAILURE_CLASS_NAMES = frozenset(
    {cls.__name__ for cls, _ in RUN_FAILURES}
    | {"LMNotConfiguredError", "LMUnavailableError"}
    # Python's own socket errors only count inside an LM error; alone they may be a database's.
    | (
        {*RUN_FAILURE_NAMES}
        - {
            "ConnectionError",
            "ConnectionRefusedError",
            "ConnectionResetError",
            "ConnectionAbortedError",
        }
    )
)


def raise_if_run_failure(error: BaseException) -> None:
    """Re-raise ``error`` as :class:`EndpointDown` when it ends the run (for code that catches
    ``Exception`` around a program: a run failure is not the question's)."""
    if isinstance(error, EndpointDown):
        raise error
    if run_failure_kind(error) is None:
        return
    public = as_program_error(error)
    assert isinstance(public, LMUnavailableError)
    raise EndpointDown(public) from error


__all__ = [
    "EndpointDown",
    "LMUnavailableError",
    "ProgramError",
    "as_program_error",
    "endpoint_guard",
    "endpoint_of",
    "is_guard",
    "is_run_failure_record",
    "raise_if_run_failure",
    "run_failure_kind",
]
