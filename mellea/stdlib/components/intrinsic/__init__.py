"""Adapter functions ("intrinsics"): the ``Intrinsic`` component and the helpers of
``core`` (requirement check, certainty, context attribution), ``rag``
(answerability, query rewrite and clarification, citations, hallucination
detection) and ``guardian`` (guardian check, policy guardrails, factuality)."""

from mellea.stdlib.components.intrinsic.intrinsic import Intrinsic

__all__ = ["Intrinsic"]
