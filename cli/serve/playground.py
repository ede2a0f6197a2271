"""The playground page at ``/``: a chat UI that talks to this server's own public API.

The page is plain HTML, CSS and JavaScript shipped as package data under
``cli/serve/static/playground``; no CDN and no build step, so it works offline.
"""

from __future__ import annotations

import html
from functools import cache
from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

STATIC_PACKAGE = "cli.serve"
STATIC_DIR = "static/playground"
MODEL_PLACEHOLDER = "{{MODEL_NAME}}"

# The page only ever loads its own assets and calls its own server.
PAGE_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


@cache
def _template() -> str:
    return files(STATIC_PACKAGE).joinpath(STATIC_DIR, "index.html").read_text(encoding="utf-8")


def render_page(model_name: str) -> str:
    """The playground's HTML with ``model_name`` filled in (HTML-escaped)."""
    return _template().replace(MODEL_PLACEHOLDER, html.escape(model_name, quote=True))


def mount_playground(app: FastAPI, *, model_name: str) -> None:
    """Add ``GET /`` and the page's static assets under ``/playground/`` to ``app``."""
    page = render_page(model_name)

    @app.get("/", include_in_schema=False)
    async def playground() -> HTMLResponse:
        """The chat playground page."""
        return HTMLResponse(page, headers=PAGE_HEADERS)

    app.mount(
        "/playground",
        StaticFiles(packages=[(STATIC_PACKAGE, STATIC_DIR)]),
        name="playground",
    )
