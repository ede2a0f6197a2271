"""``GET /v1/models``: the program this server serves, and the ``--lora`` adapters a
request's model may name."""

from __future__ import annotations

from fastapi import APIRouter, Request

from cli.serve.describe import describe_program
from mellea.serve.errors import OpenAIError
from mellea.serve.protocol import ModelCard, ModelList

router = APIRouter()


def model_card(request: Request) -> ModelCard:
    """The served program as a model: its docstring and the parameters ``serve()`` declares."""
    state = request.app.state
    return ModelCard(id=state.settings.served_model_name, mellea=describe_program(state.program))


@router.get("/v1/models")
async def list_models(request: Request) -> ModelList:
    """The program, and the ``--lora`` adapters a request's model may name."""
    adapters = request.app.state.settings.adapter_names
    return ModelList(data=[model_card(request), *(ModelCard(id=name) for name in adapters)])


@router.get("/v1/models/{model_id:path}")
async def retrieve_model(model_id: str, request: Request) -> ModelCard:
    """The served program as a model: its docstring and the parameters ``serve()`` declares."""
    settings = request.app.state.settings
    if model_id in settings.adapter_names:
        return ModelCard(id=model_id)
    model_name = settings.served_model_name
    if model_id != model_name:
        raise OpenAIError(
            404,
            f"no model {model_id!r}; this server serves {model_name!r}",
            param="model",
            code="model_not_found",
        )
    return model_card(request)
