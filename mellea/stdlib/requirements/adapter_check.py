"""Requirement checks routed through an adapter (upstream's aLoRA routing rule).

- An :class:`ALoraRequirement` is checked by the backend's aLoRA for its adapter
  function when one was added; otherwise a warning, and the model judges it.
- A plain requirement with no ``validation_fn`` is checked by the backend's
  ``requirement-check`` aLoRA when one was added (or its engine loaded one, e.g. by
  ``m serve --lora requirement-check_alora=DIR``) and the backend's
  ``default_to_constraint_checking_alora`` is on (the default).
- An :class:`LLMaJRequirement` is always judged by the model.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mellea.backends.adapters.adapter import Adapter, IntrinsicAdapter
from mellea.backends.adapters.backend import (
    REQUIREMENT_CHECK,
    add_adapter,
    base_model_name,
    find_adapter,
    loaded_adapter_names,
    routes_requirement_checks,
)
from mellea.backends.adapters.catalog import AdapterType
from mellea.core.base import Context
from mellea.core.requirement import Requirement, ValidationResult
from mellea.stdlib.components.intrinsic.run import Generate, run_intrinsic
from mellea.stdlib.requirements.requirement import ALoraRequirement, LLMaJRequirement

log = logging.getLogger("mellea")


def checking_adapter(
    backend: Any, requirement: Requirement
) -> tuple[Adapter, ALoraRequirement] | None:
    """The aLoRA that checks ``requirement`` on ``backend`` and the action to run it
    with, or ``None`` when the model judges it."""
    if isinstance(requirement, ALoraRequirement):
        adapter = find_adapter(backend, requirement.intrinsic_name, ("alora",))
        if adapter is None:
            log.warning(
                "ALoraRequirement %r: backend %s has no '%s' aLoRA added; the model judges it",
                requirement.description,
                type(backend).__name__,
                requirement.intrinsic_name,
            )
            return None
        return adapter, requirement
    if (
        isinstance(requirement, LLMaJRequirement)
        or getattr(requirement, "use_aloras", True) is False
    ):
        return None
    if requirement.validation_fn is not None or not requirement.description:
        return None
    if not routes_requirement_checks(backend):
        return None
    adapter = find_adapter(backend, REQUIREMENT_CHECK, ("alora",)) or _engine_loaded(backend)
    if adapter is None:
        return None
    return adapter, ALoraRequirement(requirement.description, REQUIREMENT_CHECK)


def _engine_loaded(backend: Any) -> Adapter | None:
    """The requirement-check aLoRA the backend's engine already has (loaded for every
    session by the server), added to this backend once its io.yaml is found."""
    name = f"{REQUIREMENT_CHECK}_{AdapterType.ALORA.value}"
    if name not in loaded_adapter_names(backend):
        return None
    # where the engine loaded it from, when it says (its io.yaml is there); else the
    # catalog's place under MELLEA_ADAPTERS_DIR
    path = getattr((getattr(backend, "adapters", None) or {}).get(name), "path", None)
    try:
        if path is not None:
            adapter = IntrinsicAdapter(REQUIREMENT_CHECK, adapter_path=path)
        else:
            adapter = IntrinsicAdapter(REQUIREMENT_CHECK, base_model_name=base_model_name(backend))
        add_adapter(backend, adapter)
    except ValueError as exc:  # its io.yaml is not here: the model judges instead
        log.warning("requirement-check aLoRA is loaded but cannot be used: %s", exc)
        return None
    return adapter


async def adapter_validate(
    backend: Any,
    requirement: Requirement,
    ctx: Context,
    generate: Generate | None = None,
) -> tuple[ValidationResult, Adapter] | None:
    """``requirement``'s verdict on the last output in ``ctx`` from an adapter, or
    ``None`` when no adapter checks it (the caller asks the model instead)."""
    route = checking_adapter(backend, requirement)
    if route is None:
        return None
    adapter, action = route
    thunk = await run_intrinsic(backend, action, ctx, generate=generate)
    return (
        ValidationResult(
            bool(action.output_to_bool(thunk)),
            reason=thunk.value,
            score=_score(thunk.value),
            thunk=thunk,
            context=ctx.add(action).add(thunk),
        ),
        adapter,
    )


def _score(value: str | None) -> float | None:
    """The requirement-check score in an adapter's result, when it has one."""
    try:
        data = json.loads(value or "")
        score = data["requirement_check"]["score"]
    except (ValueError, KeyError, TypeError):
        return None
    return float(score) if isinstance(score, int | float) else None


__all__ = ["adapter_validate", "checking_adapter"]
