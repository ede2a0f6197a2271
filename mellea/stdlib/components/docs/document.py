"""Documents attached to a chat message, shown to the model as part of its text."""

from __future__ import annotations

from mellea.core.base import CBlock, Component, Span
from mellea.core.thunk import ModelOutputThunk


class Document(Component[str]):
    """A text with an optional title and id, e.g. a retrieved passage."""

    def __init__(self, text: str, title: str | None = None, doc_id: str | None = None) -> None:
        self.text = text
        self.title = title
        self.doc_id = doc_id

    def parts(self) -> list[Span]:
        """The document's text block."""
        return [CBlock(self.text)]

    def format_for_llm(self) -> str:
        """``[Document <id>] <title>: <text>``."""
        label = f"[Document {self.doc_id}]" if self.doc_id else "[Document]"
        title = f" {self.title}:" if self.title else ""
        return f"{label}{title} {self.text}"

    def _parse(self, computed: ModelOutputThunk) -> str:
        return computed.value or ""
