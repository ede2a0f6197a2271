"""Every name upstream mellea's examples import resolves at its path in our package.

The corpus is data: tests/compat/upstream_examples/examples.json, written by
collect.py there from a fetched copy of upstream (the examples are not copied). One
test per imported (module, name). Names we do not provide yet are listed below with
the reason; such a test is an expected failure, and a listed name that resolves
fails, so the list shrinks with each addition and cannot go stale.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

CORPUS = Path(__file__).parent / "upstream_examples" / "examples.json"

CLI = "the `m alora` / `m decompose` modules are not ported yet (issue 23)"
ADAPTERS = "intrinsics and LoRA adapters are not provided yet (issue 23, adapters)"
BACKENDS = "hosted backends, the response cache and telemetry are not provided yet (issue 23)"
STREAMING = "validated streaming is not provided yet (issue 23)"
COMPONENTS = "mify, rich documents, react and the compactors are not provided yet (issue 23)"
REQS_TOOLS = "the Python/shell sandbox requirements and tools are not provided yet (issue 23)"
SAMPLING = "upstream's sampling presets are not provided yet (issue 23)"

# "module:name" (name empty for `import module`) -> why we do not provide it yet.
EXPECTED_MISSING: dict[str, str] = {
    "cli.alora.readme_generator:generate_readme": CLI,
    "cli.alora.readme_generator:make_readme_jinja_dict": CLI,
    "cli.decompose.pipeline:DecompBackend": CLI,
    "cli.decompose.pipeline:DecompPipelineResult": CLI,
    "cli.decompose.pipeline:decompose": CLI,
    "mellea.backends.adapters:AdapterMixin": ADAPTERS,
    "mellea.backends.adapters.adapter:AdapterType": ADAPTERS,
    "mellea.backends.adapters.adapter:CustomIntrinsicAdapter": ADAPTERS,
    "mellea.backends.adapters.adapter:EmbeddedIntrinsicAdapter": ADAPTERS,
    "mellea.backends.adapters.adapter:IntrinsicAdapter": ADAPTERS,
    "mellea.backends.bedrock:create_bedrock_litellm_backend": BACKENDS,
    "mellea.backends.bedrock:create_bedrock_openai_backend": BACKENDS,
    "mellea.backends.cache:SimpleLRUCache": BACKENDS,
    "mellea.backends.litellm:LiteLLMBackend": BACKENDS,
    "mellea.core.requirement:PartialValidationResult": STREAMING,
    "mellea.stdlib.chunking:ChunkingStrategy": STREAMING,
    "mellea.stdlib.components:Intrinsic": ADAPTERS,
    "mellea.stdlib.components:as_generic_chat_history": COMPONENTS,
    "mellea.stdlib.components.docs.richdocument:RichDocument": COMPONENTS,
    "mellea.stdlib.components.docs.richdocument:Table": COMPONENTS,
    "mellea.stdlib.components.docs.richdocument:TableQuery": COMPONENTS,
    "mellea.stdlib.components.intrinsic:Intrinsic": ADAPTERS,
    "mellea.stdlib.components.intrinsic:core": ADAPTERS,
    "mellea.stdlib.components.intrinsic:guardian": ADAPTERS,
    "mellea.stdlib.components.intrinsic:rag": ADAPTERS,
    "mellea.stdlib.components.mify:MifiedProtocol": COMPONENTS,
    "mellea.stdlib.components.mify:mify": COMPONENTS,
    "mellea.stdlib.components.react:MELLEA_FINALIZER_TOOL": COMPONENTS,
    "mellea.stdlib.components.react:ReactInitiator": COMPONENTS,
    "mellea.stdlib.components.react:_mellea_finalize_tool": COMPONENTS,
    "mellea.stdlib.components.react:pin_react_initiator": COMPONENTS,
    "mellea.stdlib.context:Compactor": COMPONENTS,
    "mellea.stdlib.context:LLMSummarizeCompactor": COMPONENTS,
    "mellea.stdlib.context:ThresholdCompactor": COMPONENTS,
    "mellea.stdlib.context.chat:_rebuild_chat_context": COMPONENTS,
    "mellea.stdlib.frameworks.react:react": COMPONENTS,
    "mellea.stdlib.requirements:ALoraRequirement": ADAPTERS,
    "mellea.stdlib.requirements.plotting:MatplotlibHeadlessBackend": REQS_TOOLS,
    "mellea.stdlib.requirements.plotting:PlotDependenciesAvailable": REQS_TOOLS,
    "mellea.stdlib.requirements.plotting:PlotFileSaved": REQS_TOOLS,
    "mellea.stdlib.requirements.python_reqs:PythonExecutionReq": REQS_TOOLS,
    "mellea.stdlib.requirements.python_reqs:_has_python_code_listing": REQS_TOOLS,
    "mellea.stdlib.requirements.python_tools:NoImportRestrictions": REQS_TOOLS,
    "mellea.stdlib.requirements.python_tools:PythonCodeExtraction": REQS_TOOLS,
    "mellea.stdlib.requirements.python_tools:PythonSyntaxValid": REQS_TOOLS,
    "mellea.stdlib.requirements.rag:GroundednessRequirement": ADAPTERS,
    "mellea.stdlib.sampling:ModelFriendlyRepairStrategy": SAMPLING,
    "mellea.stdlib.sampling:SOFAISamplingStrategy": SAMPLING,
    "mellea.stdlib.sampling:python_code_generation_sampling": SAMPLING,
    "mellea.stdlib.sampling:python_plotting_sampling": SAMPLING,
    "mellea.stdlib.streaming:ChunkEvent": STREAMING,
    "mellea.stdlib.streaming:CompletedEvent": STREAMING,
    "mellea.stdlib.streaming:ErrorEvent": STREAMING,
    "mellea.stdlib.streaming:FullValidationEvent": STREAMING,
    "mellea.stdlib.streaming:QuickCheckEvent": STREAMING,
    "mellea.stdlib.streaming:StreamingDoneEvent": STREAMING,
    "mellea.stdlib.streaming:stream": STREAMING,
    "mellea.stdlib.tools:python_tool": REQS_TOOLS,
    "mellea.stdlib.tools.execution_policy:CapabilityPolicy": REQS_TOOLS,
    "mellea.stdlib.tools.interpreter:python_tool": REQS_TOOLS,
    "mellea.stdlib.tools.mcp:discover_mcp_tools": REQS_TOOLS,
    "mellea.stdlib.tools.mcp:http_connection": REQS_TOOLS,
    "mellea.stdlib.tools.shell:bash_executor": REQS_TOOLS,
    "mellea.telemetry:is_metrics_enabled": BACKENDS,
    "mellea.telemetry:is_tracing_enabled": BACKENDS,
    "mellea.telemetry:with_context": BACKENDS,
}


def _corpus() -> dict:
    return json.loads(CORPUS.read_text())


def _imported_names() -> dict[str, list[str]]:
    """``module:name`` -> the example paths that import it."""
    names: dict[str, list[str]] = {}
    for example in _corpus()["examples"]:
        for item in example["imports"]:
            key = f"{item['module']}:{item['name'] or ''}"
            names.setdefault(key, []).append(example["path"])
    return dict(sorted(names.items()))


IMPORTED = _imported_names()


def resolve(key: str) -> str | None:
    """None when ``from module import name`` (or ``import module``) works, else why not."""
    module_name, _, name = key.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        return f"import {module_name} fails: {exc}"
    if not name or name == "*" or hasattr(module, name):
        return None
    try:  # `from package import submodule`
        importlib.import_module(f"{module_name}.{name}")
    except ImportError:
        return f"{module_name} has no name {name!r}"
    return None


@pytest.mark.parametrize("key", list(IMPORTED))
def test_upstream_example_name_resolves(key: str) -> None:
    """The name imports at upstream's path (or is listed, with a reason, as missing)."""
    problem = resolve(key)
    if key in EXPECTED_MISSING:
        assert problem is not None, f"{key} now resolves: remove it from EXPECTED_MISSING"
        pytest.xfail(f"{EXPECTED_MISSING[key]}: {problem}")
    examples = ", ".join(IMPORTED[key])
    assert problem is None, f"{problem} (imported by {examples})"


def test_expected_missing_names_are_in_the_corpus() -> None:
    """Every listed name is one the corpus imports (no leftovers after a re-collect)."""
    assert sorted(set(EXPECTED_MISSING) - set(IMPORTED)) == []


def test_corpus_is_whole() -> None:
    """The data covers upstream's corpus: programs, their imports, the service rule."""
    corpus = _corpus()
    programs = [e for e in corpus["examples"] if e["is_program"]]
    assert len(programs) >= 140
    assert len(corpus["commit"]) == 40
    for example in programs:
        assert example["path"].startswith("docs/examples/")
        assert example["needs_service"] == bool(example["service_reasons"])
    assert any(e["needs_service"] for e in programs)
    assert any(not e["needs_service"] for e in programs)
