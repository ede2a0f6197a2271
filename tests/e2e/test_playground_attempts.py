"""The playground shows a program's attempts and verdicts, folded under the answer.

Drives the page in headless chromium (see tests/e2e/test_playground.py) against the
scripted rejection-sampling program: attempt 1 fails a requirement, attempt 2 passes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.test_playground import (  # noqa: F401 - the browser fixture
    LAST_REPLY,
    browser,
    open_page,
    reply_text,
    send,
    wait_for_state,
)
from tests.programs.events_sampler import GREETING, REPLY
from tests.server import PROGRAMS, Server, serve

pytestmark = pytest.mark.e2e

FIRST = REPLY.format(n=0)
ACCEPTED = f"{GREETING} " + REPLY.format(n=1)


@pytest.fixture(scope="module")
def sampler() -> Iterator[Server]:
    with serve(PROGRAMS / "events_sampler.py") as server:
        yield server


def test_attempts_are_shown_folded_under_the_answer(browser, sampler) -> None:  # noqa: F811
    page, js_errors = open_page(browser, sampler.base_url + "/")
    page.wait_for_selector("#server-dot.ok")
    about = page.locator("[data-testid=program-about]")
    assert about.is_visible()
    assert page.inner_text("[data-testid=program-doc]").startswith("Test program:")
    assert page.inner_text("[data-testid=program-params]") == "serve() takes: input, model_options"

    send(page, "sampled in the browser")
    wait_for_state(page, "done")
    assert reply_text(page) == ACCEPTED

    panel = page.locator(f"{LAST_REPLY} >> [data-testid=attempts]")
    assert panel.get_attribute("open") is None  # folded
    summary = page.inner_text(f"{LAST_REPLY} >> [data-testid=attempts-summary]")
    assert summary == "2 attempts · requirements met · showing attempt 2"
    page.click(f"{LAST_REPLY} >> [data-testid=attempts-summary]")
    attempts = page.locator(f"{LAST_REPLY} >> [data-testid=attempt]")
    assert attempts.count() == 2
    texts = page.locator(f"{LAST_REPLY} >> [data-testid=attempt-text]").all_inner_texts()
    assert texts == [FIRST, ACCEPTED]
    assert attempts.nth(0).get_attribute("data-chosen") is None
    assert attempts.nth(1).get_attribute("data-chosen") == "true"
    first = attempts.nth(0).locator("[data-testid=verdict]")
    assert first.nth(0).get_attribute("data-passed") == "false"
    assert first.nth(0).inner_text() == (f"✗ Start with '{GREETING}' — checked the first words")
    assert first.nth(1).inner_text() == "✓ Be polite — yes"
    second = attempts.nth(1).locator("[data-testid=verdict]")
    assert [v.get_attribute("data-passed") for v in second.all()] == ["true", "true"]
    assert js_errors == []
    page.close()
