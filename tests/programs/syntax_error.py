"""Test program with a syntax error."""

def serve(input)
    return "never"
