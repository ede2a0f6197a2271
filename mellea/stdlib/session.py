"""MelleaSession: instruct a model, check its output against requirements, keep context."""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from mellea.backends.base import Backend
from mellea.core._sync import run_sync
from mellea.core.base import CBlock, Component, GenerateLog, Span, span_text
from mellea.core.content import user_content
from mellea.core.model_options import ModelOption, varied_options
from mellea.core.requirement import Requirement, ValidationResult, as_requirement
from mellea.core.sampling import SamplingResult
from mellea.core.thunk import ModelOutputThunk
from mellea.core.trace import current_trace
from mellea.formatters import chat_dicts
from mellea.plugins import hook_points
from mellea.plugins.hook_points import ComponentRun
from mellea.plugins.manager import deregister_session_plugins, has_plugins
from mellea.plugins.registry import register
from mellea.stdlib.components.chat import Message
from mellea.stdlib.components.instruction import Instruction, render_instruction, substitute
from mellea.stdlib.components.intrinsic.intrinsic import Intrinsic
from mellea.stdlib.components.intrinsic.run import run_intrinsic
from mellea.stdlib.context import Context, SimpleContext
from mellea.stdlib.mobject_calls import aquery, atransform
from mellea.stdlib.requirements.adapter_check import adapter_validate
from mellea.stdlib.sampling.base import (
    Generate,
    RejectionSamplingStrategy,
    Retry,
    SamplingStrategy,
)
from mellea.stdlib.start_backend import start_backend
from mellea.stdlib.token_limit import (
    DEFAULT_MAX_NEW_TOKENS as DEFAULT_MAX_NEW_TOKENS,  # docs/library.md names it here
)
from mellea.stdlib.token_limit import default_max_new_tokens, with_default_limit


class _Default:
    """Marks an argument the caller did not pass."""

    def __repr__(self) -> str:
        return "<default>"


DEFAULT: Any = _Default()
RETRY_TEMPERATURE = 0.7
JUDGE_OPTIONS = {ModelOption.TEMPERATURE: 0.0, ModelOption.MAX_NEW_TOKENS: 8}


def start_session(
    backend_name: str = "local",
    model_id: Any = None,
    ctx: Context | None = None,
    *,
    context_type: Literal["simple", "chat"] | None = None,
    model_options: dict[str, Any] | None = None,
    plugins: list[Any] | None = None,
    **backend_kwargs: Any,
) -> MelleaSession:
    """Start a session on a backend: ``local`` (default; also ``hf``), ``openai`` or ``ollama``.

    With no arguments the session runs the bundled SmolLM2-135M-Instruct on the
    local engine, offline. The local model is loaded once per process and shared by
    every session that names it. ``model_id`` is a name or a
    :class:`~mellea.backends.model_ids.ModelIdentifier`. ``context_type`` (``"simple"``
    or ``"chat"``) is shorthand for ``ctx``. ``plugins`` (hook functions, ``Plugin``
    instances, ``PluginSet`` s) fire while the session lives, until its cleanup.
    """
    session_id = str(uuid.uuid4())
    if has_plugins():
        context_name = type(ctx).__name__ if ctx is not None else _context_name(context_type)
        model_id, model_options = run_sync(
            hook_points.session_pre_init(
                session_id, backend_name, model_id, model_options, context_name
            )
        )
    ctx, backend = start_backend(
        backend_name,
        model_id,
        ctx,
        context_type=context_type,
        model_options=model_options,
        **backend_kwargs,
    )
    session = MelleaSession(backend, ctx=ctx, model_options=model_options, session_id=session_id)
    if plugins:
        register(plugins, session_id=session.id)
    if has_plugins():
        run_sync(hook_points.session_post_init(session))
    return session


def _context_name(context_type: str | None) -> str:
    return "ChatContext" if context_type == "chat" else "SimpleContext"


