"""``POST /v1/chat/completions``: the program run once per choice, the reply whole or streamed."""

from __future__ import annotations

import time
from dataclasses import replace

from fastapi import APIRouter, Request
from fastapi.responses import Response

from cli.serve.event_stream import as_response
from cli.serve.json_body import BoundedJsonRoute
from cli.serve.offload import run_request_work
from cli.serve.program import Program
from cli.serve.reply_parsers import reply_parser
from cli.serve.request_adapter import reply_model
from mellea.serve.chat.arguments import serve_arguments
from mellea.serve.chat.reply import ChatReply, ChatReplyContext
from mellea.serve.options import choice_options
from mellea.serve.protocol import ChatCompletion, ChatCompletionRequest

router = APIRouter(route_class=BoundedJsonRoute)


@router.post("/v1/chat/completions", response_model=None)
async def chat_completions(
    body: ChatCompletionRequest, request: Request
) -> ChatCompletion | Response:
    """Run the program on a chat request (once per choice); stream the reply when asked to."""
    started = time.monotonic()
    state = request.app.state
    settings = state.settings
    # A response_format schema takes a while to turn into a model: off the loop.
    schema = body.response_format is not None and body.response_format.type == "json_schema"
    args = await run_request_work(request, schema, serve_arguments, body)
    per_choice = choice_options(args.model_options, body.n or 1)
    context = ChatReplyContext.of(body, reply_model(settings))
    reply = ChatReply(context, [reply_parser(settings, body) for _ in per_choice])
    program: Program = state.program
    calls = [program.call(replace(args, model_options=o)) for o in per_choice]
    return as_response(await state.runner.run(calls, reply, request.is_disconnected, started))
