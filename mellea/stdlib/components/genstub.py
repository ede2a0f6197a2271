"""``@generative``: a typed Python function stub the model implements.

The decorated function's name, signature and docstring become the instruction,
its arguments are listed as given, and its return annotation becomes the output
format: the model answers with JSON ``{"result": ...}`` matching a pydantic model
built from the annotation (the local engine enforces it by constrained decoding,
the ``openai`` backend asks for it as ``response_format``), and the call returns
the parsed value. Call it with a session first, as upstream does::

    @generative
    def classify(text: str) -> Literal["positive", "negative"]:
        \"\"\"Classify the sentiment of text.\"\"\"

    label = classify(m, text="I love it")  # or: await an async def stub
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Generic, ParamSpec, TypeVar, get_type_hints

from pydantic import Field, create_model

from mellea.core._sync import run_sync
from mellea.core.base import CBlock, Component, Context, Span
from mellea.core.requirement import Requirement, ValidationResult, as_requirement
from mellea.core.thunk import ModelOutputThunk
from mellea.stdlib.session import MelleaSession

P = ParamSpec("P")
R = TypeVar("R")


class PreconditionException(Exception):
    """The arguments did not satisfy the stub's precondition requirements."""

    def __init__(self, message: str, validation_results: list[ValidationResult]) -> None:
        super().__init__(message)
        self.validation = validation_results


@dataclass
class _Extracted:
    m: Any = None
    context: Context | None = None
    backend: Any = None
    precondition_requirements: list[Requirement | str] | None = None
    requirements: list[Requirement | str] | None = None
    strategy: Any = None
    model_options: dict[str, Any] | None = None
    f_kwargs: dict[str, Any] = field(default_factory=dict)


_RESERVED = {f.name for f in fields(_Extracted)} - {"f_kwargs"}


def create_response_format(func: Callable[..., Any]) -> type:
    """A pydantic model ``{"result": <return annotation>}`` for ``func``'s output."""
    try:
        return_type = get_type_hints(func).get("return", Any)
    except Exception:  # an annotation only importable under TYPE_CHECKING
        return_type = Any
    name = func.__name__.replace("_", " ").title().replace(" ", "") + "Response"
    return create_model(name, result=(return_type, Field(description=f"Result of {func.__name__}")))


def describe_function(func: Callable[..., Any]) -> dict[str, Any]:
    """The function's name, signature and docstring, as the prompt shows them."""
    try:  # show postponed annotations (``from __future__ import annotations``) unquoted
        signature = inspect.signature(func, eval_str=True)
    except Exception:
        signature = inspect.signature(func)
    return {
        "name": func.__name__,
        "signature": str(signature),
        "docstring": inspect.getdoc(func),
    }


