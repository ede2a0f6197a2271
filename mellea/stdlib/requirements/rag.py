"""``GroundednessRequirement``: is the last answer backed by its documents?

Upstream's four steps, with the same pass rule:

1. the ``citations`` adapter finds, for each sentence of the answer, the document
   sentences that support it;
2. the answer is cut into spans, cited and uncited, and the model says which spans
   make claims that need a source (greetings, hedges and "I don't know" do not);
3. for each span that needs one and has citations, the model grades the support
   ``FULLY_SUPPORTED``, ``PARTIALLY_SUPPORTED`` or ``NOT_SUPPORTED`` (a span without
   citations is not supported);
4. the answer is grounded when every span that needs a source is fully supported
   (or partially, with ``allow_partial_support=True``).

The two model judgments are asked with a JSON schema (constrained decoding), so
their answers parse; the prompts are ours.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterable
from typing import Any

from mellea.core.base import Context
from mellea.core.model_options import ModelOption
from mellea.core.requirement import Requirement, ValidationResult
from mellea.core.thunk import ModelOutputThunk
from mellea.stdlib.components.chat import Message
from mellea.stdlib.components.intrinsic._util import coerce_documents
from mellea.stdlib.components.intrinsic.rag import afind_citations
from mellea.stdlib.components.intrinsic.run import conversation
from mellea.stdlib.context import ChatContext

log = logging.getLogger("mellea")

FULLY, PARTIALLY, NOT = "FULLY_SUPPORTED", "PARTIALLY_SUPPORTED", "NOT_SUPPORTED"

_NECESSITY_SCHEMA = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "span_id": {"type": "integer", "minimum": 0},
            "needs_citation": {"type": "string", "enum": ["yes", "no"]},
        },
        "required": ["span_id", "needs_citation"],
    },
}
_SUPPORT_SCHEMA = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "span_id": {"type": "integer", "minimum": 0},
            "support_level": {"type": "string", "enum": [FULLY, PARTIALLY, NOT]},
        },
        "required": ["span_id", "support_level"],
    },
}


class GroundednessRequirement(Requirement):
    """The last assistant answer is grounded in ``documents`` (default: those attached
    to the answer's message), judged by the citations adapter and the model."""

    def __init__(
        self,
        documents: Iterable[Any] | None = None,
        allow_partial_support: bool = False,
        max_new_tokens: int = 500,
        description: str | None = None,
    ) -> None:
        self.allow_partial_support = allow_partial_support
        self.max_new_tokens = max_new_tokens
        self.documents = coerce_documents(documents) if documents is not None else None
        if description is None:
            level = "supported" if allow_partial_support else "fully supported"
            description = (
                f"Response must be grounded in citations (all spans needing citations "
                f"must be {level})"
            )
        super().__init__(description, None)

    async def validate(
        self,
        backend: Any,
        ctx: Context,
        *,
        format: type | None = None,
        model_options: dict[str, Any] | None = None,
    ) -> ValidationResult:
        """The verdict on the last answer in ``ctx``; a step that fails is a failed
        verdict whose reason says which."""
        del format, model_options
        found = _last_answer(ctx)
        if isinstance(found, str):
            return ValidationResult(False, reason=found)
        response, documents, before = found
        documents = self.documents if self.documents is not None else documents
        if not documents:
            return ValidationResult(
                False,
                reason="No documents to check the answer against: pass documents= or "
                "attach them to the assistant message.",
            )
        if not response.strip():
            return ValidationResult(True, reason="Empty response is considered grounded")
        try:
            citations = await afind_citations(response, documents, before, backend)
        except Exception as exc:
            return ValidationResult(False, reason=f"Citation generation failed: {exc}")
        spans = response_spans(response, citations)
        try:
            needed = await self._needs_citation(backend, before, response, spans)
            support = await self._support(
                backend, before, response, spans, needed, citations, documents
            )
        except Exception as exc:
            return ValidationResult(False, reason=f"Judging the citations failed: {exc}")
        passed, reason = self.verdict(response, spans, needed, support)
        return ValidationResult(passed, reason=reason)

    async def _judge(
        self, backend: Any, before: Context, prompt: str, schema: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """One model judgment, as JSON matching ``schema``."""
        messages, _ = conversation(before)
        options = {
            ModelOption.TEMPERATURE: 0.0,
            ModelOption.MAX_NEW_TOKENS: self.max_new_tokens,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "judgment", "schema": schema},
            },
        }
        thunk: ModelOutputThunk = await backend.generate(
            [*messages, {"role": "user", "content": prompt}], model_options=options
        )
        answer = await thunk.avalue()
        data = json.loads(answer)
        return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []

    async def _needs_citation(
        self, backend: Any, before: Context, response: str, spans: list[dict[str, Any]]
    ) -> list[bool]:
        """For each span, whether it makes a claim that needs a source."""
        if not spans:
            return []
        listed = ",\n".join(
            json.dumps({"span_id": i, "text": s["text"]}) for i, s in enumerate(spans)
        )
        prompt = (
            "Below is an answer and the spans it was cut into. For each span, say whether it "
            'states facts about the world that a source must back (needs_citation "yes"), '
            "or whether it is only one of: an admission of not knowing, conversational or "
            'transitional wording, or a repetition of another span ("no").\n'
            'Answer with a JSON array with one {"span_id": ..., "needs_citation": ...} '
            f"per span.\n\nAnswer:\n{response}\n\nSpans:\n[{listed}]\n"
        )
        judged = await self._judge(backend, before, prompt, _NECESSITY_SCHEMA)
        needs = [False] * len(spans)
        for item in judged:
            index = item.get("span_id")
            if isinstance(index, int) and 0 <= index < len(spans):
                needs[index] = str(item.get("needs_citation", "")).lower() in ("yes", "true", "1")
        return needs

    async def _support(
        self,
        backend: Any,
        before: Context,
        response: str,
        spans: list[dict[str, Any]],
        needed: list[bool],
        citations: list[dict[str, Any]],
        documents: list[Any],
    ) -> list[str | None]:
        """Each span's support level (``None`` where no source is needed)."""
        support: list[str | None] = [None] * len(spans)
        graded: list[tuple[int, list[dict[str, Any]]]] = []
        for index, (span, needs) in enumerate(zip(spans, needed, strict=True)):
            if not needs:
                continue
            cited = [
                c
                for c in citations
                if c["response_begin"] < span["end"] and c["response_end"] > span["begin"]
            ]
            if cited:
                graded.append((index, cited))
            else:
                support[index] = NOT
        if not graded:
            return support
        entries = []
        for number, (index, cited) in enumerate(graded):
            quotes = "\n".join(
                f'    source {j} (document {c.get("citation_doc_id")}): "{c.get("citation_text", "")}"'
                for j, c in enumerate(cited)
            )
            entries.append(f'  span {number}: "{spans[index]["text"]}"\n{quotes}')
        sources = "\n\n".join(f"Document {d.doc_id}:\n{d.text}" for d in documents)
        prompt = (
            "Grade how well the quoted sources back each span of the answer, reading them in "
            "the full documents: FULLY_SUPPORTED, PARTIALLY_SUPPORTED or NOT_SUPPORTED.\n"
            'Answer with a JSON array with one {"span_id": ..., "support_level": ...} per '
            f"span.\n\nDocuments:\n{sources}\n\nAnswer:\n{response}\n\nSpans:\n"
            + "\n".join(entries)
            + "\n"
        )
        judged = await self._judge(backend, before, prompt, _SUPPORT_SCHEMA)
        levels = {
            item.get("span_id"): item.get("support_level")
            for item in judged
            if item.get("support_level") in (FULLY, PARTIALLY, NOT)
        }
        for number, (index, _) in enumerate(graded):
            support[index] = levels.get(number, NOT)
        return support

    def verdict(
        self,
        response: str,
        spans: list[dict[str, Any]],
        needed: list[bool],
        support: list[str | None],
    ) -> tuple[bool, str]:
        """Whether the answer is grounded, and a reason listing the spans that fail."""
        accepted = {FULLY, PARTIALLY} if self.allow_partial_support else {FULLY}
        failing = [
            (span, level)
            for span, needs, level in zip(spans, needed, support, strict=True)
            if needs and level not in accepted
        ]
        if failing:
            lines = "".join(f'- "{s["text"]}" [{level or NOT}]\n' for s, level in failing)
            reason = (
                f"Response is not grounded - these spans are not properly supported:\n\n{lines}"
            )
        else:
            reason = "Response is grounded in citations."
        total = sum(needed)
        full = sum(
            1 for needs, level in zip(needed, support, strict=True) if needs and level == FULLY
        )
        reason += f"\nSummary: {full}/{total} spans needing citations are fully supported."
        return not failing, reason


