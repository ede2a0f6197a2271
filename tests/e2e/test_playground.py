"""The playground page at ``/``, driven in a real headless chromium against a live ``m serve``.

Needs Debian's chromium at ``/usr/bin/chromium`` (``.ci/install-browser.sh`` installs it)
and Playwright's Python package, pointed at that browser: ``playwright install`` is never
needed. To regenerate the README screenshot (the real default model replies)::

    M_PLAYGROUND_SCREENSHOT=docs/playground.png pytest tests/e2e/test_playground.py -k screenshot
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.server import EXAMPLES, PROGRAMS, ROOT, Server, serve

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.e2e

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}
SCREENSHOT_VIEWPORT = {"width": 1280, "height": 960}
# Each echoed word takes this long, so a reply streams visibly and a long one can be stopped.
ECHO_DELAY = "0.1"
SCREENSHOT_ENV = "M_PLAYGROUND_SCREENSHOT"
SCREENSHOT_QUESTION = "Give me three tips for writing clear commit messages."

REPLY = "[data-testid=message-assistant]"
LAST_REPLY = f"{REPLY} >> nth=-1"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """A headless Debian chromium driven by Playwright; fails (never skips) without one."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"chromium is not installed at {CHROMIUM}: run .ci/install-browser.sh "
            "(apt-get install chromium chromium-driver) to run the playground tests"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("Playwright's Python package is missing: pip install -e '.[dev]'")
    with sync_playwright() as playwright:
        # Playwright gives each launch a fresh temporary profile (--user-data-dir).
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def echo_server() -> Iterator[Server]:
    """``m serve tests/programs/echo.py`` with a per-word delay."""
    with serve(PROGRAMS / "echo.py", env={"ECHO_DELAY": ECHO_DELAY}) as server:
        yield server


def open_page(browser: Browser, url: str) -> tuple[Page, list[str]]:
    """A new page at ``url``, and the list its uncaught JavaScript errors go to."""
    page = browser.new_page(viewport=VIEWPORT)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url)
    page.wait_for_selector("#prompt")
    return page, errors


def send(page: Page, text: str) -> None:
    """Type ``text`` in the composer and press Enter."""
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")


def reply_text(page: Page) -> str:
    """The answer text of the newest assistant reply."""
    return page.locator(f"{LAST_REPLY} >> [data-testid=reply-content]").text_content() or ""


def reply_state(page: Page) -> str | None:
    """``waiting``, ``streaming``, ``done``, ``stopped`` or ``error`` for the newest reply."""
    return page.locator(LAST_REPLY).get_attribute("data-state")


def wait_for_state(page: Page, state: str, timeout: float = 15.0) -> None:
    """Wait until the newest reply reaches ``state``."""
    page.wait_for_function(
        """state => {
            const replies = document.querySelectorAll("[data-testid=message-assistant]");
            return replies.length > 0 && replies[replies.length - 1].dataset.state === state;
        }""",
        arg=state,
        timeout=timeout * 1000,
    )


def stat(page: Page, name: str) -> str:
    """One figure under the newest reply, e.g. ``stat-ttft``."""
    return page.locator(f"{LAST_REPLY} >> [data-testid={name}]").inner_text()


def in_flight(server: Server) -> float:
    """The server's count of requests being served, from ``/metrics``."""
    text = httpx.get(server.base_url + "/metrics", timeout=5).text
    found = re.search(r"^m_serve_requests_in_flight ([0-9.]+)$", text, re.MULTILINE)
    assert found, text
    return float(found.group(1))


