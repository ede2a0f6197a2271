"""The corpus collector's reading of an example: its imports and its service rule."""

from __future__ import annotations

from tests.compat.upstream_examples.collect import describe


def record(source: str, siblings: frozenset[str] = frozenset()) -> dict:
    return describe("docs/examples/x/example.py", source, set(siblings))


def test_imports_are_read_from_the_syntax_tree() -> None:
    found = record(
        "import mellea\n"
        "import mellea.stdlib.context as c\n"
        "from mellea.plugins import hook, HookType\n"
        "from cli.decompose.pipeline import decompose\n"
        "def f():\n    from mellea.stdlib.tools import python_tool\n"
        "import os, json\n"
        "text = 'from mellea.fake import nothing'\n"
    )["imports"]
    assert [(i["module"], i["name"]) for i in found] == [
        ("mellea", None),
        ("mellea.stdlib.context", None),
        ("mellea.plugins", "hook"),
        ("mellea.plugins", "HookType"),
        ("cli.decompose.pipeline", "decompose"),
        ("mellea.stdlib.tools", "python_tool"),
    ]


def test_an_example_on_the_default_session_needs_nothing() -> None:
    example = record(
        "# pytest: ollama, e2e\n"
        "import os, logging\nfrom pydantic import BaseModel\nfrom helpers import util\n"
        "from mellea import start_session\nm = start_session()\n",
        frozenset({"helpers"}),
    )
    assert example["needs_service"] is False and example["service_reasons"] == []
    assert example["upstream_markers"] == ["ollama", "e2e"]


def test_each_kind_of_outside_service_is_named() -> None:
    cases = {
        "import pandas\n": "extra package: pandas",
        "from mellea.backends.watsonx import WatsonxAIBackend\n": "hosted backend: watsonx",
        "m = start_session('ollama')\n": "needs an Ollama server",
        "m = start_session(model_id=X)\n": "loads a model other than the bundled one",
        "import os\nkey = os.environ['OPENAI_API_KEY']\n": "reads OPENAI_API_KEY",
        "import os\nurl = os.getenv('LLAMA_SERVER_URL')\n": "reads LLAMA_SERVER_URL",
        "import openai\nc = openai.OpenAI(base_url='http://0.0.0.0:8080/v1')\n": "calls a running server",
        "from mellea.stdlib.components.docs.richdocument import RichDocument\n": "docling",
        "python_tool(code, packages=['numpy'])\n": "installs packages on demand",
        "# pytest: huggingface, e2e\nx = 1\n": "upstream marks it huggingface",
    }
    for source, reason in cases.items():
        example = record(source)
        assert example["needs_service"] is True, source
        assert any(reason in r for r in example["service_reasons"]), (source, example)
