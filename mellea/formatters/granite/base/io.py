"""The interfaces of the Granite formatters: prompt renderers, output parsers, request
rewriters, response processors and document retrievers."""

from __future__ import annotations

import abc
from typing import Any

import pydantic

from mellea.formatters.granite.base.types import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionResponse,
    Document,
)


class InputProcessor(abc.ABC):
    """Turns a chat completion request into the prompt text a model reads."""

    @abc.abstractmethod
    def transform(self, chat_completion: ChatCompletion, add_generation_prompt: bool = True) -> str:
        """The prompt for ``chat_completion`` (ending with the assistant's turn opening
        when ``add_generation_prompt``)."""


class OutputProcessor(abc.ABC):
    """Turns a model's raw output into a structured assistant message."""

    @abc.abstractmethod
    def transform(
        self, model_output: str, chat_completion: ChatCompletion | None = None
    ) -> AssistantMessage:
        """The message ``model_output`` (possibly partial) holds; the request that
        produced it may decide how it is read."""


class ChatCompletionRewriter(abc.ABC):
    """Rewrites a chat completion request into another (the input is not changed)."""

    def transform(
        self, chat_completion: ChatCompletion | str | dict, /, **kwargs: Any
    ) -> ChatCompletion:
        """The rewritten request; ``chat_completion`` may be a model, its JSON text or a
        dict (a TypeError for anything else)."""
        if isinstance(chat_completion, str):
            chat_completion = ChatCompletion.model_validate_json(chat_completion)
        elif isinstance(chat_completion, dict):
            chat_completion = ChatCompletion.model_validate(chat_completion)
        if not isinstance(chat_completion, ChatCompletion):
            raise TypeError(
                "chat_completion must be a ChatCompletion, its JSON text or a dict, not "
                f"{type(chat_completion).__name__}"
            )
        return self._transform(chat_completion, **kwargs)

    @abc.abstractmethod
    def _transform(self, chat_completion: ChatCompletion, /, **kwargs: Any) -> ChatCompletion:
        """The rewrite itself, on a parsed request."""


class ChatCompletionResultProcessor(abc.ABC):
    """Post-processes a chat completion response (the input is not changed)."""

    def transform(
        self,
        chat_completion_response: ChatCompletionResponse | dict | pydantic.BaseModel,
        chat_completion: ChatCompletion | None = None,
    ) -> ChatCompletionResponse:
        """The processed response; ``chat_completion_response`` may be our model, a dict
        or another pydantic model (the ``openai`` client's response); ``chat_completion``
        is the request, which some processors read."""
        response = chat_completion_response
        if isinstance(response, dict):
            response = ChatCompletionResponse.model_validate(response)
        elif not isinstance(response, ChatCompletionResponse):
            if not isinstance(response, pydantic.BaseModel):
                raise TypeError(
                    "chat_completion_response must be a ChatCompletionResponse, a dict or a "
                    f"pydantic model, not {type(response).__name__}"
                )
            response = ChatCompletionResponse.model_validate(response.model_dump())
        return self._transform_impl(response, chat_completion)

    @abc.abstractmethod
    def _transform_impl(
        self,
        chat_completion_response: ChatCompletionResponse,
        chat_completion: ChatCompletion | None,
    ) -> ChatCompletionResponse:
        """The processing itself, on a parsed response."""


class Retriever(abc.ABC):
    """Finds the documents that best match a query."""

    @abc.abstractmethod
    def retrieve(self, query: str, top_k: int = 10) -> list[Document]:
        """Up to ``top_k`` documents for ``query``, best first."""


__all__ = [
    "ChatCompletionResultProcessor",
    "ChatCompletionRewriter",
    "InputProcessor",
    "OutputProcessor",
    "Retriever",
]
