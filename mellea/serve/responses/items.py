"""Conversation items: what a client sends as ``input``, kept in one canonical form.

Input items are validated and stored as the API lists them (each with an ``id``);
:func:`chat_messages` turns canonical items, from this request and from the responses it
continues, into the chat messages a program's ``serve()`` receives.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mellea.serve.errors import OpenAIError
from mellea.serve.messages import (
    ChatMessage,
    FunctionCall,
    ToolCall,
    audio_data_problem,
    image_url_problem,
)
from mellea.serve.responses.request import field_error

TEXT_PARTS = ("input_text", "output_text")
# media part type -> the key that must carry its data inline
MEDIA_PARTS = {"input_image": "image_url", "input_file": "file_data", "input_audio": "input_audio"}


def new_item_id(prefix: str) -> str:
    """A fresh item id such as ``msg_...`` or ``fc_...``."""
    return f"{prefix}_{uuid.uuid4().hex}"


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["message"] = "message"
    id: str | None = None
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[dict[str, Any]]


class _FunctionCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function_call"]
    id: str | None = None
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str


class _FunctionCallOutput(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function_call_output"]
    id: str | None = None
    call_id: str = Field(min_length=1)
    output: str | list[dict[str, Any]]


class _Reasoning(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[dict[str, Any]] = Field(default_factory=list)
    content: list[dict[str, Any]] | None = None


_ITEM_MODELS: dict[str, type[BaseModel]] = {
    "message": _Message,
    "function_call": _FunctionCall,
    "function_call_output": _FunctionCallOutput,
    "reasoning": _Reasoning,
}


# Looks stored items up by id: ``{id: item}`` for those it has.
ItemLookup = Callable[[list[str]], dict[str, dict[str, Any]]]


def input_items(
    raw: str | list[dict[str, Any]], lookup: ItemLookup | None = None
) -> list[dict[str, Any]]:
    """The request's ``input`` as canonical items; 400 naming the field for what we cannot use.

    An ``item_reference`` (``{"type": "item_reference", "id": ...}``, what the Vercel AI
    SDK sends for earlier turns of a stored conversation) becomes the stored item
    ``lookup`` finds by its id; an id it does not find is a 400 naming it.
    """
    if isinstance(raw, str):
        raw = [{"role": "user", "content": raw}]
    references = {i: _reference_id(item, f"input[{i}]") for i, item in enumerate(raw)}
    references = {i: ref for i, ref in references.items() if ref is not None}
    stored = lookup(list(references.values())) if references and lookup else {}
    items = []
    for i, item in enumerate(raw):
        if i not in references:
            items.append(_canonical(item, f"input[{i}]"))
            continue
        found = stored.get(references[i])
        if found is None:
            raise OpenAIError(
                400,
                f"Item with id {references[i][:128]!r} not found (input[{i}] refers to it); "
                "only items of stored responses can be referred to",
                param=f"input[{i}].id",
                code="item_not_found",
            )
        items.append(found)
    return items


def _reference_id(item: Any, where: str) -> str | None:
    """The id an ``item_reference`` names, or None for any other item."""
    if not isinstance(item, dict) or item.get("type") != "item_reference":
        return None
    item_id = item.get("id")
    if not isinstance(item_id, str) or not item_id:
        raise OpenAIError(400, f"{where}.id must be an item id", param=f"{where}.id")
    return item_id


def _canonical(item: dict[str, Any], where: str) -> dict[str, Any]:
    kind = item.get("type", "message")
    model = _ITEM_MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise OpenAIError(
            400, f"input item type {kind!r} is not supported by this server", param=f"{where}.type"
        )
    try:
        parsed = model.model_validate(item)
    except ValidationError as exc:
        raise field_error(exc, where) from None
    if isinstance(parsed, _Message):
        return {
            "type": "message",
            "id": parsed.id or new_item_id("msg"),
            "role": parsed.role,
            "status": "completed",
            "content": _message_parts(parsed, where),
        }
    if isinstance(parsed, _FunctionCall):
        return {
            "type": "function_call",
            "id": parsed.id or new_item_id("fc"),
            "call_id": parsed.call_id,
            "name": parsed.name,
            "arguments": parsed.arguments,
            "status": "completed",
        }
    if isinstance(parsed, _FunctionCallOutput):
        output = parsed.output
        if isinstance(output, list):
            output = [_part(part, f"{where}.output[{j}]") for j, part in enumerate(output)]
        return {
            "type": "function_call_output",
            "id": parsed.id or new_item_id("fco"),
            "call_id": parsed.call_id,
            "output": output,
            "status": "completed",
        }
    return {**parsed.model_dump(exclude_none=True), "id": parsed.id or new_item_id("rs")}


def _message_parts(message: _Message, where: str) -> list[dict[str, Any]]:
    if isinstance(message.content, str):
        return [_text_part(message.role, message.content)]
    return [_part(part, f"{where}.content[{j}]") for j, part in enumerate(message.content)]


def _text_part(role: str, text: str) -> dict[str, Any]:
    if role == "assistant":
        return {"type": "output_text", "text": text, "annotations": []}
    return {"type": "input_text", "text": text}


def _part(part: dict[str, Any], where: str) -> dict[str, Any]:
    """Check one content part; text parts are kept, media parts must carry their data."""
    kind = part.get("type")
    kind = kind if isinstance(kind, str) else None  # unhashable junk must not reach a dict
    if kind in TEXT_PARTS or kind == "refusal":
        key = "refusal" if kind == "refusal" else "text"
        if not isinstance(part.get(key), str):
            raise OpenAIError(400, f"{where}.{key} must be a string", param=f"{where}.{key}")
        return part
    if kind in MEDIA_PARTS:
        key = MEDIA_PARTS[kind]
        if not part.get(key):
            raise OpenAIError(
                400,
                f"{kind} needs its data inline in {key!r} (file ids are not supported)",
                param=f"{where}.{key}",
            )
        problem = _media_problem(kind, part)
        if problem is not None:
            raise OpenAIError(
                400, f"{where}.{problem[0]}: {problem[1]}", param=f"{where}.{problem[0]}"
            )
        return part
    raise OpenAIError(
        400, f"content part type {kind!r} is not supported by this server", param=f"{where}.type"
    )


def _media_problem(kind: str, part: dict[str, Any]) -> tuple[str, str] | None:
    """``(field, why)`` when an image or audio part would not make a valid chat part."""
    if kind == "input_image":
        if part.get("detail") is not None and not isinstance(part["detail"], str):
            return "detail", "must be a string"
        problem = image_url_problem(part["image_url"])
        return ("image_url", problem) if problem else None
    if kind == "input_audio":
        audio = part["input_audio"]
        if not isinstance(audio, dict):
            return "input_audio", "must be an object with 'data' and 'format'"
        if not isinstance(audio.get("format"), str) or not audio["format"]:
            return "input_audio.format", "must name the audio format, e.g. 'wav'"
        problem = audio_data_problem(audio.get("data"))
        return ("input_audio.data", problem) if problem else None
    return None


def chat_messages(instructions: str | None, items: list[dict[str, Any]]) -> list[ChatMessage]:
    """The chat messages for a program: instructions first, then the items in order.

    ``function_call`` items join the assistant message just before them (one assistant
    turn with content and calls, as chat completions have it); reasoning items are left out.
    """
    messages = [ChatMessage(role="system", content=instructions)] if instructions else []
    for item in items:
        kind = item["type"]
        if kind == "message":
            messages.append(ChatMessage(role=item["role"], content=_chat_content(item["content"])))
        elif kind == "function_call":
            call = ToolCall(
                id=item["call_id"],
                function=FunctionCall(name=item["name"], arguments=item["arguments"]),
            )
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant":
                last.tool_calls = [*(last.tool_calls or []), call]
            else:
                messages.append(ChatMessage(role="assistant", content=None, tool_calls=[call]))
        elif kind == "function_call_output":
            output = item["output"]
            content = output if isinstance(output, str) else _chat_content(output)
            messages.append(ChatMessage(role="tool", tool_call_id=item["call_id"], content=content))
        # reasoning items are not part of what the next turn sees
    return messages


def _chat_content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Responses content parts as chat content: one string when they are all text."""
    chat = [_chat_part(part) for part in parts]
    if all(part["type"] == "text" for part in chat):
        return "".join(part["text"] for part in chat)
    return chat


def _chat_part(part: dict[str, Any]) -> dict[str, Any]:
    kind = part["type"]
    if kind in TEXT_PARTS:
        return {"type": "text", "text": part["text"]}
    if kind == "refusal":
        return {"type": "text", "text": part["refusal"]}
    if kind == "input_image":
        image = {"url": part.get("image_url"), "detail": part.get("detail")}
        return {"type": "image_url", "image_url": {k: v for k, v in image.items() if v}}
    if kind == "input_file":
        file = {"file_data": part.get("file_data"), "filename": part.get("filename")}
        return {"type": "file", "file": {k: v for k, v in file.items() if v}}
    return {"type": "input_audio", "input_audio": part.get("input_audio")}
