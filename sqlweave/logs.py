"""Logging for the command line: quiet by default, details with ``--verbose``.

Third-party libraries log on their own terms: bm25s sets its logger to DEBUG (13 lines of
``Building index from tokens`` between the progress bars of one compile), DSPy installs its own
handler at INFO, and DSPy's bootstrap logs each failed example at ERROR with the whole example,
schema included (~1,900 characters a line). A handler's level, not the root logger's, is what
stops a record from a logger with its own level, so :func:`setup` puts the level on the handlers
and caps the known talkers. A person reads one line per message: without ``--verbose`` a message
is cut to its first line.
"""

from __future__ import annotations

import logging

__all__ = ["QUIET", "NORMAL", "VERBOSE", "setup"]

QUIET, NORMAL, VERBOSE = -1, 0, 1

#: Libraries whose INFO and DEBUG lines are details: shown only with ``--verbose``.
THIRD_PARTY = (
    "bm25s",
    "sentence_transformers",
    "transformers",
    "huggingface_hub",
    "httpx",
    "LiteLLM",
    "litellm",
    "optuna",
    "urllib3",
    "dspy",
)

#: DSPy's per-example bootstrap failures: counted by the compile's own report, so a person sees
#: them only with ``--verbose``.
DETAIL_LOGGERS = ("dspy.teleprompt.bootstrap",)

_FORMAT = "%(levelname)s %(name)s: %(message)s"
_VERBOSE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class FirstLine(logging.Filter):
    """Cut a record's message to its first line and ``limit`` characters (a schema in an error
    message is for ``--verbose``)."""

    def __init__(self, limit: int = 240) -> None:
        super().__init__()
        self.limit = limit

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        line = (message.strip().splitlines() or [""])[0]
        if len(line) > self.limit:
            line = line[: self.limit - 1] + "…"
        if line != message:
            record.msg, record.args = line, None
            record.exc_info = record.exc_text = None
        return True


def setup(verbosity: int = NORMAL) -> None:
    """Configure logging for one CLI run: ``QUIET`` errors only, ``NORMAL`` warnings in one line
    each, ``VERBOSE`` everything at INFO with timestamps, full messages included.

    Safe to call again (a command calling another): the handler is replaced, not added twice.
    """
    level = {QUIET: logging.ERROR, NORMAL: logging.WARNING}.get(verbosity, logging.INFO)
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "name", None) == "sqlweave"]:
        root.removeHandler(handler)
    handler = logging.StreamHandler()
    handler.set_name("sqlweave")
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter(_VERBOSE_FORMAT if verbosity >= VERBOSE else _FORMAT))
    if verbosity < VERBOSE:
        handler.addFilter(FirstLine())
    root.addHandler(handler)
    root.setLevel(min(level, logging.INFO) if verbosity >= VERBOSE else level)
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(level)
    for name in DETAIL_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if verbosity >= VERBOSE else logging.CRITICAL)
    _tame_dspy(level)
    _hub_progress_bars(verbosity >= VERBOSE)


def _tame_dspy(level: int) -> None:
    """DSPy installs its own handler on the ``dspy`` logger (``propagate=False``, INFO) when it
    is imported, so it prints whatever the root says: import it now and route it through ours."""
    import dspy  # noqa: F401 - its import installs the handler replaced here

    dspy_logger = logging.getLogger("dspy")
    for existing in list(dspy_logger.handlers):
        if getattr(existing, "name", None) == "dspy_handler":
            dspy_logger.removeHandler(existing)
    dspy_logger.propagate = True
    dspy_logger.setLevel(level)


def _hub_progress_bars(enabled: bool) -> None:
    """Hugging Face's own progress bars ("Loading weights" of the sentence encoder, downloads)
    are details beside sqlweave's bars: shown with ``--verbose`` only. transformers reads the
    hub's setting when it is imported, and is told directly when it already was."""
    import sys

    try:
        from huggingface_hub.utils import disable_progress_bars, enable_progress_bars
    except ImportError:  # the embeddings extra is optional
        return
    (enable_progress_bars if enabled else disable_progress_bars)()
    hf_logging = sys.modules.get("transformers.utils.logging")
    if hf_logging is not None:
        (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
