"""A helper module next to a test program (its directory must be importable)."""


def shout(text: str) -> str:
    return text.upper() + "!"