def test_chat_streams_shows_figures_and_stops(browser: Browser, echo_server: Server) -> None:
    """A reply streams in with its figures; Stop ends a long one; the settings are sent."""
    page, js_errors = open_page(browser, echo_server.base_url + "/")
    assert page.inner_text("#model-name") == "echo"
    page.wait_for_selector("#server-dot.ok")

    # A reply streams: partial text shows before the final text.
    message = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
    send(page, message)
    assert page.locator("[data-testid=user-content]").last.inner_text() == message
    seen: list[str] = []
    deadline = time.monotonic() + 15
    while reply_state(page) != "done" and time.monotonic() < deadline:
        text = reply_text(page)
        if text and (not seen or seen[-1] != text):
            seen.append(text)
        time.sleep(0.03)
    assert reply_state(page) == "done"
    assert reply_text(page) == message
    partial = [text for text in seen if text != message]
    assert len(partial) >= 3, seen
    assert all(message.startswith(text) for text in partial), seen
    assert len(set(partial)) == len(partial)  # it grew, it never went back

    # Its figures: time to first token, speed, token counts, finish reason.
    assert re.fullmatch(r"TTFT \d+\.\d+ s", stat(page, "stat-ttft"))
    speed = float(re.fullmatch(r"(\d+\.\d) tok/s", stat(page, "stat-tps")).group(1))
    assert 2 < speed < 20  # 14 words at 0.1 s each
    assert stat(page, "stat-prompt-tokens") == "prompt 7"
    assert stat(page, "stat-completion-tokens") == "completion 14"
    assert stat(page, "stat-finish") == "finish stop"

    # A long reply is stopped mid-stream: it stops growing, the server cancels it.
    words = [f"w{i}" for i in range(300)]
    send(page, " ".join(words))
    page.wait_for_selector("#stop:visible")
    deadline = time.monotonic() + 15
    while len(reply_text(page).split()) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    page.click("#stop")
    wait_for_state(page, "stopped", timeout=5)
    stopped_at = reply_text(page)
    assert 5 <= len(stopped_at.split()) < 100
    assert " ".join(words).startswith(stopped_at)
    assert stat(page, "stat-finish") == "finish stopped"
    assert page.is_visible("#send") and not page.is_visible("#stop")
    deadline = time.monotonic() + 5
    while in_flight(echo_server) > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert in_flight(echo_server) == 0  # the 30 s generation was cancelled
    time.sleep(0.5)
    assert reply_text(page) == stopped_at

    # The page is usable again, and sends the settings: echo.py reports what it got.
    page.fill("#system-prompt", "Be brief.")
    page.fill("#temperature", "0.5")
    page.fill("#max-tokens", "64")
    page.fill("#seed", "42")
    page.fill("#requirements", "Be polite.\n\n  Use one sentence.  \n")
    send(page, "!args")
    wait_for_state(page, "done")
    args = json.loads(reply_text(page))
    assert args["roles"] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert args["requirements"] == ["Be polite.", "Use one sentence."]
    options = args["model_options"]
    assert options["temperature"] == 0.5
    assert 64 in options.values() and 42 in options.values()

    # "New chat" empties the conversation.
    page.click("#clear")
    assert page.locator(REPLY).count() == 0
    send(page, "!args")
    wait_for_state(page, "done")
    assert json.loads(reply_text(page))["roles"] == ["system", "user"]
    assert js_errors == []
    page.close()


def sse(*frames: object, newline: str = "\r\n") -> str:
    """An SSE body: each frame a JSON ``data:`` event, a raw string line, or ``[DONE]``."""
    lines = []
    for frame in frames:
        if isinstance(frame, str):
            lines.append(frame if frame.startswith(":") else f"data: {frame}")
        else:
            lines.append(f"data: {json.dumps(frame)}")
    return "".join(line + newline * (1 if line.startswith(":") else 2) for line in lines)


def chunk(delta: dict | None = None, finish: str | None = None, usage: dict | None = None) -> dict:
    """One ``chat.completion.chunk`` frame."""
    choices = [] if usage else [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "echo",
        "choices": choices,
        "usage": usage,
    }


