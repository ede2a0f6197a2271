"""Token counts on the wire: one thunk's, and a whole reply's summed over its choices."""

from __future__ import annotations

from typing import Any

from mellea.core.thunk import ModelOutputThunk
from mellea.serve.choice_events import Finish
from mellea.serve.program_report import with_calls
from mellea.serve.protocol import CompletionTokensDetails, PromptTokensDetails, Usage


def usage_of(thunk: ModelOutputThunk, reasoning: str | None = None) -> Usage | None:
    """The thunk's token counts in wire form, if the backend reported them.

    ``completion_tokens_details.reasoning_tokens`` comes from the backend's own report
    (e.g. a model server behind the ``openai`` backend) or, with ``reasoning`` text and
    a backend that can count tokens (``meta["count_tokens"]``), from counting it.
    """
    raw = thunk.usage
    if not raw:
        return None
    prompt = int(raw.get("prompt_tokens", 0))
    completion = int(raw.get("completion_tokens", 0))
    cached = (raw.get("prompt_tokens_details") or {}).get("cached_tokens")
    usage = Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=int(raw.get("total_tokens", prompt + completion)),
        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached)
        if cached is not None
        else None,
    )
    reported = (raw.get("completion_tokens_details") or {}).get("reasoning_tokens")
    count = thunk.meta.get("count_tokens")
    if reported is not None:
        usage.completion_tokens_details = CompletionTokensDetails(reasoning_tokens=int(reported))
    elif reasoning and callable(count):
        usage.completion_tokens_details = CompletionTokensDetails(
            reasoning_tokens=min(int(count(reasoning)), completion)
        )
    return usage


def total_usage(usages: list[Usage | None], n: int = 1) -> Usage | None:
    """The usage of a whole reply from its choices' (``None`` if no choice reported any).

    Choices come ``n`` per prompt: a prompt's tokens count once, every choice's
    completion tokens count.
    """
    if all(u is None for u in usages):
        return None
    total = Usage()
    cached, reasoning = None, None
    for index, usage in enumerate(usages):
        if usage is None:
            continue
        if index % n == 0:
            total.prompt_tokens += usage.prompt_tokens
            if usage.prompt_tokens_details is not None:
                cached = (cached or 0) + usage.prompt_tokens_details.cached_tokens
        total.completion_tokens += usage.completion_tokens
        if usage.completion_tokens_details is not None:
            reasoning = (reasoning or 0) + usage.completion_tokens_details.reasoning_tokens
    total.total_tokens = total.prompt_tokens + total.completion_tokens
    if cached is not None:
        total.prompt_tokens_details = PromptTokensDetails(cached_tokens=cached)
    if reasoning is not None:
        total.completion_tokens_details = CompletionTokensDetails(reasoning_tokens=reasoning)
    return total


class Tally:
    """Each choice's finish, summed into the whole reply's usage.

    Choices come ``n`` per prompt: a prompt's tokens count once. The program's other
    model calls count too.
    """

    def __init__(self, count: int, n: int) -> None:
        """A tally of ``count`` choices."""
        self.usages: list[Usage | None] = [None] * count
        self.calls: list[tuple[dict[str, Any], ...]] = [() for _ in range(count)]
        self.n = n

    def add(self, index: int, finish: Finish) -> None:
        """Choice ``index`` finished."""
        self.usages[index] = finish.usage
        self.calls[index] = finish.other_calls

    def total(self) -> Usage:
        """The whole reply's usage: zeros when nothing reported any (a program that
        answered without a model call), since OpenAI's replies always carry one."""
        usage = total_usage(self.usages, self.n)
        return with_calls(usage, [call for run in self.calls for call in run]) or Usage()
