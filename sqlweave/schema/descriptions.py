"""BIRD's ``database_description/<table>.csv`` files: column and value descriptions."""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

_ENCODINGS = ("utf-8-sig", "cp1252", "latin-1")


def _read_text(path: Path) -> str:
    """BIRD's CSVs come in UTF-8 with and without BOM and in Windows-1252; latin-1 never fails."""
    raw = path.read_bytes()
    for encoding in _ENCODINGS:
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError:
            continue
    return raw.decode("latin-1")  # pragma: no cover - latin-1 decodes any byte string


def _clean(text: str | None) -> str:
    return " ".join((text or "").split())


def read_descriptions(
    desc_dir: Path, table_names: Sequence[str]
) -> dict[str, dict[str, tuple[str, str]]]:
    """``{table_lower: {column_lower: (description, value_description)}}`` from BIRD CSVs."""
    if not desc_dir.is_dir():
        logger.warning("description folder not found: %s", desc_dir)
        return {}
    files = {p.stem.strip().lower(): p for p in desc_dir.glob("*.csv")}
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for table in table_names:
        path = files.get(table.lower())
        if path is None:
            continue
        reader = csv.DictReader(io.StringIO(_read_text(path)))
        reader.fieldnames = [
            (f or "").replace("\ufeff", "").strip().lower() for f in reader.fieldnames or []
        ]
        columns: dict[str, tuple[str, str]] = {}
        for row in reader:
            original = _clean(row.get("original_column_name")).lower()
            expanded = _clean(row.get("column_name"))
            desc = _clean(row.get("column_description"))
            if not desc and expanded:
                desc = expanded  # an expanded name ("hero id") is better than nothing
            value_desc = _clean(row.get("value_description"))
            if original:
                columns[original] = (desc, value_desc)
        out[table.lower()] = columns
    return out
