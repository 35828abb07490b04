"""Record (and replay) the exact messages every seed program sends, for every ablation.

Issue 14 restructures the seed pipelines into shared stages with their behaviour kept. This is the
evidence: each program in :func:`sqlweave.programs.available` is run, configuration by
configuration (``cls.ABLATIONS``), on bundled Spider dev questions against a scripted LM, and every
call's messages are written to ``tests/fixtures/prompts/<program>__<config>.json``.
``tests/test_prompt_fixtures.py`` replays the same runs and compares byte for byte.

Everything comes from the demo bundle shipped in the package (``sqlweave/demo``): the questions,
their databases and the default demo pool (its train split), so the replay runs on a bare checkout
or a pip install without ``../shared/data``. Retrieval is offline: the sentence encoder is the
locally installed all-MiniLM-L6-v2, the graph retriever the shipped GNN checkpoint.

The scripted LM answers from the prompt alone (so the answers, and hence the next prompts, do not
depend on call order across programs): a count over the first table of the schema it was shown,
deliberately broken for one question in three so the correction stages run, a column list for the
linker, one element list per field for RSL's extraction, candidate 1 for the selector.

Run ``python tests/record_prompts.py`` (under ``nice``) after a change that is *meant* to change a
prompt, and list the changed fixtures with their reason in the commit message.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy
from dspy.clients.engines.dummy_engine import AsyncDummyEngine, DummyEngine
from dspy.utils import DummyLM

REPO = Path(__file__).resolve().parents[1]
DEMO_ROOT = REPO / "sqlweave" / "demo"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "prompts"

#: Questions per configuration: the issue's 20 for each program's ``full`` configuration, and the
#: first few of those for every other ablation, which keeps the replay under a minute.
FULL_QUESTIONS = 20
ABLATION_QUESTIONS = 3

_TABLE_PATTERNS = (
    re.compile(r"CREATE TABLE\s+[`\"\[]?(\w+)", re.I),  # DDL
    re.compile(r"^#\s*(\w+)\s*\(", re.M),  # PET / SEA: "# table(col, ...)"
    re.compile(r"^(\w+)\.\w+ \(", re.M),  # Dubo: "table.column (TYPE). Example values: ..."
)
_COLUMN_LINE = re.compile(
    r"^\s*[`\"\[]?(\w+)[`\"\]]?\s+(?:INTEGER|INT|TEXT|REAL|NUMBER|VARCHAR|CHAR|NUMERIC|BOOL"
    r"|FLOAT|DOUBLE|DATE|TIME|BLOB)",
    re.I | re.M,
)


# --- questions and configurations --------------------------------------------------------------


def questions(n: int = FULL_QUESTIONS) -> list[dspy.Example]:
    """``n`` bundled Spider dev questions spread evenly over the file (so over its databases)."""
    from sqlweave.data import load_spider

    dev = load_spider("dev", root=DEMO_ROOT)
    step = len(dev) // FULL_QUESTIONS
    return [dev[i * step] for i in range(FULL_QUESTIONS)][:n]


def configurations() -> list[tuple[str, str, dict[str, Any]]]:
    """``(program, config, switches)`` for every registered program (aliases once) and ablation."""
    from sqlweave import programs

    out = []
    for name in programs.available():
        cls = programs.program_class(name)
        if cls.name != name:  # an alias ("dubo" is dubo_v2)
            continue
        for config, switches in cls.ABLATIONS.items():
            out.append((name, config, dict(switches)))
    return out


def fixture_path(program: str, config: str) -> Path:
    return FIXTURES / f"{program}__{config}.json"


# --- the scripted LM ---------------------------------------------------------------------------


def _first_table(text: str) -> str | None:
    for pattern in _TABLE_PATTERNS:
        found = pattern.search(text)
        if found:
            return found.group(1)
    return None


def _question_of(messages: list[dict[str, str]]) -> str:
    """The question the final turn asks (the text after its last ``question`` marker)."""
    last = messages[-1]["content"]
    for marker in (
        "[[ ## question ## ]]\n",
        "answer the following question for the tables provided above.\n",
        "Question: ",
    ):
        if marker in last:
            return last.rsplit(marker, 1)[1].split("\n\n", 1)[0]
    return last[-200:]


def _sql(messages: list[dict[str, str]], *, may_break: bool, salt: Any = None) -> str:
    """A query over the first table shown: broken for one question in three (drafts only, so
    correction stages run), else one of three answers picked by the whole prompt (and the
    rollout), so votes and selections see different results and MageSQL sees a hard case."""
    last = messages[-1]["content"]
    table = _first_table(last) or _first_table("\n".join(m["content"] for m in messages))
    if table is None:
        return "SELECT 1"
    if may_break and zlib.crc32(_question_of(messages).encode()) % 3 == 0:
        return f"SELECT count(no_such_column) FROM {table}"
    variant = zlib.crc32(f"{salt}|{last}".encode()) % 3
    if variant == 1:
        return f"SELECT count(*) + 1 FROM {table}"
    if variant == 2:
        return f"SELECT count(*) FROM {table} UNION SELECT count(*) FROM {table}"
    return f"SELECT count(*) FROM {table}"


def _is_fix(last: str) -> bool:
    """Whether the prompt carries execution feedback (a correction call)."""
    return "-- Feedback" in last or "[[ ## feedback ## ]]" in last


def _columns(text: str) -> list[str]:
    table = _first_table(text)
    if table is None:
        return []
    after = text[text.find(table) :]
    column = _COLUMN_LINE.search(after)
    return [f"{table}.{column.group(1)}"] if column else [f"{table}.*"]


def respond(messages: list[dict[str, str]], salt: Any = None) -> str:
    """The scripted reply to one call, from its messages (and rollout ``salt``) alone."""
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    last = messages[-1]["content"]
    if "Your output fields are:" in system:  # ChatAdapter / JSONAdapter: typed or several outputs
        fields = re.findall(r"^\d+\. `(\w+)`", system.split("Your output fields are:", 1)[1], re.M)
        values: dict[str, Any] = {}
        for field in fields:
            if field == "columns":
                values[field] = _columns(last)
            elif field == "choice":
                values[field] = 1 + zlib.crc32(last.encode()) % 2
            elif field in ("elements", "conditions", "keywords"):
                values[field] = [f"{field} of the question"]
            elif field.endswith("sql"):
                values[field] = _sql(messages, may_break=not _is_fix(last), salt=salt)
            else:
                values[field] = f"the {field}"
        if "Outputs will be a JSON object" in system:
            return json.dumps(values, indent=2)
        body = "".join(
            f"[[ ## {k} ## ]]\n{v if isinstance(v, str | int) else json.dumps(v)}\n\n"
            for k, v in values.items()
        )
        return body + "[[ ## completed ## ]]"
    if system and "Answer with the" in last:  # SQLAdapter, a text output (a reason)
        return "The query names a column the table does not have."
    # A SQL-writing prompt: drafts and reviews may be broken; a fix from feedback never is.
    return _sql(messages, may_break=not _is_fix(last), salt=salt)


class _Engine(DummyEngine):
    def _complete_messages(self, messages):  # type: ignore[override]
        from dspy.lm15 import Message, Response, TextPart, Usage

        owner = self.owner
        call: dict[str, Any] = {"messages": [dict(m) for m in messages]}
        for key in ("temperature", "rollout_id"):
            if owner.kwargs.get(key) not in (None, 0, 0.0):
                call[key] = owner.kwargs[key]
        owner.calls.append(call)
        return Response(
            id=None,
            model="dummy",
            message=Message.assistant(
                [TextPart(respond(messages, owner.kwargs.get("rollout_id")))]
            ),
            finish_reason="stop",
            usage=Usage(input_tokens=0, output_tokens=0, total_tokens=0),
        )


class ScriptedLM(DummyLM):
    """A DummyLM answering with :func:`respond`; its copies (rollouts) share its call log."""

    def __init__(self) -> None:
        super().__init__([])
        self.calls: list[dict[str, Any]] = []
        self._install()

    def _install(self) -> None:
        self._engine_spec = _Engine(self)
        self._async_engine_spec = AsyncDummyEngine(self._engine_spec)

    def copy(self, **kwargs: Any) -> ScriptedLM:
        copied = super().copy(**kwargs)
        copied._install()
        return copied


# --- running -----------------------------------------------------------------------------------


@contextlib.contextmanager
def demo_environment() -> Iterator[None]:
    """Default pools from the demo bundle, with the process-wide pool caches emptied around it."""
    from sqlweave.programs.stages import pools

    def clear() -> None:
        pools._load.cache_clear()
        with pools._RETRIEVERS_LOCK:
            pools._RETRIEVERS.clear()

    saved = os.environ.get("SQLWEAVE_DATA")
    os.environ["SQLWEAVE_DATA"] = str(DEMO_ROOT)
    clear()
    try:
        yield
    finally:
        clear()
        if saved is None:
            os.environ.pop("SQLWEAVE_DATA", None)
        else:
            os.environ["SQLWEAVE_DATA"] = saved


def record(program: str, config: str, switches: dict[str, Any]) -> dict[str, Any]:
    """Run one configuration on its questions; the fixture's content (call in demo_environment)."""
    from sqlweave import programs

    n = FULL_QUESTIONS if config == "full" else ABLATION_QUESTIONS
    module = programs.get(program, **switches)
    items = []
    for ex in questions(n):
        lm = ScriptedLM()
        # An empty adapter setting: programs install their own default, as for a user.
        with dspy.context(lm=lm, adapter=None):
            module(**ex.inputs())
        items.append({"question_id": ex.question_id, "calls": lm.calls})
    return {"program": program, "config": config, "switches": switches, "questions": items}


