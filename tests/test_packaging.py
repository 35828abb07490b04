"""Packaging config (issue 39): data ship as package data, listed by pattern, so `pip install`
prints no "absent from the packages configuration" warning, and nothing a fresh install needs
is left out of the wheel."""

from __future__ import annotations

import glob
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def test_data_are_package_data_not_packages() -> None:
    # include-package-data on made setuptools warn once per data folder (~1,600 lines).
    assert CONFIG["include-package-data"] is False


def _tracked_data(folder: Path) -> set[str]:
    try:
        listed = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "--", str(folder.relative_to(REPO))],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.split()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout")
    return {
        str((REPO / name).relative_to(folder))
        for name in listed
        if not name.endswith(".py") and "__pycache__" not in name
    }


@pytest.mark.parametrize("package", sorted(CONFIG["package-dir"]))
def test_every_tracked_data_file_is_package_data(package: str) -> None:
    folder = REPO / CONFIG["package-dir"][package]
    patterns = CONFIG.get("package-data", {}).get(package, [])
    matched = {
        str(Path(hit).relative_to(folder))
        for pattern in patterns
        for hit in glob.glob(str(folder / pattern), recursive=True)
        if Path(hit).is_file()
    }
    # A file under a sub-package belongs to that sub-package's own entry.
    inner = [
        Path(CONFIG["package-dir"][other]).resolve()
        for other in CONFIG["package-dir"]
        if other != package and other.startswith(package + ".")
    ]
    missing = {
        name
        for name in _tracked_data(folder) - matched
        if not any((folder / name).resolve().is_relative_to(d) for d in inner)
    }
    assert not missing, f"{package}: not shipped: {sorted(missing)[:5]}"
