"""The program on the wire: attempts, requirement verdicts and program usage (issue 14).

A rejection-sampling program whose first attempt fails a requirement and whose second
passes, served over a real socket: the ``mellea`` extension object of non-streamed
replies, program usage across every model call, and the opt-in live events of
``stream_options.include_program_events`` on chat, completions and Responses. The
scripted program makes the texts and token counts exact; the ``model`` tests do the
same against the real default model.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import openai
import pytest

from tests.programs.events_sampler import GREETING, JUDGE_PROMPT_TOKENS, PROMPT_TOKENS, REPLY
from tests.server import PROGRAMS, ROOT, serve, sse_events

pytestmark = pytest.mark.e2e

FIRST = REPLY.format(n=0)
ACCEPTED = f"{GREETING} " + REPLY.format(n=1)
EVENTS = {"include_program_events": True}


def _tokens(text: str) -> int:
    return len(text.split(" "))


# attempt 0, its judge, attempt 1, its judge
PROMPT_TOTAL = 2 * PROMPT_TOKENS + 2 * JUDGE_PROMPT_TOKENS
COMPLETION_TOTAL = _tokens(FIRST) + _tokens(ACCEPTED) + 2


@pytest.fixture(scope="module")
def server():
    with serve(PROGRAMS / "events_sampler.py") as running:
        yield running


def _client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


def _check_report(report: dict[str, Any]) -> None:
    """The extension object of the sampled run: attempt 0 failed, attempt 1 chosen."""
    assert report["requirements_met"] is True
    assert report["attempt_count"] == 2
    assert report["chosen_attempt"] == 1
    assert report["requirements"] == [
        {
            "description": f"Start with '{GREETING}'",
            "passed": True,
            "reason": "checked the first words",
            "score": None,
        },
        {"description": "Be polite", "passed": True, "reason": "yes", "score": None},
    ]
    first, second = report["attempts"]
    assert (first["attempt"], first["text"], first["passed"]) == (0, FIRST, False)
    assert [r["passed"] for r in first["requirements"]] == [False, True]
    assert (second["attempt"], second["text"], second["passed"]) == (1, ACCEPTED, True)
    calls = [(c["purpose"], c["attempt"], c.get("requirement")) for c in report["model_calls"]]
    assert calls == [
        ("attempt", 0, None),
        ("requirement", 0, "Be polite"),
        ("attempt", 1, None),
        ("requirement", 1, "Be polite"),
    ]
    assert sum(c["prompt_tokens"] for c in report["model_calls"]) == PROMPT_TOTAL
    assert sum(c["completion_tokens"] for c in report["model_calls"]) == COMPLETION_TOTAL


def _check_usage(usage: Any) -> None:
    assert usage.prompt_tokens == PROMPT_TOTAL
    assert usage.completion_tokens == COMPLETION_TOTAL
    assert usage.total_tokens == PROMPT_TOTAL + COMPLETION_TOTAL


# -- non-streamed ---------------------------------------------------------------------


def test_chat_reply_carries_the_report_and_program_usage(server):
    reply = _client(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "sampled please"}]
    )
    choice = reply.choices[0]
    assert choice.message.content == ACCEPTED
    _check_report(choice.model_extra["mellea"])
    _check_usage(reply.usage)


def test_completion_reply_carries_the_report_and_program_usage(server):
    reply = _client(server).completions.create(model="m", prompt="sampled now")
    assert reply.choices[0].text == ACCEPTED
    _check_report(reply.choices[0].model_extra["mellea"])
    _check_usage(reply.usage)


def test_response_carries_the_report_and_program_usage(server):
    response = _client(server).responses.create(model="m", input="sampled then")
    assert response.output_text == ACCEPTED
    _check_report(response.model_extra["mellea"])
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens) == (PROMPT_TOTAL, COMPLETION_TOTAL)
    stored = _client(server).responses.retrieve(response.id)
    _check_report(stored.model_extra["mellea"])


def test_failed_requirements_are_reported(server):
    reply = _client(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "failing please"}]
    )
    report = reply.choices[0].model_extra["mellea"]
    assert report["requirements_met"] is False
    assert report["attempt_count"] == 2
    assert report["chosen_attempt"] == 0
    assert report["requirements"] == [
        {"description": "Be in French", "passed": False, "reason": None, "score": None}
    ]
    assert reply.choices[0].message.content == FIRST


def test_a_plain_program_reports_its_one_call_and_no_requirements(server):
    reply = _client(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "plain please"}]
    )
    report = reply.choices[0].model_extra["mellea"]
    assert "requirements_met" not in report and "attempts" not in report
    assert report["model_calls"] == [
        {"purpose": "generate", "prompt_tokens": PROMPT_TOKENS, "completion_tokens": 8}
    ]
    assert reply.usage.total_tokens == PROMPT_TOKENS + 8


# -- streamed -------------------------------------------------------------------------


def _raw_chunks(server, route: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream("POST", f"{server.base_url}{route}", json=body, timeout=60) as response:
        assert response.status_code == 200
        payloads = list(sse_events(response.iter_lines()))
    assert payloads[-1] == "[DONE]"
    return [json.loads(p) for p in payloads[:-1]]


def _check_events(events: list[dict[str, Any]], index: int = 0) -> None:
    """The live events of the sampled run of choice ``index``, in order."""
    kinds = [e["type"] for e in events]
    assert kinds[0] == "attempt.started" and events[0]["attempt"] == 0
    text = {
        n: "".join(e["text"] for e in events if e["type"] == "attempt.delta" and e["attempt"] == n)
        for n in (0, 1)
    }
    assert text == {0: FIRST, 1: ACCEPTED}
    assert len([k for k in kinds if k == "attempt.delta"]) > 4  # as generated, not at the end
    checks = [(e["attempt"], e["passed"]) for e in events if e["type"] == "requirement.checked"]
    assert checks == [(0, False), (0, True), (1, True), (1, True)]
    chosen = [e for e in events if e["type"] == "attempt.chosen"]
    assert chosen == [
        {
            "type": "attempt.chosen",
            "run": 0,
            "attempt": 1,
            "requirements_met": True,
            "attempt_count": 2,
            "index": index,
        }
    ]
    assert kinds.index("attempt.chosen") < kinds.index("program.done")
    assert all(e["index"] == index for e in events)
    done = events[-1]
    assert done["type"] == "program.done"
    _check_report(done)


def test_chat_stream_with_program_events(server):
    body = {
        "messages": [{"role": "user", "content": "sampled x"}],
        "stream": True,
        "stream_options": {**EVENTS, "include_usage": True},
    }
    chunks = _raw_chunks(server, "/v1/chat/completions", body)
    events = [c["mellea"] for c in chunks if "mellea" in c]
    assert all(c["choices"] == [] for c in chunks if "mellea" in c)
    _check_events(events)
    # the first attempt's text arrives before the answer's first content
    first_delta = next(i for i, c in enumerate(chunks) if "mellea" in c)
    first_content = next(i for i, c in enumerate(chunks) if c["choices"])
    assert first_delta < first_content
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == ACCEPTED
    assert chunks[-1]["usage"]["total_tokens"] == PROMPT_TOTAL + COMPLETION_TOTAL


def test_chat_stream_without_the_option_is_unchanged(server):
    body = {
        "messages": [{"role": "user", "content": "sampled x"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks = _raw_chunks(server, "/v1/chat/completions", body)
    assert not any("mellea" in c for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == ACCEPTED
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["total_tokens"] == PROMPT_TOTAL + COMPLETION_TOTAL


def test_openai_client_reads_a_stream_with_program_events(server):
    stream = _client(server).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "sampled y"}],
        stream=True,
        stream_options=EVENTS,  # type: ignore[arg-type]
    )
    chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == ACCEPTED
    _check_events([c.model_extra["mellea"] for c in chunks if not c.choices])


def test_completions_stream_with_program_events(server):
    body = {"prompt": "sampled z", "stream": True, "stream_options": EVENTS}
    chunks = _raw_chunks(server, "/v1/completions", body)
    _check_events([c["mellea"] for c in chunks if "mellea" in c])
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == ACCEPTED
    plain = _client(server).completions.create(model="m", prompt="sampled z", stream=True)
    pieces = list(plain)
    assert not any("mellea" in (c.model_extra or {}) for c in pieces)
    assert "".join(c.choices[0].text for c in pieces if c.choices) == ACCEPTED


def _response_events(server, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream("POST", f"{server.base_url}/v1/responses", json=body, timeout=60) as response:
        assert response.status_code == 200
        return [json.loads(p) for p in sse_events(response.iter_lines())]


def test_responses_stream_with_program_events(server):
    body = {"input": "sampled r", "stream": True, "stream_options": EVENTS}
    events = _response_events(server, body)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    ours = [e for e in events if e["type"].startswith("mellea.")]
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    # the attempts come before the answer's first text
    first_text = kinds.index("response.output_text.delta")
    assert kinds.index("mellea.attempt.delta") < first_text
    assert kinds.index("mellea.attempt.chosen") < first_text
    renamed = [{**e, "type": e["type"].removeprefix("mellea.")} for e in ours]
    for e in renamed:
        e.pop("sequence_number")
        e["index"] = 0
    done = events[-1]
    assert done["type"] == "response.completed"
    _check_events([*renamed, {"type": "program.done", **done["response"]["mellea"], "index": 0}])
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == ACCEPTED


def test_responses_stream_without_the_option_is_unchanged(server):
    events = _response_events(server, {"input": "sampled r", "stream": True})
    assert not any(e["type"].startswith("mellea.") for e in events)
    _check_report(events[-1]["response"]["mellea"])


def test_openai_client_reads_a_responses_stream_with_program_events(server):
    stream = _client(server).responses.create(
        model="m",
        input="sampled q",
        stream=True,
        stream_options=EVENTS,  # type: ignore[arg-type]
    )
    events = list(stream)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == ACCEPTED
    assert any(e.type == "mellea.attempt.delta" for e in events)
    final = events[-1]
    assert final.type == "response.completed"
    assert final.response.output_text == ACCEPTED
    _check_report(final.response.model_extra["mellea"])


# -- the real default model, with the example of docs/serve.md -------------------------

DOC = ROOT / "docs" / "serve.md"
SECTION = "## The program's report"


def _doc_blocks() -> tuple[str, str]:
    """The example program and the example client of the report's section."""
    text = DOC.read_text()
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", 1)]
    program, client = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    return program, client


