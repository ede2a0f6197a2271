"""Test program with its own serve_completion (reverses the prompt)."""

from mellea.backends.model_options import ModelOption


def serve(input, requirements=None, model_options=None):
    return "chat: " + input[-1].get_text_content()


def serve_completion(prompt: str, model_options: dict | None = None) -> str:
    """Reverse the prompt, cut to max_tokens characters when given."""
    text = prompt[::-1]
    limit = (model_options or {}).get(ModelOption.MAX_NEW_TOKENS)
    return text[:limit] if limit else text
