"""A plain-prompt DSPy adapter for signatures whose single output is SQL (or other free text).

DSPy's ChatAdapter wraps every field in ``[[ ## name ## ]]`` markers and describes the format in
a system message. Large served models follow that easily; a 0.5B–1.5B local model spends its
attention on the markup, writes the markers into its SQL, and over-joins tables. For a signature
with exactly one text output, :class:`SQLAdapter` sends plain prompts instead.

For a **SQL** output (``sql`` or ``*_sql``) the prompt is laid out as a SQL script, the layout
code models met for text-to-SQL in training:

* no system message;
* one user turn: the rendered schema (CREATE TABLE statements) first, then as ``--`` comments
  the signature's instructions (what optimizers tune; final turn only), every other non-empty
  input (evidence, hints, a draft query, execution feedback…), and last
  ``-- Using valid <dialect>, answer the following question for the tables provided above.``
  followed by the question;
* demos: the same turn without the instructions, the bare SQL as the assistant turn; a demo of
  the question's own database marked :data:`AFTER_SCHEMA` goes inside the question's turn
  instead, right after the schema, as its question in a comment and its SQL (in the chat
  layout too, as ``Question:``/``SQL:`` lines): the schema stays the first tokens of the prompt,
  which the engine's prefix cache shares between questions on one database;
* on the local llama.cpp engine the assistant turn is prefilled with ``SELECT``.

Why (Qwen2.5-Coder-1.5B, first 57 questions of the stratified Spider dev 100, greedy): the same
words as a system message scored 28 against 38 for the script layout; a longer instruction that
told the model to "join through the listed foreign keys" made it join tables the question does not
need. Over the whole 100, the old layout scored 39 and the script layout with SQLite's own DDL 53.

``SQLAdapter(layout="chat")`` lays a SQL prompt out as a chat instead, the way a user writes one
by hand (``naive``'s reference script): the instructions and the dialect as a system message; one
user turn with the schema, a blank line, every other input as ``Label: text`` and
``Question: <question>`` last. ``direct``'s ``prompt_layout`` switch chooses between the two.

For any other **text** output: system = instructions; user = each input as a labelled block, the
question last, then one line asking for the output alone.

The reply is the whole completion; SQL outputs are cleaned by
:func:`sqlweave.sqltext.extract_sql`. Signatures with several or typed outputs (lists, ints) fall
back to ChatAdapter without its JSON retry, so a garbage reply costs one call, not two.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import dspy
from dspy.adapters.chat_adapter import ChatAdapter
from dspy.clients._deprecation import adapter_message_call
from dspy.signatures.signature import Signature

from sqlweave.schema import DIALECT_LABELS
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


def _present(value: Any) -> str:
    """The rendered value, or "" for a missing or blank input (left out of the prompt)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return ""
    return _render_value(value)


def _comment(text: str) -> str:
    """``text`` as SQL line comments."""
    return "\n".join(f"-- {line}".rstrip() for line in text.splitlines())


_SCHEMA_FIELDS = ("db_schema", "schema")

SAME_DB_SCHEMA = "(the database of the last question: its schema is shown there)"
"""The schema a demo of the question's own database carries (``knn``'s ``same_db``)."""

AFTER_SCHEMA = "after_schema"
"""A demo field (never rendered) that asks for the demo inside the question's turn, after its
schema, instead of a turn of its own (``knn``'s ``same_db="inline"``)."""


def _solved(demos: Sequence[Any], signature: type[Signature]) -> list[tuple[str, str]]:
    """``(question, answer)`` of each demo that answers ``signature``'s output, both stripped."""
    output = _text_output(signature) or ""
    pairs = []
    for demo in demos:
        get = _getter(demo)
        answer = str(get(output, "") or "").strip()
        if answer:
            pairs.append((str(get("question", "") or "").strip(), answer))
    return pairs


def _after_schema(demo: Any) -> bool:
    """Whether ``demo`` goes inside the question's turn (:data:`AFTER_SCHEMA`)."""
    return bool(_getter(demo)(AFTER_SCHEMA, False))


#: How a SQL-writing prompt is laid out: a SQL script (schema, then ``--`` comments) or a chat.
SQL_LAYOUTS = ("script", "chat")


def check_layout(layout: str, switch: str = "layout") -> str:
    """``layout`` if it is one of :data:`SQL_LAYOUTS`; a ``ValueError`` naming ``switch`` if not."""
    if layout not in SQL_LAYOUTS:
        raise ValueError(f"unknown {switch} {layout!r}; choose one of {', '.join(SQL_LAYOUTS)}")
    return layout


