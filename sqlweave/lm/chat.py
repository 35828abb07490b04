"""DSPy requests as llama.cpp chat calls: messages, sampling options, and prefilled answers.

A request whose last message is a partial assistant turn (a *prefill*, such as ``SELECT``) is
continued rather than answered anew (:func:`continue_assistant`); :func:`answer_content` is the
one place that says what such a call answers with, for the call itself and for the samples a
batch decodes beside it.
"""

from __future__ import annotations

from typing import Any

from dspy.lm15 import Request


def _part_text(parts: Any) -> str:
    if isinstance(parts, str):
        return parts
    return "".join(getattr(part, "text", "") or "" for part in parts)


def request_to_messages(request: Request) -> list[dict[str, str]]:
    """OpenAI-style chat messages for llama-cpp, whose chat template (from the GGUF) renders them.

    Developer messages become system messages (Qwen's template knows no developer role); tool
    traffic is not supported by the local engine and is refused rather than dropped.
    """
    messages: list[dict[str, str]] = []
    if request.system is not None:
        messages.append({"role": "system", "content": _part_text(request.system)})
    for message in request.messages:
        if message.role not in ("user", "assistant", "developer"):
            raise ValueError(f"the local engine does not support {message.role!r} messages")
        text = message.text
        if text is None:
            raise ValueError("the local engine supports text-only messages")
        role = "system" if message.role == "developer" else message.role
        messages.append({"role": role, "content": text})
    return messages


def sampling_options(request: Request) -> dict[str, Any]:
    config = request.config
    options: dict[str, Any] = {
        "temperature": 0.0 if config.temperature is None else float(config.temperature),
        "max_tokens": config.max_tokens,
    }
    if config.top_p is not None:
        options["top_p"] = config.top_p
    if config.top_k is not None:
        options["top_k"] = config.top_k
    if config.stop:
        options["stop"] = list(config.stop)
    if config.seed is not None:
        options["seed"] = config.seed
    if config.frequency_penalty is not None:
        options["frequency_penalty"] = config.frequency_penalty
    if config.presence_penalty is not None:
        options["presence_penalty"] = config.presence_penalty
    if config.response_format is not None:
        schema = config.response_format.get("schema")
        # llama-cpp turns a JSON schema into a grammar; json_object alone means "any JSON".
        options["response_format"] = {
            "type": "json_object",
            **({"schema": schema} if schema else {}),
        }
    return options


def render_turns(llama: Any, messages: list[dict[str, str]]) -> Any:
    """``messages`` rendered by the GGUF's own chat template, ending with the generation prompt
    (the start of the assistant's turn): ``.prompt`` is the text, ``.stop`` the end-of-turn
    strings. What the model reads before its answer, for a prefilled call or a score."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    template = llama.metadata.get("tokenizer.chat_template")
    if not template:
        raise ValueError("this GGUF file has no chat template; prefilled answers need one")
    model = llama._model
    formatter = Jinja2ChatFormatter(
        template=template,
        eos_token=model.token_get_text(llama.token_eos()),
        bos_token=model.token_get_text(llama.token_bos()),
    )
    return formatter(messages=messages)


def continue_assistant(
    llama: Any, messages: list[dict[str, str]], options: dict[str, Any]
) -> dict[str, Any]:
    """Complete a conversation whose last turn is a partial assistant message (a prefill).

    Chat APIs end every message with an end-of-turn token, so a prefilled answer (say
    ``SELECT``) cannot be sent as a message. Instead the earlier turns are rendered with the
    GGUF's own chat template plus the generation prompt, the prefill is appended as plain text,
    and the model continues it. The returned message holds prefill + continuation, so callers
    see one whole answer. Small models follow a prefilled ``SELECT`` far more reliably than an
    instruction to "reply with SQL only".
    """
    prefill = messages[-1]["content"]
    rendered = render_turns(llama, messages[:-1])
    stop = list(options.pop("stop", None) or [])
    template_stop = rendered.stop if isinstance(rendered.stop, list) else [rendered.stop]
    stop.extend(token for token in template_stop if token and token not in stop)
    options.pop("response_format", None)
    raw = llama.create_completion(rendered.prompt + prefill, stop=stop, **options)
    choice = raw["choices"][0]
    text = choice.get("text", "")
    return {
        "id": raw.get("id"),
        "choices": [
            {
                "message": {"role": "assistant", "content": answer_content(prefill, text)},
                "finish_reason": choice.get("finish_reason"),
            }
        ],
        "usage": raw.get("usage") or {},
    }


def prefill_of(messages: list[dict[str, str]]) -> str | None:
    """The partial assistant turn a conversation ends with (the start of the answer the call
    continues), or None when its last turn is not the assistant's."""
    if messages and messages[-1]["role"] == "assistant":
        return messages[-1]["content"]
    return None


def answer_content(prefill: str | None, text: bytes | str) -> str:
    """What a call answers with when the model decoded ``text`` after ``prefill``: the prefill,
    then the text (bytes decoded as ``create_completion`` decodes them, an unfinished UTF-8
    character dropped)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="ignore")
    return (prefill or "") + text
