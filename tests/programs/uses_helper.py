"""Test program importing a module that sits beside it."""

from program_helper import shout


def serve(input):
    return shout(input[-1].get_text_content())
