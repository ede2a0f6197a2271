"""docs/examples/hello.py on the naive baseline: one Hugging Face ``generate()`` per request.

``bench_serve.py`` serves it to compare the engine with a server that does not batch.
"""

from typing import Any

from hf_generate import HFGenerateEngine  # beside this file (the program's folder is importable)

import mellea
from mellea.backends.local import LocalBackend
from mellea.core import ModelOutputThunk
from mellea.serve import ChatMessage

session = mellea.MelleaSession(LocalBackend(engine=HFGenerateEngine()))  # type: ignore[arg-type]


async def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict[str, Any] | None = None,
) -> ModelOutputThunk:
    """Reply to the newest message, as hello.py does."""
    return await session.ainstruct(
        input[-1].get_text_content(),
        requirements=requirements,
        strategy=None,
        model_options=model_options,
        await_result=False,
    )
