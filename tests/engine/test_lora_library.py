"""The library's adapter path on the real engine: a random PEFT aLoRA made here, found
under MELLEA_ADAPTERS_DIR, loaded through ``LocalBackend.load_adapter`` and run by
``core.requirement_check`` and by a routed requirement check."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

# Only looked for here: importing peft imports Triton, which must not happen before
# tests/kernels' conftest turns Triton's interpreter on (it is loaded after this module).
if importlib.util.find_spec("peft") is None:
    pytest.skip("needs peft", allow_module_level=True)

from mellea.backends.adapters import IntrinsicAdapter
from mellea.backends.adapters import backend as adapter_backend
from mellea.backends.adapters.locate import adapter_subpath
from mellea.backends.local import LocalBackend
from mellea.core._sync import run_sync
from mellea.core.model_options import ModelOption
from mellea.stdlib.components import Message
from mellea.stdlib.components.intrinsic import core
from mellea.stdlib.components.intrinsic.run import request_for
from mellea.stdlib.context import ChatContext
from mellea.stdlib.requirements import ALoraRequirement, req
from mellea.stdlib.session import MelleaSession
from tests.adapter_support import CORE_REPO, REQUIREMENT_CHECK_IO

GENERATION_PROMPT = "<|im_start|>assistant\n"  # SmolLM2's template (the tiny model's)


def make_random_alora(model_dir: Path, out: Path) -> Path:
    """A random aLoRA on the tiny model, invoked by the assistant turn's header."""
    import peft
    import torch
    import yaml
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    invocation = tokenizer.encode(GENERATION_PROMPT, add_special_tokens=False)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = peft.LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=["q_proj", "v_proj"],
        init_lora_weights=False,  # random B too, so the adapter changes the output
        task_type="CAUSAL_LM",
        alora_invocation_tokens=invocation,
    )
    peft.get_peft_model(model, config).save_pretrained(out)
    (out / "io.yaml").write_text(yaml.safe_dump(REQUIREMENT_CHECK_IO), encoding="utf-8")
    return out


@pytest.fixture
def backend(make_engine, tiny_model_dir, tmp_path, monkeypatch):
    engine = make_engine()
    backend = LocalBackend(engine=engine)
    base = adapter_backend.base_model_name(backend)
    subpath = adapter_subpath("requirement-check", base, CORE_REPO, alora=True)
    root = tmp_path / "adapters"
    make_random_alora(tiny_model_dir, root / CORE_REPO / subpath)
    monkeypatch.setenv("MELLEA_ADAPTERS_DIR", str(root))
    return backend


def _answered() -> ChatContext:
    ctx = ChatContext().add(Message("user", "Invite the team to a party."))
    return ctx.add(Message("assistant", "Dear team, join us on Friday."))


def test_requirement_check_runs_the_alora_on_the_engine(backend):
    score = core.requirement_check(_answered(), backend, "Use a professional tone.")
    assert 0.0 <= score <= 1.0 and math.isfinite(score)
    assert "requirement-check_alora" in backend.adapters


def test_the_adapter_changes_what_the_model_computes(backend):
    adapter = adapter_backend.resolve_adapter(backend, "requirement-check")
    request, options = request_for(adapter, ALoraRequirement("Short."), _answered())
    messages = request.messages
    assert options[ModelOption.ADAPTER] == "requirement-check_alora"

    async def token_logprobs(opts):
        thunk = await backend.generate(messages, model_options=opts)
        await thunk.avalue()
        return [
            (t.token, round(t.logprob, 4), [(a.token, round(a.logprob, 4)) for a in t.top_logprobs])
            for t in thunk.logprobs
        ]

    with_adapter = run_sync(token_logprobs(options))
    base = {k: v for k, v in options.items() if k != ModelOption.ADAPTER}
    assert with_adapter != run_sync(token_logprobs(base))


def test_a_routed_requirement_check_uses_the_loaded_alora(backend):
    adapter_backend.add_adapter(
        backend,
        IntrinsicAdapter(
            "requirement-check", base_model_name=adapter_backend.base_model_name(backend)
        ),
    )
    m = MelleaSession(backend, _answered())
    (verdict,) = m.validate([req("Use a professional tone.")])
    data = json.loads(verdict.reason)
    assert verdict.score == pytest.approx(data["requirement_check"]["score"])
    assert verdict.as_bool() == (verdict.score > 0.5)


def test_a_check_after_the_answer_reuses_the_answers_cached_blocks(backend):
    m = MelleaSession(backend, ChatContext())
    adapter_backend.add_adapter(
        backend,
        IntrinsicAdapter(
            "requirement-check", base_model_name=adapter_backend.base_model_name(backend)
        ),
    )
    answer = m.instruct(
        "Write a long, polite note inviting the whole team to a party on Friday evening.",
        strategy=None,
        model_options={ModelOption.MAX_NEW_TOKENS: 40, ModelOption.TEMPERATURE: 0.0},
    )
    assert answer.value
    (verdict,) = m.validate([req("Use a professional tone.")])
    usage = verdict.thunk.usage
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    # the conversation up to the answer came from the base model's blocks (the random
    # tiny model's answer itself re-tokenizes differently, so only its prompt is sure)
    assert cached >= answer.usage["prompt_tokens"] - 16, usage
