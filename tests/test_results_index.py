"""``experiments/results/INDEX.md`` names the committed file behind every quoted figure (issue 60).

Checks, each tried on a broken copy too:

(a) every path INDEX.md names in backticks exists in the checkout;
(b) every EX figure of README.md's Results and Presets tables (with its interval, where one is
    quoted) has an INDEX.md row with a file;
(c) a row's figure (and interval) equals what its protocol summaries hold: ``round(100 * ex, 1)``
    for EX, ``round(usage.wall_seconds, 1)`` for s/q;
(d) a row's figure is held, as a number, by at least one JSON file it names.

Reads files only: no LM, no network.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "experiments" / "results" / "INDEX.md"
README = ROOT / "README.md"
PROTOCOL = "experiments/results/protocol/"

PATH = re.compile(r"`((?:experiments|sqlweave|docs|scripts)/[^`\s]*)`")
FILE_PATH = re.compile(r"`((?:experiments/results|sqlweave)/[^`\s]+\.[a-z]+)`")
LEADING = re.compile(r"^\**~?(\d+\.\d)\**")
INTERVAL = re.compile(r"\[(-?\d+\.\d), (-?\d+\.\d)\]")


def section(text: str, heading: str) -> str:
    """The lines under ``## heading`` up to the next ``## ``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == f"## {heading}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "\n".join(lines[start + 1 : end])


def table(text: str) -> list[dict[str, str]]:
    """The first Markdown table in ``text``, as dicts keyed by its header (none: ``[]``)."""
    rows = [line for line in text.splitlines() if line.startswith("|")]
    if not rows:  # a section without a table (the README's Presets is a list)
        return []
    split = [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]
    header, body = split[0], split[2:]
    return [dict(zip(header, cells, strict=True)) for cells in body]


def index_rows(index_text: str) -> list[dict[str, str]]:
    return table(section(index_text, "Figure → file"))


def row_files(row: dict[str, str]) -> list[str]:
    return FILE_PATH.findall(row["file(s)"])


def interval(cell: str) -> tuple[str, str] | None:
    found = INTERVAL.search(cell)
    return (found.group(1), found.group(2)) if found else None


def missing_paths(index_text: str, root: Path) -> list[str]:
    """(a) Backticked paths that do not exist under ``root``."""
    return sorted({p for p in PATH.findall(index_text) if not (root / p).exists()})


def readme_figures(readme_text: str) -> list[tuple[str, str, str, tuple[str, str] | None]]:
    """(table, slice, EX figure, interval) for every EX cell of the Results and Presets tables."""
    out = []
    results = table(section(readme_text, "Results"))
    for row in results:
        for column, cell in row.items():
            if column.endswith("EX [95% CI]") and (m := LEADING.match(cell)):
                out.append(("README Results", column.split()[0], m.group(1), interval(cell)))
    presets = table(section(readme_text, "Presets"))
    for row in presets:
        for column in ("decision set", "spider-train-val"):
            if m := LEADING.match(row[column]):
                out.append(("README Presets", column, m.group(1), interval(row[column])))
    return out


def unbacked_readme_figures(readme_text: str, index_text: str) -> list[str]:
    """(b) README EX figures with no INDEX row (same table, slice, figure, interval) naming a file."""
    rows = [r for r in index_rows(index_text) if r["metric"] == "EX" and row_files(r)]
    problems = []
    for quoted, slice_name, figure, ci in readme_figures(readme_text):
        if not any(
            (r["quoted in"], r["slice"], r["figure"]) == (quoted, slice_name, figure)
            # the same interval, or one the index declares it could not find
            and (interval(r["95% CI"]) == ci or r["95% CI"] == "not found")
            for r in rows
        ):
            problems.append(f"{quoted} {slice_name} {figure} {ci}")
    return problems


def load(root: Path, path: str) -> Any:
    return json.loads((root / path).read_text(encoding="utf-8"))


def wrong_protocol_figures(index_text: str, root: Path) -> list[str]:
    """(c) Rows whose figure or interval differs from a protocol summary the row names."""
    problems = []
    for row in index_rows(index_text):
        if row["metric"] not in ("EX", "s/q"):
            continue
        for path in row_files(row):
            if not (path.startswith(PROTOCOL) and path.endswith(".json")):
                continue
            if path.endswith(".run.json") or not (root / path).exists():
                continue
            summary = load(root, path)
            if row["metric"] == "EX" and "ex" in summary:
                held = f"{round(100 * summary['ex'], 1):.1f}"
                if row["figure"] != held:
                    problems.append(
                        f"{row['row']} {row['slice']}: {row['figure']} vs {held} in {path}"
                    )
                ci = interval(row["95% CI"])
                if ci and "interval" in summary:
                    low, high = (f"{round(100 * x, 1):.1f}" for x in summary["interval"])
                    if ci != (low, high):
                        problems.append(
                            f"{row['row']} {row['slice']}: {ci} vs {(low, high)} in {path}"
                        )
            if row["metric"] == "s/q" and "usage" in summary:
                held = f"{round(summary['usage']['wall_seconds'], 1):.1f}"
                if row["figure"] != held:
                    problems.append(
                        f"{row['row']} {row['slice']} s/q: {row['figure']} vs {held} in {path}"
                    )
    return problems


