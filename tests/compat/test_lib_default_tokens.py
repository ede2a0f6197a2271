"""A local session bounds a generation whose program names no token limit (ours; see docs/library.md)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from mellea import MelleaSession
from mellea.backends.local import LocalBackend
from mellea.core import ModelOutputThunk
from mellea.core.model_options import ModelOption
from mellea.stdlib.session import DEFAULT_MAX_NEW_TOKENS
from tests.compat.lib_scripted import ScriptedBackend


class RecordingLocal(LocalBackend):
    """A local backend on a stand-in engine that records the options each call gets."""

    def __init__(self) -> None:
        super().__init__(engine=SimpleNamespace(model_id="stand-in"))
        self.options: list[dict[str, Any]] = []

    async def generate(self, messages, *, model_options=None, format=None, tool_calls=False):
        self.options.append(dict(model_options or {}))
        return ModelOutputThunk("ok")


def test_a_local_call_without_a_limit_gets_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MELLEA_MAX_NEW_TOKENS", raising=False)
    backend = RecordingLocal()
    m = MelleaSession(backend)
    m.instruct("Write an email.", strategy=None)
    m.chat("Hello.")
    assert [o[ModelOption.MAX_NEW_TOKENS] for o in backend.options] == [DEFAULT_MAX_NEW_TOKENS] * 2


@pytest.mark.parametrize(
    ("session_options", "call_options", "key", "expected"),
    [
        ({}, {"max_tokens": 40}, "max_tokens", 40),
        ({}, {ModelOption.MAX_NEW_TOKENS: 30}, ModelOption.MAX_NEW_TOKENS, 30),
        ({"max_tokens": 20}, None, "max_tokens", 20),
    ],
)
def test_a_limit_the_program_names_is_kept(
    session_options: dict, call_options: dict | None, key: str, expected: int
) -> None:
    backend = RecordingLocal()
    MelleaSession(backend, model_options=session_options).instruct(
        "Hi.", strategy=None, model_options=call_options
    )
    [sent] = backend.options
    assert sent[key] == expected
    assert (ModelOption.MAX_NEW_TOKENS in sent) == (key == ModelOption.MAX_NEW_TOKENS)


def test_the_environment_changes_or_lifts_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MELLEA_MAX_NEW_TOKENS", "64")
    backend = RecordingLocal()
    MelleaSession(backend).instruct("Hi.", strategy=None)
    monkeypatch.setenv("MELLEA_MAX_NEW_TOKENS", "0")
    MelleaSession(backend).instruct("Hi.", strategy=None)
    assert backend.options[0][ModelOption.MAX_NEW_TOKENS] == 64
    assert ModelOption.MAX_NEW_TOKENS not in backend.options[1]
    monkeypatch.setenv("MELLEA_MAX_NEW_TOKENS", "lots")
    with pytest.raises(ValueError, match="MELLEA_MAX_NEW_TOKENS"):
        MelleaSession(backend)


def test_remote_backends_get_no_default() -> None:
    backend = ScriptedBackend(["ok"])
    MelleaSession(backend).instruct("Hi.", strategy=None)
    assert ModelOption.MAX_NEW_TOKENS not in (backend.calls[0]["options"] or {})
