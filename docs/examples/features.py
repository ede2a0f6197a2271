"""A tour of the OpenAI surface of `m serve`, with the official openai client.

Run it after `m serve docs/examples/hello.py`:  python docs/examples/features.py
"""

import json
import os

from openai import OpenAI

client = OpenAI(
    base_url=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"),
    api_key=os.environ.get("OPENAI_API_KEY", "not-needed"),
)
ask = [{"role": "user", "content": "Is it raining in Oslo?"}]
weather = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}

# Tool calls: "required" makes the local engine emit a valid call.
reply = client.chat.completions.create(
    model="hello", messages=ask, tools=[weather], tool_choice="required", max_tokens=100
)
call = reply.choices[0].message.tool_calls[0]
print("tool call:", call.function.name, json.loads(call.function.arguments))

# Structured output: the content always parses and matches the schema.
city = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "country": {"type": "string"}},
    "required": ["name", "country"],
}
reply = client.chat.completions.create(
    model="hello",
    messages=[{"role": "user", "content": "Describe Rome."}],
    response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": city}},
    max_tokens=60,
)
print("json:", json.loads(reply.choices[0].message.content))

# Several choices, each with the log-probabilities of its tokens.
reply = client.chat.completions.create(
    model="hello",
    messages=[{"role": "user", "content": "Name a colour."}],
    n=2,
    seed=1,
    max_tokens=8,
    logprobs=True,
    top_logprobs=2,
)
for choice in reply.choices:
    first = choice.logprobs.content[0]
    alternatives = [(t.token, round(t.logprob, 2)) for t in first.top_logprobs]
    print(f"choice {choice.index}:", repr(choice.message.content), "first token", alternatives)

# The legacy completions endpoint: one choice per prompt.
reply = client.completions.create(model="hello", prompt=["Hello,", "Goodbye,"], max_tokens=8)
print("completions:", [c.text for c in reply.choices])

# The Responses API, streamed as typed events.
stream = client.responses.create(model="hello", input="Say hi.", max_output_tokens=16, stream=True)
for event in stream:
    if event.type == "response.output_text.delta":
        print(event.delta, end="", flush=True)
    elif event.type in ("response.completed", "response.incomplete"):
        print("\nresponse:", event.response.status)  # incomplete: max_output_tokens ran out
