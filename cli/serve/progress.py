"""What the user sees while ``m serve`` starts: a live progress line for long steps."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


def install_progress() -> None:
    """Show the model loader's long steps (the first-start conversion) as a spinner line."""
    from mellea.engine.loader import set_step_hook

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

    set_step_hook(step)