def numbers(value: Any) -> set[str]:
    """Every number in a JSON value, to one decimal, as itself and (fractions) in percent."""
    if isinstance(value, bool):
        return set()
    if isinstance(value, int | float):
        return {f"{round(value, 1):.1f}", f"{round(100 * value, 1):.1f}"}
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return set().union(*(numbers(v) for v in value)) if value else set()
    return set()


def figures_not_held(index_text: str, root: Path) -> list[str]:
    """(d) Rows whose figure (and interval ends) no named JSON file holds."""
    problems = []
    for row in index_rows(index_text):
        jsons = [p for p in row_files(row) if p.endswith(".json") and (root / p).exists()]
        if not jsons or not LEADING.match(row["figure"]):
            continue
        held = set().union(*(numbers(load(root, p)) for p in jsons))
        wanted = [row["figure"], *(interval(row["95% CI"]) or ())]
        for figure in wanted:
            if figure not in held:
                problems.append(
                    f"{row['row']} {row['slice']} {row['metric']}: {figure} in none of {jsons}"
                )
    return problems


# --- the committed index ------------------------------------------------------------------


@pytest.fixture(scope="module")
def index_text() -> str:
    return INDEX.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def readme_text() -> str:
    return README.read_text(encoding="utf-8")


def test_index_has_a_layout_line_per_results_folder(index_text: str) -> None:
    layout = section(index_text, "Layout")
    named = set(re.findall(r"`experiments/results/([^/`]+)/`", layout))
    folders = {p.name for p in (ROOT / "experiments" / "results").iterdir() if p.is_dir()}
    assert folders <= named, sorted(folders - named)


def test_every_named_path_exists(index_text: str) -> None:
    assert PATH.findall(index_text)
    assert missing_paths(index_text, ROOT) == []


def test_every_readme_figure_has_a_backing_row(index_text: str, readme_text: str) -> None:
    assert len(readme_figures(readme_text)) >= 20
    assert unbacked_readme_figures(readme_text, index_text) == []


def test_rows_match_their_protocol_summaries(index_text: str) -> None:
    assert any(PROTOCOL in r["file(s)"] for r in index_rows(index_text))
    assert wrong_protocol_figures(index_text, ROOT) == []


def test_rows_are_held_by_their_files(index_text: str) -> None:
    assert figures_not_held(index_text, ROOT) == []


# --- broken copies: each check can fail -----------------------------------------------------


def broken(tmp_path: Path, text: str) -> str:
    path = tmp_path / "INDEX.md"
    path.write_text(text, encoding="utf-8")
    return path.read_text(encoding="utf-8")


NAIVE_DEV = "`experiments/results/protocol/naive__spider-dev-200__1.5b.json`"
BEST_DEV = "`experiments/results/protocol/direct__samples8-joins-all-t10-intersect-grounded__spider-dev-200__1.5b.json`"


def test_a_missing_path_fails(tmp_path: Path, index_text: str) -> None:
    text = broken(
        tmp_path, index_text.replace(NAIVE_DEV, NAIVE_DEV.replace("naive__", "naiv__"), 1)
    )
    assert missing_paths(text, ROOT) == [
        "experiments/results/protocol/naiv__spider-dev-200__1.5b.json"
    ]
    assert missing_paths(index_text, tmp_path)  # an empty checkout holds none of them


def test_a_readme_figure_without_a_row_fails(
    tmp_path: Path, index_text: str, readme_text: str
) -> None:
    rsl = next(
        line for line in index_text.splitlines() if "| `rsl` | spider-dev-200 | EX |" in line
    )
    text = broken(tmp_path, index_text.replace(rsl + "\n", ""))
    assert unbacked_readme_figures(readme_text, text) == [
        "README Results spider-dev-200 60.0 ('53.0', '67.0')"
    ]
    not_found = index_text.replace(
        rsl,
        rsl.replace("`experiments/results/protocol/rsl__spider-dev-200__1.5b.json`", "not found"),
    )
    assert unbacked_readme_figures(readme_text, broken(tmp_path, not_found))
    readme = readme_text.replace("| 55.5 [48.5, 62.0] |", "| 55.4 [48.5, 62.0] |", 1)
    assert unbacked_readme_figures(readme, index_text) == [
        "README Results spider-dev-200 55.4 ('48.5', '62.0')"
    ]


def test_a_wrong_mapping_fails(tmp_path: Path, index_text: str) -> None:
    line = next(
        line
        for line in index_text.splitlines()
        if line.startswith("| README Results | the best program | spider-dev-200 | EX |")
    )
    text = broken(tmp_path, index_text.replace(line, line.replace(BEST_DEV, NAIVE_DEV)))
    problems = wrong_protocol_figures(text, ROOT)
    assert len(problems) == 2 and "73.0 vs 55.5" in problems[0], problems  # EX and its interval
    sq = next(
        line for line in index_text.splitlines() if "| `mage` | bird-52 | s/q | 26.8 |" in line
    )
    text = broken(tmp_path, index_text.replace(sq, sq.replace("26.8", "12.2")))
    assert wrong_protocol_figures(text, ROOT) == [
        "`mage` bird-52 s/q: 12.2 vs 26.8 in experiments/results/protocol/mage__bird-52__1.5b.json"
    ]


def test_a_figure_its_files_do_not_hold_fails(tmp_path: Path, index_text: str) -> None:
    line = next(line for line in index_text.splitlines() if "| oracle, repair on all |" in line)
    text = broken(tmp_path, index_text.replace(line, line.replace("| 86.0 |", "| 86.1 |")))
    assert len(figures_not_held(text, ROOT)) == 1
