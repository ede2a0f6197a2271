"""Talk to a running `m serve` with the official openai client, streaming and not.

Run it after `m serve docs/examples/hello.py`:  python docs/examples/client.py
"""

import os

from openai import OpenAI

client = OpenAI(
    base_url=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"),
    api_key=os.environ.get("OPENAI_API_KEY", "not-needed"),
)
question = [{"role": "user", "content": "Name three colours."}]

reply = client.chat.completions.create(model="hello", messages=question, max_tokens=40)
print("non-streamed:", reply.choices[0].message.content)
print(
    "usage:",
    reply.usage.prompt_tokens,
    "prompt +",
    reply.usage.completion_tokens,
    "completion tokens",
)

print("streamed: ", end="", flush=True)
stream = client.chat.completions.create(
    model="hello", messages=question, max_tokens=40, stream=True
)
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        print(chunk.choices[0].delta.content, end="", flush=True)
print()
