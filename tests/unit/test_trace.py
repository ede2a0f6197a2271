"""The program trace: what the session reports, from async code, worker threads and run_sync."""

from __future__ import annotations

import asyncio
import contextvars

from mellea.core._sync import run_sync
from mellea.core.trace import ProgramTrace, current_trace, recording
from mellea.serve import ChatMessage
from tests.programs import events_sampler
from tests.programs.events_sampler import GREETING, REPLY


def _ask(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=text)]


def _check_sampled(trace: ProgramTrace, served) -> None:
    sampling = trace.sampling_for(served)
    assert sampling is not None
    assert sampling.chosen == 1 and sampling.success is True
    assert [a.index for a in sampling.attempts] == [0, 1]
    first, second = sampling.attempts
    assert [v.passed for v in first.verdicts] == [False, True]
    assert [v.passed for v in second.verdicts] == [True, True]
    assert first.verdicts[0].reason == "checked the first words"
    assert second.thunk is served
    purposes = [(c.purpose, c.attempt, c.requirement) for c in trace.calls]
    assert purposes == [
        ("attempt", 0, None),
        ("requirement", 0, "Be polite"),
        ("attempt", 1, None),
        ("requirement", 1, "Be polite"),
    ]
    assert all(c.usage is not None for c in trace.calls)


def test_run_sync_copies_the_callers_context():
    var = contextvars.ContextVar("probe", default="unset")

    async def read() -> str:
        return var.get()

    var.set("caller")
    assert run_sync(read()) == "caller"
    assert contextvars.Context().run(run_sync, read()) == "unset"


def test_nothing_is_recorded_without_a_trace():
    assert current_trace() is None
    served = events_sampler.serve(_ask("sampled hi"))
    assert served.value == f"{GREETING} " + REPLY.format(n=1)


def test_sync_program_in_a_worker_thread_reports_into_the_trace():
    async def main():
        trace = ProgramTrace()
        with recording(trace):
            served = await asyncio.to_thread(events_sampler.serve, _ask("sampled hi"))
        _check_sampled(trace, served)

    asyncio.run(main())


def test_live_trace_streams_attempt_text_and_verdicts_in_order():
    async def main():
        trace = ProgramTrace(live=True)
        with recording(trace):
            work = asyncio.ensure_future(asyncio.to_thread(events_sampler.serve, _ask("sampled")))
        events = [event async for event in trace.events_while(work)]
        _check_sampled(trace, work.result())
        return events

    events = asyncio.run(main())
    kinds = [e["type"] for e in events]
    assert kinds[0] == "attempt.started" and kinds[-1] == "attempt.chosen"
    text0 = "".join(e["text"] for e in events if e["type"] == "attempt.delta" and e["attempt"] == 0)
    assert text0 == REPLY.format(n=0)
    assert len([e for e in events if e["type"] == "attempt.delta"]) > 4  # word by word
    checks = [(e["attempt"], e["passed"]) for e in events if e["type"] == "requirement.checked"]
    assert checks == [(0, False), (0, True), (1, True), (1, True)]
    assert events[-1] == {
        "type": "attempt.chosen",
        "run": 0,
        "attempt": 1,
        "requirements_met": True,
        "attempt_count": 2,
    }
    # every attempt's text is complete before its first verdict
    first_check = kinds.index("requirement.checked")
    assert kinds.index("attempt.started", 1) > first_check


def test_plain_program_records_one_call_and_no_sampling():
    async def main():
        trace = ProgramTrace()
        with recording(trace):
            served = await asyncio.to_thread(events_sampler.serve, _ask("plain x"))
        return trace, served

    trace, served = asyncio.run(main())
    assert trace.samplings == []
    assert [(c.purpose, c.thunk is served) for c in trace.calls] == [("generate", True)]


def test_requirement_labels_are_bounded():
    from cli.serve.observability import (
        MAX_REQUIREMENT_LABELS,
        OTHER_REQUIREMENT,
        REQUIREMENT_LABEL_CHARS,
        ServerMetrics,
    )

    metrics = ServerMetrics()
    labels = {metrics.requirement_label(f"requirement {i}") for i in range(200)}
    assert len(labels) == MAX_REQUIREMENT_LABELS + 1 and OTHER_REQUIREMENT in labels
    assert metrics.requirement_label("requirement 3") == "requirement 3"  # known ones stay
    assert len(metrics.requirement_label("x" * 500)) <= REQUIREMENT_LABEL_CHARS
    assert metrics.requirement_label(None) == OTHER_REQUIREMENT  # the set is full


