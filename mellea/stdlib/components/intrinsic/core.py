"""Core adapter functions: requirement check, certainty, context attribution."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from mellea.core.base import Context
from mellea.stdlib.components.chat import Message
from mellea.stdlib.components.intrinsic._util import (
    call_intrinsic,
    coerce_documents,
    resolve_response,
)
from mellea.stdlib.requirements.requirement import requirement_score


def check_certainty(context: Context, backend: Any, model_options: dict | None = None) -> float:
    """How certain the model is of the last assistant answer (``uncertainty``
    adapter; the context ends with a question and its answer); higher is surer."""
    result = call_intrinsic("uncertainty", context, backend, model_options=model_options)
    return cast(float, result["certainty"])


def requirement_check(
    context: Context, backend: Any, requirement: str, model_options: dict | None = None
) -> float:
    """The likelihood (0 to 1) that the last assistant answer meets ``requirement``
    (``requirement-check`` adapter, result ``{"requirement_check": {"score": s}}``).

    An output of another shape, or a score outside [0, 1], is an
    :class:`~mellea.backends.adapters.AdapterSchemaMismatchError`.
    """
    result = call_intrinsic(
        "requirement-check",
        context,
        backend,
        kwargs={"requirement": requirement},
        model_options=model_options,
    )
    return requirement_score(result)


def find_context_attributions(
    response: str | None,
    documents: Iterable[Any],
    context: Context,
    backend: Any,
    model_options: dict | None = None,
) -> list[dict]:
    """The sentences of the conversation and ``documents`` that most shaped each
    sentence of ``response`` (default: the last assistant answer), as records with
    ``response_begin``/``end``/``text``, ``attribution_doc_id``,
    ``attribution_msg_index`` and ``attribution_begin``/``end``/``text``."""
    response, context = resolve_response(response, context)
    docs = coerce_documents(documents, auto_doc_id=False)
    result = call_intrinsic(
        "context-attribution",
        context.add(Message("assistant", response, documents=docs)),
        backend,
        model_options=model_options,
    )
    return cast(list[dict], result)


__all__ = ["check_certainty", "find_context_attributions", "requirement_check"]
