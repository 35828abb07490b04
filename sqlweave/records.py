"""Evaluation records on disk: a JSONL file written as a run goes, and the identity of that run.

:func:`sqlweave.evaluate.evaluate` appends one record per finished question and resumes from
what the file holds, so the file format, the check that a resumed file belongs to the same run,
and the final rewrite in example order live here, apart from the loop that produces records.
Readers of finished runs (the report, the experiments' tables) need only this module.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def read_records(path: str | Path, *, repair: bool = False) -> list[dict[str, Any]]:
    """Records of an evaluation JSONL file.

    A last line cut short by an interrupted write is dropped (and, with ``repair=True``, cut from
    the file so later appends start on a clean line); a malformed line anywhere else is an error,
    because it means the file is not ours or was edited.
    """
    path = Path(path)
    packed = compressed(path)
    if not path.exists() and packed is None:
        return []
    if packed is not None:  # a finished run, committed gzipped: read, never repaired
        return _parse(path, gzip.decompress(packed.read_bytes()), repair=False)
    if not path.is_file():  # a folder, or a device such as /dev/zero that never ends
        raise ValueError(f"{path} is not a regular file")
    return _parse(path, path.read_bytes(), repair=repair)


def compressed(path: str | Path) -> Path | None:
    """The gzipped copy a finished run's records are kept as (``<path>.gz``, or ``path`` itself
    when it ends ``.gz``), when ``path`` itself is not there; else None. Large finished record
    files are committed compressed; their readers name them as they were written."""
    path = Path(path)
    if path.suffix == ".gz" and path.is_file():
        return path
    packed = path.with_name(path.name + ".gz")
    return packed if not path.exists() and packed.is_file() else None


def _parse(path: Path, raw: bytes, *, repair: bool) -> list[dict[str, Any]]:
    """Records of ``raw`` (the bytes of ``path``), per :func:`read_records`."""
    lines = raw.split(b"\n")
    records: list[dict[str, Any]] = []
    good_end = 0
    offset = 0
    for i, line in enumerate(lines):
        end = offset + len(line) + 1
        is_last = i == len(lines) - 1 or (i == len(lines) - 2 and not lines[-1])
        if line.strip():
            complete = end <= len(raw)  # the line ended with a newline
            try:
                record = json.loads(line)
                if not isinstance(record, dict) or "question_id" not in record:
                    raise ValueError("not an evaluation record")
            except ValueError as err:
                # Only a last line cut off before its newline is a killed run's: drop it.
                if not is_last or complete:
                    raise ValueError(f"{path}: line {i + 1} is not a valid record ({err})") from err
            if not complete:
                logger.warning("%s: dropping a truncated last line", path)
                break
            records.append(record)
        good_end = min(end, len(raw))
        offset = end
    if repair and good_end < len(raw):
        with open(path, "r+b") as fh:
            fh.truncate(good_end)
    return records


def run_identity_path(out_path: str | Path) -> Path:
    """Where the identity of the run writing ``out_path`` is kept: ``<out_path>.run.json``."""
    out = Path(out_path)
    return out.with_name(out.name + ".run.json")


def read_run_identity(out_path: str | Path) -> dict[str, Any] | None:
    """The identity recorded for the run that wrote ``out_path``, or None (none recorded)."""
    path = run_identity_path(out_path)
    if not path.is_file():
        return None
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: unreadable run identity ({err}); delete it to go on") from err
    if not isinstance(payload, dict) or not isinstance(payload.get("_run"), dict):
        raise ValueError(f"{path} is not a sqlweave run identity; delete it to go on")
    return payload["_run"]


def recorded_run_matches(
    run: str | Path, identity: Mapping[str, Any], question_ids: Iterable[str]
) -> bool:
    """Whether the recorded run ``run`` stands for a run of ``identity`` on ``question_ids``.

    Its identity (:func:`read_run_identity`) must hold every item of ``identity`` with the same
    value (e.g. ``program``, ``slice``, ``model`` and the full ``switches``: one switch apart is
    another program), and its records must answer exactly ``question_ids`` (a ``--limit`` run
    does not); ``question_ids`` is read only when the identity matches. Raises
    FileNotFoundError when ``run`` or its identity file is missing.
    """
    meta = read_run_identity(run) if Path(run).is_file() else None
    if meta is None:
        raise FileNotFoundError(
            f"{run}: a recorded run needs its records and its {run_identity_path(run).name} "
            "beside them"
        )
    if any(meta.get(key) != value for key, value in identity.items()):
        return False
    return {r.get("question_id") for r in read_records(run)} == set(question_ids)


def _normal(identity: dict[str, Any]) -> dict[str, Any]:
    """The identity as it reads back from JSON (tuples become lists, keys strings)."""
    return json.loads(json.dumps(identity, sort_keys=True, default=str))


def check_identity(out: Path, identity: dict[str, Any] | None) -> None:
    """Refuse to resume ``out`` when it holds records of a run with another identity: mixing
    two runs' records would make every figure read from the file meaningless."""
    if not out.is_file() or not out.stat().st_size:
        return  # nothing to mix with
    recorded = read_run_identity(out)
    if identity is None or recorded is None:
        if identity is not None:
            logger.warning(
                "%s records no run identity (written by an older sqlweave or without one); "
                "resuming it as the same run",
                out,
            )
        return
    wanted = _normal(identity)
    if recorded == wanted:
        return
    differ = [
        f"{key} {recorded.get(key)!r} vs {wanted.get(key)!r}"
        for key in sorted(set(recorded) | set(wanted))
        if recorded.get(key) != wanted.get(key)
    ]
    raise ValueError(
        f"{out} holds records of another run ({'; '.join(differ)}, recorded vs this run); "
        "resuming would mix them: use another out_path (--out) or start afresh (--no-resume)"
    )


def write_identity(out: Path, identity: dict[str, Any] | None) -> None:
    """Record ``identity`` beside ``out`` (atomically); without one, drop a stale record when
    the file was started afresh (its records are no longer that run's)."""
    path = run_identity_path(out)
    if identity is None:
        if path.exists() and (not out.exists() or not out.stat().st_size):
            path.unlink()
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"_run": _normal(identity)}, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def json_line(record: Mapping[str, Any]) -> str:
    """``record`` as one JSONL line that can always be written: a value JSON has no type for
    (a numpy number, a set, an object) is written as its plain value or text, and text that
    UTF-8 cannot hold (a lone surrogate a question or a program's SQL carried) as its escape,
    so that one odd record never stops a run, nor every resume at the same question."""
    text = json.dumps(record, ensure_ascii=False, default=_plain)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(record, ensure_ascii=True, default=_plain)
    return text + "\n"


def _plain(value: Any) -> Any:
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        try:
            return item()
        except (TypeError, ValueError):
            pass
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return str(value)


def rewrite_records(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Replace ``path`` with ``records`` as JSONL, atomically (a crash leaves the old file)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json_line(record))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


@contextlib.contextmanager
def lock_records(out: Path | None) -> Iterator[None]:
    """Hold ``out`` for one run: a second run writing the same records file (whose final
    rewrite would drop the first one's lines) is refused with ``ValueError`` instead. An
    advisory ``flock`` on the file itself, where the platform has one; nothing for no file."""
    if out is None or (out.exists() and not out.is_file()) or compressed(out) is not None:
        yield  # nothing to hold, or a path the run refuses with its own message
        return
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(
                f"{out} is being written by another run; wait for it to finish or give another "
                "out_path"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
