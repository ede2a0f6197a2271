"""Render chat messages into prompt tokens with a chat template.

The model's own template (from its tokenizer files) or one given instead (``m serve
--chat-template FILE``); request-level template variables (``chat_template_kwargs``,
e.g. ``{"enable_thinking": false}``) reach the template as keywords.
"""

from __future__ import annotations

from typing import Any


class ChatTemplateError(ValueError):
    """The messages cannot be rendered: no template, or the template refused them."""


def render_chat(
    tokenizer: Any,
    messages: list[dict],
    *,
    tools: list[dict] | None = None,
    add_generation_prompt: bool = True,
    chat_template: str | None = None,
    template_kwargs: dict[str, Any] | None = None,
) -> list[int]:
    """Token ids of ``messages`` rendered with ``chat_template`` or the tokenizer's own."""
    import jinja2

    if not (chat_template or getattr(tokenizer, "chat_template", None)):
        raise ChatTemplateError(
            "this model has no chat template, so it cannot take chat messages; "
            "start the server with --chat-template FILE"
        )
    # Our own arguments win over same-named template variables from the request.
    extra = {k: v for k, v in (template_kwargs or {}).items() if k not in _RESERVED}
    try:
        text = tokenizer.apply_chat_template(
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            chat_template=chat_template,  # None: the tokenizer's own
            **extra,
        )
    except (
        jinja2.TemplateError
    ) as exc:  # e.g. the template's raise_exception("roles must alternate")
        raise ChatTemplateError(f"the chat template rejected the messages: {exc}") from None
    return tokenizer.encode(text, add_special_tokens=False)


_RESERVED = frozenset(
    {"conversation", "messages", "tools", "add_generation_prompt", "tokenize", "chat_template"}
    | {"return_dict", "return_tensors", "continue_final_message", "documents", "tokenizer_kwargs"}
)
