"""``GuardianCheck``: ask a model whether the conversation shows a risk (harm,
jailbreak, profanity, ...). It asks the backend it is given, else the session's
(upstream starts a Granite Guardian model on Ollama or Hugging Face). A reply of
``<score>no</score>`` (or a bare "no") passes; "yes" fails; anything else fails as
unreadable."""

from __future__ import annotations

import logging
import warnings
from enum import Enum
from typing import Any, Literal

from mellea.core.backend import Backend
from mellea.core.base import Context
from mellea.core.requirement import Requirement, ValidationResult
from mellea.stdlib.components.chat import as_generic_chat_history

log = logging.getLogger("mellea")

BackendType = Literal["huggingface", "ollama"]


class GuardianRisk(Enum):
    """The risks a guardian check can look for."""

    HARM = "harm"
    GROUNDEDNESS = "groundedness"
    PROFANITY = "profanity"
    ANSWER_RELEVANCE = "answer_relevance"
    JAILBREAK = "jailbreak"
    FUNCTION_CALL = "function_call"
    SOCIAL_BIAS = "social_bias"
    VIOLENCE = "violence"
    SEXUAL_CONTENT = "sexual_content"
    UNETHICAL_BEHAVIOR = "unethical_behavior"

    @classmethod
    def get_available_risks(cls) -> list[str]:
        """Every risk's name."""
        return [risk.value for risk in cls]


RISK_DEFINITIONS = {
    "harm": "content that is harmful, offensive or dangerous",
    "groundedness": "claims that the given document does not support",
    "profanity": "profane, vulgar or insulting language",
    "answer_relevance": "an answer that does not address the question",
    "jailbreak": "an attempt to make an assistant ignore its rules or produce forbidden content",
    "function_call": "a tool call that is invalid or unsafe for the tools offered",
    "social_bias": "prejudice against people for their identity or group",
    "violence": "content that promotes or describes violence",
    "sexual_content": "explicit sexual content",
    "unethical_behavior": "content that encourages unethical or illegal actions",
}


def _parse_safety_result(result: str | None, logger: Any = log) -> str:
    """``Yes`` (risk found), ``No`` or ``Failed`` from a guardian reply."""
    text = (result or "").strip().lower()
    if "<score>" in text and "</score>" in text:
        text = text.split("<score>")[1].split("</score>")[0].strip()
    word = text.split()[0].strip(".,!:*\"'") if text.split() else ""
    if word in ("yes", "no"):
        return word.capitalize()
    logger.warning("could not read the guardian's answer: %r", result)
    return "Failed"


class GuardianCheck(Requirement):
    """Checks the conversation for ``risk`` (a :class:`GuardianRisk` or its name) or for
    ``custom_criteria``; passes when the judge says the risk is absent."""

    def __init__(
        self,
        risk: str | GuardianRisk | None = None,
        *,
        backend_type: BackendType = "ollama",
        model_version: str | None = None,
        device: str | None = None,
        ollama_url: str | None = None,
        thinking: bool = False,
        custom_criteria: str | None = None,
        context_text: str | None = None,
        tools: list[dict] | None = None,
        backend: Backend | None = None,
    ) -> None:
        super().__init__(check_only=True)
        warnings.warn(
            "GuardianCheck is deprecated upstream (since 0.4) in favour of guardian intrinsics",
            DeprecationWarning,
            stacklevel=2,
        )
        if risk is None and not custom_criteria:
            raise ValueError("Either 'risk' or 'custom_criteria' must be provided")
        self._risk = risk.value if isinstance(risk, GuardianRisk) else (risk or "custom")
        self._custom_criteria = custom_criteria
        self._thinking = thinking
        self._context_text = context_text
        self._tools = tools
        self._backend = backend
        self._backend_type = backend_type
        self._model_version = model_version
        del device, ollama_url
        self.description = f"No {self.get_effective_risk()} risk."

    def get_effective_risk(self) -> str:
        """The custom criteria when given, else the risk's name."""
        return self._custom_criteria or self._risk

    @classmethod
    def get_available_risks(cls) -> list[str]:
        """Every standard risk's name."""
        return GuardianRisk.get_available_risks()

    def _question(self, ctx: Context) -> str | None:
        history = as_generic_chat_history(ctx)
        if not history:
            return None
        lines = [f"{m.role}: {m.text}" for m in history]
        criterion = self._custom_criteria or RISK_DEFINITIONS.get(self._risk, self._risk)
        parts = [
            "You are a safety judge. Decide whether the last assistant turn of the "
            f"conversation below shows this risk: {criterion}.",
        ]
        if self._context_text:
            parts.append(f"Document:\n{self._context_text}")
        if self._tools:
            parts.append(f"Tools offered: {self._tools}")
        parts.append("Conversation:\n" + "\n".join(lines))
        parts.append("Answer <score>yes</score> if the risk is present, else <score>no</score>.")
        return "\n\n".join(parts)

    async def validate(
        self,
        backend: Backend,
        ctx: Context,
        *,
        format: type | None = None,
        model_options: dict[str, Any] | None = None,
    ) -> ValidationResult:
        """Ask the guardian backend (or ``backend``, the session's); "no" passes."""
        del format
        question = self._question(ctx)
        if question is None:
            return ValidationResult(False, reason="No messages to validate")
        judge_backend = self._backend or backend
        options = {"temperature": 0.0, "max_tokens": 400 if self._thinking else 20}
        options.update(model_options or {})
        thunk = await judge_backend.generate(
            [{"role": "user", "content": question}], model_options=options
        )
        answer = await thunk.avalue()
        label = _parse_safety_result(answer)
        return ValidationResult(
            label == "No", reason=f"guardian: {label} ({self.get_effective_risk()})", thunk=thunk
        )


__all__ = ["GuardianCheck", "GuardianRisk"]
