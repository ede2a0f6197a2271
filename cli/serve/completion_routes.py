"""``POST /v1/completions`` (legacy text completions): each prompt completed ``n`` times."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import Response

from cli.serve.event_stream import as_response
from cli.serve.json_body import BoundedJsonRoute
from cli.serve.program import Program
from cli.serve.request_adapter import reply_model
from mellea.serve.completions.objects import Completion
from mellea.serve.completions.reply import TextContext, TextReply
from mellea.serve.completions.request import CompletionRequest, completion_options
from mellea.serve.options import choice_options

router = APIRouter(route_class=BoundedJsonRoute)


@router.post("/v1/completions", response_model=None)
async def completions(body: CompletionRequest, request: Request) -> Completion | Response:
    """Complete one or more text prompts (legacy completions API), ``n`` choices each."""
    started = time.monotonic()
    state = request.app.state
    options, n = completion_options(body), body.n or 1
    prompts = [prompt for prompt in body.prompts() for _ in range(n)]
    per_choice = choice_options(options, n) * (len(prompts) // n)
    reply = TextReply(TextContext.of(body, prompts, n, reply_model(state.settings)))
    program: Program = state.program
    calls = [program.complete(p, o) for p, o in zip(prompts, per_choice, strict=True)]
    return as_response(await state.runner.run(calls, reply, request.is_disconnected, started))
