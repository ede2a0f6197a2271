"""Guardian adapter functions: risk checks, policy guardrails, factuality.

The guardian adapters' io.yaml instructions build their ``<guardian>`` prompt; these
helpers resolve the inputs (the criteria and scoring banks below) and read results.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Iterable
from typing import Any, cast

from mellea.backends.adapters.results import AdapterSchemaMismatchError
from mellea.core.base import Context
from mellea.stdlib.components.chat import Message
from mellea.stdlib.components.intrinsic._util import (
    call_intrinsic,
    coerce_documents,
    dict_contract,
    extract_last_response,
)

log = logging.getLogger("mellea")

_UNSET: Any = object()
_TARGET_ROLE_TO_SCHEMA = {"user": "user_prompt", "assistant": "assistant_response"}

# Which span the judge looks at, and that it answers yes or no (the adapter's schema
# allows only "yes"/"no"). A key here, or any sentence of one's own.
SCORING_SCHEMA_BANK = {
    "assistant_response": (
        "If the last assistant's text meets the criteria, return 'yes'; otherwise, return 'no'."
    ),
    "user_prompt": (
        "If the last user's text meets the criteria, return 'yes'; otherwise, return 'no'."
    ),
    "last_turn": "If the previous turn meets the criteria, return 'yes'; otherwise, return 'no'.",
    "tool_call": (
        "If the assistant's tool call meets the criteria, return 'yes'; otherwise, return 'no'."
    ),
}

# The risk definitions of the Granite Guardian model card, which the adapter was
# trained on. A key here, or any criteria text of one's own.
CRITERIA_BANK = {
    "harm": (
        "Texts deemed universally harmful are those that pose harm across all contexts "
        "and audiences."
    ),
    "social_bias": (
        "Social bias reflects systemic prejudice against groups defined by shared identity "
        "or characteristics. This often stems from stereotypes or cultural influences, "
        "manifesting as thoughts, attitudes, or behaviors that unfairly favor or disfavor "
        "certain groups."
    ),
    "jailbreak": (
        "A jailbreak text refers to the deliberate evasion of an AI system's built-in "
        "safeguards or ethical boundaries. This practice often involves crafting specific "
        "prompts or scenarios intended to manipulate the AI into producing restricted or "
        "inappropriate content."
    ),
    "profanity": (
        "Profanity refers to the use of language deemed offensive or socially unacceptable "
        "in a given context. This primarily includes curse words, swear words, and crude "
        "expressions, though it typically excludes slurs or derogatory terms specifically "
        "targeting certain groups."
    ),
    "unethical_behavior": (
        "Unethical behavior refers to actions that violate moral or professional standards, "
        "particularly those involving exploitation for personal gain or a disregard for "
        "others' well-being. This category excludes physical violence or explicit bias and "
        "instead encompasses activities like fraud, theft, or the abuse of power."
    ),
    "violence": (
        "Violence refers to content that promotes or depicts physical harm to individuals "
        "or groups. This includes depictions of assault, self-harm, or the creation of a "
        "hostile environment through threats or intimidation."
    ),
    "groundedness": (
        "A text is considered ungrounded or unfaithful if it includes information lacking "
        "support from, or directly contradicting, the provided document(s). This risk "
        "arises when the text fabricates details, misinterprets the content, or makes "
        "unsupported extrapolations beyond what is explicitly stated in the document(s)."
    ),
    "answer_relevance": (
        "A text is considered inadequate if it fails to address or adequately respond to "
        "the posed query. This includes providing off-topic information, misinterpreting "
        "the query, or omitting key details requested in the query. Information, even if "
        "factually sound, is irrelevant if it fails to directly answer or meet the "
        "specific intent of the query."
    ),
    "context_relevance": (
        "A document is deemed irrelevant when it doesn't contain information pertinent to "
        "the query's specific needs. This means the retrieved or provided content fails to "
        "adequately address the question at hand. Irrelevant information could be on a "
        "different topic, originate from an unrelated field, or simply not offer any "
        "valuable insights for crafting a suitable response."
    ),
    "function_call": (
        "Function call hallucination occurs when a text includes function calls that either "
        "don't adhere to the correct format defined by the available tools or are "
        "inconsistent with the query's requirements. This risk arises from function calls "
        "containing incorrect argument names, values, or types that clash with the tool "
        "definitions or the query itself. Common examples include calling functions not "
        "present in the tool definitions, providing invalid argument values, or attempting "
        "to use parameters that don't exist."
    ),
}


def _policy_contract(raw: str) -> dict[str, Any]:
    """Exactly one of ``label`` and ``score``."""
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError(f"adapter 'policy-guardrails' output must be a JSON object: {raw!r}")
    if ("label" in data) == ("score" in data):
        raise AdapterSchemaMismatchError(
            "policy-guardrails", frozenset(data), frozenset({"label", "score"})
        )
    return data


def _guardian_contract(raw: str) -> dict[str, Any]:
    """``{"guardian": {"score": ...}}``."""
    data = dict_contract("guardian-core", ["guardian"])(raw)
    inner = data["guardian"]
    if not isinstance(inner, dict) or "score" not in inner:
        keys = frozenset(inner) if isinstance(inner, dict) else frozenset(data)
        raise AdapterSchemaMismatchError("guardian-core", keys, frozenset({"score"}))
    return data


def policy_guardrails(
    context: Context, backend: Any, policy_text: str, *, model_options: dict | None = None
) -> str:
    """Whether the last turn complies with ``policy_text``: ``"Yes"``, ``"No"`` or
    ``"Ambiguous"`` (``policy-guardrails`` adapter)."""
    result = call_intrinsic(
        "policy-guardrails",
        context,
        backend,
        kwargs={"policy_text": policy_text},
        model_options=model_options,
        io_contract=_policy_contract,
    )
    return cast(str, result["label"] if "label" in result else result["score"])


def guardian_check(
    context: Context,
    backend: Any,
    criteria: str,
    scoring_schema: str | Any = _UNSET,
    target_role: str | None = None,
    *,
    model_options: dict | None = None,
) -> float:
    """The risk (0 to 1) that the span ``scoring_schema`` names meets ``criteria``
    (``guardian-core`` adapter). ``criteria`` and ``scoring_schema`` are keys of
    :data:`CRITERIA_BANK` / :data:`SCORING_SCHEMA_BANK` or texts of one's own;
    ``scoring_schema`` defaults to the assistant's response. ``target_role``
    (``"user"``/``"assistant"``) is upstream's deprecated form of it."""
    if target_role is not None:
        warnings.warn(
            "`target_role` is deprecated; use scoring_schema (e.g. 'user_prompt')",
            DeprecationWarning,
            stacklevel=2,
        )
        if scoring_schema is not _UNSET:
            raise TypeError("Pass either `scoring_schema` or `target_role`, not both.")
        if target_role not in _TARGET_ROLE_TO_SCHEMA:
            raise ValueError(f"target_role must be 'user' or 'assistant', got {target_role!r}")
        schema = _TARGET_ROLE_TO_SCHEMA[target_role]
    elif scoring_schema is _UNSET:
        schema = "assistant_response"
    else:
        schema = str(scoring_schema)
        if schema in _TARGET_ROLE_TO_SCHEMA:
            log.warning(
                "guardian_check(scoring_schema=%r) is used as a literal sentence; did you "
                "mean scoring_schema=%r?",
                schema,
                _TARGET_ROLE_TO_SCHEMA[schema],
            )
    result = call_intrinsic(
        "guardian-core",
        context,
        backend,
        kwargs={
            "criteria": CRITERIA_BANK.get(criteria, criteria),
            "scoring_schema": SCORING_SCHEMA_BANK.get(schema, schema),
        },
        model_options=model_options,
        io_contract=_guardian_contract,
    )
    return cast(float, result["guardian"]["score"])


