"""Peer benchmark program for upstream mellea 0.8.0's `m serve`: its Hugging Face backend.

The counterpart of `docs/examples/hello.py`: answer the last message with
`ainstruct`, no sampling strategy, returning the uncomputed thunk so the server
streams it. The model is the directory our engine converts the bundled
SmolLM2-135M-Instruct GGUF into; `benchmarks/bench_peers.py` passes its path in
`PEER_MODEL_DIR`.
"""

import os
from typing import Any

from mellea import start_session
from mellea.core import ModelOutputThunk

session = start_session("hf", model_id=os.environ["PEER_MODEL_DIR"])


async def serve(
    input: list[Any],
    requirements: list[str] | None = None,
    model_options: dict[str, Any] | None = None,
) -> ModelOutputThunk:
    """Reply to the newest message; upstream's server streams the thunk."""
    return await session.ainstruct(
        input[-1].get_text_content(),
        requirements=requirements or None,
        strategy=None,
        model_options=model_options,
        await_result=False,
    )
