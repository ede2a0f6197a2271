"""Upstream's context API and ainstruct defaults, in-process over a scripted backend."""

from __future__ import annotations

import pytest

from mellea.core.base import CBlock, ContextTurn, ModelOutputThunk
from mellea.stdlib.components import Instruction, Message
from mellea.stdlib.context import ChatContext, SimpleContext
from mellea.stdlib.session import MelleaSession
from tests.compat.lib_scripted import ScriptedBackend


def test_contexts_are_immutable_linked_lists():
    root = ChatContext()
    one = root.add(Message("user", "hi"))
    two = one.add(CBlock("block"))
    assert root.as_list() == [] and root.is_root_node
    assert [str(getattr(x, "content", x)) for x in two.as_list()] == ["hi", "block"]
    assert two.previous_node is one and two.node_data.value == "block"
    assert two.as_list(1)[0].value == "block"
    assert two.is_chat_context


def test_last_turn_and_last_output():
    ctx = ChatContext()
    assert ctx.last_turn() is None and ctx.last_output() is None
    question = Message("user", "q")
    ctx = ctx.add(question)
    assert ctx.last_turn() == ContextTurn(question, None)
    answer = ModelOutputThunk("a")
    ctx = ctx.add(answer)
    turn = ctx.last_turn()
    assert turn.model_input is question and turn.output is answer
    assert ctx.last_output() is answer
    manual = Message("assistant", "typed by hand")
    assert ctx.add(Message("user", "x")).add(manual).last_turn().output is manual


def test_session_records_the_action_and_the_thunk_as_upstream():
    m = MelleaSession(ScriptedBackend(["hello"]), ctx=ChatContext())
    result = m.instruct("Greet me.")
    items = m.ctx.as_list()
    assert isinstance(items[0], Instruction) and items[-1] is result
    assert m.ctx.last_turn().model_input is items[0]
    reply = m.chat("again")
    assert reply.content == "hello " and reply.role == "assistant"
    last = m.ctx.as_list()[-1]
    assert isinstance(last, ModelOutputThunk) and last.value == "hello "
    roles = [msg["role"] for msg in m.backend.calls[1]["messages"]]
    assert roles == ["user", "assistant", "user"]


def test_simple_context_keeps_only_the_newest_turn():
    m = MelleaSession(ScriptedBackend(["r"]))
    for i in range(20):
        m.instruct(f"question {i}")
    items = m.ctx.as_list()
    assert len(items) <= 3
    assert m.ctx.last_turn().model_input.text == "question 19"
    assert m.ctx.last_output().value == "r "
    assert all(len(call["messages"]) == 1 for call in m.backend.calls)  # the model saw no history


def test_chat_window_drops_old_turns_but_keeps_the_system_message():
    ctx = ChatContext(window_size=2).add(Message("system", "be brief"))
    for i in range(5):
        ctx = ctx.add(Message("user", f"u{i}"))
    texts = [m.content for m in ctx.as_list()]
    assert texts == ["be brief", "u3", "u4"]
    assert ctx.new_instance().window_size == 2


def test_token_budget_limits_what_the_model_sees():
    ctx = ChatContext(token_context_length_limit=40)
    for i in range(10):
        ctx = ctx.add(Message("user", f"{i}" * 20))  # ~5 tokens each
    shown = ctx.view_for_generation()
    assert 0 < len(shown) < 10 and shown[-1].content == "9" * 20
    assert len(ctx.as_list()) == 10


async def test_ainstruct_defaults_match_upstream():
    m = MelleaSession(ScriptedBackend(["a b c"]))
    # the default strategy (rejection sampling) computes the result
    default = await m.ainstruct("q")
    assert default.is_computed() and default.value == "a b c "
    # strategy=None: uncomputed unless await_result=True, for the caller to stream
    streamed = await m.ainstruct("q", strategy=None)
    assert not streamed.is_computed()
    assert await streamed.astream() == "a "
    assert await streamed.avalue() == "a b c "
    awaited = await m.ainstruct("q", strategy=None, await_result=True)
    assert awaited.is_computed()


