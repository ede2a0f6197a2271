"""Amazon Bedrock: through LiteLLM (AWS credentials) or Bedrock's OpenAI-compatible
"Mantle" endpoint (``AWS_BEARER_TOKEN_BEDROCK``), as upstream's helpers build them."""

from __future__ import annotations

import os
from typing import Any

from mellea.backends.model_ids import ModelIdentifier


def _resolve_region(region: str | None) -> str | None:
    return (
        region
        or os.environ.get("AWS_REGION_NAME")
        or os.environ.get("AWS_DEFAULT_REGION")
        or os.environ.get("AWS_REGION")
    )


def _assert_bedrock_auth() -> None:
    """Some AWS credentials can be found (a Bedrock bearer token, or anything boto3 finds)."""
    if "AWS_BEARER_TOKEN_BEDROCK" in os.environ:
        return
    try:
        import boto3
    except ImportError as exc:
        raise ImportError(
            "checking AWS credentials for Bedrock needs the 'boto3' package "
            "(`pip install boto3`), or set AWS_BEARER_TOKEN_BEDROCK"
        ) from exc
    if boto3.Session().get_credentials() is None:
        raise RuntimeError(
            "no AWS credentials found for Bedrock: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, a profile, or AWS_BEARER_TOKEN_BEDROCK"
        )


def _mantle_uri(region: str | None = None) -> str:
    return f"https://bedrock-mantle.{region or 'us-east-1'}.api.aws/v1"


def _name(model_id: ModelIdentifier | str, field: str) -> str:
    if isinstance(model_id, ModelIdentifier):
        name = getattr(model_id, field)
        if not name:
            raise ValueError(f"{model_id} has no {field}; pass the Bedrock model id as a string")
        return name
    if not model_id:
        raise ValueError("a Bedrock model id is needed")
    return model_id


def create_bedrock_litellm_backend(
    model_id: ModelIdentifier | str, region: str | None = None, num_retries: int = 3
) -> Any:
    """A :class:`~mellea.backends.litellm.LiteLLMBackend` for a Bedrock model
    (``bedrock_litellm_name`` of an identifier, or a ``"bedrock/..."`` string)."""
    from mellea.backends.litellm import LiteLLMBackend

    _assert_bedrock_auth()
    resolved = _resolve_region(region)
    if resolved is None:
        raise ValueError(
            "you must specify a region: pass `region` or set AWS_REGION_NAME, "
            "AWS_DEFAULT_REGION or AWS_REGION"
        )
    name = _name(model_id, "bedrock_litellm_name")
    options = {"num_retries": num_retries, "aws_region_name": resolved}
    return LiteLLMBackend(model_id=name, model_options=options)


def create_bedrock_openai_backend(
    model_id: ModelIdentifier | str, region: str | None = None
) -> Any:
    """An :class:`~mellea.backends.openai.OpenAIBackend` on Bedrock's OpenAI-compatible
    endpoint (needs ``AWS_BEARER_TOKEN_BEDROCK``). Ours does not list the region's
    models first, so an unknown model fails on the first request instead."""
    from mellea.backends.openai import OpenAIBackend

    token = os.environ.get("AWS_BEARER_TOKEN_BEDROCK")
    if not token:
        raise RuntimeError(
            "set AWS_BEARER_TOKEN_BEDROCK to use Bedrock's OpenAI-compatible endpoint"
        )
    name = _name(model_id, "bedrock_name")
    return OpenAIBackend(model_id=name, base_url=_mantle_uri(region), api_key=token)


def list_mantle_models(region: str | None = None) -> list[Any]:
    """The models Bedrock's OpenAI-compatible endpoint serves in ``region``."""
    from openai import OpenAI

    client = OpenAI(base_url=_mantle_uri(region), api_key=os.environ["AWS_BEARER_TOKEN_BEDROCK"])
    return list(client.models.list())


def stringify_mantle_model_ids(region: str | None = None) -> str:
    """The served model ids, one `` * id`` a line."""
    return " * " + "\n * ".join(str(m.id) for m in list_mantle_models(region))


__all__ = [
    "create_bedrock_litellm_backend",
    "create_bedrock_openai_backend",
    "list_mantle_models",
    "stringify_mantle_model_ids",
]
