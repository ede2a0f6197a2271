"""Test program: a requirement checked by a requirement-check aLoRA, on a backend that
fakes the adapter (tests/adapter_support.py), so the wire test needs no engine LoRA.

``MELLEA_ADAPTERS_DIR`` must hold the fake adapters tree (the test sets it).
"""

from mellea.backends.adapters import IntrinsicAdapter
from mellea.backends.adapters.backend import add_adapter
from mellea.core import SamplingResult
from mellea.serve import ChatMessage
from mellea.stdlib.context import ChatContext
from mellea.stdlib.requirements import ALoraRequirement
from mellea.stdlib.sampling import RejectionSamplingStrategy
from mellea.stdlib.session import MelleaSession
from tests.adapter_support import FakeAdapterBackend

REQUIREMENT = "Use a professional tone."


def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict | None = None,
) -> SamplingResult:
    """Answer, with the answer checked by the requirement-check aLoRA."""
    backend = FakeAdapterBackend()
    backend.judge_answer = "Dear team, see you on Friday."
    add_adapter(backend, IntrinsicAdapter("requirement-check", base_model_name=backend.model_id))
    m = MelleaSession(backend, ChatContext())
    return m.instruct(
        input[-1].content,
        requirements=[ALoraRequirement(REQUIREMENT)],
        strategy=RejectionSamplingStrategy(loop_budget=1),
        return_sampling_results=True,
        model_options=model_options,
    )