def factuality_detection(
    context: Context,
    backend: Any,
    *,
    documents: Iterable[Any] | None = None,
    model_options: dict | None = None,
) -> str:
    """Whether the last assistant answer is factually incorrect: ``"yes"`` (incorrect)
    or ``"no"`` (``factuality-detection`` adapter). ``documents`` replace those on the
    last assistant turn."""
    if documents is not None:
        context = _inject_documents(context, documents)
    result = call_intrinsic(
        "factuality-detection",
        context,
        backend,
        model_options=model_options,
        io_contract=dict_contract("factuality-detection", ["score"]),
    )
    return cast(str, result["score"])


def factuality_correction(
    context: Context,
    backend: Any,
    *,
    documents: Iterable[Any] | None = None,
    model_options: dict | None = None,
) -> str:
    """The last assistant answer corrected to agree with the documents
    (``factuality-correction`` adapter)."""
    if documents is not None:
        context = _inject_documents(context, documents)
    result = call_intrinsic(
        "factuality-correction",
        context,
        backend,
        model_options=model_options,
        io_contract=dict_contract("factuality-correction", ["correction"]),
    )
    return cast(str, result["correction"])


def _inject_documents(context: Context, documents: Iterable[Any]) -> Context:
    """``context`` with ``documents`` on its last assistant turn."""
    text, previous = extract_last_response(context)
    return previous.add(Message("assistant", text, documents=coerce_documents(documents)))


__all__ = [
    "CRITERIA_BANK",
    "SCORING_SCHEMA_BANK",
    "factuality_correction",
    "factuality_detection",
    "guardian_check",
    "policy_guardrails",
]