@pytest.fixture(scope="module")
def doc_server(tmp_path_factory):
    program, _ = _doc_blocks()
    path = tmp_path_factory.mktemp("doc") / "second_look.py"
    path.write_text(program)
    with serve(path) as running:
        yield running


def _model_client(server) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, timeout=300
    )


def _check_second_look(report: dict[str, Any], content: str, usage: Any = None) -> None:
    assert report["requirements_met"] is True
    assert (report["attempt_count"], report["chosen_attempt"]) == (2, 1)
    assert [a["passed"] for a in report["attempts"]] == [False, True]
    assert report["attempts"][0]["requirements"][0]["reason"] == "look number 1"
    assert report["requirements"] == [
        {
            "description": "Passes on the second look",
            "passed": True,
            "reason": "look number 2",
            "score": None,
        }
    ]
    assert content == report["attempts"][1]["text"]
    calls = report["model_calls"]
    assert [(c["purpose"], c["attempt"]) for c in calls] == [("attempt", 0), ("attempt", 1)]
    assert all(c["prompt_tokens"] > 0 and c["completion_tokens"] > 0 for c in calls)
    if usage is not None:
        assert usage == (
            sum(c["prompt_tokens"] for c in calls),
            sum(c["completion_tokens"] for c in calls),
        )


