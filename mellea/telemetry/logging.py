"""OTLP log export (upstream's name)."""

from __future__ import annotations

import logging as _logging
from typing import Any

from mellea.telemetry._env import env_true


def get_otlp_log_handler() -> _logging.Handler | None:
    """A handler exporting log records over OTLP when ``MELLEA_LOGS_OTLP`` is true and
    the OpenTelemetry SDK and OTLP exporter are installed; else ``None``."""
    if not env_true("MELLEA_LOGS_OTLP"):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    except ImportError:
        return None
    provider: Any = LoggerProvider()
    provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
    return LoggingHandler(logger_provider=provider)