class MelleaSession:
    """A backend plus a context. Sync methods wrap their ``a``-prefixed async twins."""

    def __init__(
        self,
        backend: Backend,
        ctx: Context | None = None,
        model_options: dict[str, Any] | None = None,
        *,
        session_id: str | None = None,
    ) -> None:
        self.id = session_id or str(uuid.uuid4())
        self.backend = backend
        self.ctx: Context = ctx if ctx is not None else SimpleContext()
        self.model_options: dict[str, Any] = dict(model_options or {})
        self._default_max_new_tokens = default_max_new_tokens(backend)
        self._interaction_count = 0  # turns committed since the last reset (for plugins)

    def __enter__(self) -> MelleaSession:
        return self

    def __exit__(self, exc_type: object, exc_val: BaseException | None, tb: object) -> None:
        self.cleanup(exception=exc_val)

    def reset(self) -> None:
        """Forget the conversation: an empty context of the same kind and settings."""
        if has_plugins():
            run_sync(hook_points.session_reset(self))
        self.ctx = self.ctx.new_instance()
        self._interaction_count = 0

    def cleanup(self, *, exception: BaseException | None = None, **kwargs: Any) -> None:
        """End the session: its plugins hear of it and are unregistered, and the
        conversation is forgotten (upstream also releases backend resources)."""
        del kwargs
        if has_plugins():
            run_sync(hook_points.session_cleanup(self, self._interaction_count, exception))
            deregister_session_plugins(self.id)
        self.ctx = self.ctx.new_instance()
        self._interaction_count = 0

    def clone(self) -> MelleaSession:
        """A session on the same backend whose context starts where this one is."""
        return MelleaSession(self.backend, self.ctx, self.model_options)

    # -- instruct --------------------------------------------------------------

    def instruct(self, description: str, **kwargs: Any) -> ModelOutputThunk | SamplingResult:
        """Run an instruction to completion; see :meth:`ainstruct` for the arguments."""
        kwargs["await_result"] = True
        return run_sync(self.ainstruct(description, **kwargs))

    async def ainstruct(
        self,
        description: str,
        *,
        requirements: list[Requirement | str] | None = None,
        strategy: SamplingStrategy | None = DEFAULT,
        format: type | None = None,
        model_options: dict[str, Any] | None = None,
        return_sampling_results: bool = False,
        user_variables: dict[str, str] | None = None,
        grounding_context: dict[str, str] | None = None,
        icl_examples: list[str] | None = None,
        prefix: str | None = None,
        output_prefix: str | None = None,
        images: list[Any] | None = None,
        tool_calls: bool = False,
        await_result: bool = False,
        audio: list[Any] | None = None,
    ) -> ModelOutputThunk | SamplingResult:
        """Ask the model to follow ``description``, checking ``requirements``.

        As upstream: the default strategy is rejection sampling with two attempts,
        and its result is computed. With ``strategy=None`` a single generation is
        made (requirements are shown to the model, not checked), and it comes back
        uncomputed, for the caller to stream, unless ``await_result=True``.
        ``return_sampling_results=True`` returns the :class:`SamplingResult`.
        ``images`` (image blocks, PIL images, URLs) and ``audio`` (audio blocks) go with
        the instruction as content parts; a backend whose model reads text only refuses them.
        """
        reqs = [as_requirement(r) for r in requirements or []]
        action = Instruction(
            description,
            reqs,
            icl_examples,
            grounding_context,
            user_variables,
            prefix,
            output_prefix,
            images=images,
            audio=audio,
        )
        text = action.text
        options = self._call_options(model_options)
        if strategy is DEFAULT:
            strategy = RejectionSamplingStrategy(loop_budget=2)
        run = ComponentRun(action, reqs, options, format, strategy, tool_calls, self.id)
        run = await hook_points.component_pre_execute(run, self.ctx, self.backend)
        messages = self._messages_for(user_content(text, images, audio), run.model_options)
        return await self._run_component(run, messages, return_sampling_results, await_result)

    async def _run_component(
        self,
        run: ComponentRun,
        messages: list[dict[str, Any]],
        return_sampling_results: bool,
        await_result: bool,
    ) -> ModelOutputThunk | SamplingResult:
        """Generate and sample ``run``'s action, inside the component hooks."""
        before = self.ctx
        try:
            generate = self._generator(
                messages, run.model_options, run.format, run.tool_calls, run.action
            )
            result = await self._sample(
                run.action,
                generate,
                run.requirements,
                run.strategy,
                return_sampling_results,
                await_result,
            )
        except Exception as exc:
            await hook_points.component_post_error(run, self.backend, exc, before)
            raise
        sampling = result if isinstance(result, SamplingResult) else None
        thunk = sampling.result if sampling is not None else result
        await hook_points.component_post_success(
            run, self.backend, thunk, before, self.ctx, sampling
        )
        return result

    async def _sample(
        self,
        action: Span,
        generate: Generate,
        reqs: list[Requirement],
        strategy: SamplingStrategy | None,
        return_sampling_results: bool,
        await_result: bool,
    ) -> ModelOutputThunk | SamplingResult:
        """Run ``generate`` under ``strategy``, record the turn and shape the result.

        Each model call, attempt and verdict is reported to the request's program trace
        (:mod:`mellea.core.trace`) when the server records one.
        """
        trace = current_trace()
        sampling = strategy is not None and (
            bool(reqs) or getattr(strategy, "samples_without_requirements", False)
        )
        run = trace.sampling_started() if trace is not None and sampling else None
        model = getattr(self.backend, "model_id", None)

        async def traced(attempt: int, retry: Retry | None = None) -> ModelOutputThunk:
            thunk = await generate(attempt, retry)
            if trace is not None:
                if sampling:
                    trace.attempt_started(attempt, thunk, model, run)
                else:
                    trace.model_call(thunk, "generate", model=model)
            return thunk

        traced.__dict__.update(getattr(generate, "__dict__", {}))  # the request, for strategies

        if not sampling:
            thunk = await traced(0)
            self._record(action, thunk)
            if await_result or strategy is not None or return_sampling_results:
                await thunk.avalue()
                _parse_into(action, thunk)
            if return_sampling_results:
                return SamplingResult(0, True, [thunk], [[]])
            return thunk

        async def validate(
            thunk: ModelOutputThunk, to_check: list[Requirement]
        ) -> list[tuple[Requirement, ValidationResult]]:
            ctx = self.ctx.add(action).add(thunk)

            async def check(items: list[Requirement]) -> list[ValidationResult]:
                results = []
                for r in items:
                    began = time.time_ns() if trace is not None else None
                    results.append(await self._validate_one(r, ctx))
                    if trace is not None:
                        trace.requirement_checked(thunk, r, results[-1], began)
                return results

            checked, results = await hook_points.validate(
                to_check, check, target=thunk, context=ctx, backend=self.backend, session_id=self.id
            )
            return list(zip(checked, results, strict=False))

        assert strategy is not None
        result = await hook_points.sample(
            strategy,
            traced,
            validate,
            reqs,
            action=action,
            context=self.ctx,
            backend=self.backend,
            session_id=self.id,
        )
        if trace is not None:
            trace.sampled(result, run)
        _parse_into(action, result.result)
        if not result.sample_contexts:
            base = self.ctx.add(action)
            result.sample_contexts = [base.add(g) for g in result.sample_generations]
        self._record(action, result.result)
        return result if return_sampling_results else result.result

    # -- act -------------------------------------------------------------------

    def act(self, action: Component | CBlock, **kwargs: Any) -> ModelOutputThunk | SamplingResult:
        """Run any component (or text block) to completion; see :meth:`aact`."""
        kwargs["await_result"] = True
        return run_sync(self.aact(action, **kwargs))

    async def aact(
        self,
        action: Component | CBlock,
        *,
        requirements: list[Requirement | str] | None = None,
        strategy: SamplingStrategy | None = None,
        return_sampling_results: bool = False,
        format: type | None = None,
        model_options: dict[str, Any] | None = None,
        tool_calls: bool = False,
        await_result: bool = False,
    ) -> ModelOutputThunk | SamplingResult:
        """Send ``action`` as one user turn; the thunk's ``parsed_repr`` is ``action.parse()``'s.

        Without a strategy, ``requirements`` cannot be checked and are refused, as
        upstream does; the thunk comes back uncomputed unless ``await_result=True``.
        """
        if strategy is None and requirements:
            raise ValueError("requirements passed to act need a strategy to check them")
        if return_sampling_results and strategy is None:
            raise ValueError("return_sampling_results=True needs a strategy")
        reqs = [as_requirement(r) for r in requirements or []]
        options = self._call_options(model_options)
        run = ComponentRun(action, reqs, options, format, strategy, tool_calls, self.id)
        run = await hook_points.component_pre_execute(run, self.ctx, self.backend)
        if _is_intrinsic(action):
            thunk = await self._run_intrinsic(run)
            return SamplingResult(0, True, [thunk], [[]]) if return_sampling_results else thunk
        messages = self._messages_for(self._render(action), run.model_options)
        return await self._run_component(run, messages, return_sampling_results, await_result)

    # -- query / transform (MObjects; see mellea.stdlib.mobject_calls) ----------

    def query(self, obj: Any, query: str, **kwargs: Any) -> ModelOutputThunk:
        """Ask ``query`` about ``obj`` (mified if needed); the answer, computed."""
        kwargs["await_result"] = True
        return run_sync(self.aquery(obj, query, **kwargs))

    async def aquery(self, obj: Any, query: str, **kwargs: Any) -> ModelOutputThunk:
        """Async :meth:`query` (uncomputed unless ``await_result=True``)."""
        return await aquery(self, obj, query, **kwargs)

    def transform(self, obj: Any, transformation: str, **kwargs: Any) -> Any:
        """Ask for ``transformation`` of ``obj``: a called tool's result, else the answer."""
        return run_sync(self.atransform(obj, transformation, **kwargs))

    async def atransform(self, obj: Any, transformation: str, **kwargs: Any) -> Any:
        """Async :meth:`transform`."""
        return await atransform(self, obj, transformation, **kwargs)

    # -- chat ------------------------------------------------------------------

    def chat(self, content: str, role: str = "user", **kwargs: Any) -> Message:
        """Send one chat turn and return the model's reply as a :class:`Message`."""
        return run_sync(self.achat(content, role, **kwargs))

    async def achat(
        self,
        content: str,
        role: str = "user",
        *,
        format: type | None = None,
        model_options: dict[str, Any] | None = None,
        user_variables: dict[str, str] | None = None,
        tool_calls: bool = False,
        documents: list[Any] | None = None,
        images: list[Any] | None = None,
        audio: list[Any] | None = None,
    ) -> Message:
        """Async :meth:`chat`; ``documents`` (texts or ``Document`` s) follow the content,
        ``images`` and ``audio`` go with it as for :meth:`ainstruct`."""
        if user_variables:
            content = substitute(content, user_variables)
        options = self._call_options(model_options)
        message = Message(role, content, documents=documents)  # type: ignore[arg-type]
        run = ComponentRun(message, [], options, format, None, tool_calls, self.id)
        run = await hook_points.component_pre_execute(run, self.ctx, self.backend)
        messages = self._messages_for(
            user_content(message.text, images, audio), run.model_options, role=role
        )
        before = self.ctx
        try:
            thunk = await hook_points.generate(
                self.backend,
                messages,
                action=message,
                context=self.ctx,
                model_options=run.model_options,
                format=run.format,
                tool_calls=run.tool_calls,
                session_id=self.id,
            )
            thunk._generate_log = GenerateLog(prompt=messages, model_options=run.model_options)  # type: ignore[attr-defined]
            trace = current_trace()
            if trace is not None:
                trace.model_call(thunk, "chat", model=getattr(self.backend, "model_id", None))
            reply = await thunk.avalue()
        except Exception as exc:
            await hook_points.component_post_error(run, self.backend, exc, before)
            raise
        self._record(message, thunk)
        await hook_points.component_post_success(run, self.backend, thunk, before, self.ctx)
        return Message("assistant", reply, thunk)

    # -- validate --------------------------------------------------------------

    def validate(
        self, reqs: Requirement | str | list[Requirement | str], **kwargs: Any
    ) -> list[ValidationResult]:
        """Check requirements against ``output`` (default: the last output in context)."""
        return run_sync(self.avalidate(reqs, **kwargs))

    async def avalidate(
        self,
        reqs: Requirement | str | list[Requirement | str],
        *,
        output: ModelOutputThunk | str | None = None,
        format: type | None = None,
        model_options: dict[str, Any] | None = None,
        generate_logs: list[GenerateLog] | None = None,
    ) -> list[ValidationResult]:
        """Async :meth:`validate`; ``generate_logs`` (upstream's) receives a
        ``GenerateLog`` (prompt, result) for each model or adapter call the checks made."""
        del format
        items = reqs if isinstance(reqs, list) else [reqs]
        ctx = self.ctx
        if output is not None:
            if isinstance(output, CBlock):
                output = output.value or ""
            thunk = output if isinstance(output, ModelOutputThunk) else ModelOutputThunk(output)
            ctx = ctx.add(thunk)

        async def check(reqs: list[Requirement]) -> list[ValidationResult]:
            return [await self._validate_one(r, ctx) for r in reqs]

        _, results = await hook_points.validate(
            [as_requirement(r) for r in items],
            check,
            target=output,
            context=ctx,
            backend=self.backend,
            model_options=model_options,
            session_id=self.id,
        )
        if generate_logs is not None:
            for result in results:
                log = getattr(result.thunk, "_generate_log", None)
                if isinstance(log, GenerateLog):
                    generate_logs.append(log)
        return results

    async def _validate_one(self, requirement: Requirement, ctx: Context) -> ValidationResult:
        if type(requirement).validate is not Requirement.validate:  # a subclass's own check
            return await requirement.validate(self.backend, ctx)
        if requirement.validation_fn is not None:
            verdict = requirement.validation_fn(ctx)
            if isinstance(verdict, ValidationResult):
                return verdict
            return ValidationResult(bool(verdict))
        routed = await self._adapter_validate(requirement, ctx)
        if routed is not None:
            return routed
        # No function and no adapter: ask the model itself to judge the output.
        output = ctx.last_output()
        text = output.value if output is not None and output.value is not None else ""
        question = requirement.judge_prompt(text)
        sent = [{"role": "user", "content": question}]
        judge = await hook_points.generate(
            self.backend,
            sent,
            action=requirement,
            context=ctx,
            model_options=dict(JUDGE_OPTIONS),
            session_id=self.id,
        )
        judge._generate_log = GenerateLog(  # type: ignore[attr-defined]
            prompt=sent, model_options=dict(JUDGE_OPTIONS), action=requirement, result=judge
        )
        trace = current_trace()
        if trace is not None:
            trace.judged(judge, requirement, getattr(self.backend, "model_id", None), output)
        answer = await judge.avalue()
        # an adapter's requirement falls back here with a reader for the judge's words
        to_bool = getattr(requirement, "judge_output_to_bool", requirement.output_to_bool)
        return ValidationResult(
            to_bool(answer),
            reason=answer,
            thunk=judge,
            context=ctx.add(requirement).add(judge),  # upstream's validation context
        )

    async def _adapter_validate(
        self, requirement: Requirement, ctx: Context
    ) -> ValidationResult | None:
        """The verdict of the backend's checking adapter, when one checks ``requirement``
        (see :mod:`mellea.stdlib.requirements.adapter_check`)."""

        async def generate(messages: list[dict[str, Any]], options: dict[str, Any]) -> Any:
            judge = await hook_points.generate(
                self.backend,
                messages,
                action=requirement,
                context=ctx,
                model_options=options,
                session_id=self.id,
            )
            judge._generate_log = GenerateLog(  # type: ignore[attr-defined]
                prompt=messages, model_options=options, action=requirement, result=judge
            )
            trace = current_trace()
            if trace is not None:
                adapter = options.get(ModelOption.ADAPTER)
                model = adapter or getattr(self.backend, "model_id", None)
                trace.judged(judge, requirement, model, ctx.last_output())
            return judge

        routed = await adapter_validate(self.backend, requirement, ctx, generate)
        return routed[0] if routed is not None else None

    async def _run_intrinsic(self, run: ComponentRun) -> ModelOutputThunk:
        """An ``Intrinsic`` action: its adapter's result, recorded as one turn."""
        before = self.ctx

        async def generate(messages: list[dict[str, Any]], options: dict[str, Any]) -> Any:
            raw = await hook_points.generate(
                self.backend,
                messages,
                action=run.action,
                context=before,
                model_options=options,
                session_id=self.id,
            )
            raw._generate_log = GenerateLog(prompt=messages, model_options=options)  # type: ignore[attr-defined]
            trace = current_trace()
            if trace is not None:
                model = options.get(ModelOption.ADAPTER) or getattr(self.backend, "model_id", None)
                trace.model_call(raw, "generate", model=model)
            return raw

        try:
            thunk = await run_intrinsic(
                self.backend, run.action, before, run.model_options, generate
            )
        except Exception as exc:
            await hook_points.component_post_error(run, self.backend, exc, before)
            raise
        self._record(run.action, thunk)
        _parse_into(run.action, thunk)
        await hook_points.component_post_success(run, self.backend, thunk, before, self.ctx, None)
        return thunk

    # -- helpers ---------------------------------------------------------------

    def _call_options(self, model_options: dict[str, Any] | None) -> dict[str, Any]:
        """The session's options updated by the call's, with the local default token limit."""
        options = ModelOption.merge_model_options(self.model_options, model_options)
        return with_default_limit(options, self._default_max_new_tokens)

    def _messages_for(
        self, text: str | list[dict[str, Any]], options: dict[str, Any], role: str = "user"
    ) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        system = options.get(ModelOption.SYSTEM_PROMPT)
        if system:
            messages.append({"role": "system", "content": system})
        messages.extend(chat_dicts(self.ctx.view_for_generation() or []))
        messages.append({"role": role, "content": text})
        return messages

    def _generator(
        self,
        messages: list[dict[str, Any]],
        options: dict[str, Any],
        format: type | None,
        tool_calls: bool,
        action: Any = None,
    ) -> Generate:
        """``generate(attempt, retry)`` for a sampling strategy: one backend call."""

        async def generate(attempt: int, retry: Retry | None = None) -> ModelOutputThunk:
            sent = retry.apply(messages) if retry is not None else messages
            thunk = await hook_points.generate(
                self.backend,
                sent,
                action=action,
                context=self.ctx,
                model_options=varied_options(options, attempt, RETRY_TEMPERATURE),
                format=format,
                tool_calls=tool_calls,
                session_id=self.id,
            )
            thunk._generate_log = GenerateLog(prompt=sent, model_options=options)  # type: ignore[attr-defined]
            return thunk

        # what a strategy that makes its own calls (budget forcing, SOFAI) needs
        generate.__dict__.update(
            messages=messages,
            options=options,
            format=format,
            tool_calls=tool_calls,
            backend=self.backend,
        )
        return generate

    def last_prompt(self) -> str | list[dict[str, Any]] | None:
        """The messages sent for the newest output in the context, if known."""
        output = self.ctx.last_output()
        log = getattr(output, "_generate_log", None)
        if isinstance(log, list) and log:
            log = log[-1]
        return log.prompt if isinstance(log, GenerateLog) else None

    def _render(self, action: Component | CBlock) -> str:
        """The user message text an action becomes."""
        return span_text(action)

    def _record(self, action: Span, thunk: ModelOutputThunk) -> None:
        self.ctx = self.ctx.add(action).add(thunk)
        self._interaction_count += 1


def _is_intrinsic(action: Any) -> bool:
    """Whether ``action`` is an adapter function to run (a requirement is checked, not run)."""
    return isinstance(action, Intrinsic) and not isinstance(action, Requirement)


def _parse_into(action: Any, thunk: ModelOutputThunk) -> None:
    """Set ``thunk.parsed_repr`` from the component's own parser, when it has one."""
    parse = getattr(action, "parse", None)
    if callable(parse) and not isinstance(action, Instruction | Message | CBlock):
        thunk.parsed_repr = parse(thunk)


__all__ = ["MelleaSession", "render_instruction", "start_session"]