@pytest.mark.model
def test_doc_client_example_runs(doc_server, monkeypatch):
    _, client = _doc_blocks()
    monkeypatch.setenv("M_SERVE_URL", f"{doc_server.base_url}/v1")
    exec(compile(client, "serve.md[report client]", "exec"), {})


@pytest.mark.model
def test_real_model_chat_completions_and_responses(doc_server):
    client = _model_client(doc_server)
    ask = [{"role": "user", "content": "Name a fruit."}]
    reply = client.chat.completions.create(model="m", messages=ask, max_tokens=12)
    usage = (reply.usage.prompt_tokens, reply.usage.completion_tokens)
    _check_second_look(
        reply.choices[0].model_extra["mellea"], reply.choices[0].message.content, usage
    )

    completion = client.completions.create(model="m", prompt="Name a tree.", max_tokens=12)
    usage = (completion.usage.prompt_tokens, completion.usage.completion_tokens)
    _check_second_look(
        completion.choices[0].model_extra["mellea"], completion.choices[0].text, usage
    )

    response = client.responses.create(model="m", input="Name a bird.", max_output_tokens=12)
    usage = (response.usage.input_tokens, response.usage.output_tokens)
    _check_second_look(response.model_extra["mellea"], response.output_text, usage)


@pytest.mark.model
def test_real_model_streams_with_and_without_program_events(doc_server):
    client = _model_client(doc_server)
    ask = [{"role": "user", "content": "Name a city."}]
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=ask,
            max_tokens=12,
            stream=True,
            stream_options={"include_program_events": True, "include_usage": True},  # type: ignore[typeddict-unknown-key]
        )
    )
    events = [
        c.model_extra["mellea"] for c in chunks if not c.choices and c.model_extra.get("mellea")
    ]
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "attempt.started" and kinds[-1] == "program.done"
    live = {
        n: "".join(e["text"] for e in events if e["type"] == "attempt.delta" and e["attempt"] == n)
        for n in (0, 1)
    }
    report = events[-1]
    assert live == {n: report["attempts"][n]["text"] for n in (0, 1)}
    assert chunks[-1].usage is not None
    usage = (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens)
    _check_second_look(report, content, usage)
    # the first attempt's text came before the answer's content
    first_event = next(i for i, c in enumerate(chunks) if not c.choices)
    assert first_event < next(i for i, c in enumerate(chunks) if c.choices)

    plain = list(
        client.chat.completions.create(model="m", messages=ask, max_tokens=12, stream=True)
    )
    assert all(c.choices for c in plain)
    assert "".join(c.choices[0].delta.content or "" for c in plain)

    text_chunks = list(
        client.completions.create(
            model="m",
            prompt="Name a river.",
            max_tokens=12,
            stream=True,
            stream_options={"include_program_events": True},  # type: ignore[typeddict-unknown-key]
        )
    )
    done = [c.model_extra["mellea"] for c in text_chunks if not c.choices][-1]
    _check_second_look(done, "".join(c.choices[0].text for c in text_chunks if c.choices))

    stream = client.responses.create(
        model="m",
        input="Name a sea.",
        max_output_tokens=12,
        stream=True,
        stream_options={"include_program_events": True},  # type: ignore[typeddict-unknown-key]
    )
    events = list(stream)
    assert any(e.type == "mellea.attempt.delta" for e in events)
    final = events[-1].response
    _check_second_look(final.model_extra["mellea"], final.output_text)


