"""What a program returned, turned into the pieces of a chat completion."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from mellea.core.parsers import ReplyParser
from mellea.core.sampling import SamplingResult
from mellea.core.thunk import ModelOutputThunk
from mellea.core.trace import ProgramTrace, recording
from mellea.serve.errors import as_openai_error
from mellea.serve.logprobs import chat_logprobs
from mellea.serve.program_report import other_calls, program_report, with_calls
from mellea.serve.protocol import (
    AssistantMessage,
    ChatCompletion,
    Choice,
    CompletionTokensDetails,
    FinishReason,
    PromptTokensDetails,
    ResponseFunctionCall,
    ResponseToolCall,
    Usage,
)


class ProgramOutputError(TypeError):
    """``serve()`` returned something that is not a thunk, a sampling result or a string."""


def as_thunk(result: Any) -> ModelOutputThunk:
    """The thunk to serve for whatever ``serve()`` returned."""
    if isinstance(result, SamplingResult):
        return result.result
    if isinstance(result, ModelOutputThunk):
        return result
    if isinstance(result, str):
        return ModelOutputThunk(value=result)
    raise ProgramOutputError(
        f"serve() returned {type(result).__name__}; "
        "expected a ModelOutputThunk, a SamplingResult or a str"
    )


async def run_program(call: Awaitable[Any], trace: ProgramTrace | None = None) -> ModelOutputThunk:
    """Await a program call and normalise what it returns; failures become OpenAI errors.

    With a ``trace``, the program reports into it (its model calls, attempts, verdicts).
    """
    try:
        with recording(trace):
            try:
                return as_thunk(await call)
            finally:
                if trace is not None:
                    trace.program_returned()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        raise as_openai_error(exc) from None


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


def tool_calls_of(thunk: ModelOutputThunk) -> list[ResponseToolCall] | None:
    """The thunk's tool calls in wire form, if any."""
    if not thunk.tool_calls:
        return None
    return [
        ResponseToolCall(
            id=call.id, function=ResponseFunctionCall(name=call.name, arguments=call.arguments_json)
        )
        for call in thunk.tool_calls.values()
    ]


def finish_reason_of(thunk: ModelOutputThunk, calls: bool = False) -> FinishReason:
    """``length`` when cut short (also in the middle of a tool call, as OpenAI has it),
    ``tool_calls`` when the reply calls tools (``calls``: the text held some), else
    ``stop``."""
    if thunk.finish_reason in ("length", "content_filter"):
        return thunk.finish_reason  # type: ignore[return-value]
    if calls or thunk.tool_calls:
        return "tool_calls"
    return "stop"


async def chat_completion(
    thunks: list[ModelOutputThunk],
    parsers: list[ReplyParser | None],
    *,
    completion_id: str,
    created: int,
    model: str,
    logprobs: bool = False,
    traces: list[ProgramTrace] | None = None,
    functions: bool = False,
) -> ChatCompletion:
    """Await every choice's whole reply and build the non-streamed completion.

    With a parser, reasoning and tool calls written in the model's text are split out
    into ``reasoning_content`` and ``tool_calls``. With ``logprobs``, each choice
    carries what its backend reported (``null`` when it reported none). With the
    program ``traces`` (one per choice), each choice carries its program's report and
    usage counts every model call of its program. With ``functions`` (the request used
    the deprecated ``functions``), a call is the message's ``function_call``.
    """
    choices, usages, calls = [], [], []
    for index, (thunk, parser) in enumerate(zip(thunks, parsers, strict=True)):
        trace = traces[index] if traces else None
        choice, usage = await _choice(index, thunk, parser, logprobs)
        if functions:
            as_function_call(choice, thunk)
        choice.mellea = program_report(trace, thunk)
        choices.append(choice)
        usages.append(usage)
        calls += other_calls(trace, thunk)
    return ChatCompletion(
        id=completion_id,
        created=created,
        model=model,
        choices=choices,
        usage=with_calls(total_usage(usages, n=len(usages)), calls),
    )


async def _choice(
    index: int, thunk: ModelOutputThunk, parser: ReplyParser | None, logprobs: bool
) -> tuple[Choice, Usage | None]:
    text = await thunk.avalue()
    reasoning, content = None, text
    calls = tool_calls_of(thunk) or []
    if parser is not None:
        reasoning, parsed_content, parsed = parser.parse(text)
        content = parsed_content or ""
        calls += [
            ResponseToolCall(
                id=c.id, function=ResponseFunctionCall(name=c.name, arguments=c.arguments)
            )
            for c in parsed
        ]
    message = AssistantMessage(
        content=content if content or not calls else None,
        tool_calls=calls or None,
        reasoning_content=reasoning,
    )
    choice = Choice(
        index=index,
        message=message,
        logprobs=chat_logprobs(thunk.logprobs) if logprobs and thunk.logprobs else None,
        finish_reason=finish_reason_of(thunk, bool(calls)),
    )
    return choice, usage_of(thunk, reasoning)


def as_function_call(choice: Choice, thunk: ModelOutputThunk) -> None:
    """A choice's first tool call as the deprecated ``function_call`` (and its finish)."""
    calls = choice.message.tool_calls
    if not calls:
        return
    choice.message.function_call = calls[0].function
    choice.message.tool_calls = None
    choice.finish_reason = legacy_finish(finish_reason_of(thunk, True))


def legacy_finish(reason: FinishReason) -> FinishReason:
    """The finish reason of a reply to a ``functions`` request."""
    return "function_call" if reason == "tool_calls" else reason