def response_spans(response: str, citations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The answer cut at the edges of its cited ranges: each non-blank piece with its
    ``begin``/``end``, stripped ``text`` and whether a citation covers it."""
    ranges = sorted(
        (c["response_begin"], min(c["response_end"], len(response)))
        for c in citations
        if c["response_begin"] < min(c["response_end"], len(response))
    )
    merged: list[list[int]] = []
    for begin, end in ranges:
        if merged and begin < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([begin, end])
    cuts = sorted({0, len(response), *(x for r in merged for x in r)})
    spans = []
    for begin, end in itertools.pairwise(cuts):
        text = response[begin:end].strip()
        if text:
            cited = any(b <= begin and end <= e for b, e in merged)
            spans.append({"begin": begin, "end": end, "text": text, "is_cited": cited})
    return spans


def _last_answer(ctx: Context) -> tuple[str, list[Any], Context] | str:
    """The last answer's text, its message's documents and the context before it; or
    why there is none."""
    items = ctx.as_list(1)
    if not items:
        return "Context is empty, cannot validate groundedness"
    last = items[0]
    if isinstance(last, ModelOutputThunk):
        text, documents = last.value or "", []
    elif isinstance(last, Message) and last.role == "assistant":
        text = last.content if last.content is not None else last.text
        documents = list(last._docs or [])
    else:
        return "The last context item is not an assistant response, cannot validate groundedness"
    before = ctx.previous_node or ChatContext()
    return text, documents, before


__all__ = ["GroundednessRequirement", "response_spans"]
