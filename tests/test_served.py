"""A real served model: llama.cpp's OpenAI-compatible server on loopback, driven by the CLI.

The fixture starts ``python -m llama_cpp.server`` with the 0.5B model on a free loopback port and
waits for ``/v1/models``; the test runs ``sqlweave evaluate --model openai/<alias> --api-base ...``
through LiteLLM, once with four client threads and once sequentially, each with a fresh DSPy cache
so that both runs really ask the server, and checks that the records agree (greedy decoding).

Where the ``served`` extra or the model is missing the test skips, unless
``SQLWEAVE_LM_TEST_MODEL`` is set (``scripts/test.sh`` sets it, so CI fails instead of skipping).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import DEMO_ROOT as BUNDLE

pytestmark = [pytest.mark.served, pytest.mark.lm]

MODEL = "qwen2.5-coder-0.5b"
SERVER_MODULES = ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context")
N_QUESTIONS = 4
# Compared fields: everything the model's answer decides (seconds and call timing differ).
SAME = ("pred_sql", "correct", "error", "error_kind")
SAME_USAGE = ("calls", "prompt_tokens", "completion_tokens")


def _unavailable(reason: str) -> None:
    if os.environ.get("SQLWEAVE_LM_TEST_MODEL"):
        pytest.fail(f"{reason} (required where SQLWEAVE_LM_TEST_MODEL is set, as in CI)")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama.cpp server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise TimeoutError(f"llama.cpp server not ready at {url} after {timeout_s:.0f}s")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The ``/v1`` base URL of a llama.cpp server serving the 0.5B model as ``MODEL``."""
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
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(weights),
        "--model_alias",
        MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "8192",
    ]
    with open(log, "wb") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    try:
        _wait_ready(f"http://127.0.0.1:{port}/v1/models", proc, timeout_s=120)
        yield f"http://127.0.0.1:{port}/v1"
    except (RuntimeError, TimeoutError) as err:
        pytest.fail(f"{err}; server log:\n{log.read_text(errors='replace')[-3000:]}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _evaluate(api_base: str, threads: int, tmp: Path) -> dict[str, dict]:
    out = tmp / f"threads{threads}.jsonl"
    env = {
        **os.environ,
        # A fresh DSPy disk cache per run: the second run must ask the server, not the cache.
        "DSPY_CACHEDIR": str(tmp / f"dspy-cache-{threads}"),
        # LiteLLM's OpenAI client wants a key; llama.cpp's server started without one ignores it.
        "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", "sk-local"),
        # No fetch of LiteLLM's price map from GitHub on the first call (CI may be offline).
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    command = [
        sys.executable,
        "-c",
        "from sqlweave.cli import app; app()",
        "evaluate",
        "--program",
        "direct",
        "--dataset",
        "spider",
        "--data-root",
        str(BUNDLE),
        "--n",
        str(N_QUESTIONS),
        "--model",
        f"openai/{MODEL}",
        "--api-base",
        api_base,
        "--threads",
        str(threads),
        "--out",
        str(out),
        "--no-resume",
        "--no-progress",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {r["question_id"]: r for r in records}


def test_evaluate_against_a_served_model_is_the_same_with_threads(
    server: str, tmp_path: Path
) -> None:
    parallel = _evaluate(server, 4, tmp_path)
    sequential = _evaluate(server, 1, tmp_path)
    assert len(parallel) == N_QUESTIONS and parallel.keys() == sequential.keys()
    for qid, record in sequential.items():
        other = parallel[qid]
        assert {k: other[k] for k in SAME} == {k: record[k] for k in SAME}, qid
        # Every call reached the server (no cache hit) and used the same tokens.
        assert record["usage"]["calls"] >= 1 and record["usage"]["cached_calls"] == 0
        assert other["usage"]["cached_calls"] == 0
        assert {k: other["usage"][k] for k in SAME_USAGE} == {
            k: record["usage"][k] for k in SAME_USAGE
        }, qid
    assert any(r["pred_sql"].strip() for r in sequential.values())
