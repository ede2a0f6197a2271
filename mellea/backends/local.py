"""The local backend: a thin adapter from mellea to the in-process inference engine."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

from mellea.backends.base import Backend, openai_tools, schema_hint
from mellea.backends.logprobs import TokenTexts, engine_logprobs, token_texts
from mellea.backends.model_options import ModelOption
from mellea.backends.tool_parsing import lift_tool_calls, tool_functions, tool_parser_name
from mellea.core.errors import ContextLengthExceededError, RequestError
from mellea.core.thunk import GenerationChunk, ModelOutputThunk


class LocalEngine(Protocol):
    """What the backend needs from an engine (the batching one or the naive baseline)."""

    model_id: str
    max_model_len: int
    tokenizer: Any

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        **template_args: Any,  # chat_template / template_kwargs, passed only when set
    ) -> list[int]: ...

    def add_request(self, prompt: Any, params: Any, request_id: str | None = None) -> Any: ...


_engines: dict[tuple[str, str | None], LocalEngine] = {}
_engines_lock = threading.Lock()


def shared_engine(model_id: str | None = None, **engine_kwargs: Any) -> LocalEngine:
    """The process's engine for ``model_id``, built on first use.

    Programs often call ``start_session()`` once per request; sharing the engine keeps
    that cheap and lets concurrent requests batch together. ``MELLEA_ENGINE=hf``
    selects the naive one-``generate()``-per-request engine (the benchmark baseline).
    """
    kind = os.environ.get("MELLEA_ENGINE", "paged")
    budget = os.environ.get("MELLEA_KV_CACHE_MEMORY")
    if budget and kind != "hf":
        engine_kwargs.setdefault("kv_cache_memory", parse_memory(budget))
    key = (kind, model_id)
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            engine = _build_engine(kind, model_id, engine_kwargs)
            _engines[key] = engine
        return engine


def parse_memory(text: str) -> int | float:
    """``"2GiB"``, ``"512MiB"``, ``"1000000"`` (bytes) or ``"0.25"`` (a fraction of memory)."""
    units = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}
    cleaned = text.strip().upper()
    for unit, factor in units.items():
        if cleaned.endswith(unit):
            return int(float(cleaned[: -len(unit)]) * factor)
    return float(cleaned) if "." in cleaned else int(cleaned)


def engine_stats() -> dict[str, dict[str, Any]]:
    """``stats()`` of every engine loaded in this process, by model id."""
    with _engines_lock:
        engines = list(_engines.values())
    return {e.model_id: e.stats() for e in engines if hasattr(e, "stats")}


async def warm_up() -> int:
    """Run a one-token generation on every loaded engine; returns how many were warmed."""
    from mellea.engine.types import SamplingParams

    with _engines_lock:
        engines = list(_engines.values())
    for engine in engines:
        # Plain text, not the chat template: a model may have none (chat requests then get a 400).
        prompt = engine.tokenizer.encode("Hi")
        async for _ in engine.add_request(prompt, SamplingParams(max_tokens=1)):
            pass
    return len(engines)


def _build_engine(kind: str, model_id: str | None, kwargs: dict[str, Any]) -> LocalEngine:
    if kind == "hf":
        from mellea.engine.hf_generate import HFGenerateEngine

        return HFGenerateEngine(model_id, **kwargs)
    from mellea.engine import build_engine

    return build_engine(model_id, **kwargs)


class LocalBackend(Backend):
    """Generate with a local model on this machine's CPU or GPU.

    ``model_id`` is ``None`` for the bundled SmolLM2-135M-Instruct, a local model
    directory, a ``.gguf`` file, or a Hugging Face hub id. ``tool_call_parser`` names
    the format the model writes tool calls in, read for ``generate(tool_calls=True)``
    (default: ``m serve --tool-call-parser``'s, else hermes).
    """

    def __init__(
        self,
        model_id: str | None = None,
        *,
        model_options: dict[str, Any] | None = None,
        engine: LocalEngine | None = None,
        tool_call_parser: str | None = None,
        **engine_kwargs: Any,
    ) -> None:
        super().__init__(model_options)
        self.tool_call_parser = tool_call_parser
        self.engine = engine if engine is not None else shared_engine(model_id, **engine_kwargs)
        self.model_id = model_id or self.engine.model_id

    async def generate(
        self,
        messages: list[dict[str, Any]],
        *,
        model_options: dict[str, Any] | None = None,
        format: type | None = None,
        tool_calls: bool = False,
    ) -> ModelOutputThunk:
        """Start a request on the engine and return its streaming thunk."""
        from mellea.engine.chat import ChatTemplateError
        from mellea.engine.types import PromptTooLongError

        options = ModelOption.merge_model_options(self.model_options, model_options)
        if format is not None:
            messages = _with_schema_hint(messages, format)
        tools = openai_tools(options.get(ModelOption.TOOLS))
        render = _template_args(options.get("chat_template_kwargs"))
        try:
            prompt = self.engine.apply_chat_template(messages, tools=tools or None, **render)
            if tools and prompt == self.engine.apply_chat_template(messages, **render):
                # The model's chat template ignores tools: describe them ourselves, in the
                # hermes format the server's default tool-call parser reads.
                prompt = self.engine.apply_chat_template(
                    with_tool_instructions(messages, tools), **render
                )
        except ChatTemplateError as exc:
            raise RequestError(str(exc), param="messages") from None
        params = sampling_params(options)
        forced_tools = _forced_tools(tools, options.get(ModelOption.TOOL_CHOICE))
        try:
            params.grammar = _grammar(format, options.get("response_format"), forced_tools)
            stream = self.engine.add_request(prompt, params)
        except PromptTooLongError as exc:
            raise ContextLengthExceededError(str(exc)) from None
        except ValueError as exc:
            param = "tools" if forced_tools else "response_format" if params.grammar else None
            raise RequestError(str(exc), param=param) from None
        texts = token_texts(self.engine.tokenizer) if params.logprobs is not None else None
        chunks = _chunks(stream, texts)
        functions = tool_functions(options.get(ModelOption.TOOLS))
        if forced_tools:
            chunks = _tool_call_chunks(chunks, functions)
        elif tool_calls and tools and options.get(ModelOption.TOOL_CHOICE) != "none":
            parser = tool_parser_name(self.tool_call_parser)
            single = options.get("parallel_tool_calls") is False
            chunks = lift_tool_calls(chunks, parser, functions, 1 if single else None)
        thunk = ModelOutputThunk.from_stream(chunks)
        thunk.meta["count_tokens"] = self.count_tokens
        return thunk

    def count_tokens(self, text: str) -> int:
        """How many tokens ``text`` is for this model (e.g. to report reasoning tokens)."""
        return len(self.engine.tokenizer.encode(text, add_special_tokens=False))


async def _chunks(stream: Any, texts: TokenTexts | None) -> AsyncIterator[GenerationChunk]:
    """Engine outputs as thunk chunks; closing this generator aborts the request.

    With ``texts``, the engine's token log-probabilities come along, with token texts.
    """
    try:
        async for out in stream:
            chunk = GenerationChunk(text=out.text)
            if texts is not None and out.logprobs is not None:
                chunk.logprobs = engine_logprobs(out.logprobs, texts)
            if out.finished:
                chunk.finish_reason = "length" if out.finish_reason == "length" else "stop"
                chunk.usage = {
                    "prompt_tokens": out.prompt_tokens,
                    "completion_tokens": out.completion_tokens,
                    "total_tokens": out.prompt_tokens + out.completion_tokens,
                    "prompt_tokens_details": {"cached_tokens": out.cached_tokens},
                }
            yield chunk
    finally:
        closer = getattr(stream, "aclose", None)
        if closer is not None:
            await closer()


def _template_args(kwargs: Any) -> dict[str, Any]:
    """Chat-template overrides: ``m serve --chat-template``'s file and the request's
    ``chat_template_kwargs`` (only what is set, so engines without them still work)."""
    args: dict[str, Any] = {}
    path = os.environ.get("MELLEA_CHAT_TEMPLATE")
    if path:
        args["chat_template"] = _read_template(path)
    if kwargs:
        if not isinstance(kwargs, dict):
            raise RequestError(
                "chat_template_kwargs must be an object", param="chat_template_kwargs"
            )
        args["template_kwargs"] = kwargs
    return args


@functools.cache
def _read_template(path: str) -> str:
    return Path(path).read_text()


def _forced_tools(tools: list[dict[str, Any]], choice: Any) -> list[dict[str, Any]]:
    """The tools the reply must call: all for ``"required"``, the named one, else none."""
    if not tools:
        return []
    if choice == "required":
        return tools
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return [t for t in tools if t["function"]["name"] == name]
    return []


def _grammar(
    format: type | None, response_format: Any, forced_tools: list[dict[str, Any]]
) -> str | None:
    """The grammar that constrains decoding: a forced tool call, a schema, or any JSON object."""
    from mellea.engine.constraints import json_schema_grammar

    if forced_tools:
        calls = [
            {
                "type": "object",
                "properties": {
                    "name": {"const": t["function"]["name"]},
                    "arguments": t["function"].get("parameters") or {"type": "object"},
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
            for t in forced_tools
        ]
        return json_schema_grammar(calls[0] if len(calls) == 1 else {"anyOf": calls})
    if format is not None:
        return json_schema_grammar(format.model_json_schema())  # type: ignore[attr-defined]
    if not isinstance(response_format, dict):
        return None
    if response_format.get("type") == "json_object":
        return json_schema_grammar({"type": "object"})
    schema = (response_format.get("json_schema") or {}).get("schema")
    if response_format.get("type") == "json_schema" and isinstance(schema, dict):
        return json_schema_grammar(schema)
    return None


async def _tool_call_chunks(
    chunks: AsyncIterator[GenerationChunk], functions: dict[str, Any]
) -> AsyncIterator[GenerationChunk]:
    """A constrained tool call: the JSON text becomes a ``ModelToolCall``, not content."""
    import json

    from mellea.core.tool_call import ModelToolCall

    text, last, logprobs = "", GenerationChunk(), []
    async for chunk in chunks:
        text += chunk.text
        logprobs += chunk.logprobs or []
        last = chunk
    try:
        call = json.loads(text)
        name = call["name"]
        tool_calls = [ModelToolCall(name, functions.get(name), call.get("arguments") or {})]
    except (ValueError, KeyError, TypeError):  # cut short by max_tokens: keep the text
        yield GenerationChunk(
            text=text, finish_reason=last.finish_reason, usage=last.usage, logprobs=logprobs or None
        )
        return
    yield GenerationChunk(
        finish_reason=last.finish_reason,
        usage=last.usage,
        tool_calls=tool_calls,
        logprobs=logprobs or None,
    )


def sampling_params(options: dict[str, Any]) -> Any:
    """Map mellea model options (and common plain keys) to engine sampling parameters."""
    from mellea.engine.types import SamplingParams

    params = SamplingParams()
    simple = {
        ModelOption.TEMPERATURE: ("temperature", float),
        ModelOption.TOP_P: ("top_p", float),
        ModelOption.MAX_NEW_TOKENS: ("max_tokens", int),
        "max_tokens": ("max_tokens", int),
        ModelOption.SEED: ("seed", int),
        "seed": ("seed", int),
        "top_k": ("top_k", int),
        "min_p": ("min_p", float),
        "presence_penalty": ("presence_penalty", float),
        "frequency_penalty": ("frequency_penalty", float),
        "repetition_penalty": ("repetition_penalty", float),
    }
    already_set: set[str] = set()  # the mellea key wins over its plain alias
    for key, (field, cast) in simple.items():
        value = options.get(key)
        if value is not None and field not in already_set:
            setattr(params, field, cast(value))
            already_set.add(field)
    stop = options.get(ModelOption.STOP_SEQUENCES, options.get("stop"))
    if stop:
        params.stop = [stop] if isinstance(stop, str) else list(stop)
    if options.get("ignore_eos"):
        params.ignore_eos = True
    if options.get("logprobs"):
        params.logprobs = int(options.get("top_logprobs") or 0)
    bias = options.get("logit_bias")
    if bias:
        params.logit_bias = {int(k): float(v) for k, v in bias.items()}
    return params


def _with_schema_hint(messages: list[dict[str, Any]], format: type) -> list[dict[str, Any]]:
    messages = [dict(m) for m in messages]
    messages[-1]["content"] = f"{messages[-1].get('content') or ''}\n\n{schema_hint(format)}"
    return messages


TOOL_INSTRUCTIONS = (
    "You can call functions. To call one, answer with exactly\n"
    '<tool_call>{{"name": "<function name>", "arguments": {{<JSON arguments>}}}}</tool_call>\n'
    "and nothing else. The functions:\n{tools}"
)


def with_tool_instructions(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``messages`` with the tools described in the system message (created if absent)."""
    import json

    text = TOOL_INSTRUCTIONS.format(tools="\n".join(json.dumps(t["function"]) for t in tools))
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0])
        first["content"] = f"{first.get('content') or ''}\n\n{text}"
        return [first, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]