def test_reasoning_tool_calls_and_error_frames(browser: Browser, echo_server: Server) -> None:
    """Stream shapes echo.py does not produce, answered by the browser itself."""
    page, js_errors = open_page(browser, echo_server.base_url + "/")
    bodies = [
        sse(
            chunk({"role": "assistant", "content": ""}),
            ": ping",
            chunk({"reasoning_content": "The user wants "}),
            chunk({"reasoning_content": "the weather."}),
            chunk({"content": "Let me **check**."}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
            chunk(finish="tool_calls"),
            chunk(usage={"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12}),
            "[DONE]",
        ),
        sse(
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Half"}),
            {
                "error": {
                    "message": "the program failed",
                    "type": "server_error",
                    "param": None,
                    "code": "internal_error",
                }
            },
            "[DONE]",
            newline="\n",
        ),
    ]
    page.route(
        "**/v1/chat/completions",
        lambda route: route.fulfill(
            status=200, content_type="text/event-stream", body=bodies.pop(0)
        ),
    )

    send(page, "weather?")
    wait_for_state(page, "done")
    reasoning = page.locator(f"{LAST_REPLY} >> [data-testid=reasoning]")
    assert reasoning.locator("[data-testid=reasoning-content]").text_content() == (
        "The user wants the weather."
    )
    assert reasoning.get_attribute("open") is None  # folded once the answer began
    assert reply_text(page) == "Let me check."
    assert page.locator(f"{LAST_REPLY} >> strong").inner_text() == "check"
    assert page.locator("[data-testid=tool-name]").inner_text() == "get_weather"
    arguments = page.locator("[data-testid=tool-arguments]").inner_text()
    assert json.loads(arguments) == {"city": "Paris"}
    assert stat(page, "stat-finish") == "finish tool_calls"
    assert stat(page, "stat-completion-tokens") == "completion 9"

    send(page, "again")
    wait_for_state(page, "error")
    assert reply_text(page) == "Half"
    error = page.locator(f"{LAST_REPLY} >> [data-testid=reply-error]").inner_text()
    assert "the program failed" in error
    assert page.is_visible("#send")
    assert js_errors == []
    page.close()


def test_api_key_is_asked_for_and_used(browser: Browser) -> None:
    """With ``--api-key`` the page asks for the key, refuses a wrong one, then chats."""
    with serve(PROGRAMS / "echo.py", "--api-key", "k") as server:
        page, js_errors = open_page(browser, server.base_url + "/")
        page.wait_for_selector("#key-panel:visible")
        page.fill("#api-key", "wrong")
        page.click("#save-key")
        page.wait_for_selector("#key-panel:visible")
        assert "refused" in page.inner_text("#key-message")

        page.fill("#api-key", "k")
        page.click("#save-key")
        page.wait_for_selector("#server-dot.ok")
        assert page.is_hidden("#key-panel")
        send(page, "hello with a key")
        wait_for_state(page, "done")
        assert reply_text(page) == "hello with a key"
        assert page.evaluate("localStorage.getItem('mellea.playground.apiKey')") == "k"
        assert js_errors == []
        page.close()


def test_no_playground_is_404() -> None:
    """``--no-playground``: no page and no assets, 404 in the OpenAI error shape."""
    with serve(PROGRAMS / "echo.py", "--no-playground") as server:
        for path in ("/", "/playground/app.js"):
            response = httpx.get(server.base_url + path, timeout=10)
            assert response.status_code == 404
            error = response.json()["error"]
            assert error["type"] == "not_found_error"
            assert set(error) == {"message", "type", "param", "code"}


@pytest.mark.model
@pytest.mark.skipif(
    not os.environ.get(SCREENSHOT_ENV), reason=f"set {SCREENSHOT_ENV}=PATH to regenerate"
)
def test_screenshot(browser: Browser) -> None:
    """Not a check: writes the README screenshot, a real default-model reply with figures."""
    target = ROOT / os.environ[SCREENSHOT_ENV]
    with serve(EXAMPLES / "hello.py") as server:
        page = browser.new_page(viewport=SCREENSHOT_VIEWPORT, device_scale_factor=1)
        page.goto(server.base_url + "/")
        page.wait_for_selector("#server-dot.ok")
        page.fill("#system-prompt", "You are a concise, friendly assistant.")
        page.fill("#temperature", "0.7")
        page.fill("#max-tokens", "256")
        page.fill("#seed", "7")
        send(page, SCREENSHOT_QUESTION)
        wait_for_state(page, "done", timeout=120)
        page.locator("#prompt").blur()
        page.screenshot(path=str(target))
        page.close()
