"""``cli.alora``: train, upload and document adapters that check requirements (``m alora``)."""