def _getter(values: Any) -> Any:
    """``values.get`` for an Example or dict of inputs; a getter of defaults for anything else."""
    return values.get if hasattr(values, "get") else (lambda key, default=None: default)


def _engine_label(get: Any) -> str:
    """The dialect of the inputs as a prompt names it (``SQLite``), or ``SQL`` when none."""
    dialect = str(get("dialect", "") or "").strip()
    return DIALECT_LABELS.get(dialect.lower(), dialect) if dialect else "SQL"


def _labelled(name: str, text: str) -> str:
    """An input as ``Label: text``, or the label on its own line above a multi-line text."""
    return f"{_label(name)}:\n{text}" if "\n" in text else f"{_label(name)}: {text}"


class SQLAdapter(ChatAdapter):
    """Plain prompts for single-text-output signatures; ChatAdapter (no JSON retry) otherwise.

    ``prefill``: ``"auto"`` prefills ``SELECT`` for SQL outputs when the LM runs on sqlweave's
    local engine (the only engine here that continues a partial assistant turn), ``True`` always,
    ``False`` never. ``layout``: ``"script"`` (the default) or ``"chat"`` for SQL outputs (see
    the module docstring).
    """

    def __init__(self, prefill: bool | str = "auto", layout: str = "script", **kwargs: Any) -> None:
        check_layout(layout)
        kwargs.setdefault("use_json_adapter_fallback", False)
        super().__init__(**kwargs)
        self.prefill = prefill
        self.layout = layout

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
        sql = _is_sql_field(output)
        chat = sql and self.layout == "chat"
        messages: list[dict[str, str]] = []
        if not sql:
            messages.append({"role": "system", "content": signature.instructions.strip()})
        elif chat:
            messages.append({"role": "system", "content": self._chat_system(signature, inputs)})

        # Demos marked AFTER_SCHEMA go inside the question's turn, right after the schema: the
        # schema stays the prompt's first tokens, so questions on one database share it in the
        # engine's prefix cache (turns before it make every prompt differ from its start).
        inline = [d for d in demos if sql and _after_schema(d)]

        def block_of(values: Any, final: bool) -> str:
            solved = inline if final else ()
            if chat:
                return self._chat_block(signature, values, solved=solved)
            if sql:
                return self._sql_block(signature, values, instructions=final, solved=solved)
            return self._user_block(signature, values)

        for demo in demos:
            answer = demo.get(output) if hasattr(demo, "get") else None
            if not answer or (sql and _after_schema(demo)):
                continue
            messages.append({"role": "user", "content": block_of(demo, False)})
            messages.append({"role": "assistant", "content": str(answer).strip()})
        block = block_of(inputs, True)
        messages.append({"role": "user", "content": block})
        if prefill:
            messages.append({"role": "assistant", "content": "SELECT"})
        return messages

    def _sql_block(
        self,
        signature: type[Signature],
        values: Any,
        *,
        instructions: bool,
        solved: Sequence[Any] = (),
    ) -> str:
        """The prompt of a SQL-writing signature, laid out as a SQL script.

        The schema comes first as it is rendered (CREATE TABLE statements), then every other
        input, the signature's instructions (in the final turn only) and the question as ``--``
        comments, closing with the dialect and the question: the layout code models such as
        Qwen2.5-Coder saw for text-to-SQL in training. Measured on 57 Spider dev questions with
        Qwen2.5-Coder-1.5B (issue 7 note), the instructions in a system message cost ~10 points
        EX against the same words as comments after the schema.
        """
        get = _getter(values)
        schema_names = [n for n in signature.input_fields if n in _SCHEMA_FIELDS]
        others = [
            n
            for n in signature.input_fields
            if n not in ("dialect", "question") and n not in schema_names
        ]
        parts: list[str] = []
        for name in schema_names:
            text = _present(get(name, None))
            if text:
                parts.append(text)
        examples = [f"{_comment(q)}\n{sql.rstrip(';')};" for q, sql in _solved(solved, signature)]
        if examples:
            parts.append("-- Questions on these tables, answered:\n" + "\n".join(examples))
        comments: list[str] = []
        if instructions and signature.instructions.strip():
            comments.append(_comment(signature.instructions.strip()))
        for name in others:
            text = _present(get(name, None))
            if not text:
                continue
            if "\n" in text:
                comments.append(f"-- {_label(name)}:\n{_comment(text)}")
            else:
                comments.append(f"-- {_label(name)}: {text}")
        engine = _engine_label(get)
        ask = (
            f"-- Using valid {engine}, answer the following question for the tables provided above."
        )
        if "question" in signature.input_fields:
            question = _present(get("question", None))
            comments.append(ask + (f"\n{_comment(question)}" if question else ""))
        else:
            comments.append(ask)
        parts.append("\n".join(comments))
        return "\n\n".join(parts) + "\n"

    def _chat_system(self, signature: type[Signature], values: Any) -> str:
        """The chat layout's system message: the instructions, then the dialect to write."""
        text = signature.instructions.strip()
        return f"{text}\nThe query must run on {_engine_label(_getter(values))}.".strip()

    def _chat_block(
        self,
        signature: type[Signature],
        values: Any,
        *,
        solved: Sequence[Any] = (),
    ) -> str:
        """The chat layout's user turn: the schema, a blank line, other inputs labelled, the
        question last (``naive``'s reference prompt, with any further inputs between). Demos of
        the question's own database (``solved``) follow the schema as ``Question:``/``SQL:``
        lines."""
        get = _getter(values)
        parts = [
            text
            for name in signature.input_fields
            if name in _SCHEMA_FIELDS and (text := _present(get(name, None)))
        ]
        examples = [
            f"{_labelled('question', q)}\n{_labelled('sql', sql)}"
            for q, sql in _solved(solved, signature)
        ]
        if examples:
            parts.append("Questions on these tables, answered:\n\n" + "\n\n".join(examples))
        lines: list[str] = []
        names = [
            n
            for n in signature.input_fields
            if n not in ("dialect", "question") and n not in _SCHEMA_FIELDS
        ]
        if "question" in signature.input_fields:
            names.append("question")
        for name in names:
            text = _present(get(name, None))
            if text:
                lines.append(_labelled(name, text))
        if lines:
            parts.append("\n".join(lines))
        return "\n\n".join(parts)

    def _user_block(self, signature: type[Signature], values: Any) -> str:
        output = _text_output(signature) or ""
        get = _getter(values)
        blocks: list[str] = []
        names = [n for n in signature.input_fields if n not in ("dialect", "question")]
        if "question" in signature.input_fields:
            names.append("question")
        for name in names:
            text = _present(get(name, None))
            if not text:
                continue
            blocks.append(_labelled(name, text))
        out_field = signature.output_fields.get(output)
        desc = getattr(out_field, "json_schema_extra", None) or {}
        what = desc.get("desc") or _label(output)
        blocks.append(f"Answer with the {_label(output).lower()} only ({what}).")
        return "\n\n".join(blocks)

    def output_reader(self, signature: type[Signature]) -> Callable[[str], dict[str, Any]] | None:
        """How a completion of ``signature`` becomes its outputs when the text alone gives them
        (a single text output, read by :meth:`parse`); None for the signatures handed to
        ChatAdapter, whose parsing may ask the LM again. Lets a caller read an answer while the
        engine is still decoding it (:meth:`sqlweave.programs.base.Generator.candidate_reader`).
        """
        if _text_output(signature) is None:
            return None
        return lambda completion: self.parse(signature, completion)

    def parse(self, signature, completion):  # type: ignore[override]
        output = _text_output(signature)
        if output is None:
            return super().parse(signature, completion)
        text = completion or ""
        if _is_sql_field(output):
            return {output: extract_sql(text)}
        return {output: field_body(text, prefer=output).strip()}


def default_adapter(layout: str = "script", prefill: bool | str = "auto") -> SQLAdapter:
    """The adapter sqlweave programs use when the caller configured none."""
    adapter = SQLAdapter(prefill=prefill, layout=layout)
    adapter.sqlweave_default = True  # type: ignore[attr-defined]
    return adapter


def use_default_adapter(layout: str | None = None, prefill: bool | str | None = None) -> Any:
    """A context manager installing :class:`SQLAdapter` unless the user set an adapter.

    ``layout`` and ``prefill`` (a generator's own, e.g. ``direct``'s ``prompt_layout``) replace
    those of sqlweave's default adapter; an adapter the user configured is never replaced.
    """
    import contextlib

    current = dspy.settings.adapter
    if current is None:
        return dspy.context(
            adapter=default_adapter(layout or "script", "auto" if prefill is None else prefill)
        )
    if not getattr(current, "sqlweave_default", False):
        return contextlib.nullcontext()
    want_layout = current.layout if layout is None else layout
    want_prefill = current.prefill if prefill is None else prefill
    if (want_layout, want_prefill) != (current.layout, current.prefill):
        return dspy.context(adapter=default_adapter(want_layout, want_prefill))
    return contextlib.nullcontext()
