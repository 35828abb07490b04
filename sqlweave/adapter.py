"""A plain-prompt DSPy adapter for signatures whose single output is SQL (or other free text).

DSPy's ChatAdapter wraps every field in ``[[ ## name ## ]]`` markers and describes the format in
a system message. Large served models follow that easily; a 0.5B–1.5B local model spends its
attention on the markup, writes the markers into its SQL, and over-joins tables. For a signature
with exactly one text output, :class:`SQLAdapter` sends what text-to-SQL papers send instead:

* system: the signature's instructions (what the optimizer tunes);
* user: each non-empty input as a labelled block, the question last, then one line asking for
  the output alone;
* demos: the same user block and the bare answer as the assistant turn;
* for SQL outputs on the local llama.cpp engine, the assistant turn is prefilled with ``SELECT``
  (the engine continues it), the "prefilled SELECT" of SEA-SQL and the naive baselines.

The reply is the whole completion; SQL outputs are cleaned by
:func:`sqlweave.sqltext.extract_sql`. Signatures with several or typed outputs (lists, ints) fall
back to ChatAdapter without its JSON retry, so a garbage reply costs one call, not two.
"""

from __future__ import annotations

import logging
from typing import Any

import dspy
from dspy.adapters.chat_adapter import ChatAdapter
from dspy.clients._deprecation import adapter_message_call
from dspy.signatures.signature import Signature

from sqlweave.sqltext import extract_sql, field_body

logger = logging.getLogger(__name__)

_LABELS = {
    "db_schema": "Database schema",
    "evidence": "Evidence (external knowledge)",
    "question": "Question",
    "sql": "SQL",
    "hints": "Hints",
    "feedback": "Feedback",
    "execution_result": "Execution result",
}


def _label(name: str) -> str:
    return _LABELS.get(name, name.replace("_", " ").capitalize())


def _text_output(signature: type[Signature]) -> str | None:
    """The name of the signature's only output field if it is plain text, else None."""
    outputs = signature.output_fields
    if len(outputs) != 1:
        return None
    name, field = next(iter(outputs.items()))
    return name if field.annotation in (str, None) else None


def _is_sql_field(name: str) -> bool:
    return name == "sql" or name.endswith("_sql")


def _render_value(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "\n".join(f"- {item}" for item in value)
    return str(value).strip()


class SQLAdapter(ChatAdapter):
    """Plain prompts for single-text-output signatures; ChatAdapter (no JSON retry) otherwise.

    ``prefill``: ``"auto"`` prefills ``SELECT`` for SQL outputs when the LM runs on sqlweave's
    local engine (the only engine here that continues a partial assistant turn), ``True`` always,
    ``False`` never.
    """

    def __init__(self, prefill: bool | str = "auto", **kwargs: Any) -> None:
        kwargs.setdefault("use_json_adapter_fallback", False)
        super().__init__(**kwargs)
        self.prefill = prefill

    def _wants_prefill(self, lm: Any, signature: type[Signature]) -> bool:
        output = _text_output(signature)
        if output is None or not _is_sql_field(output):
            return False
        if self.prefill == "auto":
            from sqlweave.lm import LlamaCppEngine

            return isinstance(getattr(lm, "engine", None), LlamaCppEngine)
        return bool(self.prefill)

    def __call__(self, lm, lm_kwargs, signature, demos, inputs):  # type: ignore[override]
        if _text_output(signature) is None:
            return super().__call__(lm, lm_kwargs, signature, demos, inputs)
        messages = self._plain_messages(
            signature, demos, inputs, prefill=self._wants_prefill(lm, signature)
        )
        with adapter_message_call(lm, messages):
            outputs = lm(messages=messages, **lm_kwargs)
        return self._call_postprocess(signature, signature, outputs, lm, lm_kwargs)

    async def acall(self, lm, lm_kwargs, signature, demos, inputs):  # type: ignore[override]
        if _text_output(signature) is None:
            return await super().acall(lm, lm_kwargs, signature, demos, inputs)
        messages = self._plain_messages(
            signature, demos, inputs, prefill=self._wants_prefill(lm, signature)
        )
        with adapter_message_call(lm, messages):
            outputs = await lm.acall(messages=messages, **lm_kwargs)
        return self._call_postprocess(signature, signature, outputs, lm, lm_kwargs)

    def format(self, signature, demos, inputs):  # type: ignore[override]
        if _text_output(signature) is None:
            return super().format(signature, demos, inputs)
        return self._plain_messages(signature, demos, inputs, prefill=False)

    def _plain_messages(
        self, signature: type[Signature], demos: list[Any], inputs: Any, *, prefill: bool
    ) -> list[dict[str, str]]:
        output = _text_output(signature) or ""
        messages: list[dict[str, str]] = [
            {"role": "system", "content": signature.instructions.strip()}
        ]
        for demo in demos:
            answer = demo.get(output) if hasattr(demo, "get") else None
            if not answer:
                continue
            messages.append({"role": "user", "content": self._user_block(signature, demo)})
            messages.append({"role": "assistant", "content": str(answer).strip()})
        messages.append({"role": "user", "content": self._user_block(signature, inputs)})
        if prefill:
            messages.append({"role": "assistant", "content": "SELECT"})
        return messages

    def _user_block(self, signature: type[Signature], values: Any) -> str:
        output = _text_output(signature) or ""
        get = values.get if hasattr(values, "get") else (lambda key, default=None: default)
        blocks: list[str] = []
        dialect = str(get("dialect", "") or "").strip()
        names = [n for n in signature.input_fields if n not in ("dialect", "question")]
        if "question" in signature.input_fields:
            names.append("question")
        for name in names:
            value = get(name, None)
            if value is None or (isinstance(value, str) and not value.strip()):
                continue
            text = _render_value(value)
            if not text:
                continue
            blocks.append(f"{_label(name)}:\n{text}" if "\n" in text else f"{_label(name)}: {text}")
        out_field = signature.output_fields.get(output)
        desc = getattr(out_field, "json_schema_extra", None) or {}
        what = desc.get("desc") or _label(output)
        if _is_sql_field(output):
            engine = f"{dialect} " if dialect else ""
            blocks.append(f"Answer with one {engine}SQL query only ({what}).")
        else:
            blocks.append(f"Answer with the {_label(output).lower()} only ({what}).")
        return "\n\n".join(blocks)

    def parse(self, signature, completion):  # type: ignore[override]
        output = _text_output(signature)
        if output is None:
            return super().parse(signature, completion)
        text = completion or ""
        if _is_sql_field(output):
            return {output: extract_sql(text)}
        return {output: field_body(text, prefer=output).strip()}


def default_adapter() -> SQLAdapter:
    """The adapter sqlweave programs use when the caller configured none."""
    return SQLAdapter()


def use_default_adapter() -> Any:
    """A context manager installing :class:`SQLAdapter` unless the user set an adapter."""
    import contextlib

    if dspy.settings.adapter is not None:
        return contextlib.nullcontext()
    return dspy.context(adapter=default_adapter())
