"""Components: the things a context holds and a session sends to the model."""

from mellea.core.base import (
    CBlock,
    Component,
    ComponentParseError,
    TemplateRepresentation,
    blockify,
)
from mellea.core.thunk import ModelOutputThunk
from mellea.stdlib.components.chat import (
    Message,
    ToolMessage,
    as_chat_history,
    as_generic_chat_history,
)
from mellea.stdlib.components.docs import Document
from mellea.stdlib.components.genstub import generative
from mellea.stdlib.components.instruction import Instruction
from mellea.stdlib.components.intrinsic import Intrinsic
from mellea.stdlib.components.simple import SimpleComponent

__all__ = [
    "CBlock",
    "Component",
    "ComponentParseError",
    "Document",
    "Instruction",
    "Intrinsic",
    "Message",
    "ModelOutputThunk",
    "SimpleComponent",
    "TemplateRepresentation",
    "ToolMessage",
    "as_chat_history",
    "as_generic_chat_history",
    "blockify",
    "generative",
]
