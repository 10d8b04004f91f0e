"""Waiting on the app in pilot tests: on a condition, never on the clock (a fixed sleep races
the app on a busy machine)."""

from __future__ import annotations

import time
from collections.abc import Callable


async def until(pilot, ready: Callable[[], bool], deadline_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    """Let the app run until ``ready()`` holds; fail after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while not ready():
        assert time.monotonic() < end, "the app never got there"
        await pilot.pause()
