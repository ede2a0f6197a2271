"""``/health``, ``/ready`` and ``/metrics``: whether the server is up and ready, and its counters."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from mellea.serve.errors import error_body

router = APIRouter()


@router.get("/health")
async def health() -> dict[str, str]:
    """Liveness: the server is up."""
    return {"status": "ok"}


@router.get("/ready", response_model=None)
async def ready(request: Request) -> dict[str, str] | JSONResponse:
    """Readiness: 200 once the program is loaded and warm, 503 before and while draining."""
    state = request.app.state
    if state.ready and not state.draining:
        return {"status": "ready"}
    status = "draining" if state.draining else "starting"
    return JSONResponse(
        error_body(f"the server is {status}", "service_unavailable", None, status),
        status_code=503,
        headers={"retry-after": "1"},
    )


@router.get("/metrics")
async def prometheus_metrics(request: Request) -> Response:
    """Prometheus metrics of this server process."""
    registry = request.app.state.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
