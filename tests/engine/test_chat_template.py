"""Chat templates: request variables reach the template, a file can replace it, and a
model without one gets a clear 400 on chat requests (in process and over the wire)."""

from __future__ import annotations

import json
import shutil

import openai
import pytest

from mellea.engine.chat import ChatTemplateError, render_chat
from tests.server import PROGRAMS, serve

# Renders the messages' text, and a long tail only when the request asks for it.
SHOUTING = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}{% if shout %}{{ 'LOUD ' * 20 }}{% endif %}"
MESSAGES = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_template_kwargs_reach_the_template(tokenizer):
    quiet = render_chat(tokenizer, MESSAGES, chat_template=SHOUTING)
    loud = render_chat(tokenizer, MESSAGES, chat_template=SHOUTING, template_kwargs={"shout": True})
    assert tokenizer.decode(quiet) == "hello there\n"
    assert tokenizer.decode(loud).count("LOUD") == 20
    # Our own arguments are not overridden by same-named request variables.
    again = render_chat(
        tokenizer, MESSAGES, chat_template=SHOUTING, template_kwargs={"messages": []}
    )
    assert again == quiet


def test_the_models_own_template_gets_the_kwargs(tokenizer):
    own = render_chat(tokenizer, MESSAGES)
    assert "<|im_start|>user" in tokenizer.decode(own)  # SmolLM2's template
    assert render_chat(tokenizer, MESSAGES, template_kwargs={"enable_thinking": False}) == own


def test_no_template_and_rejected_messages_are_value_errors(tokenizer):
    bare = type(tokenizer).from_pretrained(tokenizer.name_or_path)
    bare.chat_template = None
    with pytest.raises(ChatTemplateError, match="no chat template"):
        render_chat(bare, MESSAGES)
    strict = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        render_chat(tokenizer, MESSAGES, chat_template=strict)


@pytest.fixture(scope="module")
def templateless_model(tmp_path_factory, tiny_model_dir):
    """The tiny model with its chat template removed."""
    path = tmp_path_factory.mktemp("no-template")
    for file in tiny_model_dir.iterdir():
        if file.suffix != ".jinja":
            shutil.copy(file, path / file.name)
    config = json.loads((path / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)


@pytest.mark.e2e
def test_wire_without_a_template_is_a_400(templateless_model):
    with serve(PROGRAMS / "local_model.py", env={"LOCAL_MODEL": str(templateless_model)}) as server:
        with pytest.raises(openai.BadRequestError) as info:
            client(server).chat.completions.create(model="m", messages=MESSAGES, max_tokens=3)
        error = info.value.body
        assert error["param"] == "messages" and "--chat-template" in error["message"]
        assert "Traceback" not in server.log


@pytest.mark.e2e
def test_wire_chat_template_file_and_kwargs(templateless_model, tmp_path):
    template = tmp_path / "shout.jinja"
    template.write_text(SHOUTING)
    with serve(
        PROGRAMS / "local_model.py",
        "--chat-template",
        str(template),
        env={"LOCAL_MODEL": str(templateless_model)},
    ) as server:
        ask = dict(model="m", messages=MESSAGES, max_tokens=3, temperature=0)
        quiet = client(server).chat.completions.create(**ask)
        loud = client(server).chat.completions.create(
            **ask, extra_body={"chat_template_kwargs": {"shout": True}}
        )
        assert loud.usage.prompt_tokens >= quiet.usage.prompt_tokens + 20
        with pytest.raises(openai.BadRequestError):  # not an object: a 400 naming the field
            client(server).chat.completions.create(
                **ask, extra_body={"chat_template_kwargs": ["shout"]}
            )
