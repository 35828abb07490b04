"""Resuming an optimization: finished units of work in one JSON file, and the calls made so far.

:class:`Checkpoint` is the file: every finished unit (a bootstrapped train example, a scored
random-search candidate, one validation question of a switch-search trial) is written at once,
atomically, under a key its optimizer chooses; a rerun with the same file and the same compile
replays them without an LM call. It also keeps the running total of LM calls, saved before each
call goes out, so that a :class:`~sqlweave.optimizers.budget.CallBudget` caps the compile across
any number of kills and resumes.

:class:`Checkpointed` puts any optimizer under a checkpoint: it opens the file for the compile
at hand (keyed by the optimizer's settings, the student's class and switches, the train and
validation data, and the LM) and hands it to every sqlweave optimizer inside, and to a
:class:`~sqlweave.optimizers.budget.Budgeted` inside, which then counts earlier runs' calls.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dspy

from sqlweave.optimizers.base import Wrapper, compile_with

if TYPE_CHECKING:
    from sqlweave.programs import SQLProgram

logger = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "sqlweave-compile-checkpoint"


def example_key(example: Any) -> str:
    """A stable identity for a train example (its db, question and gold SQL), for checkpoints."""
    raw = json.dumps([example.get("db_id"), example.get("question"), example.get("gold_sql")])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


class Checkpoint:
    """Finished units of an optimization, in a JSON file rewritten atomically after each one.

    ``config`` identifies the compile (optimizer, settings, data); a file written for another
    configuration is ignored (and replaced), never half-reused. ``calls`` is the number of LM
    calls all runs of this compile have made, saved before each call goes out
    (:meth:`record_calls`), so a budget holds across resumes.
    """

    def __init__(self, path: str | Path, config: dict[str, Any]) -> None:
        self.path = Path(path)
        self.key = hashlib.sha256(
            json.dumps(config, sort_keys=True, default=str).encode()
        ).hexdigest()
        self.entries: dict[str, Any] = {}
        self.calls = 0
        self.reused = 0
        if self.path.is_dir():
            raise ValueError(f"checkpoint {self.path} is a folder; give a file path")
        if self.path.is_file():
            try:
                payload = json.loads(self.path.read_text())
            except (OSError, ValueError, RecursionError) as err:
                payload = None
                why = str(err)
            else:
                why = "it has no compile checkpoint header"
            if not (isinstance(payload, dict) and payload.get("format") == CHECKPOINT_FORMAT):
                # Written atomically, a checkpoint is never half a file: this is someone's
                # other file (a questions file, an artefact), which the compile would replace.
                raise ValueError(
                    f"{self.path} exists and is not a compile checkpoint ({why}); give another "
                    "checkpoint path"
                )
            if (
                isinstance(payload, dict)
                and payload.get("format") == CHECKPOINT_FORMAT
                and payload.get("key") == self.key
                and isinstance(payload.get("entries"), dict)
            ):
                self.entries = payload["entries"]
                calls = payload.get("lm_calls", 0)
                self.calls = calls if isinstance(calls, int) and calls >= 0 else 0
                logger.info(
                    "resuming from %s: %d finished units, %d LM calls made so far",
                    self.path,
                    len(self.entries),
                    self.calls,
                )
            else:
                logger.warning(
                    "checkpoint %s belongs to another compile; starting afresh", self.path
                )

    def get(self, key: str) -> Any:
        """The saved value for ``key`` (counted as reused), or None."""
        value = self.entries.get(key)
        if value is not None:
            self.reused += 1
        return value

    def put(self, key: str, value: Any) -> None:
        """Record ``key`` and write the file at once, atomically."""
        self.entries[key] = value
        self._write()

    def record_calls(self, calls: int) -> None:
        """Save the running total of LM calls (before the call is sent: a kill loses none)."""
        self.calls = calls
        self._write()

    def _write(self) -> None:
        payload = {
            "format": CHECKPOINT_FORMAT,
            "key": self.key,
            "lm_calls": self.calls,
            "entries": self.entries,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(payload, fh, default=str)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)  # no stray temporary file beside the checkpoint
            raise


def _data_hash(examples: list[dspy.Example] | None) -> str | None:
    if examples is None:
        return None
    from sqlweave.optimizers.artifact import trainset_hash

    return trainset_hash(list(examples))


class Checkpointed(Wrapper):
    """``inner`` resuming from the checkpoint file at ``path``.

    ``config`` adds to the key what the optimizer cannot know (a proposer LM given as a string,
    an experiment tag). ``last`` is the :class:`Checkpoint` of the last compile (for its
    ``reused`` count). Put a :class:`~sqlweave.optimizers.budget.Budgeted` *inside* this wrapper
    for a budget that counts the calls of earlier runs.
    """

    def __init__(self, inner: Any, path: str | Path, config: dict[str, Any] | None = None) -> None:
        super().__init__(inner)
        self.path = Path(path)
        self.extra = dict(config or {})
        self.last: Checkpoint | None = None

    def compile(
        self,
        student: SQLProgram,
        *,
        trainset: list[dspy.Example],
        valset: list[dspy.Example] | None = None,
        **kwargs: Any,
    ) -> SQLProgram:
        """Open the checkpoint for this compile, then compile ``inner`` with it."""
        (inner,) = self.wrapped
        config = {
            **self.config(),
            "program": type(student).__name__,
            "switches": getattr(student, "switches", {}),
            "train": _data_hash(trainset),
            "val": _data_hash(valset),
            # Traces from another model are not this model's: never reuse them.
            "lm": getattr(dspy.settings.lm, "model", None),
            **self.extra,
        }
        self.last = Checkpoint(self.path, config)
        self.checkpoint = self.last
        return compile_with(inner, student, trainset, valset, **kwargs)
