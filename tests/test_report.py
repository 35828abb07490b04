"""The HTML report: error classes, statistics, a self-contained page, and a real browser loading it.

The page is rendered from real evaluation records (the 0.5B Spider runs in
``experiments/results/programs``, cut to a few questions) and opened in Debian's headless
Chromium, which must load every image. With ``SQLWEAVE_WRITE_SCREENSHOT=1`` the browser's
screenshot is saved as ``docs/report.png``.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import struct
from pathlib import Path

import pytest
from conftest import browse, chromium
from typer.testing import CliRunner

from sqlweave.cli import app
from sqlweave.report import (
    ERROR_CLASSES,
    Run,
    error_class,
    load_run,
    read_provenance,
    render_report,
    write_report,
)

pytest.importorskip("matplotlib", reason="reports need the 'report' extra (matplotlib)")

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "experiments" / "results" / "programs"
RUN_NAMES = (
    "direct__full__0.5b__spider12",
    "mage__full__0.5b__spider12",
    "pet__full__0.5b__spider12",
    "dubo_v2__full__0.5b__spider12",
)
SCREENSHOT = REPO / "docs" / "report.png"
DATA_URI = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


@pytest.fixture()
def run_files(tmp_path: Path) -> list[Path]:
    """The real 0.5B runs, each cut to its first 10 questions, with their summaries (which
    name the program, switches, model and commit)."""
    out = []
    for name in RUN_NAMES:
        source = RUNS / f"{name}.jsonl"
        if not source.is_file():
            pytest.skip(f"{source} is missing")
        lines = source.read_text(encoding="utf-8").splitlines()[:10]
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        if source.with_suffix(".json").is_file():
            shutil.copyfile(source.with_suffix(".json"), path.with_suffix(".json"))
        out.append(path)
    return out


# --- error classes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ({"correct": True, "error": None}, "correct"),
        ({"correct": False, "error": None}, "wrong result"),
        ({"correct": False, "error": "Syntax error: near 'FORM'", "error_kind": "syntax"}, "syntax error"),
        ({"correct": False, "error": "Unknown column: no such column: x", "error_kind": "unknown_column"}, "unknown column/table"),
        ({"correct": False, "error": "Unknown table: no such table: t", "error_kind": "unknown_table"}, "unknown column/table"),
        ({"correct": False, "error": "Timed out: interrupted", "error_kind": "timeout"}, "timeout"),
        ({"correct": False, "error": "Execution error: ambiguous column name: id", "error_kind": "runtime"}, "other"),
        ({"correct": False, "error": "program returned no SQL", "error_kind": "no_sql"}, "other"),
        # No kind recorded (older files, other engines): the text decides.
        ({"correct": False, "error": 'column "foo" does not exist'}, "unknown column/table"),
        ({"correct": False, "error": "sqlite3.OperationalError: near \"x\": syntax error"}, "syntax error"),
        ({"correct": False, "error": "canceling statement due to statement timeout"}, "timeout"),
        # The model, not the SQL, failed: its own class.
        ({"correct": False, "error": "APIConnectionError: Connection refused", "error_kind": "program"}, "LM failure"),
        ({"correct": False, "error": "ValueError: Requested tokens exceed context window", "error_kind": "program"}, "LM failure"),
        ({"correct": False, "error": "KeyError: 'x'", "error_kind": "program"}, "other"),
        ({"correct": False, "error": "the model is down", "error_kind": "lm"}, "LM failure"),
    ],
)  # fmt: skip
def test_error_class(record: dict, expected: str) -> None:
    assert error_class(record) == expected
    assert expected in ERROR_CLASSES


def test_run_statistics_from_records() -> None:
    records = [
        {"question_id": "a", "correct": True, "difficulty": "easy", "seconds": 1.0,
         "usage": {"calls": 1, "prompt_tokens": 100, "completion_tokens": 10}},
        {"question_id": "b", "correct": False, "difficulty": "hard", "seconds": 3.0,
         "error": "Unknown column: no such column: x", "error_kind": "unknown_column",
         "usage": {"calls": 2, "prompt_tokens": 300, "completion_tokens": 20}},
        {"question_id": "c", "correct": False, "difficulty": "easy", "seconds": 2.0, "usage": None},
    ]  # fmt: skip
    run = Run("r", records)
    assert run.ex().estimate == pytest.approx(1 / 3) and run.ex().n == 3
    assert list(run.ex_by_level()) == ["easy", "hard"]
    assert run.ex_by_level()["easy"].estimate == 0.5
    assert run.classes()["unknown column/table"] == 1 and run.classes()["wrong result"] == 1
    assert run.tokens() == [110.0, 320.0] and run.seconds() == [1.0, 3.0, 2.0]
    assert run.calls() == [1.0, 2.0]


def test_per_database_oracle_and_question_marks() -> None:
    base = Run(
        "base",
        [
            {"question_id": "a", "db_id": "x", "correct": True},
            {"question_id": "b", "db_id": "x", "correct": False, "error": None},
            {"question_id": "c", "db_id": "y", "correct": False, "error": None},
        ],
    )
    other = Run("other", [
        {"question_id": "a", "db_id": "x", "correct": False, "error": None,
         "candidates": [{"sql": "s", "correct": True}]},
        {"question_id": "b", "db_id": "x", "correct": True, "candidates": []},
        {"question_id": "c", "db_id": "y", "correct": False, "error": "RateLimitError: slow down",
         "error_kind": "program"},
    ])  # fmt: skip
    assert {db: c.estimate for db, c in base.ex_by_database().items()} == {"x": 0.5, "y": 0.0}
    assert base.oracle_ex() is None  # no record carries candidates
    assert other.oracle_ex().estimate == pytest.approx(2 / 3)  # a's candidate was right
    page = render_report([base, other])
    assert "oracle EX %" in page and "EX per database" in page
    assert "selection gap (points)" in page and "<td>33.3</td>" in page  # 66.7 - 33.3
    # one row per question id, in the first run's order: a lost, b gained, c wrong everywhere
    classes = re.findall(r'<tr class="([a-z ]*)">', page)
    assert classes == ["lost", "gained", "allwrong lmfail"]
    assert "lost against the first run (1)" in page and "an LM failure (1)" in page


def test_provenance_from_the_run_json(tmp_path: Path) -> None:
    records = tmp_path / "run.jsonl"
    records.write_text(json.dumps({"question_id": "a", "correct": True}) + "\n")
    (tmp_path / "run.jsonl.run.json").write_text(json.dumps({
        "_run": {"program": "weave", "switches": {"samples": 3}, "model": "local:m",
                 "semantics": "per-example", "artifact": "abc123"},
        "provenance": {"commit": "f" * 40, "sqlweave": "0.1.0"},
    }))  # fmt: skip
    prov = read_provenance(records)
    assert prov == {
        "program": "weave",
        "switches": {"samples": 3},
        "model": "local:m",
        "artifact": "abc123",
        "commit": "f" * 40,
    }
    page = render_report([load_run(records)])
    assert "<td>samples=3</td>" in page and "<td>local:m</td>" in page and "ffffffffffff" in page
    (tmp_path / "run.jsonl.run.json").write_text("{not json")
    assert read_provenance(records) == {}  # a broken sidecar costs the provenance, not the page


# --- the page -------------------------------------------------------------------------------------


def _pngs(page: str) -> list[bytes]:
    return [base64.b64decode(data) for data in DATA_URI.findall(page)]


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


def test_report_is_one_self_contained_page(run_files: list[Path], tmp_path: Path) -> None:
    out = write_report(run_files, tmp_path / "sub" / "report.html", title="0.5B on Spider")
    page = out.read_text(encoding="utf-8")
    pngs = _pngs(page)
    # EX per difficulty, paired differences, error classes, tokens and seconds.
    assert len(pngs) == 4
    assert all(w > 300 and h > 100 for w, h in map(_png_size, pngs))
    # Nothing fetched from elsewhere: no external scripts, styles or images.
    assert not re.search(r'(src|href)="(?!data:)', page)
    assert "<script" not in page
    for name in RUN_NAMES:
        assert name in page
    assert "McNemar" in page and "0.5B on Spider" in page
    # Provenance from each run's summary, per-database EX, one row per question.
    assert "<td>mage</td>" in page and "<td>local:qwen2.5-coder-0.5b</td>" in page
    first = load_run(run_files[0])
    for db in {r["db_id"] for r in first.records}:
        assert f"<td>{db}</td>" in page
    assert page.count('<tr class="') == 10
    # The paired table compares every later run with the first on the 10 shared questions.
    assert page.count(">10<") >= len(RUN_NAMES) - 1
    assert first.n == 10


def test_one_run_has_no_comparison(run_files: list[Path]) -> None:
    page = render_report([load_run(run_files[0])])
    assert len(_pngs(page)) == 3
    assert "pass more files to compare" in page


def test_report_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no evaluation records"):
        load_run(tmp_path / "missing.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="no evaluation records"):
        load_run(empty)
    with pytest.raises(ValueError, match="at least one run"):
        render_report([])


def test_cli_report(run_files: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "cli.html"
    result = CliRunner().invoke(
        app, ["report", *map(str, run_files[:2]), "--out", str(out), "--name", "direct",
              "--name", "mage"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"report: {out}" in result.output
    page = out.read_text(encoding="utf-8")
    assert ">direct<" in page and ">mage<" in page
    missing = CliRunner().invoke(app, ["report", str(tmp_path / "nope.jsonl")])
    assert missing.exit_code == 2 and "no evaluation records" in missing.output


# --- a real browser -------------------------------------------------------------------------------

# Appended to a copy of the page: once everything has loaded, write each image's state into the
# DOM, which --dump-dom then prints. The report itself carries no script.
PROBE = """<script>
window.addEventListener("load", () => {
  const images = Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight]);
  const out = document.createElement("pre");
  out.id = "probe";
  const visible = () => Array.from(document.querySelectorAll("table.questions tbody tr"))
    .filter(r => r.offsetParent !== null).length;
  const shown = {};
  for (const id of ["gained", "lost", "wrong", "all"]) {
    document.getElementById("qf-" + id).click();
    shown[id] = visible();
  }
  out.textContent = JSON.stringify({images, title: document.title, scroll: document.body.scrollHeight, shown});
  document.body.appendChild(out);
});
</script>"""


def test_report_loads_in_headless_chromium(run_files: list[Path], tmp_path: Path) -> None:
    browser = chromium()
    out = write_report(run_files, tmp_path / "report.html", title="sqlweave report: 0.5B on Spider")
    probed = tmp_path / "probed.html"
    probed.write_text(out.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"))

    dumped = browse(
        browser, tmp_path / "profile1", "--virtual-time-budget=10000", "--window-size=1200,1600",
        "--dump-dom", probed.as_uri(),
    )  # fmt: skip
    match = re.search(r'<pre id="probe">(.*?)</pre>', dumped.stdout, re.S)
    assert match, f"no probe output; stderr:\n{dumped.stderr[-2000:]}"
    state = json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert state["title"] == "sqlweave report: 0.5B on Spider"
    assert len(state["images"]) == 4
    assert all(done and w > 300 and h > 100 for done, w, h in state["images"]), state
    # The per-question filters work in a real browser, with CSS alone.
    page = out.read_text(encoding="utf-8")
    classes = re.findall(r'<tr class="([a-z ]*)">', page)
    expected = {
        "gained": sum("gained" in c.split() for c in classes),
        "lost": sum("lost" in c.split() for c in classes),
        "wrong": sum("allwrong" in c.split() for c in classes),
        "all": len(classes),
    }
    assert state["shown"] == expected and expected["all"] == 10

    shot = tmp_path / "report.png"
    # Headless window height includes a little more than the viewport: leave a margin.
    height = min(max(int(state["scroll"]) + 160, 1600), 4000)
    taken = browse(
        browser, tmp_path / "profile2", f"--screenshot={shot}", f"--window-size=1200,{height}",
        out.as_uri(),
    )  # fmt: skip
    assert shot.is_file(), taken.stderr[-2000:]
    _assert_not_blank(shot)
    if os.environ.get("SQLWEAVE_WRITE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)


def _assert_not_blank(png: Path) -> None:
    import matplotlib.image

    pixels = matplotlib.image.imread(png)
    assert pixels.shape[1] == 1200 and pixels.shape[0] >= 1600
    # A blank page is one colour; the report has white, text and coloured plots.
    assert float(pixels[..., :3].std()) > 0.05
    coloured = (abs(pixels[..., 0] - pixels[..., 1]) + abs(pixels[..., 1] - pixels[..., 2])) > 0.2
    assert coloured.mean() > 0.01


def test_odd_run_names_and_paths_make_a_report(run_files: list[Path], tmp_path: Path) -> None:
    """Found by review: a '$' in a run's name failed the report (matplotlib read a formula);
    a run kept gzipped could not be named as written; one file given twice was named '/one'
    twice; an --out folder left a stray .tmp behind."""
    import gzip

    dollar = tmp_path / "cost_$5_vs_$10.jsonl"
    shutil.copyfile(run_files[0], dollar)
    packed = tmp_path / "packed.jsonl"
    packed.with_name("packed.jsonl.gz").write_bytes(gzip.compress(run_files[1].read_bytes()))
    out = write_report([dollar, packed, run_files[0], run_files[0]], tmp_path / "r.html")
    page = out.read_text(encoding="utf-8")
    assert "cost_$5_vs_$10" in page and "packed" in page
    assert f"{run_files[0].stem} (2)" in page and f">/{run_files[0].stem}<" not in page
    folder = tmp_path / "reports"
    folder.mkdir()
    with pytest.raises(ValueError, match="is a folder"):
        write_report([dollar], folder)
    assert not list(tmp_path.glob("*.tmp"))
