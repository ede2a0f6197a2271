"""Test program: the same echo through a session as plugin_guard.py, registering nothing."""

from echo_backend import EchoBackend

from mellea.serve import ChatMessage
from mellea.stdlib.session import MelleaSession


def serve(input: list[ChatMessage], requirements=None, model_options=None):
    """Echo the last message through a session."""
    return MelleaSession(EchoBackend()).instruct(str(input[-1].content), strategy=None)
