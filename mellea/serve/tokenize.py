"""``/tokenize`` and ``/detokenize``: the served model's tokenizer, in the shapes of vLLM's
and llama-server's routes of those names, so clients of either work unchanged.

``POST /tokenize`` takes the text in one of three fields: vLLM's ``prompt``, llama-server's
``content``, or vLLM's chat ``messages``, rendered with the model's chat template as a
chat request is (``add_generation_prompt``, ``tools``, ``chat_template_kwargs``).
``add_special_tokens`` (vLLM's name) or ``add_special`` (llama-server's) adds the
tokenizer's special tokens (BOS); unset, each field keeps its own server's default: added
for ``prompt``, not for ``content``, nor for ``messages`` (the template writes its own).
The reply carries vLLM's ``count``, ``max_model_len`` and ``tokens`` (all that llama-server's
clients read is ``tokens``); ``return_token_strs`` adds vLLM's ``token_strs`` (the
vocabulary's pieces), and ``with_pieces`` makes each token llama-server's ``{"id", "piece"}``
(the token's text, or its bytes when they are not whole UTF-8).

``POST /detokenize`` takes ``tokens`` and answers with their text under both servers'
names: vLLM's ``prompt`` and llama-server's ``content``.

The tokenizer is the served model's (:func:`served_engine`); a program without a local
model has none, and these routes answer 404.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from mellea.backends.base import openai_tools
from mellea.backends.local import with_tool_instructions
from mellea.backends.logprobs import token_texts
from mellea.backends.runtime import Runtime
from mellea.engine.chat import ChatTemplateError
from mellea.serve.bounds import body_error, check_tool_count
from mellea.serve.errors import OpenAIError
from mellea.serve.messages import ChatMessage
from mellea.serve.protocol import RequestBody, Tool, WireModel

TEXT_FIELDS = ("prompt", "content", "messages")  # where /tokenize finds its text


class TokenizeRequest(RequestBody):
    """A ``POST /tokenize`` body: vLLM's fields and llama-server's."""

    model: str | None = None  # any name: the served model's tokenizer answers
    prompt: str | None = None  # vLLM
    content: str | None = None  # llama-server
    messages: list[ChatMessage] | None = Field(default=None, min_length=1)  # vLLM (chat)
    add_special_tokens: bool | None = None  # vLLM
    add_special: bool | None = None  # llama-server
    parse_special: bool = True  # llama-server: special tokens written in the text are read
    add_generation_prompt: bool = True  # vLLM (chat)
    continue_final_message: bool = False  # vLLM (chat); not offered here
    tools: list[Tool] | None = None  # vLLM (chat)
    chat_template_kwargs: dict[str, Any] | None = None  # vLLM (chat)
    return_token_strs: bool = False  # vLLM
    with_pieces: bool = False  # llama-server

    @model_validator(mode="after")
    def one_text(self) -> TokenizeRequest:
        """Exactly one of ``prompt``, ``content`` and ``messages``; agreeing flags."""
        given = [name for name in TEXT_FIELDS if getattr(self, name) is not None]
        if len(given) != 1:
            found = f"got {' and '.join(given)}" if given else "got none"
            raise body_error(
                f"send the text as one of prompt, content (a string) or messages; {found}",
                (given[-1] if given else "prompt",),
            )
        both = self.add_special_tokens, self.add_special
        if None not in both and both[0] != both[1]:
            raise body_error(
                "add_special_tokens and add_special are two names of one switch; they disagree",
                ("add_special",),
            )
        if not self.parse_special:
            raise body_error(
                "this server always reads special tokens written in the text as such",
                ("parse_special",),
            )
        if self.continue_final_message:
            raise body_error(
                "continue_final_message is not offered; send add_generation_prompt: false",
                ("continue_final_message",),
            )
        if self.messages is None:
            for name in ("add_generation_prompt", "tools", "chat_template_kwargs"):
                if name in self.model_fields_set:
                    raise body_error("goes with messages only", (name,))
        return self

    def adds_special_tokens(self) -> bool:
        """Whether to add the tokenizer's special tokens: as asked, else the default of
        the server whose field carries the text (vLLM's for ``prompt``)."""
        asked = self.add_special_tokens if self.add_special_tokens is not None else self.add_special
        return asked if asked is not None else self.prompt is not None


class TokenPiece(WireModel):
    """A token as llama-server's ``with_pieces`` gives it: its id and its text (or its
    bytes, when they are not whole UTF-8)."""

    id: int
    piece: str | list[int]


class TokenizeResponse(WireModel):
    """The ``/tokenize`` reply (``token_strs`` only when asked for)."""

    count: int
    max_model_len: int
    tokens: list[int] | list[TokenPiece]
    token_strs: list[str] | None = None


class DetokenizeRequest(RequestBody):
    """A ``POST /detokenize`` body (vLLM's and llama-server's are the same)."""

    model: str | None = None
    tokens: list[int]

    @model_validator(mode="after")
    def token_ids(self) -> DetokenizeRequest:
        """Token ids are not negative (the vocabulary's size is checked against the model)."""
        for index, token in enumerate(self.tokens):
            if token < 0:
                raise body_error("a token id is not negative", ("tokens", index))
        return self


class DetokenizeResponse(WireModel):
    """The ``/detokenize`` reply: the text under vLLM's name and llama-server's."""

    prompt: str
    content: str


def served_engine(runtime: Runtime) -> Any:
    """The engine whose tokenizer these routes use: the served model (``--model``), else
    the first local model the program loaded (at import, or by a request so far).

    404 when there is none: a program on remote backends only has no tokenizer here.
    """
    if runtime.model is not None:
        return runtime.engine()
    engines = runtime.engines()
    if not engines:
        raise OpenAIError(
            404,
            "this program has no local model loaded, so the server has no tokenizer to "
            "offer; serve a local model (m serve --model ID_OR_PATH) or a program that "
            "starts a local session when it is imported",
            code="model_not_found",
        )
    return engines[0]


def tokenize(engine: Any, body: TokenizeRequest, chat_template: str | None) -> TokenizeResponse:
    """``body``'s text (or chat messages) as the engine's token ids.

    ``chat_template`` is the server's own (``--chat-template``), else the model's is used.
    """
    tokenizer = engine.tokenizer
    special = body.adds_special_tokens()
    if body.messages is not None:
        ids = _chat_ids(engine, body, chat_template)
        if special:
            prefix, suffix = _special_ends(tokenizer)
            ids = [*prefix, *ids, *suffix]
    else:
        text = body.prompt if body.prompt is not None else body.content
        ids = tokenizer.encode(text, add_special_tokens=special)
    ids = [int(token) for token in ids]
    reply = TokenizeResponse(count=len(ids), max_model_len=engine.max_model_len, tokens=ids)
    if body.with_pieces:
        texts = token_texts(tokenizer)
        reply.tokens = [TokenPiece(id=token, piece=_piece(texts(token)[1])) for token in ids]
    if body.return_token_strs:
        reply.token_strs = [str(piece) for piece in tokenizer.convert_ids_to_tokens(ids)]
    return reply


def detokenize(engine: Any, body: DetokenizeRequest) -> DetokenizeResponse:
    """The text of ``body.tokens`` (special tokens included); 400 naming the first id
    outside the vocabulary."""
    tokenizer = engine.tokenizer
    size = len(tokenizer)
    for index, token in enumerate(body.tokens):
        if token >= size:
            raise OpenAIError(
                400,
                f"tokens[{index}]: {token} is not a token id of this model "
                f"(its vocabulary has {size}, from 0 to {size - 1})",
                param=f"tokens[{index}]",
            )
    text = tokenizer.decode(body.tokens, skip_special_tokens=False)
    return DetokenizeResponse(prompt=text, content=text)


def _chat_ids(engine: Any, body: TokenizeRequest, chat_template: str | None) -> list[int]:
    """The messages rendered as the local backend renders a chat request's."""
    assert body.messages is not None
    messages = [_template_message(message, i) for i, message in enumerate(body.messages)]
    tools: list[dict[str, Any]] = []
    if body.tools:
        check_tool_count(len(body.tools))
        tools = openai_tools([tool.model_dump(exclude_none=True) for tool in body.tools])
    render: dict[str, Any] = {"add_generation_prompt": body.add_generation_prompt}
    if chat_template:
        render["chat_template"] = chat_template
    if body.chat_template_kwargs:
        render["template_kwargs"] = body.chat_template_kwargs
    try:
        ids = engine.apply_chat_template(messages, tools=tools or None, **render)
        if tools and ids == engine.apply_chat_template(messages, **render):
            # A template that ignores tools: the local backend describes them itself.
            ids = engine.apply_chat_template(with_tool_instructions(messages, tools), **render)
    except ChatTemplateError as exc:
        raise OpenAIError(400, str(exc), param="messages") from None
    except (ValueError, TypeError) as exc:
        if not body.chat_template_kwargs:
            raise
        # e.g. a transformers switch named as a template variable
        message = f"the chat template cannot take these chat_template_kwargs: {exc}"
        raise OpenAIError(400, message, param="chat_template_kwargs") from None
    return list(ids)


def _template_message(message: ChatMessage, index: int) -> dict[str, Any]:
    """A request message as the chat template reads it: its text parts joined; an image
    or audio part is a 400 naming it (the local model reads text only)."""
    for part, kind in message.media_parts():
        raise OpenAIError(
            400,
            f"messages[{index}].content[{part}] is {kind} content, and the local model "
            "reads text only",
            param=f"messages[{index}].content[{part}]",
        )
    wire = message.model_dump(exclude_none=True)
    # Templates read every message's content: none (an assistant's tool calls) is empty.
    wire["content"] = message.get_text_content()
    return wire


def _special_ends(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer adds before and after a text (e.g. BOS)."""
    plain = tokenizer.encode("x", add_special_tokens=False)
    marked = tokenizer.encode("x", add_special_tokens=True)
    for start in range(len(marked) - len(plain) + 1):
        if marked[start : start + len(plain)] == plain:
            return marked[:start], marked[start + len(plain) :]
    return [], []


def _piece(raw: list[int]) -> str | list[int]:
    """A token's bytes as llama-server shows a piece: text when they are whole UTF-8."""
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return raw