class GenerativeStub(Component[R], Generic[P, R]):
    """A function whose body the model supplies; see the module documentation."""

    def __init__(self, func: Callable[P, R]) -> None:
        clashing = sorted(set(inspect.signature(func).parameters) & _RESERVED)
        if clashing:
            raise ValueError(f"a generative function cannot have parameters named {clashing}")
        self._func = func
        self._function_dict = describe_function(func)
        self._response_model = create_response_format(func)
        self._arguments: dict[str, Any] = {}
        self.requirements: list[Requirement] = []
        self.precondition_requirements: list[Requirement] = []
        functools.update_wrapper(self, func)

    # -- the component -------------------------------------------------------

    def arguments_text(self) -> str:
        """The bound arguments, one per line (strings quoted)."""
        lines = []
        for name, value in self._arguments.items():
            shown = json.dumps(value) if isinstance(value, str) else repr(value)
            lines.append(f"- {name} = {shown}")
        return "\n".join(lines)

    def parts(self) -> list[Span]:
        """The arguments block and the requirements' descriptions."""
        return [CBlock(self.arguments_text())] + [
            CBlock(r.description) for r in self.requirements if r.description
        ]

    def format_for_llm(self) -> str:
        """The instruction the model receives."""
        info = self._function_dict
        doc = f'\n    """{info["docstring"]}"""' if info["docstring"] else ""
        text = (
            "Act as the Python function below: work out the value it returns for the "
            'given arguments, and answer only with JSON of the form {"result": <value>}.\n\n'
            f"def {info['name']}{info['signature']}:{doc}\n"
        )
        if self._arguments:
            text += f"\nArguments:\n{self.arguments_text()}\n"
        shown = [r.description for r in self.requirements if r.description and not r.check_only]
        if shown:
            text += "\nRequirements:\n" + "\n".join(f"- {d}" for d in shown) + "\n"
        return text

    def _parse(self, computed: ModelOutputThunk) -> R:
        response = self._response_model.model_validate_json(computed.value or "")  # type: ignore[attr-defined]
        return response.result

    # -- calling -------------------------------------------------------------

    def _prepare(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, _Extracted]:
        """Split mellea's arguments from the function's and bind a copy of the stub."""
        extracted = _extract(args, kwargs)
        try:
            bound = inspect.signature(self._func).bind(**extracted.f_kwargs)
        except TypeError as exc:
            raise TypeError(f"{self._func.__name__}: {exc}") from None
        bound.apply_defaults()
        stub = copy.copy(self)
        stub._arguments = dict(bound.arguments)
        stub.requirements = [as_requirement(r) for r in extracted.requirements or []]
        stub.precondition_requirements = [
            as_requirement(r) for r in extracted.precondition_requirements or []
        ]
        return stub, extracted

    async def _arun(self, stub: GenerativeStub[P, R], extracted: _Extracted) -> Any:
        session = extracted.m or MelleaSession(extracted.backend, ctx=extracted.context)
        if stub.precondition_requirements:
            results = await session.avalidate(
                stub.precondition_requirements,
                output=ModelOutputThunk(stub.arguments_text()),
                model_options=extracted.model_options,
            )
            if not all(results):
                raise PreconditionException(
                    "the arguments did not satisfy the precondition requirements", results
                )
        thunk = await session.aact(
            stub,
            requirements=stub.requirements if extracted.strategy is not None else None,
            strategy=extracted.strategy,
            format=self._response_model,
            model_options=extracted.model_options,
            await_result=True,
        )
        result = thunk.parsed_repr
        return result if extracted.m is not None else (result, session.ctx)


class SyncGenerativeStub(GenerativeStub[P, R]):
    """A generative function called synchronously: ``fn(m, arg=...)`` returns the value."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        stub, extracted = self._prepare(args, kwargs)
        return run_sync(self._arun(stub, extracted))


class AsyncGenerativeStub(GenerativeStub[P, R]):
    """A generative ``async def``: ``await fn(m, arg=...)`` returns the value."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        stub, extracted = self._prepare(args, kwargs)
        return self._arun(stub, extracted)


def generative(func: Callable[P, R]) -> GenerativeStub[P, R]:
    """Turn a typed function stub into one the model implements (see the module doc)."""
    if inspect.iscoroutinefunction(func):
        return AsyncGenerativeStub(func)
    return SyncGenerativeStub(func)


def _extract(args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Extracted:
    """Read ``(m, ...)`` or ``(context, backend, ...)`` and mellea's keyword options."""
    kwargs = dict(kwargs)
    extracted = _Extracted()
    positional = list(args)
    if positional and isinstance(positional[0], MelleaSession):
        extracted.m = positional.pop(0)
    elif positional and isinstance(positional[0], Context):
        extracted.context = positional.pop(0)
        if positional:
            extracted.backend = positional.pop(0)
    extracted.m = kwargs.pop("m", extracted.m)
    extracted.context = kwargs.pop("context", extracted.context)
    extracted.backend = kwargs.pop("backend", extracted.backend)
    names = ("precondition_requirements", "requirements", "strategy", "model_options")
    for name in names:
        if positional:
            setattr(extracted, name, positional.pop(0))
        if name in kwargs:
            setattr(extracted, name, kwargs.pop(name))
    if positional:
        raise TypeError("pass a generative function's own arguments by keyword")
    if extracted.m is None and (extracted.context is None or extracted.backend is None):
        raise TypeError(
            "a generative function needs a session first (fn(m, ...)), "
            "or a context and a backend (fn(context, backend, ...))"
        )
    extracted.f_kwargs = kwargs
    return extracted


# Upstream's former names (its ``genslot`` modules re-export them from here).
AsyncGenerativeSlot = AsyncGenerativeStub
GenerativeSlot = GenerativeStub
SyncGenerativeSlot = SyncGenerativeStub

__all__ = [
    "AsyncGenerativeSlot",
    "AsyncGenerativeStub",
    "GenerativeSlot",
    "GenerativeStub",
    "PreconditionException",
    "SyncGenerativeSlot",
    "SyncGenerativeStub",
    "create_response_format",
    "generative",
]
