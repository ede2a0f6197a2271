"""The prompt's log-probabilities on ``/v1/completions``: ``echo`` with ``logprobs`` (the
legacy shape lm-evaluation-harness reads), ``max_tokens: 0``, vLLM's ``prompt_logprobs``,
streamed and whole, with the ``openai`` client and raw HTTP; bad values are 400s.

The served program is ``tests/programs/local_model.py`` on the tiny random Llama, in
process; the numbers are checked against transformers' logits for the same tokens.
"""

from __future__ import annotations

import httpx
import openai
import pytest
import torch

from tests.inprocess import app_for, client_for, openai_client, stream_frames
from tests.server import PROGRAMS

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
PROMPT = "The quick brown fox jumps over the lazy dog. It was"


@pytest.fixture(scope="module")
def local_app(tiny_model_dir):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOCAL_MODEL", str(tiny_model_dir))
        return app_for(PROGRAMS / "local_model.py", max_request_bytes=65536)


@pytest.fixture
async def client(local_app):
    async with client_for(local_app) as http:
        yield http


@pytest.fixture(scope="module")
def reference(tiny_model_dir, tiny_hf_model):
    """(prompt ids, [len - 1, vocab] log-softmax before each prompt token) by transformers."""
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(tiny_model_dir).encode(PROMPT)
    with torch.inference_mode():
        logits = tiny_hf_model(torch.tensor([ids])).logits[0].float()
    return ids, torch.log_softmax(logits[:-1], dim=-1)


def check_prompt_part(logprobs: dict, reference, k: int) -> None:
    """The first ``len(prompt ids)`` items of a legacy ``logprobs`` are the prompt's."""
    ids, rows = reference
    n = len(ids)
    assert "".join(logprobs["tokens"][:n]) == PROMPT
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    offsets = [sum(len(t) for t in logprobs["tokens"][:i]) for i in range(n)]
    assert logprobs["text_offset"][:n] == offsets
    for i in range(1, n):
        want = rows[i - 1]
        assert logprobs["token_logprobs"][i] == pytest.approx(float(want[ids[i]]), abs=1e-4)
        top = logprobs["top_logprobs"][i]
        assert len(top) <= k
        assert max(top.values()) == pytest.approx(float(want.max()), abs=1e-4)


async def test_openai_client_scores_a_prompt_with_max_tokens_zero(client, reference):
    reply = await openai_client(client).completions.create(
        model="m", prompt=PROMPT, echo=True, logprobs=5, max_tokens=0
    )
    (choice,) = reply.choices
    assert choice.text == PROMPT and choice.finish_reason == "length"
    logprobs = choice.logprobs.model_dump()
    assert len(logprobs["tokens"]) == len(reference[0])
    check_prompt_part(logprobs, reference, 5)
    assert reply.usage.prompt_tokens == len(reference[0]) and reply.usage.completion_tokens == 0


async def test_lm_eval_request_shape_scores_the_prompt_then_the_token(client, reference):
    # What lm-evaluation-harness's local-completions sends for a log-likelihood request.
    body = {"model": "m", "prompt": PROMPT, "temperature": 0, "max_tokens": 1}
    body |= {"logprobs": 1, "seed": 1234, "echo": True}
    response = await client.post(COMPLETIONS, json=body)
    assert response.status_code == 200, response.text
    (choice,) = response.json()["choices"]
    logprobs = choice["logprobs"]
    n = len(reference[0])
    assert len(logprobs["tokens"]) == n + 1  # the prompt's, then the generated one
    check_prompt_part(logprobs, reference, 1)
    assert logprobs["text_offset"][n] == len(PROMPT)
    assert choice["text"] == PROMPT + logprobs["tokens"][n]


