"""Upstream's first README example, served: a ``@generative`` function on the local model.

The return annotation (a ``Literal``) becomes the output format, which the local
engine enforces by constrained decoding, so even the small bundled model answers
with one of the two labels.
"""

from typing import Any, Literal

from mellea import generative, start_session
from mellea.serve import ChatMessage

m = start_session()


@generative
def classify_sentiment(text: str) -> Literal["positive", "negative"]:
    """Classify the sentiment of the text as positive or negative."""


@generative
async def count_items(text: str) -> int:
    """Count the comma-separated items in the text."""


async def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict[str, Any] | None = None,
) -> str:
    """``count: ...`` counts items (async stub); anything else is classified (sync stub)."""
    text = input[-1].get_text_content()
    if text.startswith("count: "):
        n = await count_items(m, text=text.removeprefix("count: "), model_options=model_options)
        return f"count={n} ({type(n).__name__})"
    return f"sentiment={classify_sentiment(m, text=text, model_options=model_options)}"
