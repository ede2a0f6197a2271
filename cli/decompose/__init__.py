"""``cli.decompose``: break a task prompt into subtasks, prompts and constraints with a model."""
