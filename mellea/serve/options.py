"""What a program's ``serve()`` receives, and the model options every endpoint maps the
same way (sampling fields, log-probabilities, ``n`` choices)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from mellea.core.model_options import ModelOption, varied_options
from mellea.serve.bounds import (
    check_logit_bias,
    check_stop,
)
from mellea.serve.errors import OpenAIError

log = logging.getLogger("mellea.serve")

# request field -> model option key, copied only when the client sent a value
_DIRECT = {
    "temperature": ModelOption.TEMPERATURE,
    "top_p": ModelOption.TOP_P,
    "seed": ModelOption.SEED,
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "logit_bias": "logit_bias",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "parallel_tool_calls": "parallel_tool_calls",
    "ignore_eos": "ignore_eos",
    "chat_template_kwargs": "chat_template_kwargs",
    "reasoning_effort": "reasoning_effort",
}


# Model option keys asking the backend for token log-probabilities (OpenAI chat's names).
LOGPROBS = "logprobs"
TOP_LOGPROBS = "top_logprobs"


@dataclass
class ServeArguments:
    """What ``serve()`` is called with, derived from one request."""

    messages: list[Any]
    requirements: list[str] | None
    model_options: dict[str, Any]
    format: type | None = None
    client_options: dict[str, Any] = field(default_factory=dict)


CHOICE_TEMPERATURE = 1.0  # OpenAI's default: n choices without a temperature sample


def choice_options(options: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The model options of each of ``n`` choices, so that they differ
    (:func:`~mellea.core.model_options.varied_options`; without a temperature the
    choices sample at 1.0, OpenAI's default)."""
    if n == 1:
        return [options]
    if options.get(ModelOption.TEMPERATURE) is None:  # every choice samples, the first too
        options = {**options, ModelOption.TEMPERATURE: CHOICE_TEMPERATURE}
    return [varied_options(options, i, CHOICE_TEMPERATURE) for i in range(n)]


def sampling_options(request: Any) -> dict[str, Any]:
    """Model options for the sampling fields chat and text completions share.

    Only values the client sent are copied; unknown fields are logged.
    """
    reject_common(request)
    if request.model_extra:
        log.info("ignoring unknown request fields: %s", ", ".join(sorted(request.model_extra)))
    options: dict[str, Any] = {}
    for name, key in _DIRECT.items():
        value = getattr(request, name, None)
        if value is not None:
            options[key] = value
    max_tokens = getattr(request, "max_completion_tokens", None) or request.max_tokens
    if max_tokens is not None:
        options[ModelOption.MAX_NEW_TOKENS] = max_tokens
    if request.stop:
        options[ModelOption.STOP_SEQUENCES] = (
            [request.stop] if isinstance(request.stop, str) else list(request.stop)
        )
    if request.stream:
        options[ModelOption.STREAM] = True
    return options


def reject_common(request: Any) -> None:
    """400 for shared fields whose values the server cannot honour."""
    if request.stream_options is not None and not request.stream:
        raise OpenAIError(
            400, "stream_options is only allowed when stream is true", param="stream_options"
        )
    check_logit_bias(request.logit_bias)
    check_stop(request.stop)
