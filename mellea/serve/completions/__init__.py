"""``/v1/completions`` (the legacy text completions): its request, objects, renderers, reply."""
