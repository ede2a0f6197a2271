"""``/v1/chat/completions``: the reply's context, its renderers, whole and streamed."""
