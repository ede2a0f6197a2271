"""Test program without a serve() function."""


def handler(messages):
    return "nope"
