"""mify / MObject and the session's query and transform, over scripted backends."""

from __future__ import annotations

from typing import Any

from mellea.backends.base import Backend
from mellea.core import ModelOutputThunk, ModelToolCall
from mellea.core.base import Component, span_text
from mellea.core.model_options import ModelOption
from mellea.stdlib import functional as mfuncs
from mellea.stdlib.components import ToolMessage
from mellea.stdlib.components.mify import MifiedProtocol, mify
from mellea.stdlib.components.mobject import MObject, Query
from mellea.stdlib.context import ChatContext
from mellea.stdlib.session import MelleaSession
from tests.compat.lib_scripted import ScriptedBackend


@mify
class Customer:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f"Customer {self.name}"

    def rename(self, name: str) -> Customer:
        """Give the customer a new name.

        Args:
            name: The new name.
        """
        return Customer(name)

    def secret(self) -> str:
        """Internal. [no-index]"""
        return "x"

    def undocumented(self) -> None:
        pass


def test_mified_class_instances_are_components_with_tools():
    c = Customer("Jack")
    assert isinstance(c, MifiedProtocol) and isinstance(c, Component)
    rep = c.format_for_llm()
    assert rep.args == {"content": "Customer Jack"}
    assert set(rep.tools) == {"rename"}  # documented, not [no-index]
    assert rep.template_order == ["*", "MObject"]


def test_mify_an_object_in_place_and_stringify_func():
    class Store:
        def __init__(self) -> None:
            self.purchases = ["Beans"]

    store = Store()
    assert mify(store) is store and isinstance(store, MifiedProtocol)
    assert not isinstance(Store(), MifiedProtocol)  # only that object changed

    @mify(stringify_func=lambda x: f"Chain Location: {x.location}")
    class Chain:
        def __init__(self, location: str) -> None:
            self.location = location

    assert span_text(Chain("Northeast")) == "Chain Location: Northeast"


def test_fields_and_template_and_funcs_include():
    @mify(fields_include={"table"}, template="TABLE={{ table }}", funcs_include={"load"})
    class Db:
        table = "| a | b |"
        other = "hidden"

        def load(self, text: str) -> Db:
            return self

    db = Db()
    assert db.format_for_llm().args == {"table": "| a | b |"}
    assert span_text(db) == "TABLE=| a | b |"
    assert set(db.format_for_llm().tools) == {"load"}  # included though undocumented


def test_query_prompt_holds_the_object_and_the_question():
    backend = ScriptedBackend(["It is Jack."])
    m = MelleaSession(backend)
    answer = m.query(Customer("Jack"), "What is the name?")
    assert answer.value.strip() == "It is Jack."
    prompt = backend.calls[0]["messages"][-1]["content"]
    assert "Customer Jack" in prompt and "What is the name?" in prompt
    assert isinstance(m.ctx.as_list()[-2], Query)


def test_query_mifies_a_plain_object_and_functional_form():
    class Plain:
        def __str__(self) -> str:
            return "plain thing"

    backend = ScriptedBackend(["ok"])
    thunk, ctx = mfuncs.query(Plain(), "what?", ChatContext(), backend)
    assert thunk.value.strip() == "ok" and ctx.last_output() is thunk
    assert "plain thing" in backend.calls[0]["messages"][-1]["content"]


class CallsFirstTool(Backend):
    """Replies with a call of the first offered tool, with ``args``."""

    model_id = "tool-caller"

    def __init__(self, args: dict[str, Any]) -> None:
        super().__init__()
        self.args = args
        self.offered: list[Any] = []

    async def generate(self, messages, *, model_options=None, format=None, tool_calls=False):
        tools = (model_options or {}).get(ModelOption.TOOLS) or []
        self.offered = tools
        thunk = ModelOutputThunk("")
        if tool_calls and tools:
            tool = tools[0]
            thunk.tool_calls = [ModelToolCall(tool.name, tool.run, dict(self.args))]
        return thunk


def test_transform_returns_the_called_tools_result_and_records_it():
    backend = CallsFirstTool({"name": "Jill"})
    m = MelleaSession(backend, ctx=ChatContext())
    result = m.transform(Customer("Jack"), "Rename the customer to Jill.")
    assert isinstance(result, Customer) and result.name == "Jill"
    assert [t.name for t in backend.offered] == ["rename"]
    assert isinstance(m.ctx.as_list()[-1], ToolMessage)


def test_transform_without_a_tool_call_returns_the_answer():
    m = MelleaSession(ScriptedBackend(["no tool"]))
    result = m.transform(Customer("Jack"), "Say something.")
    assert isinstance(result, ModelOutputThunk) and result.value.strip() == "no tool"


def test_mobject_subclass():
    class Note(MObject):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.body = text

        def __str__(self) -> str:
            return self.body

        def shout(self) -> str:
            """The note in capitals."""
            return self.body.upper()

    note = Note("hi")
    assert span_text(note) == "hi" and set(note.format_for_llm().tools) == {"shout"}
    assert "hi" in span_text(note.get_transform_object("make it loud"))


def test_table_from_markdown_queries_and_transposes_without_docling():
    from mellea.stdlib.components.docs.richdocument import Table, TableQuery

    md = "| Store | Sales |\n|---|---|\n| Northeast | $250 |\n| Midwest | $420 |"
    table = Table.from_markdown("Intro text\n\n" + md)
    assert table is not None
    assert "| Northeast | $250" in table.to_markdown()
    flipped = table.transpose()
    header = [c.strip() for c in flipped.to_markdown().splitlines()[0].strip("|").split("|")]
    assert header == ["Store", "Northeast", "Midwest"]
    q = table.get_query_object("Sales in the Midwest?")
    assert isinstance(q, TableQuery)
    prompt = span_text(q)
    assert "Markdown" in prompt and "$420" in prompt and "Midwest?" in prompt
    assert "transpose" in table.format_for_llm().tools
    assert Table.from_markdown("no table here") is None


def test_mified_class_with_table_query():
    from mellea.stdlib.components.docs.richdocument import TableQuery

    @mify(query_type=TableQuery, template_order=["*", "Table"])
    class Sales:
        def to_markdown(self) -> str:
            return "| a |\n|---|\n| 1 |"

    backend = ScriptedBackend(["one"])
    MelleaSession(backend).query(Sales(), "What is a?")
    assert "| a |" in backend.calls[0]["messages"][-1]["content"]


def test_rich_document_without_docling_names_the_package():
    import importlib.util

    import pytest

    from mellea.stdlib.components.docs.richdocument import RichDocument

    if importlib.util.find_spec("docling") is not None:
        pytest.skip("docling is installed")
    with pytest.raises(ImportError, match="docling"):
        RichDocument.from_document_file("paper.pdf")
