"""Chat templates rendered once per run; the loop then continues the assistant turn as raw text."""

from __future__ import annotations

from collections.abc import Sequence

from tuiagent.errors import ConfigError


def render_chatml(messages: Sequence[dict[str, str]]) -> str:
    """ChatML (Qwen2.5, SmolLM2), ending with an open assistant turn."""
    parts = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
    return "".join(parts) + "<|im_start|>assistant\n"


def render_raw(messages: Sequence[dict[str, str]]) -> str:
    """No template: the messages' contents one after another, for base models and plain servers."""
    return "\n\n".join(m["content"] for m in messages) + "\n\n"


NAMED_TEMPLATES = {"chatml": render_chatml, "raw": render_raw}


def render_named(name: str, messages: Sequence[dict[str, str]]) -> str:
    try:
        return NAMED_TEMPLATES[name](messages)
    except KeyError:
        raise ConfigError(
            f"chat template {name!r} is not one this backend can render",
            key="chat_template",
            fix=f"use one of {sorted(NAMED_TEMPLATES)} (or 'gguf' with llama_cpp, 'hf' with vllm)",
        ) from None
