"""``cli.alora``: helpers around trained adapters (README generation; training needs the hub and is not provided)."""
