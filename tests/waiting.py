"""Waiting in a test for an event: its condition polled until a deadline.

A test about an event waits for the event itself, never for a fixed time: the condition
is checked every few milliseconds, so the test goes on as soon as it holds, and fails,
saying what it waited for, if it does not hold by the deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

POLL_SECONDS = 0.005


def wait_for(condition: Callable[[], T], what: str, timeout: float = 10.0) -> T:
    """Block until ``condition()`` is truthy and return its value; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout} s for {what}")
        time.sleep(POLL_SECONDS)
    return value


async def until(condition: Callable[[], T], what: str, timeout: float = 10.0) -> T:
    """In a coroutine, :func:`wait_for` without blocking the event loop."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout} s for {what}")
        await asyncio.sleep(POLL_SECONDS)
    return value


async def until_awaited(check: Callable[[], Awaitable[T]], what: str, timeout: float = 10.0) -> T:
    """:func:`until` for a condition that is itself a coroutine (e.g. an HTTP request)."""
    deadline = time.monotonic() + timeout
    while not (value := await check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout} s for {what}")
        await asyncio.sleep(POLL_SECONDS)
    return value
