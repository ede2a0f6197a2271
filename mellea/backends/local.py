"""The local backend: a thin adapter from mellea to the in-process inference engine."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from mellea.backends.adapters.backend import AdapterMixin
from mellea.backends.base import Backend, openai_tools, schema_hint
from mellea.backends.cache_salt import current_cache_salt
from mellea.backends.logprobs import (
    TokenTexts,
    engine_logprobs,
    engine_prompt_logprobs,
    token_texts,
)
from mellea.backends.request_adapter import current_request_adapter
from mellea.backends.runtime import Runtime, current_runtime, model_name
from mellea.backends.tool_parsing import lift_tool_calls, tool_functions, tool_parser_name
from mellea.core.errors import ContextLengthExceededError, RequestError
from mellea.core.model_options import ModelOption
from mellea.core.thunk import GenerationChunk, ModelOutputThunk
from mellea.core.trace import ADAPTER_META

if TYPE_CHECKING:
    from mellea.engine.interface import InferenceEngine


class LocalBackend(AdapterMixin, Backend):
    """Generate with a local model on this machine's CPU or GPU.

    ``model_id`` is ``None`` for the bundled SmolLM2-135M-Instruct, a local model
    directory, a ``.gguf`` file, a Hugging Face hub id (from the local cache when
    there), or a ``ModelIdentifier`` (its ``hf_model_name``). The engine comes from
    ``runtime`` (default: the active one, see :mod:`mellea.backends.runtime`), which
    shares one engine per model and may serve another model (``m serve --model``).
    ``tool_call_parser`` names the format the model writes tool calls in, read for
    ``generate(tool_calls=True)`` (default: the runtime's, i.e. ``m serve
    --tool-call-parser``, else hermes).

    A ``model_id`` that names a LoRA/aLoRA adapter loaded in the runtime (``m serve
    --lora NAME=PATH``, or :meth:`load_adapter` on another session's backend) runs the
    engine that holds it, with that adapter; ``ModelOption.ADAPTER`` in a request's
    options picks another (or, as None, the base model). A session that picks neither
    generates with the adapter the request being served names (``m serve``: a request
    whose ``model`` is a ``--lora`` adapter, :mod:`mellea.backends.request_adapter`)
    when its engine holds that adapter.
    """

    def __init__(
        self,
        model_id: Any = None,
        *,
        model_options: dict[str, Any] | None = None,
        engine: InferenceEngine | None = None,
        tool_call_parser: str | None = None,
        runtime: Runtime | None = None,
        **engine_kwargs: Any,
    ) -> None:
        super().__init__(model_options)
        runtime = runtime or current_runtime()
        self.tool_call_parser = tool_call_parser or runtime.tool_call_parser
        self.chat_template = runtime.chat_template  # m serve --chat-template, if given
        # The adapter requests use unless their options name another (None: the base model).
        self.adapter: str | None = None
        if engine is None and isinstance(model_id, str):
            engine = runtime.adapter_engine(model_id)
            self.adapter = model_id if engine is not None else None
        self.engine = engine if engine is not None else runtime.engine(model_id, **engine_kwargs)
        served_elsewhere = self.adapter is None and engine is None and runtime.model is not None
        named = None if served_elsewhere else model_name(model_id)
        self.model_id = named or self.engine.model_id

    def load_adapter(self, name: str, path: Any) -> None:
        """Load a PEFT LoRA/aLoRA adapter directory into this backend's engine under
        ``name``, for requests to pick with ``ModelOption.ADAPTER`` (or sessions with
        ``model_id=name``). ``AdapterLoadError`` (a ValueError) says what is wrong."""
        self.engine.load_adapter(name, path)

    @property
    def adapters(self) -> dict[str, Any]:
        """The adapters loaded in this backend's engine: name -> rank, targets, is_alora."""
        return dict(getattr(self.engine, "adapters", None) or {})

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
        from mellea.engine.types import PromptTooLongError, SamplingParamsError

        messages = text_only(messages)
        options = ModelOption.merge_model_options(self.model_options, model_options)
        tools = openai_tools(options.get(ModelOption.TOOLS))
        render = _template_args(options.get("chat_template_kwargs"), self.chat_template)
        forced_tools = _forced_tools(tools, options.get(ModelOption.TOOL_CHOICE))
        params = sampling_params(options)
        params.adapter = self.adapter_for(options)
        params.cache_salt = current_cache_salt()
        try:
            # Rendering and tokenizing a long prompt, and turning a schema into a grammar,
            # take CPU time the event loop (and every other request on it) must not wait for.
            prompt, params.grammar, constraint = await asyncio.to_thread(
                self._prompt_and_grammar, messages, tools, format, options, forced_tools, render
            )
            extra = {"constraint": constraint} if constraint is not None else {}
            stream = self.engine.add_request(prompt, params, **extra)
        except PromptTooLongError as exc:
            raise ContextLengthExceededError(str(exc)) from None
        except ChatTemplateError as exc:
            raise RequestError(str(exc), param="messages") from None
        except SamplingParamsError as exc:
            raise RequestError(str(exc), param=_WIRE_NAMES.get(exc.field, exc.field)) from None
        except ValueError as exc:  # the grammar (or the engine) refused the request
            shaped = format is not None or options.get("response_format") is not None
            param = "tools" if forced_tools else "response_format" if shaped else None
            raise RequestError(str(exc), param=param) from None
        scored = params.logprobs is not None or params.prompt_logprobs is not None
        texts = token_texts(self.engine.tokenizer) if scored else None
        chunks = _chunks(stream, texts, prompt if params.prompt_logprobs is not None else None)
        functions = tool_functions(options.get(ModelOption.TOOLS))
        if forced_tools:
            names = [t["function"]["name"] for t in forced_tools]
            chunks = _tool_call_chunks(chunks, functions, names)
        elif tool_calls and tools and options.get(ModelOption.TOOL_CHOICE) != "none":
            parser = tool_parser_name(self.tool_call_parser)
            single = options.get("parallel_tool_calls") is False
            chunks = lift_tool_calls(chunks, parser, functions, 1 if single else None)
        thunk = ModelOutputThunk.from_stream(chunks)
        thunk.meta["count_tokens"] = self.count_tokens
        thunk.meta[ADAPTER_META] = params.adapter
        return thunk

    def adapter_for(self, options: dict[str, Any]) -> str | None:
        """The adapter a generation with these (merged) ``options`` runs with (None: the
        base model): the one they name (``ModelOption.ADAPTER``, None included), else the
        session's own (``model_id=NAME``), else the one the request being served names,
        when this backend's engine holds it."""
        if ModelOption.ADAPTER in options:
            return options[ModelOption.ADAPTER]
        if self.adapter is not None:
            return self.adapter
        requested = current_request_adapter()
        if requested is None or requested not in (getattr(self.engine, "adapters", None) or {}):
            return None
        return requested

    def _prompt_and_grammar(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        format: type | None,
        options: dict[str, Any],
        forced_tools: list[dict[str, Any]],
        render: dict[str, Any],
    ) -> tuple[list[int], str | None, Any]:
        """The prompt's token ids, the decoding grammar and, where the engine compiles
        grammars ahead, its matcher (runs in a worker thread)."""
        if options.get(ModelOption.RAW_PROMPT):  # the messages' text as it is, without the template
            text = "".join(str(m.get("content") or "") for m in messages)
            prompt = self.engine.tokenizer.encode(text)
            grammar = _grammar(format, options.get("response_format"), forced_tools)
            return prompt, grammar, self.engine.compile_grammar(grammar) if grammar else None
        if format is not None:
            messages = _with_schema_hint(messages, format)
        prompt = self.engine.apply_chat_template(messages, tools=tools or None, **render)
        if tools and prompt == self.engine.apply_chat_template(messages, **render):
            # The model's chat template ignores tools: describe them ourselves, in the
            # hermes format the server's default tool-call parser reads.
            prompt = self.engine.apply_chat_template(
                with_tool_instructions(messages, tools), **render
            )
        grammar = _grammar(format, options.get("response_format"), forced_tools)
        constraint = self.engine.compile_grammar(grammar) if grammar else None
        return prompt, grammar, constraint

    def count_tokens(self, text: str) -> int:
        """How many tokens ``text`` is for this model (e.g. to report reasoning tokens)."""
        return len(self.engine.tokenizer.encode(text, add_special_tokens=False))


async def _chunks(
    stream: Any, texts: TokenTexts | None, prompt: list[int] | None = None
) -> AsyncIterator[GenerationChunk]:
    """Engine outputs as thunk chunks; closing this generator aborts the request.

    With ``texts``, the engine's token log-probabilities come along, with token texts;
    with the ``prompt``'s ids too, its own log-probabilities (on the first chunk).
    """
    try:
        async for out in stream:
            chunk = GenerationChunk(text=out.text)
            if texts is not None and out.logprobs is not None:
                chunk.logprobs = engine_logprobs(out.logprobs, texts)
            if texts is not None and prompt and out.prompt_logprobs is not None:
                chunk.prompt_logprobs = engine_prompt_logprobs(prompt, out.prompt_logprobs, texts)
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


# Engine sampling fields under the request field a client sent them as.
# (an adapter is named by the request's model, through the program's session).
_WIRE_NAMES = {"logprobs": "top_logprobs", "adapter": "model"}


def _template_args(kwargs: Any, chat_template: str | None) -> dict[str, Any]:
    """Chat-template overrides: the runtime's template (``m serve --chat-template``) and
    the request's ``chat_template_kwargs`` (only what is set, so engines without them
    still work)."""
    args: dict[str, Any] = {}
    if chat_template:
        args["chat_template"] = chat_template
    if kwargs:
        if not isinstance(kwargs, dict):
            raise RequestError(
                "chat_template_kwargs must be an object", param="chat_template_kwargs"
            )
        args["template_kwargs"] = kwargs
    return args


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
                    "arguments": _parameters_schema(t["function"].get("parameters")),
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


# A function sent without ``parameters`` takes no arguments (the OpenAI reference), so a
# forced call of it is exactly ``{}``; an empty schema ``{}`` is read the same way.
_NO_ARGUMENTS = {"type": "object", "properties": {}, "additionalProperties": False}
# The start of a forced call's JSON as the grammar writes it: its name, then its arguments.
_CALL_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)("\s*,\s*"arguments"\s*:\s*)?')


def _parameters_schema(parameters: Any) -> dict[str, Any]:
    """The schema a forced call's ``arguments`` must match."""
    return parameters if parameters else _NO_ARGUMENTS


async def _tool_call_chunks(
    chunks: AsyncIterator[GenerationChunk], functions: dict[str, Any], names: list[str]
) -> AsyncIterator[GenerationChunk]:
    """A constrained tool call: the JSON text becomes a ``ModelToolCall``, not content.

    A call cut short by ``max_tokens`` is still a call of one of ``names`` (the forced
    tools), with its arguments as far as they got, never the wrapper JSON as text.
    """
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
    except (ValueError, KeyError, TypeError):  # cut short by max_tokens
        name, arguments = _partial_call(text, names)
        tool_calls = [ModelToolCall(name, functions.get(name), partial_arguments=arguments)]
    yield GenerationChunk(
        finish_reason=last.finish_reason,
        usage=last.usage,
        tool_calls=tool_calls,
        logprobs=logprobs or None,
    )


def _partial_call(text: str, names: list[str]) -> tuple[str, str]:
    """The tool name and the arguments' text of a forced call's unfinished JSON ``text``.

    The name is the forced tool the written part of the name starts (the grammar allows
    only those); the arguments are what followed ``"arguments":``, if anything did.
    """
    head = _CALL_HEAD.match(text)
    written = head.group(1) if head else ""
    name = next((n for n in names if n.startswith(written)), names[0])
    if head is None or head.group(2) is None:
        return name, ""
    return name, text[head.end() :]


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
    if options.get(ModelOption.PROMPT_LOGPROBS) is not None:  # the engine refuses bad ones
        params.prompt_logprobs = options[ModelOption.PROMPT_LOGPROBS]
    bias = options.get("logit_bias")
    if bias:
        params.logit_bias = {int(k): float(v) for k, v in bias.items()}
    return params


def text_only(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with lists of text parts joined into strings.

    The local models read text only, so an image, audio or file part is the client's
    request for something this backend cannot do: a 400 naming ``messages``, never a
    silent drop.
    """
    result = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            result.append(message)
            continue
        kinds = [p.get("type") if isinstance(p, dict) else type(p).__name__ for p in content]
        others = sorted({str(kind) for kind in kinds if kind not in ("text", "refusal")})
        if others:
            raise RequestError(
                f"the local model reads text only and cannot take {', '.join(others)} "
                "content; send text, or serve a program whose backend's model reads "
                "images or audio (e.g. the openai backend)",
                param="messages",
            )
        text = "".join(p.get("text") or p.get("refusal") or "" for p in content)
        result.append({**message, "content": text})
    return result


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
