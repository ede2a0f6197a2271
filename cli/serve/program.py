"""Load a user's program file and call its ``serve()``, under the app's runtime.

The program is imported, and each of its calls runs, with the app's
:class:`~mellea.backends.runtime.Runtime` active, so ``mellea.start_session()``
(at module level or inside ``serve()``) shares that app's engines and settings.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from mellea.backends.runtime import Runtime
from mellea.serve.messages import ChatMessage
from mellea.serve.options import ServeArguments
from mellea.serve.unread_media import refuse_unread_media

OPTIONAL_PARAMETERS = ("requirements", "model_options", "format", "client_options")


class ProgramLoadError(Exception):
    """The program cannot be served; the message is one line meant for the user."""


@dataclass
class Program:
    """A loaded program and how its ``serve()`` (and ``serve_completion()``) want to be called."""

    path: Path
    module: Any
    serve: Callable[..., Any]
    is_async: bool
    accepts: frozenset[str]
    serve_completion: Callable[..., Any] | None = None
    completion_accepts: frozenset[str] = frozenset()
    runtime: Runtime | None = None  # None: the process's default runtime

    @classmethod
    def load(cls, path: str | Path, runtime: Runtime | None = None) -> Program:
        """Import ``path`` under a unique module name (with ``runtime`` active) and
        inspect its ``serve``."""
        path = Path(path).expanduser().resolve()
        if not path.is_file():
            raise ProgramLoadError(f"program file not found: {path}")
        with _active(runtime):
            module = _import(path)
        serve = getattr(module, "serve", None)
        if serve is None:
            raise ProgramLoadError(f"{path} defines no serve() function")
        if not callable(serve):
            raise ProgramLoadError(f"{path}: serve is a {type(serve).__name__}, not a function")
        completion = getattr(module, "serve_completion", None)
        if completion is not None and not callable(completion):
            raise ProgramLoadError(f"{path}: serve_completion is not a function")
        return cls(
            path,
            module,
            serve,
            _is_async(serve),
            _accepted(serve, OPTIONAL_PARAMETERS),
            completion,
            _accepted(completion, ("model_options",)) if completion else frozenset(),
            runtime,
        )

    async def call(self, args: ServeArguments) -> Any:
        """Call ``serve()`` with what it declares; sync programs run in a worker thread.

        Images or audio in the messages that ``serve()`` returned without reading are a
        400 naming the part (:mod:`mellea.serve.unread_media`).
        """
        candidates = {
            "requirements": args.requirements,
            "model_options": args.model_options,
            "format": args.format,
            "client_options": args.client_options,
        }
        kwargs = {name: value for name, value in candidates.items() if name in self.accepts}
        with _active(self.runtime):
            result = await _invoke(self.serve, args.messages, kwargs)
        await refuse_unread_media(args.messages, result)
        return result

    async def complete(self, prompt: str, model_options: dict[str, Any]) -> Any:
        """Serve one ``/v1/completions`` prompt.

        ``serve_completion(prompt, model_options)`` handles it when the program defines
        one; otherwise the prompt goes to ``serve()`` as a single user message.
        """
        if self.serve_completion is not None:
            kwargs = {"model_options": model_options} if self.completion_accepts else {}
            with _active(self.runtime):
                return await _invoke(self.serve_completion, prompt, kwargs)
        message = ChatMessage(role="user", content=prompt)
        return await self.call(ServeArguments([message], None, model_options))


def _active(runtime: Runtime | None) -> contextlib.AbstractContextManager[Any]:
    return runtime.active() if runtime is not None else contextlib.nullcontext()


async def _invoke(fn: Callable[..., Any], first: Any, kwargs: dict[str, Any]) -> Any:
    """Await an async function, or run a sync one in a worker thread (which inherits
    the caller's context variables, the active runtime among them)."""
    if _is_async(fn):
        return await fn(first, **kwargs)
    result = await anyio.to_thread.run_sync(functools.partial(fn, first, **kwargs))
    if inspect.isawaitable(result):
        result = await result
    return result


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def _accepted(fn: Callable[..., Any], names: tuple[str, ...]) -> frozenset[str]:
    """Which of ``names`` the function declares (all of them if it takes ``**kwargs``)."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return frozenset()
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    return frozenset(name for name in names if takes_any or name in parameters)


def _import(path: Path) -> Any:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    name = f"mellea_program_{_identifier(path.stem)}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ProgramLoadError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))  # the program's own modules stay importable
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        where = f"{exc.filename}:{exc.lineno}"
        line = (exc.text or "").strip()
        raise ProgramLoadError(
            f"{where}: SyntaxError: {exc.msg}" + (f"  ->  {line}" if line else "")
        ) from None
    except BaseException as exc:
        sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise ProgramLoadError(_describe(exc, path)) from None
    return module


def _describe(exc: BaseException, path: Path) -> str:
    """``file:line: ExcType: message  ->  source line``, at the program's own frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if Path(f.filename).resolve() == path]
    frame = own[-1] if own else (frames[-1] if frames else None)
    message = f"{type(exc).__name__}: {exc}"
    if frame is None:
        return f"{path}: {message}"
    line = (frame.line or "").strip()
    return f"{frame.filename}:{frame.lineno}: {message}" + (f"  ->  {line}" if line else "")


def _identifier(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text)
