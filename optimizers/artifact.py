"""Saving and loading compiled programs as self-describing JSON artefacts.

An artefact holds the DSPy state (instructions and demos per predictor) together with everything
needed to rebuild and audit it: the program's registry name and switches, the LM spec it was
compiled with, sqlweave and dspy versions, a hash of the train set, the validation EX, and the
optimizer with its budget, LM calls and wall time, and the optimizer's details
(``meta.extra["details"]``: random-search scores, the switch search's space, choice and trials).
A KNN-compiled program also stores its demo pool. A program chosen by the switch search is
rebuilt from its saved switches, so loading needs no training data.

Format 2 lays the predictors' state out as DSPy's own ``Module.save`` does (one top-level key
per predictor, plus ``metadata.dependency_versions``), so ``program.load("x.json")`` works on an
artefact too; :func:`sqlweave.load` is still the way to get the program *with* its switches and
KNN pool. Format 1 (the state under ``"state"``) is still read. EX is a percentage wherever a
person reads it: the meta field is ``val_ex_pct``; a format-1 ``val_ex`` (a fraction) is read
as ``val_ex_pct = 100 * val_ex``.

Loading checks every part and names the file and the problem when something is off: a
missing file, bad or truncated JSON, a wrong layout, an unknown program, a newer format, or
predictor names that do not match the program this sqlweave builds under that name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import dspy

from sqlweave.errors import SqlweaveError
from sqlweave.programs import SQLProgram, available, get, program_class
from sqlweave.switch_types import switch_type_problem, switch_types

logger = logging.getLogger(__name__)

FORMAT = "sqlweave-program"
FORMAT_VERSION = 2
#: Top-level keys of an artefact that are not predictor state (format 2).
RESERVED = frozenset({"format", "format_version", "versions", "meta", "metadata", "knn", "state"})


class ArtifactError(SqlweaveError):
    """A compiled-program file that is missing, corrupted or incompatible."""


@dataclass
class ArtifactMeta:
    """Provenance recorded beside the DSPy state."""

    program: str
    switches: dict[str, Any] = field(default_factory=dict)
    lm: str | None = None
    optimizer: str | None = None
    trainset_hash: str | None = None
    #: Validation EX in percent (0-100).
    val_ex_pct: float | None = None
    budget: int | None = None
    lm_calls: int | None = None
    compile_seconds: float | None = None
    n_train: int | None = None
    n_val: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def val_ex(self) -> float | None:
        """Validation EX as a fraction (0-1), for code written before ``val_ex_pct``."""
        return None if self.val_ex_pct is None else self.val_ex_pct / 100


def trainset_hash(examples: list[dspy.Example]) -> str:
    """Order-independent hash of (db_id, question, gold SQL) triples, to tell train sets apart."""
    rows = sorted(
        json.dumps([ex.get("db_id"), ex.get("question"), ex.get("gold_sql")]) for ex in examples
    )
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]


def save_program(program: SQLProgram, path: str | Path, meta: ArtifactMeta) -> Path:
    """Write ``program`` to ``path`` atomically (a crash never leaves half a file)."""
    from dspy.utils.saving import get_dependency_versions

    import sqlweave

    state = program.dump_state()
    # The program's own switches are what it was built with; meta may name only some of them
    # (a preset's), and a switch missing from the file is read back at its legacy value.
    meta = dataclasses.replace(
        meta, switches={**meta.switches, **dict(getattr(program, "switches", {}) or {})}
    )
    clash = sorted(RESERVED & set(state))
    if clash:
        raise ArtifactError(f"cannot save {meta.program!r}: predictor names {clash} are reserved")
    payload: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "versions": {"sqlweave": sqlweave.__version__, "dspy": dspy.__version__},
        "meta": asdict(meta),
        **state,
        # What DSPy's Module.load reads (it warns when the versions differ).
        "metadata": {"dependency_versions": get_dependency_versions()},
    }
    knn = getattr(program, "knn_pool", None)
    if knn:
        payload["knn"] = knn
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        raise ArtifactError(f"cannot save to {path}: it is a folder; give a file path")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(payload, fh, indent=2, default=str)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared artefact from its team
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError | TypeError | ValueError):
            raise ArtifactError(f"cannot save {meta.program!r} to {path}: {err}") from err
        raise
    return path


def read_artifact(path: str | Path) -> dict[str, Any]:
    """The checked payload of an artefact file; raises :class:`ArtifactError` naming the problem."""
    path = Path(path)
    if path.is_dir():
        raise ArtifactError(f"{path} is a folder, not a compiled program file")
    if not path.is_file():
        raise ArtifactError(f"compiled program not found: {path}")
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError, and
        # the rest json.loads raises: an integer of 5,000 digits, nesting too deep
        raise ArtifactError(
            f"{path} is not a sqlweave program file (invalid JSON: {err}; truncated or not JSON)"
        ) from err
    except OSError as err:
        raise ArtifactError(f"{path} cannot be read: {err}") from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ArtifactError(f"{path} is not a sqlweave program file (no '{FORMAT}' header)")
    version = payload.get("format_version")
    if not isinstance(version, int):
        raise ArtifactError(f"{path} is corrupted: format_version is missing or not a number")
    if version > FORMAT_VERSION:
        raise ArtifactError(
            f"{path} has format version {version}, newer than the {FORMAT_VERSION} this sqlweave "
            "reads; upgrade sqlweave or recompile it with this version"
        )
    if version < 1:
        raise ArtifactError(
            f"{path} has format version {version}, this sqlweave reads 1 to {FORMAT_VERSION}; "
            "recompile it with this version"
        )
    meta = payload.get("meta")
    if version >= 2:
        # Normalised to format 1's layout for every reader: the predictors under "state".
        payload["state"] = {k: v for k, v in payload.items() if k not in RESERVED}
    state = payload.get("state")
    if not isinstance(meta, dict) or not isinstance(meta.get("program"), str):
        raise ArtifactError(f"{path} is corrupted or incompatible: 'meta.program' is missing")
    if not isinstance(state, dict):
        raise ArtifactError(
            f"{path} is corrupted or incompatible: 'state' is missing or not an object"
        )
    if "knn" in payload and not (
        isinstance(payload["knn"], dict)
        and isinstance(payload["knn"].get("k"), int)
        and isinstance(payload["knn"].get("pool"), list)
    ):
        raise ArtifactError(f"{path} is corrupted or incompatible: 'knn' needs an int k and a pool")
    if "knn" in payload:
        problem = _knn_problem(payload["knn"])
        if problem:
            raise ArtifactError(f"{path} is corrupted or incompatible: {problem}")
    return payload


def _knn_problem(knn: dict[str, Any]) -> str | None:
    """What is wrong with a KNN demo pool, or None: ``k`` an int >= 0, ``same_db`` (when given)
    one of :data:`~sqlweave.optimizers.knn.SAME_DB_DEMOS`, every item an object with a string
    ``question`` and ``demos`` mapping predictor names to demo objects."""
    k = knn["k"]
    if isinstance(k, bool) or k < 0 or k > MAX_DEMOS:
        return f"'knn.k' must be a number of demos (0 to {MAX_DEMOS}), not {k!r}"
    from sqlweave.optimizers.knn import SAME_DB_DEMOS

    same_db = knn.get("same_db", "full")
    if same_db not in SAME_DB_DEMOS:
        return f"'knn.same_db' must be one of {', '.join(SAME_DB_DEMOS)}, not {same_db!r}"
    for i, item in enumerate(knn["pool"]):
        if not isinstance(item, dict):
            return f"'knn.pool' item {i} is not an object"
        if not isinstance(item.get("question"), str):
            return f"'knn.pool' item {i} has no string 'question'"
        demos = item.get("demos")
        if not isinstance(demos, dict):
            return f"'knn.pool' item {i}: 'demos' must be an object of predictor name -> demo"
        for name, demo in demos.items():
            if not isinstance(demo, dict):
                return f"'knn.pool' item {i}: the demo for {name!r} is not an object"
    return None


def _meta_from(path: Path, raw: dict[str, Any]) -> ArtifactMeta:
    known = {f.name for f in dataclasses.fields(ArtifactMeta)}
    raw = dict(raw)
    legacy = raw.pop("val_ex", None)  # format 1: a fraction
    if "val_ex_pct" not in raw and isinstance(legacy, int | float) and not isinstance(legacy, bool):
        raw["val_ex_pct"] = 100 * legacy
    kwargs = {k: v for k, v in raw.items() if k in known}
    unknown = {k: v for k, v in raw.items() if k not in known}
    try:
        meta = ArtifactMeta(**kwargs)
    except TypeError as err:
        raise ArtifactError(f"{path} is corrupted or incompatible: bad meta ({err})") from err
    if not isinstance(meta.switches, dict) or not isinstance(meta.extra, dict):
        raise ArtifactError(f"{path} is corrupted or incompatible: switches/extra must be objects")
    problem = _meta_problem(meta)
    if problem:
        raise ArtifactError(f"{path} is corrupted or incompatible: {problem}")
    if unknown:
        meta.extra = {**meta.extra, **unknown}
    return meta


#: Meta fields that hold a number (or null), and those that hold a text (or null).
_NUMBER_FIELDS = ("val_ex_pct", "budget", "lm_calls", "compile_seconds", "n_train", "n_val")
_TEXT_FIELDS = ("optimizer", "lm", "trainset_hash")


def _meta_problem(meta: ArtifactMeta) -> str | None:
    """What is wrong with the types of a loaded meta, or None: readers (``inspect``, the
    answer's confidence) trust these fields, so a hand-edited one is refused at load."""
    for name in _NUMBER_FIELDS:
        value = getattr(meta, name)
        if value is not None and not _finite(value):
            return f"meta.{name} must be a finite number, not {value!r}"
    for name in _TEXT_FIELDS:
        value = getattr(meta, name, None)
        if value is not None and not isinstance(value, str):
            return f"meta.{name} must be a text, not {value!r}"
    refit = meta.extra.get("confidence")
    if refit is not None and not (
        isinstance(refit, dict) and all(_finite(refit.get(k)) for k in ("a", "b", "n"))
    ):
        return f"meta.extra.confidence must hold finite numbers a, b and n, not {refit!r}"
    for name in ("details", "synthetic"):
        value = meta.extra.get(name)
        if value is not None and not isinstance(value, dict):
            return f"meta.extra.{name} must be an object, not {value!r}"
    preset = meta.extra.get("preset")
    if preset is not None and not isinstance(preset, str):
        return f"meta.extra.preset must be a name, not {preset!r}"
    return None


def _finite(value: Any) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isfinite(value)


#: Demos a predictor (or a KNN pick) may show: each one goes into every prompt, so a
#: hand-edited artefact with thousands would fill the model's window and stall each call. A
#: compile never writes more (``max_demos`` is held to it too).
MAX_DEMOS = 64

#: What ``Predict.dump_state`` writes for a predictor, and so all a saved state may hold.
STATE_KEYS = frozenset({"signature", "demos", "lm", "traces", "train"})


def _state_problem(part: Any) -> str | None:
    """What is wrong with one predictor's saved state, or None (DSPy itself checks little)."""
    if not isinstance(part, dict):
        return "not an object"
    signature = part.get("signature")
    if not isinstance(signature, dict) or not isinstance(signature.get("instructions"), str):
        return "signature.instructions missing"
    demos = part.get("demos")
    if not isinstance(demos, list) or not all(isinstance(d, dict) for d in demos):
        return "demos must be a list of objects"
    if len(demos) > MAX_DEMOS:
        return f"{len(demos)} demos (a predictor shows at most {MAX_DEMOS})"
    # DSPy's load_state sets every other key as an attribute of the predictor: a hand-edited
    # "lm" would send the prompts to another model, "forward" would replace the call.
    unknown = sorted(set(part) - STATE_KEYS)
    if unknown:
        return f"unknown keys {unknown} (a predictor's state has {sorted(STATE_KEYS)})"
    if part.get("lm") is not None:
        return "'lm' must be null: a compiled program answers with the model it is given"
    return None


def load_program(path: str | Path) -> tuple[SQLProgram, ArtifactMeta]:
    """Rebuild a program from an artefact written by :func:`save_program`."""
    path = Path(path)
    payload = read_artifact(path)
    meta = _meta_from(path, payload["meta"])
    if meta.program not in available():
        raise ArtifactError(
            f"{path} is corrupted or incompatible: program {meta.program!r} is unknown to this "
            f"sqlweave (known: {', '.join(available())})"
        )
    # A switch added after the artefact was saved is absent from it: it was compiled with the
    # value the program had then, which a later change of default must not replace.
    cls = program_class(meta.program)
    kinds = switch_types(cls)
    for name, value in meta.switches.items():
        if name in kinds and (problem := switch_type_problem(name, value, *kinds[name])):
            raise ArtifactError(f"{path} is corrupted or incompatible: {problem}")
    legacy = getattr(cls, "LEGACY_SWITCHES", {})
    switches = {**legacy, **meta.switches}
    try:
        program = get(meta.program, **switches)
    except (TypeError, ValueError) as err:
        raise ArtifactError(
            f"{path} is corrupted or incompatible: cannot build {meta.program!r} with switches "
            f"{meta.switches}: {err}"
        ) from err
    state = payload["state"]
    expected = {name for name, _ in program.named_predictors()}
    if set(state) != expected:
        raise ArtifactError(
            f"{path} is corrupted or incompatible: its predictors {sorted(state)} do not match "
            f"the predictors of {meta.program!r} {sorted(expected)}"
        )
    for name, part in state.items():
        problem = _state_problem(part)
        if problem:
            raise ArtifactError(
                f"{path} is corrupted or incompatible: bad predictor state for {name!r} ({problem})"
            )
    try:
        program.load_state(state)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ArtifactError(
            f"{path} is corrupted or incompatible: bad predictor state ({err})"
        ) from err
    if "knn" in payload:
        from sqlweave.optimizers.knn import attach_knn

        stray = {n for item in payload["knn"]["pool"] for n in item["demos"]} - expected
        if stray:
            raise ArtifactError(
                f"{path} is corrupted or incompatible: 'knn.pool' has demos for {sorted(stray)}, "
                f"not predictors of {meta.program!r} {sorted(expected)}"
            )

        # An artefact saved before the switch existed showed every demo's schema in full.
        same_db = payload["knn"].get("same_db", "full")
        program = attach_knn(program, payload["knn"]["pool"], payload["knn"]["k"], same_db=same_db)
    return program, meta
