"""Backend-neutral keys for generation options (upstream imports them from ``mellea.backends.model_options``).

Keys wrapped in ``@@@`` are mellea's own; backends translate them to their native
names. The key strings match upstream mellea so programs written for it run here.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("mellea.backends")  # where upstream logs option conflicts


class ModelOption:
    """Names of the generation options a program may pass in ``model_options``.

    ``CONTEXT_WINDOW``, ``THINKING`` and ``STREAM_TIMEOUT`` are upstream names our
    backends do not read; they stay so that programs naming them still import.
    """

    TOOLS = "@@@tools@@@"
    TOOL_CHOICE = "tool_choice"
    MAX_NEW_TOKENS = "@@@max_new_tokens@@@"
    SYSTEM_PROMPT = "@@@system_prompt@@@"
    TEMPERATURE = "temperature"
    TOP_P = "top_p"
    CONTEXT_WINDOW = "@@@context_window@@@"
    THINKING = "@@@thinking@@@"
    SEED = "@@@seed@@@"
    STREAM = "@@@stream@@@"
    STREAM_TIMEOUT = "@@@stream_timeout@@@"
    STOP_SEQUENCES = "@@@stop_sequences@@@"
    # The name of a LoRA/aLoRA adapter loaded in the local engine to generate with.
    ADAPTER = "@@@adapter@@@"
    # The prompt's own token log-probabilities, k alternatives each (an int; the local
    # backend reports them on ``ModelOutputThunk.prompt_logprobs``).
    PROMPT_LOGPROBS = "prompt_logprobs"
    # Send the messages' text as it is, without the chat template (the local backend):
    # a text completion whose prompt is scored, so the scores are of that text.
    RAW_PROMPT = "raw_prompt"

    @staticmethod
    def replace_keys(options: dict[str, Any], from_to: dict[str, str]) -> dict[str, Any]:
        """Return a copy of ``options`` with keys renamed by ``from_to``.

        A source key is always dropped. When the destination key already holds a
        non-None value, that value wins and the conflict is logged.
        """
        renamed = dict(options)
        for old_key, new_key in from_to.items():
            if old_key not in renamed or not new_key or old_key == new_key:
                continue
            value = renamed.pop(old_key)
            if renamed.get(new_key) is not None:
                log.warning(
                    "model option %s ignored: %s is already set to %r",
                    old_key,
                    new_key,
                    renamed[new_key],
                )
            else:
                renamed[new_key] = value
        return renamed

    @staticmethod
    def remove_special_keys(model_options: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``model_options`` without mellea's ``@@@`` keys."""
        return {k: v for k, v in model_options.items() if not k.startswith("@@@")}

    @staticmethod
    def merge_model_options(
        persistent_opts: dict[str, Any], overwrite_opts: dict[str, Any] | None
    ) -> dict[str, Any]:
        """``persistent_opts`` updated by ``overwrite_opts`` (which wins), as a new dict."""
        return {**persistent_opts, **(overwrite_opts or {})}


def varied_options(options: dict[str, Any], index: int, temperature: float) -> dict[str, Any]:
    """The options of generation ``index`` among several that must not repeat each other.

    The one rule for both ``n`` choices of a request and retries of a sampling loop:
    generation 0 keeps ``options``; later ones get ``seed + index`` when a seed was given
    (``seed - index`` where that would pass 2**63), and sample at ``temperature`` when
    no temperature was given (the local backend's default is greedy, which repeats).
    """
    if index == 0:
        return options
    varied = dict(options)
    seed = varied.get(ModelOption.SEED)
    if seed is not None:
        seed = int(seed)
        varied[ModelOption.SEED] = seed + index if seed + index < 2**63 else seed - index
    if varied.get(ModelOption.TEMPERATURE) is None:
        varied[ModelOption.TEMPERATURE] = temperature
    return varied
