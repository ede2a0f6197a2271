"""Ready-made hook handlers that log what the generation, validation and sampling
stages do (logger ``mellea.plugins.builtin_debug.*``; most lines at DEBUG).

``register([log_generation_pre_call, log_generation_post_call])``, or pass them to
``plugin_scope`` or ``start_session(plugins=...)``.
"""

from __future__ import annotations

from mellea.plugins.builtin_debug.generation import (
    log_generation_post_call,
    log_generation_pre_call,
)
from mellea.plugins.builtin_debug.sampling import (
    log_sampling_iteration,
    log_sampling_loop_end,
    log_sampling_loop_start,
    log_sampling_repair,
)
from mellea.plugins.builtin_debug.validation import (
    log_validation_post_check,
    log_validation_pre_check,
)

__all__ = [
    "log_generation_post_call",
    "log_generation_pre_call",
    "log_sampling_iteration",
    "log_sampling_loop_end",
    "log_sampling_loop_start",
    "log_sampling_repair",
    "log_validation_post_check",
    "log_validation_pre_check",
]
