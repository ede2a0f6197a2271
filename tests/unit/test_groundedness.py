"""GroundednessRequirement: citations from the adapter, then two model judgments, on
a backend that fakes both (tests/adapter_support.py)."""

from __future__ import annotations

import json

import pytest

from mellea.core.model_options import ModelOption
from mellea.stdlib.components import Message
from mellea.stdlib.context import ChatContext
from mellea.stdlib.requirements.rag import GroundednessRequirement, response_spans
from mellea.stdlib.session import MelleaSession
from tests.adapter_support import FakeAdapterBackend, adapters_tree

pytest.importorskip("nltk")

ANSWER = "The sky is blue. I hope that helps."
DOCS = ["Grass is green. The sky is blue."]


@pytest.fixture
def backend(tmp_path, monkeypatch):
    monkeypatch.setenv("MELLEA_ADAPTERS_DIR", str(adapters_tree(tmp_path / "adapters")))
    backend = FakeAdapterBackend()
    backend.adapter_outputs["citations_lora"] = ('[{"r": 0, "c": [1]}]', [])
    return backend


def _ctx() -> ChatContext:
    ctx = ChatContext().add(Message("user", "What colour is the sky?"))
    return ctx.add(Message("assistant", ANSWER))


def _script(backend, needs: list[str], support: list[str] | None = None) -> None:
    backend.judge_script = [
        json.dumps([{"span_id": i, "needs_citation": n} for i, n in enumerate(needs)])
    ]
    if support is not None:
        backend.judge_script.append(
            json.dumps([{"span_id": i, "support_level": s} for i, s in enumerate(support)])
        )


def test_spans_are_cut_at_the_cited_ranges():
    citations = [{"response_begin": 0, "response_end": 17}]
    assert response_spans(ANSWER, citations) == [
        {"begin": 0, "end": 17, "text": "The sky is blue.", "is_cited": True},
        {"begin": 17, "end": 35, "text": "I hope that helps.", "is_cited": False},
    ]


async def test_a_fully_supported_answer_is_grounded(backend):
    _script(backend, ["yes", "no"], ["FULLY_SUPPORTED"])
    result = await GroundednessRequirement(documents=DOCS).validate(backend, _ctx())
    assert result.as_bool(), result.reason
    assert "1/1 spans needing citations are fully supported" in result.reason
    necessity, support = [c for c in backend.calls if not c[1].get(ModelOption.ADAPTER)]
    assert necessity[1]["response_format"]["json_schema"]["schema"]["items"]["required"] == [
        "span_id",
        "needs_citation",
    ]
    assert '"The sky is blue."' in support[0][-1]["content"]
    assert "Document 0:\nGrass is green. The sky is blue." in support[0][-1]["content"]
    # the judges see the conversation before the answer, not the answer as a turn
    assert [m["role"] for m in necessity[0]] == ["user", "user"]


async def test_partial_support_passes_only_when_allowed(backend):
    _script(backend, ["yes", "no"], ["PARTIALLY_SUPPORTED"])
    strict = await GroundednessRequirement(documents=DOCS).validate(backend, _ctx())
    assert not strict.as_bool() and '"The sky is blue." [PARTIALLY_SUPPORTED]' in strict.reason
    _script(backend, ["yes", "no"], ["PARTIALLY_SUPPORTED"])
    lenient = GroundednessRequirement(documents=DOCS, allow_partial_support=True)
    assert (await lenient.validate(backend, _ctx())).as_bool()


async def test_an_uncited_claim_is_not_supported_without_asking(backend):
    _script(backend, ["no", "yes"])  # no support judgment is needed: nothing to grade
    result = await GroundednessRequirement(documents=DOCS).validate(backend, _ctx())
    assert not result.as_bool()
    assert '"I hope that helps." [NOT_SUPPORTED]' in result.reason
    assert len([c for c in backend.calls if not c[1].get(ModelOption.ADAPTER)]) == 1


async def test_documents_come_from_the_answer_message_and_must_exist(backend):
    _script(backend, ["yes", "no"], ["FULLY_SUPPORTED"])
    ctx = (
        ChatContext().add(Message("user", "Sky?")).add(Message("assistant", ANSWER, documents=DOCS))
    )
    assert (await GroundednessRequirement().validate(backend, ctx)).as_bool()
    bare = ChatContext().add(Message("user", "Sky?")).add(Message("assistant", ANSWER))
    result = await GroundednessRequirement().validate(backend, bare)
    assert not result.as_bool() and "No documents" in result.reason


def test_a_session_checks_it_through_its_own_validate(backend):
    _script(backend, ["yes", "no"], ["NOT_SUPPORTED"])
    m = MelleaSession(backend, _ctx())
    (result,) = m.validate([GroundednessRequirement(documents=DOCS)])
    assert not result.as_bool() and "[NOT_SUPPORTED]" in result.reason
