"""The ReACT loop: think, call a tool, observe, until the model calls ``final_answer``."""

from __future__ import annotations

import logging
from typing import Any

from mellea.core.backend import Backend
from mellea.core.base import AbstractMelleaTool
from mellea.core.model_options import ModelOption
from mellea.core.thunk import ModelOutputThunk
from mellea.stdlib import functional as mfuncs
from mellea.stdlib.components.chat import ToolMessage
from mellea.stdlib.components.react import MELLEA_FINALIZER_TOOL, ReactInitiator, ReactThought
from mellea.stdlib.context import ChatContext, Compactor
from mellea.stdlib.session import MelleaSession

log = logging.getLogger("mellea")


async def react(
    goal: str,
    context: ChatContext,
    backend: Backend,
    *,
    format: type | None = None,
    model_options: dict[str, Any] | None = None,
    tools: list[AbstractMelleaTool] | None,
    loop_budget: int = 10,
    compactor: Compactor | None = None,
) -> tuple[ModelOutputThunk, ChatContext]:
    """Pursue ``goal`` with ``tools`` for up to ``loop_budget`` steps (-1: no limit).

    Each step asks the model for its next move with every tool offered; the calls it
    makes run and their results join the context. When it calls ``final_answer``, the
    answer is the result's value (with ``format``, one more step gives the answer in
    that format). ``compactor`` runs after each step that did not finish. Returns
    ``(thunk, context)``; raises RuntimeError when the budget runs out first.
    """
    if not isinstance(context, ChatContext):
        raise TypeError(f"react needs a ChatContext, not {type(context).__name__}")
    tools = list(tools or [])
    tools.extend((model_options or {}).get(ModelOption.TOOLS) or [])
    initiator = ReactInitiator(goal, tools)
    offered = list(initiator.all_tools().values())
    options = {**(model_options or {}), ModelOption.TOOLS: offered}
    context = context.add(initiator)
    turn = 0
    while loop_budget == -1 or turn < loop_budget:
        turn += 1
        log.info("react: turn %d", turn)
        session = MelleaSession(backend, context)
        step = await session.aact(
            ReactThought(), model_options=options, tool_calls=True, await_result=True
        )
        assert isinstance(step, ModelOutputThunk)
        context = session.ctx  # type: ignore[assignment]
        responses: list[ToolMessage] = []
        if step.tool_calls:
            responses = await mfuncs.acall_tools(step, backend)
            for response in responses:
                context = context.add(response)
        final = [r for r in responses if r.name == MELLEA_FINALIZER_TOOL]
        if final:
            if format is not None:
                session = MelleaSession(backend, context)
                step = await session.aact(  # type: ignore[assignment]
                    ReactThought(),
                    model_options=model_options,
                    format=format,
                    await_result=True,
                )
                context = session.ctx  # type: ignore[assignment]
            else:
                step.value = str(final[0].content)
            return step, context
        if compactor is not None:
            context = compactor.compact(context, backend=backend)
            if not isinstance(context, ChatContext):
                raise TypeError("a react compactor must return a ChatContext")
    raise RuntimeError(f"could not complete react loop in {loop_budget} iterations")


__all__ = ["react"]
