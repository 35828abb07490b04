"""Saving and loading compiled programs as self-describing JSON artefacts.

An artefact holds the DSPy state (instructions and demos per predictor) together with everything
needed to rebuild and audit it: the program's registry name and switches, the LM spec it was
compiled with, sqlweave and dspy versions, a hash of the train set and the validation EX.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import dspy

from sqlweave.programs import SQLProgram, get

logger = logging.getLogger(__name__)

FORMAT = "sqlweave-program"
FORMAT_VERSION = 1


class ArtifactError(Exception):
    """A compiled-program file that is missing, corrupted or incompatible."""


@dataclass
class ArtifactMeta:
    """Provenance recorded beside the DSPy state."""

    program: str
    switches: dict[str, Any] = field(default_factory=dict)
    lm: str | None = None
    optimizer: str | None = None
    trainset_hash: str | None = None
    val_ex: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def trainset_hash(examples: list[dspy.Example]) -> str:
    """Order-independent hash of (db_id, question, gold SQL) triples, to tell train sets apart."""
    rows = sorted(
        json.dumps([ex.get("db_id"), ex.get("question"), ex.get("gold_sql")]) for ex in examples
    )
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]


def save_program(program: SQLProgram, path: str | Path, meta: ArtifactMeta) -> Path:
    """Write ``program`` to ``path`` atomically (a crash never leaves half a file)."""
    import sqlweave

    payload = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "versions": {"sqlweave": sqlweave.__version__, "dspy": dspy.__version__},
        "meta": asdict(meta),
        "state": program.dump_state(),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(payload, fh, indent=2, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def load_program(path: str | Path) -> tuple[SQLProgram, ArtifactMeta]:
    """Rebuild a program from an artefact written by :func:`save_program`."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"compiled program not found: {path}")
    try:
        payload = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ArtifactError(f"{path} is not a sqlweave program file (invalid JSON: {err})") from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ArtifactError(f"{path} is not a sqlweave program file (no '{FORMAT}' header)")
    if payload.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(
            f"{path} has format version {payload.get('format_version')}, this sqlweave reads "
            f"{FORMAT_VERSION}; recompile it with this version"
        )
    try:
        meta = ArtifactMeta(**payload["meta"])
        program = get(meta.program, **meta.switches)
        program.load_state(payload["state"])
    except (KeyError, TypeError, ValueError) as err:
        raise ArtifactError(f"{path} is corrupted or incompatible: {err}") from err
    return program, meta