def test_start_session_context_type():
    import mellea

    m = mellea.start_session(context_type="chat", engine=_FakeEngine())
    assert isinstance(m.ctx, ChatContext)
    with pytest.raises(ValueError, match="either ctx or context_type"):
        mellea.start_session(ctx=SimpleContext(), context_type="chat", engine=_FakeEngine())


class _FakeEngine:
    model_id = "fake"
    max_model_len = 2048
    tokenizer = None


async def test_thunk_async_iteration_yields_the_text_as_it_arrives():
    m = MelleaSession(ScriptedBackend(["a b c"]))
    thunk = await m.ainstruct("q", strategy=None)
    async with thunk:
        pieces = [delta async for delta in thunk]
    assert pieces == ["a ", "b ", "c "] and thunk.value == "a b c "
    assert [d async for d in ModelOutputThunk("done")] == ["done"]


def _short(limit: int):
    from mellea.stdlib.requirements import req, simple_validate

    return req(f"At most {limit} words.", simple_validate(lambda t: len(t.split()) <= limit))


def test_repair_template_strategy_lists_the_failed_requirements_on_retry():
    from mellea.stdlib.sampling import RepairTemplateStrategy

    m = MelleaSession(ScriptedBackend(["far too many words here", "ok"]))
    result = m.instruct(
        "q", requirements=[_short(2)], strategy=RepairTemplateStrategy(loop_budget=2)
    )
    assert result.value == "ok "
    first, second = (call["messages"] for call in m.backend.calls)
    assert "failed before" not in first[-1]["content"]
    assert second[-1]["content"].endswith(
        "The following requirements failed before:\n* At most 2 words."
    )


def test_multi_turn_strategy_shows_the_failed_answer_and_asks_again():
    from mellea.stdlib.sampling import MultiTurnStrategy

    m = MelleaSession(ScriptedBackend(["far too many words here", "ok"]))
    m.instruct("q", requirements=[_short(2)], strategy=MultiTurnStrategy(loop_budget=2))
    second = m.backend.calls[1]["messages"]
    assert [msg["role"] for msg in second] == ["user", "assistant", "user"]
    assert second[1]["content"] == "far too many words here "
    assert "At most 2 words." in second[2]["content"]


def test_start_backend_gives_a_context_and_a_backend():
    import mellea

    ctx, backend = mellea.start_backend(context_type="chat", engine=_FakeEngine())
    assert isinstance(ctx, ChatContext) and backend.model_id == "fake"
    ctx, _ = mellea.start_backend(engine=_FakeEngine())
    assert isinstance(ctx, SimpleContext)


def test_window_compactor_and_pin_predicates():
    from mellea.stdlib.context import WindowCompactor, pin_nothing, pin_system_and_initial_user

    def texts(ctx):
        return [m.content for m in ctx.as_list()]

    def fill(ctx):
        ctx = ctx.add(Message("system", "s"))
        for i in range(4):
            ctx = ctx.add(Message("user", f"u{i}"))
        return ctx

    assert texts(fill(ChatContext(compactor=WindowCompactor(size=2)))) == ["s", "u2", "u3"]
    plain = ChatContext(compactor=WindowCompactor(size=2, pin_predicate=pin_nothing))
    assert texts(fill(plain)) == ["u2", "u3"]
    first = ChatContext(
        compactor=WindowCompactor(size=1, pin_predicate=pin_system_and_initial_user)
    )
    assert texts(fill(first)) == ["s", "u0", "u3"]
    with pytest.raises(ValueError, match="either compactor or window_size"):
        ChatContext(compactor=WindowCompactor(size=1), window_size=1)


def test_chat_documents_are_shown_to_the_model():
    from mellea.stdlib.components import Document

    m = MelleaSession(ScriptedBackend(["ok"]), ctx=ChatContext())
    m.chat("Summarize.", documents=["Rome is old.", Document("Oslo is cold.", "Oslo", "7")])
    sent = m.backend.calls[0]["messages"][-1]["content"]
    assert sent == "Summarize.\n\n[Document] Rome is old.\n\n[Document 7] Oslo: Oslo is cold."
    assert m.ctx.as_list()[0].content == "Summarize."
