"""What the ``core``, ``rag`` and ``guardian`` helpers share: calling an adapter
function through a session, and reading its result against its contract."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from mellea.backends.adapters.catalog import AdapterType
from mellea.backends.adapters.results import AdapterSchemaMismatchError
from mellea.core._sync import run_sync
from mellea.core.base import CBlock, Component, Context, span_text
from mellea.core.thunk import ModelOutputThunk
from mellea.stdlib import functional as mfuncs
from mellea.stdlib.components.chat import Message
from mellea.stdlib.components.docs import Document
from mellea.stdlib.components.intrinsic.intrinsic import Intrinsic

Contract = Callable[[str], dict[str, Any]]


def call_intrinsic(
    intrinsic_name: str,
    context: Context,
    backend: Any,
    /,
    kwargs: dict | None = None,
    model_options: dict | None = None,
    io_contract: Contract | None = None,
) -> dict[str, Any]:
    """Run adapter function ``intrinsic_name`` on ``context`` and return its JSON result.

    The adapter is the backend's (added, or the catalog's added on first use; aLoRA
    before LoRA). ``kwargs`` fill its instruction; ``model_options`` override its
    defaults (``temperature`` 0). ``io_contract(raw)`` parses and checks the result
    when given, else it is ``json.loads``'d. From async code, await
    :func:`acall_intrinsic`.
    """
    return run_sync(
        acall_intrinsic(
            intrinsic_name,
            context,
            backend,
            kwargs=kwargs,
            model_options=model_options,
            io_contract=io_contract,
        )
    )


async def acall_intrinsic(
    intrinsic_name: str,
    context: Context,
    backend: Any,
    /,
    kwargs: dict | None = None,
    model_options: dict | None = None,
    io_contract: Contract | None = None,
) -> dict[str, Any]:
    """Async :func:`call_intrinsic`."""
    _assert_context_forwards_history(intrinsic_name, context)
    intrinsic = Intrinsic(
        intrinsic_name,
        intrinsic_kwargs=kwargs,
        adapter_types=(AdapterType.ALORA, AdapterType.LORA),
    )
    thunk, _ = await mfuncs.aact(
        intrinsic, context, backend, model_options=model_options, strategy=None
    )
    raw = thunk.value
    if raw is None:
        raise ValueError("the adapter function produced no output")
    if io_contract is not None:
        return io_contract(raw)
    return json.loads(raw)


def dict_contract(name: str, required: Iterable[str]) -> Contract:
    """A contract: a JSON object holding ``required`` keys (more keys are allowed)."""
    keys = frozenset(required)

    def parse(raw: str) -> dict[str, Any]:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError(f"adapter '{name}' output must be a JSON object, got {raw[:100]!r}")
        if not keys <= data.keys():
            raise AdapterSchemaMismatchError(name, frozenset(data), keys)
        return data

    return parse


def list_contract(name: str, required_item_keys: Iterable[str]) -> Contract:
    """A contract: a JSON array of objects each holding ``required_item_keys``; the
    list comes back as ``{"items": [...]}``."""
    keys = frozenset(required_item_keys)

    def parse(raw: str) -> dict[str, Any]:
        data = json.loads(raw)
        if not isinstance(data, list):
            raise ValueError(f"adapter '{name}' output must be a JSON array, got {raw[:100]!r}")
        for item in data:
            if not isinstance(item, dict):
                raise ValueError(f"adapter '{name}' output array holds a non-object: {item!r}")
            if not keys <= item.keys():
                raise AdapterSchemaMismatchError(name, frozenset(item), keys)
        return {"items": data}

    return parse


def _assert_context_forwards_history(intrinsic_name: str, context: Context) -> None:
    """A context that shows the model nothing (a ``SimpleContext``) cannot be judged."""
    if not context.view_for_generation():
        raise ValueError(
            f"Intrinsic '{intrinsic_name}' received a context that forwards no history to "
            "the model: adapter functions evaluate a conversation, so pass a ChatContext "
            "(e.g. start_session(context_type='chat')) that holds at least one message"
        )


def resolve_question(
    question: str | None, context: Context, backend: Any = None
) -> tuple[str, Context]:
    """``(question, context)``; with no question, the last turn's input and the
    context before it."""
    del backend
    if question is not None:
        return question, context
    turn = context.last_turn()
    if turn is None or turn.model_input is None:
        raise ValueError("question is None and the context has no last turn with an input")
    item = turn.model_input
    if isinstance(item, CBlock | ModelOutputThunk) and item.value is None:
        raise ValueError("question is None and the last turn's input has no text")
    if not isinstance(item, CBlock | ModelOutputThunk | Component):
        raise ValueError(f"cannot read a question from a {type(item).__name__}")
    previous = context.previous_node
    if previous is None:
        raise ValueError("cannot rewind the context past its root")
    return span_text(item), previous


def extract_last_response(context: Context) -> tuple[str, Context]:
    """The last assistant response's text and the context before it."""
    turn = context.last_turn()
    if turn is None:
        raise ValueError("the context is empty: there is no assistant response to read")
    output = turn.output
    if output is None:
        raise ValueError("the last context element is not an assistant response")
    if isinstance(output, ModelOutputThunk):
        if output.value is None:
            raise ValueError("the assistant response is not computed yet: await it first")
        text = output.value
    elif isinstance(output, Message):
        text = output.content if output.content is not None else (output.text or "")
    else:
        raise ValueError(f"the last output is a {type(output).__name__}, not a response")
    previous = context.previous_node
    if previous is None:
        raise ValueError("cannot rewind the context past the assistant turn")
    return text, previous


def resolve_response(response: str | None, context: Context) -> tuple[str, Context]:
    """``(response, context)``; with no response, the last assistant turn's text and
    the context before it."""
    if response is not None:
        return response, context
    return extract_last_response(context)


def coerce_documents(documents: Iterable[Any], auto_doc_id: bool = True) -> list[Any]:
    """Strings become ``Document`` s (numbered ``"0"``, ``"1"``, ... when ``auto_doc_id``)."""
    result = []
    for index, doc in enumerate(documents):
        if isinstance(doc, Document):
            result.append(doc)
        else:
            result.append(Document(str(doc), doc_id=str(index) if auto_doc_id else None))
    return result


__all__ = [
    "acall_intrinsic",
    "call_intrinsic",
    "coerce_documents",
    "dict_contract",
    "extract_last_response",
    "list_contract",
    "resolve_question",
    "resolve_response",
]
