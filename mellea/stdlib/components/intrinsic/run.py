"""Running an adapter function: context -> request -> adapter generation -> result.

The same path serves every backend: the request is chat messages and model options
(the adapter's name in ``ModelOption.ADAPTER``, documents and, for an embedded
adapter, its name in ``chat_template_kwargs``), so the local engine and a remote
OpenAI-compatible server run it alike.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mellea.backends.adapters.adapter import Adapter, EmbeddedIntrinsicAdapter
from mellea.backends.adapters.backend import resolve_adapter
from mellea.backends.adapters.io import IntrinsicRequest, build_request
from mellea.backends.adapters.results import process_output
from mellea.core.base import Context, Span
from mellea.core.model_options import ModelOption
from mellea.core.thunk import ModelOutputThunk
from mellea.formatters import chat_dicts
from mellea.stdlib.components.chat import Message
from mellea.stdlib.components.intrinsic.intrinsic import Intrinsic

Generate = Callable[[list[dict[str, Any]], dict[str, Any]], Awaitable[ModelOutputThunk]]

# Adapter functions answer deterministically unless the caller asks otherwise.
DEFAULT_OPTIONS = {ModelOption.TEMPERATURE: 0.0}


def adapter_for(backend: Any, intrinsic: Intrinsic) -> Adapter:
    """The backend's adapter for ``intrinsic``: an added one of an allowed kind (in
    ``adapter_types`` order), else the catalog's, added now."""
    return resolve_adapter(backend, intrinsic.intrinsic_name, intrinsic.adapter_types)


def conversation(ctx: Context, system_prompt: str | None = None) -> tuple[list[dict], list[dict]]:
    """The context as chat messages, and the documents its messages carry
    (``{"doc_id", "text"}``, numbered from 0 where a document has no id)."""
    messages: list[dict[str, Any]] = []
    documents: list[dict[str, str]] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    spans: list[Span] = list(ctx.view_for_generation() or [])
    for span in spans:
        if isinstance(span, Message):
            text = span.content
            if text is None and span.thunk is not None:
                text = span.thunk.value
            messages.append({"role": span.role, "content": text or ""})
            for doc in span._docs or []:
                doc_id = doc.doc_id if doc.doc_id is not None else str(len(documents))
                documents.append({"doc_id": str(doc_id), "text": doc.text})
        elif isinstance(span, ModelOutputThunk):
            messages.append({"role": "assistant", "content": span.value or ""})
        else:
            messages.extend(chat_dicts([span]))
    return messages, documents


def request_for(
    adapter: Adapter,
    intrinsic: Intrinsic,
    ctx: Context,
    model_options: dict[str, Any] | None = None,
) -> tuple[IntrinsicRequest, dict[str, Any]]:
    """The request (messages, documents) and model options one adapter-function call sends.

    Options: ``temperature`` 0, then the adapter's io.yaml, then the caller's
    ``model_options`` (which win), then the adapter's name.
    """
    assert adapter.config is not None
    caller = dict(model_options or {})
    messages, documents = conversation(ctx, caller.pop(ModelOption.SYSTEM_PROMPT, None))
    request = build_request(adapter.config, messages, documents, intrinsic.intrinsic_kwargs)
    caller.pop(ModelOption.STREAM, None)  # the result is post-processed as a whole
    options = {**DEFAULT_OPTIONS, **request.model_options, **caller}
    template_kwargs = dict(request.model_options.get("chat_template_kwargs") or {})
    template_kwargs.update(caller.get("chat_template_kwargs") or {})
    if request.documents:
        template_kwargs["documents"] = request.documents
    if isinstance(adapter, EmbeddedIntrinsicAdapter):
        # A Granite Switch model's chat template turns the named adapter on.
        template_kwargs["adapter_name"] = adapter.intrinsic_name
    else:
        options[ModelOption.ADAPTER] = adapter.qualified_name
    if template_kwargs:
        options["chat_template_kwargs"] = template_kwargs
    return request, options


async def run_intrinsic(
    backend: Any,
    intrinsic: Intrinsic,
    ctx: Context,
    model_options: dict[str, Any] | None = None,
    generate: Generate | None = None,
) -> ModelOutputThunk:
    """Run ``intrinsic`` on ``ctx`` and return a computed thunk holding its result (JSON).

    ``generate(messages, model_options)`` makes the model call (default:
    ``backend.generate``; the session passes its hooked call). The thunk keeps the
    generation's usage; ``meta`` holds the raw output and the adapter's name.
    """
    adapter = adapter_for(backend, intrinsic)
    request, options = request_for(adapter, intrinsic, ctx, model_options)
    if generate is None:

        async def generate(sent: list[dict[str, Any]], opts: dict[str, Any]) -> ModelOutputThunk:
            return await backend.generate(sent, model_options=opts)

    raw_thunk = await generate(request.messages, options)
    raw = await raw_thunk.avalue()
    assert adapter.config is not None
    result = process_output(adapter.config, raw, raw_thunk.logprobs, request)
    thunk = ModelOutputThunk(result, meta={"raw": raw, "adapter": adapter.qualified_name})
    thunk.usage = raw_thunk.usage
    thunk.finish_reason = raw_thunk.finish_reason
    thunk.logprobs = raw_thunk.logprobs
    if hasattr(raw_thunk, "_generate_log"):  # what the session's last_prompt() reads
        thunk._generate_log = raw_thunk._generate_log  # type: ignore[attr-defined]
    return thunk


__all__ = ["adapter_for", "conversation", "request_for", "run_intrinsic"]