def test_concurrent_sampling_runs_keep_their_own_attempts():
    """Two instructs of one program run at once: each attempt and judge call is
    attributed to its own sampling run."""
    from mellea.core import Requirement
    from mellea.stdlib.requirements import simple_validate
    from mellea.stdlib.sampling import RejectionSamplingStrategy
    from mellea.stdlib.session import MelleaSession

    async def one(session: MelleaSession, text: str):
        greets = simple_validate(lambda t: t.startswith(GREETING))
        return await session.ainstruct(
            text,
            requirements=[Requirement("greets", validation_fn=greets), Requirement("polite")],
            strategy=RejectionSamplingStrategy(loop_budget=2),
            return_sampling_results=True,
        )

    async def main():
        trace = ProgramTrace()
        with recording(trace):
            a, b = await asyncio.gather(
                one(MelleaSession(events_sampler.ScriptedBackend()), "a"),
                one(MelleaSession(events_sampler.ScriptedBackend()), "b"),
            )
        return trace, a, b

    trace, a, b = asyncio.run(main())
    assert len(trace.samplings) == 2
    for sampling, result in zip(trace.samplings, (a, b), strict=True):
        assert [x.thunk for x in sampling.attempts] == result.sample_generations
        assert sampling.chosen == 1
        assert [[v.passed for v in x.verdicts] for x in sampling.attempts] == [
            [False, True],
            [True, True],
        ]
    judges = [(c.attempt, c.requirement) for c in trace.calls if c.purpose == "requirement"]
    assert sorted(judges) == [(0, "polite"), (0, "polite"), (1, "polite"), (1, "polite")]


def test_tracing_is_off_without_otlp_variables(monkeypatch):
    from cli.serve.tracing import OTLP_VARIABLES, tracer_from_env

    for name in OTLP_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert tracer_from_env() is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert tracer_from_env() is None


def test_verdicts_are_json_whatever_the_validator_returned():
    import json

    from mellea.core import ModelOutputThunk, Requirement, ValidationResult

    trace = ProgramTrace()
    run = trace.sampling_started()
    thunk = ModelOutputThunk(value="x")
    trace.attempt_started(0, thunk, run=run)
    odd = ValidationResult(True, reason={"why": object()}, score="high")  # type: ignore[arg-type]
    trace.requirement_checked(thunk, Requirement("r"), odd)
    trace.requirement_checked(thunk, Requirement("s"), ValidationResult(False, score=float("nan")))
    trace.requirement_checked(thunk, Requirement("t"), ValidationResult(True, score=0.75))
    verdicts = [v.wire() for v in run.attempts[0].verdicts]
    json.dumps(verdicts, allow_nan=False)
    assert [v["score"] for v in verdicts] == [None, None, 0.75]
    assert verdicts[0]["reason"].startswith("{'why'")


def test_live_trace_of_an_async_program_on_the_servers_loop():
    from mellea.core import Requirement
    from mellea.stdlib.requirements import simple_validate
    from mellea.stdlib.sampling import RejectionSamplingStrategy
    from mellea.stdlib.session import MelleaSession

    async def program():
        session = MelleaSession(events_sampler.ScriptedBackend())
        greets = simple_validate(lambda t: t.startswith(GREETING))
        return await session.ainstruct(
            "hi",
            requirements=[Requirement("greets", validation_fn=greets)],
            strategy=RejectionSamplingStrategy(loop_budget=2),
        )

    async def main():
        trace = ProgramTrace(live=True)
        with recording(trace):
            work = asyncio.ensure_future(program())
        return [event async for event in trace.events_while(work)]

    events = asyncio.run(main())
    assert [e["type"] for e in events if e["type"] != "attempt.delta"] == [
        "attempt.started",
        "requirement.checked",
        "attempt.started",
        "requirement.checked",
        "attempt.chosen",
    ]
    text = "".join(e["text"] for e in events if e["type"] == "attempt.delta" and e["attempt"] == 1)
    assert text == f"{GREETING} " + REPLY.format(n=1)