def _metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a Prometheus exposition (0 if absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    line = f"{name}{{{wanted}}}" if labels else name
    for row in text.splitlines():
        if row.startswith(line + " "):
            return float(row.split(" ")[-1])
    return 0.0


def test_metrics_count_attempts_and_verdicts(server):
    before = httpx.get(f"{server.base_url}/metrics").text
    _client(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "sampled metrics"}]
    )
    _client(server).responses.create(model="m", input="failing metrics")
    after = httpx.get(f"{server.base_url}/metrics").text

    def grew(name: str, **labels: str) -> float:
        return _metric(after, name, **labels) - _metric(before, name, **labels)

    greeting = f"Start with '{GREETING}'"
    assert grew("m_serve_requirement_checks_total", requirement=greeting, result="failed") == 1
    assert grew("m_serve_requirement_checks_total", requirement=greeting, result="passed") == 1
    assert grew("m_serve_requirement_checks_total", requirement="Be polite", result="passed") == 2
    assert (
        grew("m_serve_requirement_checks_total", requirement="Be in French", result="failed") == 2
    )
    assert grew("m_serve_program_attempts_count") == 2
    assert grew("m_serve_program_attempts_sum") == 4
    assert grew("m_serve_program_attempts_bucket", le="1.0") == 0
    assert grew("m_serve_program_attempts_bucket", le="2.0") == 2


