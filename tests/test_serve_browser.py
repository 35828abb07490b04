"""``sqlweave serve``'s page in a real browser (issue 62): uvicorn on a free loopback port in a
background thread serving a DummyLM program, and Debian's headless Chromium loading
``/?q=...&db=...``, which the page asks on load. ``--dump-dom`` shows what the page rendered
(the SQL, a row, the confidence and its "not sure" badge, an alternative, the schema browser);
a screenshot checks that it paints. ``SQLWEAVE_WRITE_SCREENSHOT=1`` copies it to
``docs/img/serve.png``.

Skips where Chromium or the serve extra is missing.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from conftest import DEMO_CONCERT_DB, browse, chromium
from dspy.utils import DummyLM

pytest.importorskip(
    "starlette", reason="the serve extra is not installed: pip install 'sqlweave[serve]'"
)
pytest.importorskip(
    "uvicorn", reason="the serve extra is not installed: pip install 'sqlweave[serve]'"
)

from test_serve import running  # noqa: E402

from sqlweave.api import CompiledProgram  # noqa: E402
from sqlweave.programs import get  # noqa: E402
from sqlweave.serve import create_app  # noqa: E402

SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "img" / "serve.png"
SQL = "SELECT Name, Country, Age FROM singer WHERE Age > 30 ORDER BY Age DESC"
ALT = "SELECT Name, Country, Age FROM singer ORDER BY Age ASC"
QUESTION = "Who are the singers, oldest first?"
CAVEAT = "the query uses 30, a number the question does not state"  # the program's own


class Unsure(CompiledProgram):
    """Answers with a confidence under the shipped threshold and one alternative (the page's
    badge and alternatives need something to show); its SQL's ``30``, which the question never
    states, gives the caveat."""

    def forward(self, question: str, db: Any = None, **kwargs: Any) -> Any:
        result = super().forward(question, db=db, **kwargs)
        alt = db.execute(ALT)
        result["confidence"] = 0.42
        result["low_confidence"] = True
        result["alternatives"] = [
            {"sql": ALT, "columns": list(alt.columns), "rows": list(alt.rows), "share": 0.33}
        ]
        return result


def _text(dom: str, element_id: str) -> str:
    match = re.search(rf'<[a-z]+[^>]* id="{element_id}"[^>]*>(.*?)</', dom, re.S)
    return html.unescape(match.group(1)) if match else ""


def test_the_page_asks_and_shows_the_answer_in_chromium(tmp_path: Path) -> None:
    browser = chromium()
    app = create_app(
        Unsure(get("direct")),
        {"concert_singer": DEMO_CONCERT_DB},
        lm=DummyLM({"": {"sql": SQL}}),
        model="dummy",
    )
    query = urllib.parse.urlencode({"q": QUESTION, "db": "concert_singer"})
    with running(app) as base:
        url = f"{base}/?{query}"
        dumped = browse(
            browser, tmp_path / "profile1", "--virtual-time-budget=8000", "--dump-dom", url
        )
        shot = tmp_path / "serve.png"
        taken = browse(
            browser, tmp_path / "profile2", "--virtual-time-budget=8000",
            f"--screenshot={shot}", "--window-size=1200,900", url,
        )  # fmt: skip
    dom = dumped.stdout
    assert 'id="answer"' in dom, dumped.stderr[-2000:]
    assert _text(dom, "sql") == SQL, dom[-3000:]
    assert "Joe Sharp" in dom  # the oldest singer: the first row
    assert _text(dom, "confidence") == "42%"
    assert re.search(r'id="unsure"(?![^>]*hidden)', dom), "the not-sure badge is hidden"
    assert html.escape(ALT) in dom and "33% of the samples" in dom
    assert re.search(r'id="caveats"(?![^>]*hidden)', dom) and f"check: {CAVEAT}" in dom
    assert "4 rows" in dom
    # The schema browser lists the tables and their columns.
    assert "<summary>singer (7)</summary>" in dom and ">Singer_ID<" in dom
    assert _text(dom, "timing").endswith(" s on concert_singer")
    # The tables the SQL uses open in the schema browser; the others stay closed.
    assert '<details data-table="singer" open="">' in dom
    assert '<details data-table="concert">' in dom
    assert re.search(r'id="error"[^>]*hidden', dom)
    assert shot.is_file() and shot.stat().st_size > 10_000, taken.stderr[-2000:]
    if os.environ.get("SQLWEAVE_WRITE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)


def test_model_output_is_shown_as_text_not_html(tmp_path: Path) -> None:
    browser = chromium()
    sneaky = "SELECT '<img src=x onerror=alert(1)>' AS \"<b>bold</b>\" FROM singer LIMIT 1"
    app = create_app(
        "direct", {"concert_singer": DEMO_CONCERT_DB}, lm=DummyLM({"": {"sql": sneaky}})
    )
    query = urllib.parse.urlencode({"q": "<script>alert(1)</script>"})
    with running(app) as base:
        dumped = browse(
            browser, tmp_path / "profile", "--virtual-time-budget=8000", "--dump-dom",
            f"{base}/?{query}",
        )  # fmt: skip
    dom = dumped.stdout
    assert _text(dom, "sql") == sneaky, dom[-3000:]
    assert "<img" not in dom and "<b>bold" not in dom
    assert "&lt;img src=x onerror=alert(1)&gt;" in dom and "&lt;b&gt;bold&lt;/b&gt;" in dom
