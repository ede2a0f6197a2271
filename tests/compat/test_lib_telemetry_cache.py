"""mellea.telemetry (context, switches, instruments) and mellea.backends.cache."""

from __future__ import annotations

import asyncio
import logging

import pytest

from mellea import telemetry
from mellea.backends.cache import SimpleLRUCache


def test_context_nests_and_restores():
    assert telemetry.get_current_context() == {}
    with telemetry.with_context(session_id="s1", model_id="m"):
        with telemetry.with_context(session_id="s2", sampling_iteration=2):
            assert telemetry.get_current_context() == {
                "session_id": "s2",
                "model_id": "m",
                "sampling_iteration": 2,
            }
        assert telemetry.get_session_id() == "s1" and telemetry.get_sampling_iteration() is None
    assert telemetry.get_model_id() is None
    with pytest.raises(ValueError, match="user_id"), telemetry.with_context(user_id="x"):
        pass


def test_async_context_is_per_task():
    async def one(name: str) -> str | None:
        async with telemetry.async_with_context(request_id=name):
            await asyncio.sleep(0)
            return telemetry.get_request_id()

    async def both():
        return await asyncio.gather(one("a"), one("b"))

    assert asyncio.run(both()) == ["a", "b"]
    assert len(telemetry.generate_request_id()) == 32


def test_log_filter_adds_the_context():
    record = logging.LogRecord("mellea", logging.INFO, __file__, 1, "msg", None, None)
    with telemetry.with_context(session_id="s9"):
        assert telemetry.MelleaContextFilter().filter(record)
    assert record.session_id == "s9"


def test_switches_follow_upstreams_variables(monkeypatch, tmp_path):
    monkeypatch.delenv("MELLEA_TRACES_ENABLED", raising=False)
    assert not telemetry.is_tracing_enabled() and not telemetry.is_content_tracing_enabled()
    monkeypatch.setenv("MELLEA_TRACES_ENABLED", "true")
    monkeypatch.setenv("MELLEA_TRACES_CONTENT", "1")
    assert telemetry.is_tracing_enabled() and telemetry.is_content_tracing_enabled()
    monkeypatch.setenv("MELLEA_PRICING_FILE", str(tmp_path / "missing.json"))
    assert not telemetry.is_pricing_enabled()
    (tmp_path / "p.json").write_text("{}")
    monkeypatch.setenv("MELLEA_PRICING_FILE", str(tmp_path / "p.json"))
    assert telemetry.is_pricing_enabled()


def test_metrics_are_noops_when_off_and_recorded_when_on(monkeypatch):
    monkeypatch.delenv("MELLEA_METRICS_ENABLED", raising=False)
    telemetry.create_counter("x").add(1)  # no-op, no error
    telemetry.record_sampling_attempt("RejectionSamplingStrategy")
    sdk = pytest.importorskip("opentelemetry.sdk.metrics")
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = sdk.MeterProvider(metric_readers=[reader])
    monkeypatch.setattr(metrics, "get_meter", provider.get_meter)
    monkeypatch.setenv("MELLEA_METRICS_ENABLED", "1")
    from mellea.telemetry import metrics as ours

    ours._instrument.cache_clear()
    try:
        telemetry.record_sampling_attempt("RejectionSamplingStrategy")
        telemetry.record_sampling_attempt("RejectionSamplingStrategy")
        telemetry.record_token_usage_metrics(10, 3, "m", "local", "chat")
        data = reader.get_metrics_data()
        points = {
            m.name: [p for p in m.data.data_points]
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
        }
        assert points["mellea.sampling.attempts"][0].value == 2
        assert points["mellea.sampling.attempts"][0].attributes == {
            "strategy": "RejectionSamplingStrategy"
        }
        assert sorted(p.sum for p in points["gen_ai.client.token.usage"]) == [3, 10]
    finally:
        ours._instrument.cache_clear()


def test_lru_cache_evicts_the_least_recently_used():
    evicted = []
    cache = SimpleLRUCache(2, on_evict=evicted.append)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the newest
    cache.put("c", 3)
    assert evicted == [2] and cache.get("b") is None and cache.current_size() == 2
    cache.put("a", 10)
    assert cache.get("a") == 10 and cache.current_size() == 2
    empty = SimpleLRUCache(0)
    empty.put("x", 1)
    assert empty.get("x") is None
