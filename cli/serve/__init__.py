"""``m serve``: load a program and serve it over HTTP."""
