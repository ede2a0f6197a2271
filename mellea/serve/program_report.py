"""The ``mellea`` extension object: how the program reached its reply, and what it cost.

Built from the request's :class:`~mellea.core.trace.ProgramTrace` once the reply is
complete. Its fields (all optional to a client; see docs/serve.md):

- ``requirements_met``, ``attempt_count``, ``chosen_attempt``, ``requirements`` (the
  verdicts on the chosen attempt) and ``attempts`` (every attempt's text and verdicts):
  present when the program sampled with requirements.
- ``chunk_checks``: the verdicts on each chunk of a validated stream the program ran
  (:func:`mellea.stdlib.streaming.stream`): present when there were any.
- ``model_calls``: every model call the program made, with its purpose, the adapter it
  generated with (when one did) and its token counts.
"""

from __future__ import annotations

from typing import Any

from mellea.core.thunk import ModelOutputThunk
from mellea.core.trace import ModelCall, ProgramTrace
from mellea.serve.protocol import CompletionTokensDetails, PromptTokensDetails, Usage

EXTENSION = "mellea"  # the field name, the same on every route


def program_report(trace: ProgramTrace | None, served: ModelOutputThunk) -> dict[str, Any] | None:
    """The extension object for one program run that served ``served`` (``None`` untraced)."""
    if trace is None:
        return None
    report: dict[str, Any] = {}
    sampling = trace.sampling_for(served)
    if sampling is not None:
        chosen = sampling.chosen_attempt()
        report["requirements_met"] = sampling.success
        report["attempt_count"] = len(sampling.attempts)
        report["chosen_attempt"] = sampling.chosen
        report["requirements"] = [v.wire() for v in chosen.verdicts] if chosen else []
        report["attempts"] = [
            {
                "attempt": a.index,
                "text": a.thunk.text_so_far(),
                "passed": all(v.passed for v in a.verdicts),
                "requirements": [v.wire() for v in a.verdicts],
            }
            for a in sampling.attempts
        ]
    if trace.chunk_checks:
        report["chunk_checks"] = list(trace.chunk_checks)
    report["model_calls"] = [_call(c) for c in trace.calls]
    return report


def _call(call: ModelCall) -> dict[str, Any]:
    raw = call.usage or {}
    entry: dict[str, Any] = {"purpose": call.purpose}
    if call.attempt is not None:
        entry["attempt"] = call.attempt
    if call.requirement is not None:
        entry["requirement"] = call.requirement
    if call.adapter is not None:
        entry["adapter"] = call.adapter
    entry["prompt_tokens"] = int(raw.get("prompt_tokens", 0))
    entry["completion_tokens"] = int(raw.get("completion_tokens", 0))
    return entry


def other_calls(trace: ProgramTrace | None, served: ModelOutputThunk) -> list[dict[str, Any]]:
    """The reported usage of every model call of the run except the served thunk's."""
    if trace is None:
        return []
    return [c.usage for c in trace.calls if c.thunk is not served and c.usage]


def with_calls(usage: Usage | None, calls: list[dict[str, Any]]) -> Usage | None:
    """``usage`` (the served replies') plus the token counts of the program's other calls.

    Without other calls this is ``usage`` itself.
    """
    if not calls:
        return usage
    total = usage.model_copy(deep=True) if usage is not None else Usage()
    for raw in calls:
        total.prompt_tokens += int(raw.get("prompt_tokens", 0))
        total.completion_tokens += int(raw.get("completion_tokens", 0))
        cached = (raw.get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached is not None:
            details = total.prompt_tokens_details or PromptTokensDetails()
            details.cached_tokens += int(cached)
            total.prompt_tokens_details = details
        reasoning = (raw.get("completion_tokens_details") or {}).get("reasoning_tokens")
        if reasoning is not None:
            spent = total.completion_tokens_details or CompletionTokensDetails()
            spent.reasoning_tokens += int(reasoning)
            total.completion_tokens_details = spent
    total.total_tokens = total.prompt_tokens + total.completion_tokens
    return total


def event_object(event: dict[str, Any], index: int) -> dict[str, Any]:
    """A live trace event as the extension object of a stream chunk for choice ``index``."""
    return {**event, "index": index}
