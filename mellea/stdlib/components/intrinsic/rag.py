"""Adapter functions for retrieval-augmented generation."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any, cast

from mellea.core._sync import run_sync
from mellea.core.base import Context
from mellea.stdlib.components.chat import Message
from mellea.stdlib.components.intrinsic._util import (
    acall_intrinsic,
    call_intrinsic,
    coerce_documents,
    dict_contract,
    list_contract,
    resolve_question,
    resolve_response,
)

_CITATION_KEYS = (
    "response_begin",
    "response_end",
    "response_text",
    "citation_doc_id",
    "citation_begin",
    "citation_end",
    "citation_text",
)
_HALLUCINATION_KEYS = (
    "response_begin",
    "response_end",
    "response_text",
    "faithfulness",
    "explanation",
)


def _user_turn(context: Context, question: str, documents: Iterable[Any] | None = None) -> Context:
    docs = coerce_documents(documents) if documents is not None else None
    return context.add(Message("user", question, documents=docs))


def check_answerability(
    question: str | None,
    documents: Iterable[Any],
    context: Context,
    backend: Any,
    *,
    model_options: dict | None = None,
) -> str:
    """Whether ``documents`` can answer ``question`` (default: the last user turn):
    ``"answerable"`` or ``"unanswerable"`` (``answerability`` adapter)."""
    question, context = resolve_question(question, context, backend)
    result = call_intrinsic(
        "answerability",
        _user_turn(context, question, documents),
        backend,
        model_options=model_options,
        io_contract=dict_contract("answerability", ["answerability"]),
    )
    return cast(str, result["answerability"])


def rewrite_question(
    question: str | None, context: Context, backend: Any, *, model_options: dict | None = None
) -> str:
    """``question`` (default: the last user turn) rewritten to stand on its own, for a
    retriever (``query_rewrite`` adapter)."""
    question, context = resolve_question(question, context, backend)
    result = call_intrinsic(
        "query_rewrite",
        _user_turn(context, question),
        backend,
        model_options=model_options,
        io_contract=dict_contract("query_rewrite", ["rewritten_question"]),
    )
    return cast(str, result["rewritten_question"])


def clarify_query(
    question: str | None,
    documents: Iterable[Any],
    context: Context,
    backend: Any,
    *,
    model_options: dict | None = None,
) -> str:
    """A clarifying question for an ambiguous ``question``, or ``"CLEAR"`` when none
    is needed (``query_clarification`` adapter)."""
    question, context = resolve_question(question, context, backend)
    result = call_intrinsic(
        "query_clarification",
        _user_turn(context, question, documents),
        backend,
        model_options=model_options,
        io_contract=dict_contract("query_clarification", ["clarification"]),
    )
    return cast(str, result["clarification"])


def find_citations(
    response: str | None,
    documents: Iterable[Any],
    context: Context,
    backend: Any,
    *,
    model_options: dict | None = None,
) -> list[dict]:
    """The sentences of ``documents`` that support each sentence of ``response``
    (default: the last assistant answer), as records with ``response_begin``/``end``/
    ``text`` and ``citation_doc_id``/``begin``/``end``/``text`` (``citations`` adapter)."""
    return run_sync(
        afind_citations(response, documents, context, backend, model_options=model_options)
    )


async def afind_citations(
    response: str | None,
    documents: Iterable[Any],
    context: Context,
    backend: Any,
    *,
    model_options: dict | None = None,
) -> list[dict]:
    """Async :func:`find_citations` (ours)."""
    response, context = resolve_response(response, context)
    docs = coerce_documents(documents, auto_doc_id=False)
    result = await acall_intrinsic(
        "citations",
        context.add(Message("assistant", response, documents=docs)),
        backend,
        model_options=model_options,
        io_contract=list_contract("citations", _CITATION_KEYS),
    )
    return cast(list[dict], result["items"])


def check_context_relevance(
    question: str | None,
    document: Any,
    context: Context,
    backend: Any,
    *,
    model_options: dict | None = None,
) -> str:
    """Whether ``document`` is ``"relevant"``, ``"irrelevant"`` or ``"partially
    relevant"`` to ``question`` (``context_relevance`` adapter; deprecated upstream:
    Granite 4.0 only)."""
    warnings.warn(
        "check_context_relevance() is deprecated upstream: its adapter exists for Granite 4.0 only",
        DeprecationWarning,
        stacklevel=2,
    )
    question, context = resolve_question(question, context, backend)
    (doc,) = coerce_documents([document])
    result = call_intrinsic(
        "context_relevance",
        _user_turn(context, question),
        backend,
        kwargs={"document_content": doc.text},
        model_options=model_options,
        io_contract=dict_contract("context_relevance", ["context_relevance"]),
    )
    return cast(str, result["context_relevance"])


def flag_hallucinated_content(
    response: str | None,
    documents: Iterable[Any],
    context: Context,
    backend: Any,
    *,
    model_options: dict | None = None,
) -> list[dict]:
    """Each sentence of ``response`` (default: the last assistant answer) with its
    ``faithfulness`` to ``documents`` and an ``explanation``
    (``hallucination_detection`` adapter)."""
    response, context = resolve_response(response, context)
    result = call_intrinsic(
        "hallucination_detection",
        context.add(Message("assistant", response, documents=coerce_documents(documents))),
        backend,
        model_options=model_options,
        io_contract=list_contract("hallucination_detection", _HALLUCINATION_KEYS),
    )
    return cast(list[dict], result["items"])


__all__ = [
    "afind_citations",
    "check_answerability",
    "check_context_relevance",
    "clarify_query",
    "find_citations",
    "flag_hallucinated_content",
    "rewrite_question",
]