@pytest.mark.parametrize("extra", [{}, {"prompt_logprobs": 2}])
async def test_streamed_echo_with_logprobs_equals_the_whole_reply(client, reference, extra):
    body = {"prompt": PROMPT, "echo": True, "logprobs": 3, "max_tokens": 4, **extra}
    whole = (await client.post(COMPLETIONS, json=body)).json()["choices"][0]
    frames = await stream_frames(client, COMPLETIONS, {**body, "stream": True})
    chunks = [c for f in frames for c in f["choices"]]
    assert "".join(c["text"] for c in chunks) == whole["text"]
    assert chunks[0]["text"] == PROMPT  # the prompt comes first, with its scores
    merged: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": []}
    merged["text_offset"] = []
    for chunk in chunks:
        for key, values in (chunk.get("logprobs") or {}).items():
            merged[key] += values
    assert merged == whole["logprobs"]
    check_prompt_part(whole["logprobs"], reference, 3)
    assert [c.get("prompt_logprobs") for c in chunks[1:]] == [None] * (len(chunks) - 1)
    assert chunks[0].get("prompt_logprobs") == whole.get("prompt_logprobs")


async def test_vllm_prompt_logprobs_without_echo(client, reference):
    reply = await openai_client(client).completions.create(
        model="m", prompt=PROMPT, max_tokens=0, extra_body={"prompt_logprobs": 2}
    )
    (choice,) = reply.choices
    assert choice.text == "" and choice.logprobs is None
    entries = choice.model_extra["prompt_logprobs"]
    ids, rows = reference
    assert entries[0] is None and len(entries) == len(ids)
    for i in range(1, len(ids)):
        entry, row = entries[i], rows[i - 1]
        own = entry[str(ids[i])]
        assert own["logprob"] == pytest.approx(float(row[ids[i]]), abs=1e-4)
        assert own["rank"] == int((row > row[ids[i]]).sum()) + 1
        best = entry[str(int(row.argmax()))]
        assert best["rank"] == 1 and isinstance(best["decoded_token"], str)
        assert len(entry) in (2, 3)  # the two best, and the token itself when not one of them


async def test_a_program_without_a_model_call_echoes_with_no_prompt_entries(tmp_path):
    app = app_for(PROGRAMS / "reverser.py")
    body = {"prompt": "abc", "echo": True, "logprobs": 2, "max_tokens": 2, "prompt_logprobs": 1}
    async with client_for(app) as http:
        whole = (await http.post(COMPLETIONS, json=body)).json()["choices"][0]
        frames = await stream_frames(http, COMPLETIONS, {**body, "stream": True})
    assert whole["text"] == "abccb"
    assert whole["logprobs"]["tokens"] == [] and "prompt_logprobs" not in whole
    assert "".join(c["text"] for f in frames for c in f["choices"]) == "abccb"


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (COMPLETIONS, {"prompt": "x", "echo": True, "logprobs": 6}, "logprobs"),
        (COMPLETIONS, {"prompt": "x", "prompt_logprobs": 21}, "prompt_logprobs"),
        (COMPLETIONS, {"prompt": "x", "prompt_logprobs": -1}, "prompt_logprobs"),
        (COMPLETIONS, {"prompt": "x", "prompt_logprobs": 2.5}, "prompt_logprobs"),
        (COMPLETIONS, {"prompt": "x", "max_tokens": 0}, "max_tokens"),
        (COMPLETIONS, {"prompt": "x", "max_tokens": 0, "echo": True}, "max_tokens"),
        (COMPLETIONS, {"prompt": "x", "max_tokens": -1, "echo": True, "logprobs": 1}, "max_tokens"),
        (CHAT, {"messages": [{"role": "user", "content": "x"}], "echo": True}, "echo"),
        (
            CHAT,
            {"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 1},
            "prompt_logprobs",
        ),
    ],
)
async def test_bad_values_are_400_naming_the_field(client, path, body, param):
    response = await client.post(path, json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


async def test_openai_client_gets_a_typed_400(client):
    with pytest.raises(openai.BadRequestError) as info:
        await openai_client(client).completions.create(
            model="m", prompt="x", max_tokens=0, echo=True
        )
    assert info.value.body["param"] == "max_tokens"
    assert isinstance(info.value.response, httpx.Response)
