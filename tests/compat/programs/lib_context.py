"""Upstream-style program using the context API on a module-level chat session.

Each request is one ``chat`` turn; the reply reports ``last_turn()``, the number of
spans ``as_list()`` holds, and ``last_output()``'s text. ``!thunk`` returns
``session.ctx.as_list()[-1]`` as upstream's image example does.
"""

import os
from typing import Any, cast

from mellea import start_session
from mellea.core import ModelOutputThunk
from mellea.serve import ChatMessage
from mellea.stdlib.context import ChatContext

session = start_session(
    "openai",
    model_id="context-model",
    base_url=os.environ["UPSTREAM_BASE_URL"],
    ctx=ChatContext(window_size=4),
)


def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict[str, Any] | None = None,
) -> ModelOutputThunk:
    """Chat once, then describe the context (or return its last output)."""
    text = input[-1].get_text_content()
    reply = session.chat(content=text.removeprefix("!thunk "))
    if text.startswith("!thunk "):
        return cast(ModelOutputThunk, session.ctx.as_list()[-1])
    turn = session.ctx.last_turn()
    assert turn is not None and turn.output is session.ctx.last_output()
    summary = (
        f"input={turn.model_input.content} spans={len(session.ctx.as_list())} "
        f"output={reply.content}"
    )
    return ModelOutputThunk(value=summary)
