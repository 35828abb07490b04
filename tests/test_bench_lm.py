"""experiments/bench_lm.py end to end on a stand-in model, so a real run (tens of minutes on the
1.5B model) does not die on its plumbing: every mode, the summaries, the checks, the JSON."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sqlweave.lm import CallStats, PromptStates, loading

llama_cpp = pytest.importorskip("llama_cpp")  # patched below; no model is loaded

BENCH = Path(__file__).resolve().parents[1] / "experiments" / "bench_lm.py"
TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_lm", BENCH)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


class Oracle:
    """A stand-in model that answers each known question with its gold SQL."""

    def __init__(self, gold: dict[str, str], **_: Any) -> None:
        self.gold = gold
        self._ctx = SimpleNamespace(ctx=None)
        self.metadata = {"tokenizer.chat_template": TEMPLATE}
        self._model = SimpleNamespace(token_get_text=lambda token: "")
        self.prompt_states = PromptStates()
        self.call_stats = CallStats()
        self.resets = 0

    def token_eos(self) -> int:
        return 0

    def token_bos(self) -> int:
        return 0

    def reset(self) -> None:
        self.resets += 1

    def begin_call(self, **_: Any) -> None:
        self.call_stats = CallStats(prompt_eval_tokens=5, prompt_eval_ms=1.0, decode_steps=3)

    def _answer(self, prompt: str) -> str:
        asked = [q for q in self.gold if q in prompt]
        return self.gold[max(asked, key=len)] if asked else "SELECT 1"

    def create_chat_completion(self, messages: list[dict[str, str]], **_: Any) -> dict[str, Any]:
        text = self._answer(" ".join(m["content"] for m in messages))
        return {
            "choices": [{"message": {"content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 4},
        }

    def create_completion(self, prompt: str, **_: Any) -> dict[str, Any]:
        sql = self._answer(prompt)
        rest = re.sub(r"(?i)^\s*select", "", sql)  # the prompt ends in a prefilled SELECT
        return {
            "choices": [{"text": rest, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 60, "completion_tokens": 4},
        }


def load_stand_in(monkeypatch: pytest.MonkeyPatch, oracle: Oracle) -> None:
    """Every local engine loads ``oracle``; llama.cpp's perf counters read fixed figures."""
    monkeypatch.setattr(loading, "load_llama", lambda *a, **k: loading.Loaded(oracle))
    monkeypatch.setattr(llama_cpp, "llama_perf_context_reset", lambda ctx: None)
    monkeypatch.setattr(
        llama_cpp,
        "llama_perf_context",
        lambda ctx: SimpleNamespace(n_p_eval=50, t_p_eval_ms=2.0, n_eval=3, t_eval_ms=1.0),
    )


def stand_in_questions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int
) -> tuple[Oracle, Path]:
    """The first ``n`` questions of spider-dev-200 answered with their gold SQL by every model
    the benchmark loads (sqlweave's and the plain script's); a stand-in GGUF file to name."""
    from sqlweave.data import load_slice

    gold = {ex.question: ex.gold_sql for ex in load_slice("spider-dev-200")[:n]}
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    oracle = Oracle(gold)
    load_stand_in(monkeypatch, oracle)
    monkeypatch.setattr(llama_cpp, "Llama", lambda **kwargs: Oracle(gold, **kwargs))
    return oracle, gguf


@pytest.mark.timeout(300)
def test_bench_runs_every_mode_on_a_stand_in_model(
    data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    oracle, gguf = stand_in_questions(tmp_path, monkeypatch, 3)
    out = tmp_path / "bench.json"
    argv = ["bench_lm.py", "--model", f"gguf:{gguf}", "--limit", "3", "--samples", "3"]
    monkeypatch.setattr(sys, "argv", [*argv, "--n-threads", "1", "--out", str(out)])
    _bench().main()

    results = json.loads(out.read_text())
    assert list(results["modes"]) == ["plain", "naive", "direct", "direct_lookup", "sc8"]
    for name, mode in results["modes"].items():
        summary = mode["summary"]
        assert summary["n"] == 3 and summary["ex"] == 1.0, (name, mode["rows"])
        assert summary["s_per_question"] > 0 and "decode_tok_per_s" in summary
    # The oracle's answers agree: after two of three the vote is settled (the third is not drawn).
    assert results["modes"]["sc8"]["summary"]["calls_per_question"] == 2
    assert results["modes"]["direct"]["summary"]["prompt_tokens_evaluated_per_question"] == 5
    checks = results["checks"]
    for name in ("lookup_identical_completions", "sc_greedy_is_direct", "naive_sql_is_plain_sql"):
        assert checks[name]["identical"] == 3 and checks[name]["differ"] == [], name
    assert {"direct_over_plain", "sc_over_direct", "lookup_speedup"} <= set(checks)
    assert results["settings"]["n_threads"] == 1 and results["settings"]["questions"] == 3
    assert oracle.resets == 4  # every sqlweave mode starts with an empty KV cache
    printed = capsys.readouterr().out
    assert "sc_greedy_is_direct: 3/3 identical" in printed and f"wrote {out}" in printed


@pytest.mark.timeout(300)
def test_rounds_alternate_the_order_and_pool_each_mode(
    data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    oracle, gguf = stand_in_questions(tmp_path, monkeypatch, 2)
    bench = _bench()
    ran: list[str] = []
    real = bench.run_sqlweave

    def spy(mode: str, *args: Any, **kwargs: Any) -> Any:
        ran.append(mode)
        return real(mode, *args, **kwargs)

    monkeypatch.setattr(bench, "run_sqlweave", spy)
    out = tmp_path / "bench.json"
    argv = ["bench_lm.py", "--model", f"gguf:{gguf}", "--limit", "2", "--modes", "direct", "sc8"]
    monkeypatch.setattr(
        sys, "argv", [*argv, "--rounds", "3", "--n-threads", "1", "--out", str(out)]
    )
    bench.main()

    results = json.loads(out.read_text())
    assert ran == ["direct", "sc8", "sc8", "direct", "direct", "sc8"]
    assert results["settings"]["order"] == [["direct", "sc8"], ["sc8", "direct"], ["direct", "sc8"]]
    for mode in ("direct", "sc8"):
        entry = results["modes"][mode]
        assert entry["summary"]["n"] == 6 and len(entry["rows"]) == 2
        assert [r["n"] for r in entry["rounds"]] == [2, 2, 2]
        pooled = sum(r["s_per_question"] for r in entry["rounds"]) / 3
        assert entry["summary"]["s_per_question"] == pytest.approx(pooled)
