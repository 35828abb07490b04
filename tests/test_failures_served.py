"""A served model that goes away and comes back (issue 35), end to end through the CLI.

llama.cpp's OpenAI-compatible server (``python -m llama_cpp.server``, the 0.5B model) is
started on a loopback port, answers one run, is stopped, and is started again on the same port.
While it is down, ``sqlweave evaluate`` and ``sqlweave compile`` exit non-zero with one
``error:`` line naming the endpoint and write no finished work; once it is back, the resumed
evaluation answers every question.

Skips where the ``served`` extra or the weights are missing, unless ``SQLWEAVE_LM_TEST_MODEL`` is
set (as in CI), as ``test_served`` does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import DEMO_ROOT as BUNDLE
from test_served import MODEL, SERVER_MODULES, _free_port, _unavailable, _wait_ready

pytestmark = [pytest.mark.served, pytest.mark.lm]


class Server:
    """llama.cpp's server on one loopback port, which can be stopped and started again."""

    def __init__(self, weights: Path, port: int, log: Path) -> None:
        self.weights, self.port, self.log = weights, port, log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        command = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.weights),
            "--model_alias",
            MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            "8192",
        ]
        with open(self.log, "ab") as sink:
            self.proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        try:
            _wait_ready(f"{self.api_base}/models", self.proc, timeout_s=120)
        except (RuntimeError, TimeoutError) as err:
            self.stop()
            pytest.fail(f"{err}; server log:\n{self.log.read_text(errors='replace')[-3000:]}")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    missing = [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        _unavailable(
            f"the served extra is not installed ({', '.join(missing)}): pip install 'sqlweave[served]'"
        )
    from sqlweave import models

    try:
        weights = models.ensure_model(MODEL)
    except models.ModelError as err:
        _unavailable(f"no {MODEL} weights: {err}")
    running = Server(weights, _free_port(), tmp_path / "server.log")
    try:
        yield running
    finally:
        running.stop()


def _sqlweave(args: list[str], server: Server, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        # A DSPy disk cache of the run's own: its calls must reach the server (or fail to).
        "DSPY_CACHEDIR": str(cache),
        "OPENAI_API_KEY": "sk-local",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    command = [sys.executable, "-c", "from sqlweave.cli import app; app()", *args]
    command += ["--model", f"openai/{MODEL}", "--api-base", server.api_base, "--no-progress"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


def _evaluate(server: Server, out: Path, n: int, tmp: Path) -> subprocess.CompletedProcess[str]:
    args = ["evaluate", "--dataset", "spider", "--data-root", str(BUNDLE), "--n", str(n)]
    # One cache per output file: the resumed run shares it with the failed one, which must
    # have cached nothing; the first run's answers must not serve the second.
    return _sqlweave([*args, "--out", str(out)], server, tmp / f"dspy-cache-{out.stem}")


def _records(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _one_error_line(done: subprocess.CompletedProcess[str], server: Server) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert f"127.0.0.1:{server.port}" in errors[0] and "unreachable" in errors[0], errors[0]


def test_a_server_that_goes_away_stops_the_run_and_a_resumed_run_answers_all(
    server: Server, tmp_path: Path
) -> None:
    # Up: a run answers.
    server.start()
    first = tmp_path / "first.jsonl"
    done = _evaluate(server, first, 2, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(_records(first)) == 2

    # Down: evaluate and compile stop with one line naming the endpoint, and record nothing.
    server.stop()
    out = tmp_path / "run.jsonl"
    down = _evaluate(server, out, 3, tmp_path)
    _one_error_line(down, server)
    assert _records(out) == []
    ckpt = tmp_path / "c.ckpt.json"
    compiled = _sqlweave(
        [
            "compile",
            "--data-root",
            str(BUNDLE),
            "--n-train",
            "2",
            "--out",
            str(tmp_path / "c.json"),
            "--checkpoint",
            str(ckpt),
        ],
        server,
        tmp_path / "dspy-cache-compile",
    )
    _one_error_line(compiled, server)
    assert not (tmp_path / "c.json").exists()
    saved = json.loads(ckpt.read_text()) if ckpt.is_file() else {"entries": {}, "lm_calls": 0}
    assert saved["entries"] == {} and saved["lm_calls"] == 0

    # Back: the same command resumes and answers every question, each with a call that
    # reached the server.
    server.start()
    back = _evaluate(server, out, 3, tmp_path)
    assert back.returncode == 0, back.stdout + back.stderr
    records = _records(out)
    assert len(records) == 3
    assert all(r["error_kind"] != "program" for r in records), records
    assert all(r["usage"]["calls"] >= 1 and r["usage"]["cached_calls"] == 0 for r in records)
