"""A stand-in engine for tests that need a Runtime but no model: an InferenceEngine
that records how it was built and answers "ok"."""

from __future__ import annotations

from typing import Any

from mellea.engine.loader import ResolvedModel


class FakeTokenizer:
    """Enough of a tokenizer for warm-up and token counts."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [1] * max(1, len(text.split()))


class FakeEngine:
    """Stands in for the engine (an InferenceEngine): records how it was built, answers "ok"."""

    built = 0
    max_model_len = 1024
    weights = "float32"

    def __init__(self, model: ResolvedModel, **kwargs: Any) -> None:
        FakeEngine.built += 1
        self.path, self.kwargs = str(model.path), kwargs
        self.model_id = model.model_id
        self.tokenizer = FakeTokenizer()

    def apply_chat_template(self, messages, *, tools=None, **template_args):
        return [1, 2, 3]

    def compile_grammar(self, grammar: str) -> object:
        return object()

    async def add_request(self, prompt, params, request_id=None, *, constraint=None):
        from mellea.engine.types import RequestOutput

        yield RequestOutput("r", "ok", [5], 3, 1, finished=True, finish_reason="stop")

    def abort(self, request_id: str) -> None:
        pass

    def stats(self) -> dict[str, int]:
        return {"running": 0}

    def shutdown(self) -> None:
        pass
