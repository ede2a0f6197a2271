"""Facts the intrinsics' input and output code works from: the io.yaml fields, the
hub layouts, the base-model directory names and how many alternatives are asked for."""

from mellea.backends.adapters import io as _io
from mellea.backends.adapters import locate as _locate

YAML_REQUIRED_FIELDS: list[str] = list(_io.REQUIRED_FIELDS)
"""Fields every io.yaml must have."""

YAML_OPTIONAL_FIELDS: list[str] = list(_io.OPTIONAL_FIELDS)
"""Fields an io.yaml may have; read as ``None`` when absent."""

YAML_JSON_FIELDS: list[str] = ["response_format"]
"""io.yaml fields whose value is JSON text."""

OLD_LAYOUT_REPOS: list[str] = list(_locate.OLD_LAYOUT_REPOS)
"""Hub repositories laid out ``<task>/<lora|alora>/<base model>`` (the newer layout is
``<task>/<base model>/<lora|alora>``)."""

BASE_MODEL_TO_CANONICAL_NAME: dict[str, str] = dict(_locate.BASE_MODEL_TO_CANONICAL_NAME)
"""Base model ids -> the directory their adapters are published under."""

TOP_LOGPROBS: int = _io.TOP_LOGPROBS
"""Alternatives asked for per token when a result is decoded from log-probabilities."""
