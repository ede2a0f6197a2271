"""Upstream's former name for :mod:`mellea.stdlib.components.genstub`."""

from mellea.stdlib.components.genstub import (
    AsyncGenerativeStub,
    GenerativeStub,
    PreconditionException,
    SyncGenerativeStub,
    generative,
)

AsyncGenerativeSlot = AsyncGenerativeStub
GenerativeSlot = GenerativeStub
SyncGenerativeSlot = SyncGenerativeStub

__all__ = [
    "AsyncGenerativeSlot",
    "AsyncGenerativeStub",
    "GenerativeSlot",
    "GenerativeStub",
    "PreconditionException",
    "SyncGenerativeSlot",
    "SyncGenerativeStub",
    "generative",
]
