"""``POST /tokenize`` and ``POST /detokenize``: the served model's tokenizer, in vLLM's and
llama-server's shapes (:mod:`mellea.serve.tokenize`)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from cli.serve.json_body import BoundedJsonRoute
from cli.serve.offload import run_request_work
from mellea.serve.tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
    detokenize,
    served_engine,
    tokenize,
)

router = APIRouter(route_class=BoundedJsonRoute)


@router.post("/tokenize")
async def tokenize_text(body: TokenizeRequest, request: Request) -> TokenizeResponse:
    """The token ids of a text or of chat messages (through the chat template)."""
    runtime = request.app.state.runtime
    engine = served_engine(runtime)
    chat = body.messages is not None  # rendering a template is worth a worker thread
    return await run_request_work(request, chat, tokenize, engine, body, runtime.chat_template)


@router.post("/detokenize")
async def detokenize_ids(body: DetokenizeRequest, request: Request) -> DetokenizeResponse:
    """The text of a list of token ids."""
    engine = served_engine(request.app.state.runtime)
    return await run_request_work(request, False, detokenize, engine, body)
