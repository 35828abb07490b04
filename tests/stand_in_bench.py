"""Run a benchmark script of ``experiments/`` on a stand-in model, in this (fresh) process.

    python tests/stand_in_bench.py GOLD.json REPORT.json experiments/bench_lm.py ARGS...

Every model the script loads (sqlweave's engine and the plain llama-cpp-python script alike) is
an :class:`Oracle` answering each question of ``GOLD.json`` (``{question: gold SQL}``) with its
gold SQL; llama.cpp's perf counters read fixed figures. The script then runs as
``python SCRIPT ARGS...`` would (``runpy``, as ``__main__``, its folder first on the path), and
``REPORT.json`` says what the stand-in saw: ``resets`` (of the shared model's KV cache),
``programs`` (each ``sqlweave.programs.get`` call: name and switches) and ``calls`` (per model
call, the ids of this process's children spinning ``while True`` at that moment, the busy load
of ``bench_busy.py``). The tests of the benchmarks run this: no test imports an experiment.
"""

from __future__ import annotations

import json
import os
import re
import runpy
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)

REPORT: dict[str, Any] = {"resets": 0, "programs": [], "calls": []}


def spinning_children() -> list[int]:
    """This process's children running a ``while True`` loop (``bench_busy.busy_processes``)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if ppid == os.getpid() and b"while True" in command:
            found.append(int(stat.parent.name))
    return sorted(found)


class Oracle:
    """A stand-in model that answers each known question with its gold SQL."""

    def __init__(self, gold: dict[str, str], shared: bool = False, **_: Any) -> None:
        from sqlweave.lm import CallStats, PromptStates

        self.gold = gold
        self.shared = shared
        self._ctx = SimpleNamespace(ctx=None)
        self.metadata = {"tokenizer.chat_template": TEMPLATE}
        self._model = SimpleNamespace(token_get_text=lambda token: "")
        self.prompt_states = PromptStates()
        self.call_stats = CallStats()

    def token_eos(self) -> int:
        return 0

    def token_bos(self) -> int:
        return 0

    def reset(self) -> None:
        if self.shared:
            REPORT["resets"] += 1

    def begin_call(self, **_: Any) -> None:
        from sqlweave.lm import CallStats

        self.call_stats = CallStats(prompt_eval_tokens=5, prompt_eval_ms=1.0, decode_steps=3)

    def _answer(self, prompt: str) -> str:
        REPORT["calls"].append(spinning_children())
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


def stand_in(gold: dict[str, str]) -> None:
    """Every model loaded from now on is an :class:`Oracle` (sqlweave's engines share one)."""
    import llama_cpp

    from sqlweave import programs
    from sqlweave.lm import loading

    oracle = Oracle(gold, shared=True)
    loading.load_llama = lambda *a, **k: loading.Loaded(oracle)
    llama_cpp.Llama = lambda **kwargs: Oracle(gold, **kwargs)
    llama_cpp.llama_perf_context_reset = lambda ctx: None
    llama_cpp.llama_perf_context = lambda ctx: SimpleNamespace(
        n_p_eval=50, t_p_eval_ms=2.0, n_eval=3, t_eval_ms=1.0
    )
    get = programs.get

    def recorded_get(name: str, **switches: Any) -> Any:
        REPORT["programs"].append([name, switches])
        return get(name, **switches)

    programs.get = recorded_get


def main() -> None:
    gold_file, report_file, script, *args = sys.argv[1:]
    stand_in(json.loads(Path(gold_file).read_text()))
    sys.argv = [script, *args]
    sys.path[0] = str(Path(script).resolve().parent)  # as `python SCRIPT` puts it
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        Path(report_file).write_text(json.dumps(REPORT, default=str))


if __name__ == "__main__":
    main()