def test_the_model_card_describes_the_program(server):
    client = _client(server)
    listed = client.models.list().data
    assert len(listed) == 1
    card = client.models.retrieve(listed[0].id)
    about = card.model_extra["mellea"]
    assert about["program"] == "events_sampler.py"
    assert about["description"].startswith("Test program: rejection sampling")
    assert about["serve"] == {
        "description": "Run the instruction as the first word of the last message says.",
        "parameters": ["model_options"],
        "async": False,
    }
    assert about["serve_completion"] is False
    assert listed[0].model_extra["mellea"] == about
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("no-such-model")
    assert caught.value.body["param"] == "model"


def test_n_choices_count_every_programs_calls(server):
    """Each choice is one program run: the prompt of the served replies counts once (as
    for any ``n``), every other call of every run counts."""
    served_prompt = PROMPT_TOKENS
    others_prompt = PROMPT_TOTAL - PROMPT_TOKENS  # attempt 0 and both judges, per run
    expected_prompt = served_prompt + 2 * others_prompt
    expected_completion = 2 * COMPLETION_TOTAL
    reply = _client(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "sampled twice"}], n=2
    )
    assert [c.message.content for c in reply.choices] == [ACCEPTED, ACCEPTED]
    for choice in reply.choices:
        _check_report(choice.model_extra["mellea"])
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (
        expected_prompt,
        expected_completion,
    )
    body = {
        "messages": [{"role": "user", "content": "sampled twice"}],
        "n": 2,
        "stream": True,
        "stream_options": {"include_usage": True, **EVENTS},
    }
    chunks = _raw_chunks(server, "/v1/chat/completions", body)
    usage = chunks[-1]["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (
        expected_prompt,
        expected_completion,
    )
    for index in (0, 1):
        events = [c["mellea"] for c in chunks if c.get("mellea", {}).get("index") == index]
        _check_events(events, index)
    text = _client(server).completions.create(model="m", prompt="sampled twice", n=2)
    assert (text.usage.prompt_tokens, text.usage.completion_tokens) == (
        expected_prompt,
        expected_completion,
    )


def test_openai_stream_helpers_accept_program_events(server):
    client = _client(server)
    with client.responses.stream(
        model="m", input="sampled h", extra_body={"stream_options": EVENTS}
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "mellea.requirement.checked" in kinds
    assert final.output_text == ACCEPTED
    with client.chat.completions.stream(
        model="m",
        messages=[{"role": "user", "content": "sampled h"}],
        stream_options=EVENTS,  # type: ignore[arg-type]
    ) as stream:
        for _ in stream:
            pass
        assert stream.get_final_completion().choices[0].message.content == ACCEPTED
