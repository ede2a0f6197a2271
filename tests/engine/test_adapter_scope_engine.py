"""Upstream's newer adapter API on the real engine: a random PEFT aLoRA made here, bound
with ``LocalFileBinding``, activated by ``adapter_scope`` (with the adapter-function
hooks), and an ``AdapterBasedComponent`` generating through it."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest

# Only looked for here: importing peft imports Triton, which must not happen at
# collection before tests/kernels' conftest turns Triton's interpreter on.
if importlib.util.find_spec("peft") is None:
    pytest.skip("needs peft", allow_module_level=True)

from mellea.backends.adapters import Adapter, AdapterType, Identity, LocalFileBinding
from mellea.backends.adapters import backend as adapter_backend
from mellea.backends.adapters._core import _DictContract
from mellea.backends.adapters.locate import adapter_subpath
from mellea.backends.local import LocalBackend
from mellea.core._sync import run_sync
from mellea.core.model_options import ModelOption
from mellea.plugins import HookType, hook, register, unregister
from mellea.stdlib.components import Message
from mellea.stdlib.components.adapter_based_component import AdapterBasedComponent
from mellea.stdlib.context import ChatContext
from mellea.stdlib.session import MelleaSession
from tests.adapter_support import CORE_REPO
from tests.engine.test_lora_library import make_random_alora

MESSAGES = [
    {"role": "user", "content": "Invite the team to a party."},
    {"role": "assistant", "content": "Dear team, join us on Friday."},
    {"role": "user", "content": "Is that polite?"},
]
GREEDY = {
    ModelOption.TEMPERATURE: 0.0,
    ModelOption.MAX_NEW_TOKENS: 3,
    "logprobs": True,
    "top_logprobs": 3,
}


@pytest.fixture
def backend(make_engine, tiny_model_dir, tmp_path, monkeypatch):
    backend = LocalBackend(engine=make_engine())
    base = adapter_backend.base_model_name(backend)
    subpath = adapter_subpath("requirement-check", base, CORE_REPO, alora=True)
    root = tmp_path / "adapters"
    make_random_alora(tiny_model_dir, root / CORE_REPO / subpath)
    monkeypatch.setenv("MELLEA_ADAPTERS_DIR", str(root))
    return backend


def _computed(backend: LocalBackend, options: dict[str, Any]) -> list[Any]:
    async def run() -> list[Any]:
        thunk = await backend.generate(MESSAGES, model_options=options)
        await thunk.avalue()
        return [
            (t.token, round(t.logprob, 4), [(a.token, round(a.logprob, 4)) for a in t.top_logprobs])
            for t in thunk.logprobs
        ]

    return run_sync(run())


def test_adapter_scope_runs_the_engine_with_the_bound_adapter(backend):
    calls: list[tuple[str, Any]] = []

    @hook(HookType.ADAPTER_FUNCTION_PHASE_COMPLETE)
    async def phase(payload: Any, ctx: Any) -> None:
        calls.append(("phase", payload.phase))

    @hook(HookType.ADAPTER_FUNCTION_INVOCATION_COMPLETE)
    async def done(payload: Any, ctx: Any) -> None:
        calls.append(("done", payload.outcome))

    register([phase, done])
    try:
        binding = LocalFileBinding("requirement-check", AdapterType.ALORA, CORE_REPO)
        binding.bind_backend(backend)
        binding.prepare()
        assert "requirement-check_alora" in backend.adapters  # in the engine
        adapter = Adapter(
            Identity("requirement-check", "alora", "requirement_check"),
            _DictContract("requirement-check", frozenset()),
            binding,
        )
        base = _computed(backend, GREEDY)
        named = _computed(backend, {**GREEDY, ModelOption.ADAPTER: "requirement-check_alora"})
        assert named != base  # the random adapter changes what the model computes
        with backend.adapter_scope(adapter):
            assert _computed(backend, GREEDY) == named
        assert _computed(backend, GREEDY) == base
    finally:
        unregister(phase)
        unregister(done)
    assert calls == [
        ("phase", "prepare"),
        ("phase", "activate"),
        ("phase", "deactivate"),
        ("done", "success"),
    ]


def test_an_adapter_based_component_generates_through_the_loaded_adapter(backend):
    ctx = ChatContext().add(Message("user", "Invite the team to a party."))
    ctx = ctx.add(Message("assistant", "Dear team, join us on Friday."))
    m = MelleaSession(backend, ctx)
    component = AdapterBasedComponent(
        "requirement-check", intrinsic_kwargs={"requirement": "Use a professional tone."}
    )
    result = m.act(component, strategy=None)
    score = json.loads(result.value)["requirement_check"]["score"]
    assert 0.0 <= score <= 1.0
    assert "requirement-check_alora" in backend.adapters
    assert result.meta["adapter"] == "requirement-check_alora"
