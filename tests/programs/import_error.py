"""Test program that fails while importing."""

import json

import a_module_that_does_not_exist  # noqa: F401


def serve(input):
    return json.dumps(input)
