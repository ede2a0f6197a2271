"""@generative in-process: the prompt it sends, the format it asks for, the value it returns."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from pydantic import BaseModel

import mellea
from mellea import generative
from mellea.stdlib.components.genstub import PreconditionException
from mellea.stdlib.context import ChatContext
from mellea.stdlib.session import MelleaSession
from tests.compat.lib_scripted import ScriptedBackend


@generative
def classify_sentiment(text: str) -> Literal["positive", "negative"]:
    """Classify the sentiment of the text."""


@generative
async def count_words(text: str, minimum: int = 0) -> int:
    """Count the words in text."""


class Person(BaseModel):
    name: str
    age: int


@generative
def extract_person(sentence: str) -> Person:
    """Extract the person the sentence talks about."""


def session(reply: str) -> MelleaSession:
    return MelleaSession(ScriptedBackend([reply]))


def test_sync_stub_sends_signature_docstring_and_arguments_and_parses_the_result():
    m = session('{"result": "positive"}')
    assert classify_sentiment(m, text="I love it") == "positive"
    call = m.backend.calls[0]
    prompt = call["messages"][-1]["content"]
    assert "def classify_sentiment(text: str)" in prompt
    assert "Classify the sentiment of the text." in prompt
    assert 'text = "I love it"' in prompt
    schema = call["format"].model_json_schema()
    assert schema["properties"]["result"]["enum"] == ["positive", "negative"]


def test_return_annotation_that_is_a_model_comes_back_as_that_model():
    m = session(json.dumps({"result": {"name": "Ada", "age": 36}}))
    person = extract_person(m, sentence="Ada is 36.")
    assert person == Person(name="Ada", age=36)


async def test_async_stub_is_awaited_and_defaults_are_bound():
    m = session('{"result": 3}')
    assert await count_words(m, text="one two three") == 3
    assert "minimum = 0" in m.backend.calls[0]["messages"][-1]["content"]


def test_context_and_backend_form_returns_the_new_context():
    backend = ScriptedBackend(['{"result": "negative"}'])
    value, ctx = classify_sentiment(ChatContext(), backend, text="awful")
    assert value == "negative" and ctx.last_output().value.startswith('{"result"')


def test_positional_function_arguments_and_a_missing_session_are_refused():
    m = session('{"result": "positive"}')
    with pytest.raises(TypeError, match="by keyword"):
        classify_sentiment(m, None, None, None, None, "positional text")
    with pytest.raises(TypeError, match="session first"):
        classify_sentiment(text="no session")


def test_unparseable_output_raises():
    m = session("not json")
    with pytest.raises(Exception, match="parsing failed"):
        classify_sentiment(m, text="x")


def test_preconditions_are_checked_before_generating():
    m = session('{"result": "positive"}')
    short = mellea.req("short input", mellea.simple_validate(lambda s: len(s) < 30))
    with pytest.raises(PreconditionException):
        classify_sentiment(m, precondition_requirements=[short], text="x" * 100)
    assert m.backend.calls == []
    assert classify_sentiment(m, precondition_requirements=[short], text="ok") == "positive"


def test_stub_keeps_the_function_name_and_docstring():
    assert classify_sentiment.__name__ == "classify_sentiment"
    assert "sentiment" in classify_sentiment.__doc__
    with pytest.raises(ValueError, match="parameters named"):

        @generative
        def bad(m: str) -> str:
            """Uses a reserved name."""
