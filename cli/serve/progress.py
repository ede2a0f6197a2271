"""What the user sees while ``m serve`` starts: a live progress line for long steps."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from mellea.backends.runtime import StepHook


def progress_display() -> StepHook:
    """A step display for the runtime: the loader's long steps (the first-start
    conversion) as a spinner line on stderr."""
    console = Console(stderr=True)

    @contextlib.contextmanager
    def step(description: str) -> Iterator[None]:
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress:
            task = progress.add_task(description, total=1)
            yield
            progress.update(task, completed=1)

    return step
