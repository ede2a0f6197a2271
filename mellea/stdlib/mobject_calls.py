"""``query`` and ``transform``: the session calls that ask a model about an object
(mified on the fly when it is not an MObject already)."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from mellea.core.base import Context, TemplateRepresentation
from mellea.core.model_options import ModelOption
from mellea.core.thunk import ModelOutputThunk
from mellea.stdlib.components.chat import ToolMessage
from mellea.stdlib.components.mify import mify
from mellea.stdlib.components.mobject import MObjectProtocol

log = logging.getLogger("mellea")


class ActingSession(Protocol):
    """What these calls use of a session (``MelleaSession`` is one): its context and ``aact``."""

    ctx: Context

    async def aact(
        self,
        action: Any,
        *,
        strategy: Any = None,
        format: type | None = None,
        model_options: dict[str, Any] | None = None,
        tool_calls: bool = False,
        await_result: bool = False,
    ) -> Any:
        """Run ``action`` as one turn (see ``MelleaSession.aact``)."""
        ...


def _as_mobject(obj: Any) -> Any:
    return obj if isinstance(obj, MObjectProtocol) else mify(obj)


def _with_tools(action: Any, options: dict[str, Any] | None) -> dict[str, Any]:
    """``options`` with the action's tools added (those already given win)."""
    rep = action.format_for_llm()
    tools = list((rep.tools or {}).values()) if isinstance(rep, TemplateRepresentation) else []
    options = dict(options or {})
    if tools:
        given = list(options.get(ModelOption.TOOLS) or [])
        options[ModelOption.TOOLS] = given + tools
    return options


async def aquery(
    session: ActingSession,
    obj: Any,
    query: str,
    *,
    format: type | None = None,
    model_options: dict[str, Any] | None = None,
    tool_calls: bool = False,
    await_result: bool = False,
) -> ModelOutputThunk:
    """Ask ``query`` about ``obj``; the thunk answers (offered the object's tools when
    ``tool_calls``)."""
    action = _as_mobject(obj).get_query_object(query)
    options = _with_tools(action, model_options) if tool_calls else model_options
    return await session.aact(  # type: ignore[return-value]
        action,
        strategy=None,
        format=format,
        model_options=options,
        tool_calls=tool_calls,
        await_result=await_result,
    )


async def atransform(
    session: ActingSession,
    obj: Any,
    transformation: str,
    *,
    format: type | None = None,
    model_options: dict[str, Any] | None = None,
) -> Any:
    """Ask for ``transformation`` of ``obj``, offering its methods as tools.

    If the model calls one, that call's return value is the result (with several
    calls, the first that returns the object's type, else the first) and its tool
    message joins the context; otherwise the model's answer (a thunk) is.
    """
    obj = _as_mobject(obj)
    action = obj.get_transform_object(transformation)
    thunk = await session.aact(
        action,
        strategy=None,
        format=format,
        model_options=_with_tools(action, model_options),
        tool_calls=True,
        await_result=True,
    )
    assert isinstance(thunk, ModelOutputThunk)
    outputs: list[ToolMessage] = []
    for call in thunk.tool_calls or []:
        try:
            out: Any = call.call_func()
        except Exception as exc:  # the caller sees what went wrong, as call_tools does
            out = exc
        outputs.append(ToolMessage("tool", str(out), out, call.name, call.args, call))
    if not outputs:
        return thunk
    chosen = next((m for m in outputs if type(m.tool_output) is type(obj)), outputs[0])
    if len(outputs) > 1:
        log.warning("transform: the model made %d tool calls; using %s", len(outputs), chosen.name)
    session.ctx = session.ctx.add(chosen)
    return chosen.tool_output