def dumps(fixture: dict[str, Any]) -> str:
    """The stored form: compact JSON, one question per line, so a diff shows which one moved."""
    head = {k: v for k, v in fixture.items() if k != "questions"}
    lines = [json.dumps(head, ensure_ascii=False, sort_keys=True)[:-1] + ', "questions": [']
    items = fixture["questions"]
    for i, item in enumerate(items):
        sep = "," if i < len(items) - 1 else ""
        lines.append(json.dumps(item, ensure_ascii=False, separators=(",", ":")) + sep)
    lines.append("]}")
    return "\n".join(lines) + "\n"


def _call_lines(call: dict[str, Any]) -> list[str]:
    lines = [f"{k}: {v}" for k, v in call.items() if k != "messages"]
    for message in call["messages"]:
        lines.append(f"<{message['role']}>")
        lines.extend(message["content"].splitlines())
    return lines


def describe_difference(expected: dict[str, Any], actual: dict[str, Any], context: int = 3) -> str:
    """A readable account of the first difference between two fixtures ("" when equal)."""
    import difflib

    name = f"{expected.get('program')}__{expected.get('config')}"
    for key in ("program", "config", "switches"):
        if expected.get(key) != actual.get(key):
            return f"{name}: {key} {expected.get(key)!r} became {actual.get(key)!r}"
    want, got = expected["questions"], actual["questions"]
    if [q["question_id"] for q in want] != [q["question_id"] for q in got]:
        return f"{name}: questions changed"
    for q_want, q_got in zip(want, got, strict=True):
        qid = q_want["question_id"]
        calls_want, calls_got = q_want["calls"], q_got["calls"]
        for i, (a, b) in enumerate(zip(calls_want, calls_got, strict=False)):
            if a != b:
                diff = difflib.unified_diff(
                    _call_lines(a), _call_lines(b), "recorded", "now", n=context, lineterm=""
                )
                return f"{name}, {qid}, call {i + 1} of {len(calls_want)} differs:\n" + "\n".join(
                    diff
                )
        if len(calls_want) != len(calls_got):
            return (
                f"{name}, {qid}: {len(calls_want)} calls recorded, {len(calls_got)} now "
                f"(the first {min(len(calls_want), len(calls_got))} are equal)"
            )
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="program names or program__config")
    args = parser.parse_args(argv)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    total = 0
    with demo_environment():
        for program, config, switches in configurations():
            key = f"{program}__{config}"
            if args.only and program not in args.only and key not in args.only:
                continue
            start = time.perf_counter()
            fixture = record(program, config, switches)
            text = dumps(fixture)
            fixture_path(program, config).write_text(text, encoding="utf-8")
            calls = sum(len(q["calls"]) for q in fixture["questions"])
            total += len(text)
            print(
                f"{key:45s} {len(fixture['questions']):3d} questions {calls:4d} calls "
                f"{len(text) / 1024:8.1f} KiB {time.perf_counter() - start:6.1f} s"
            )
    print(f"total {total / 1024:.1f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
