"""``m serve`` on a GPU answers the openai client, streaming and not."""

from __future__ import annotations

import pytest

from tests.server import PROGRAMS, serve


@pytest.fixture(scope="module")
def server(smol_dir, tmp_path_factory):
    env = {"LOCAL_MODEL": str(smol_dir)}
    # fp32, so the two greedy replies below agree although the second one reuses the
    # first one's cached prompt (in bf16 that different arithmetic can flip a near-tie
    # of this random model).
    args = ("--model", str(smol_dir), "--kv-cache-memory", "1GiB", "--dtype", "float32")
    with serve(
        PROGRAMS / "local_model.py", *args, env=env, log_dir=tmp_path_factory.mktemp("log")
    ) as srv:
        yield srv


def test_chat_whole_and_streamed(server):
    from openai import OpenAI

    client = OpenAI(base_url=server.base_url + "/v1", api_key="none")
    messages = [{"role": "user", "content": "Say hello."}]
    whole = client.chat.completions.create(
        model="default", messages=messages, max_tokens=12, temperature=0
    )
    assert whole.choices[0].message.content
    assert whole.usage.completion_tokens > 0
    pieces = []
    finish = None
    for chunk in client.chat.completions.create(
        model="default", messages=messages, max_tokens=12, temperature=0, stream=True
    ):
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    assert "".join(pieces) == whole.choices[0].message.content  # greedy: the same text
    assert finish in ("stop", "length")


def test_the_server_holds_the_gpu(server):
    import torch

    # NVML lists the processes holding GPU memory; the server's model and KV cache are there.
    assert f"process {server.process.pid:>10d}" in torch.cuda.list_gpu_processes()
