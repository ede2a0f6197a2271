"""``--reload``: re-import the program when its files change, keeping the loaded model.

The program is imported again in the same process, so engines already loaded by
``start_session()`` stay in memory and the next request uses the new code at once.
A program that fails to import is reported and the previous version keeps serving.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

from watchfiles import PythonFilter, awatch

from cli.serve.program import Program, ProgramLoadError

log = logging.getLogger("mellea.serve")


async def watch_program(state: Any, program_path: Path, stop: asyncio.Event) -> None:
    """Reload ``state.program`` whenever a ``.py`` file under the program's folder changes."""
    folder = program_path.parent
    async for changes in awatch(folder, watch_filter=PythonFilter(), stop_event=stop):
        names = ", ".join(sorted({Path(path).name for _, path in changes}))
        log.info("reloading the program: %s changed", names)
        forget_modules_under(folder)
        try:
            runtime = state.program.runtime  # the same engines and settings
            state.program = await asyncio.to_thread(Program.load, program_path, runtime)
        except ProgramLoadError as exc:
            log.error("reload failed, still serving the previous version: %s", exc)
        else:
            log.info("program reloaded")


def forget_modules_under(folder: Path) -> None:
    """Drop the program's own helper modules from ``sys.modules`` so they re-import too."""
    folder = folder.resolve()
    prefix = Path(sys.prefix).resolve()
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file).resolve()
        if path.is_relative_to(folder) and not path.is_relative_to(prefix):
            del sys.modules[name]
