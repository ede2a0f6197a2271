"""Write down upstream mellea's example corpus as data: what each example imports.

Usage (from the repository root, with a fetched copy of upstream mellea)::

    python tests/compat/upstream_examples/collect.py GIT_DIR [--rev HEAD] [--out PATH]

``GIT_DIR`` is a git directory (bare or not) of github.com/generative-computing/mellea.
The script reads ``docs/examples/**/*.py`` at ``--rev`` with ``git ls-tree`` and
``git show`` (no work tree needed) and writes ``examples.json`` beside itself: per
example its path, the ``mellea``/``cli`` names it imports (module and name, from its
syntax tree), upstream's ``# pytest:`` markers, and whether it needs an outside
service, with the reasons. The examples' text is not copied.

The rule for "needs an outside service" (any one reason is enough):

* it imports a package outside our declared runtime dependencies and the standard
  library (an *extra package*), or upstream's test helpers (``test.*``);
* it names a backend that talks to something outside this process: Ollama,
  an OpenAI-compatible server, LiteLLM, watsonx, Bedrock, vLLM;
* it loads a model other than the bundled one: a ``model_id`` given to
  ``start_session``/``start_backend`` or a Hugging Face backend (a hub download);
* upstream marks it ``huggingface`` (intrinsic adapters come from the hub), ``vllm``,
  ``openai`` or ``litellm``;
* it reads an API key, token or endpoint from the environment;
* it is a client that calls a running server over HTTP (``openai.OpenAI(...)``,
  ``requests``/``httpx`` calls);
* it uses a name whose work needs an extra package (``RichDocument``: docling), or
  asks a tool to install packages (``packages=[...]``: PyPI), or picks an Ollama
  backend through an enum (``DecompBackend.ollama``).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

EXAMPLES_ROOT = "docs/examples"
HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "examples.json"

# Import names of our declared runtime dependencies (pyproject.toml [project]).
OUR_PACKAGES = {
    "torch",
    "transformers",
    "safetensors",
    "gguf",
    "accelerate",
    "huggingface_hub",
    "fastapi",
    "uvicorn",
    "uvloop",
    "httptools",
    "sse_starlette",
    "pydantic",
    "typer",
    "openai",
    "httpx",
    "rich",
    "watchfiles",
    "llguidance",
    "prometheus_client",
    "jinja2",
    "typing_extensions",
}
CHECKED_ROOTS = ("mellea", "cli")

# Backends and what they reach (class names and start_session names).
OUTSIDE_BACKENDS = {
    "OllamaModelBackend": "needs an Ollama server",
    "OpenAIBackend": "needs an OpenAI-compatible server",
    "LiteLLMBackend": "hosted backend through LiteLLM",
    "WatsonxAIBackend": "hosted backend: watsonx",
    "LocalVLLMBackend": "needs vLLM",
    "LocalHFBackend": "loads a Hugging Face hub model",
}
OUTSIDE_BACKEND_NAMES = {
    "ollama": "needs an Ollama server",
    "openai": "needs an OpenAI-compatible server",
    "litellm": "hosted backend through LiteLLM",
    "watsonx": "hosted backend: watsonx",
    "vllm": "needs vLLM",
    "hf": "loads a Hugging Face hub model",
    "huggingface": "loads a Hugging Face hub model",
}
OUTSIDE_BACKEND_MODULES = {
    "mellea.backends.ollama": "needs an Ollama server",
    "mellea.backends.openai": "needs an OpenAI-compatible server",
    "mellea.backends.litellm": "hosted backend through LiteLLM",
    "mellea.backends.watsonx": "hosted backend: watsonx",
    "mellea.backends.bedrock": "hosted backend: Bedrock",
    "mellea.backends.vllm": "needs vLLM",
    "mellea.backends.huggingface": "loads a Hugging Face hub model",
}
OUTSIDE_MARKERS = {
    "huggingface": "upstream marks it huggingface (hub model or adapters)",
    "vllm": "upstream marks it vllm (a vLLM server)",
    "openai": "upstream marks it openai (an OpenAI-compatible server)",
    "litellm": "upstream marks it litellm",
}
SECRET_ENV = re.compile(r"(API_KEY|TOKEN|SECRET|_URL|ENDPOINT|_HOST|APIKEY|PROJECT_ID)")
# Names whose work needs an extra package even though importing them does not.
NAMES_NEEDING_PACKAGES = {"RichDocument": "docling", "Table": "docling"}
HTTP_CALLERS = {("openai", "OpenAI"), ("openai", "AsyncOpenAI")}


def git(git_dir: str, *args: str) -> str:
    """Run git against ``git_dir`` and return its stdout."""
    return subprocess.run(
        ["git", "--git-dir", git_dir, *args], check=True, capture_output=True, text=True
    ).stdout


def example_paths(git_dir: str, rev: str) -> list[str]:
    """Every ``.py`` file under docs/examples at ``rev``, sorted."""
    names = git(git_dir, "ls-tree", "-r", "--name-only", rev, EXAMPLES_ROOT).splitlines()
    return sorted(n for n in names if n.endswith(".py"))


def markers(source: str) -> list[str]:
    """Upstream's ``# pytest: a, b`` markers from the head of a file."""
    for line in source.splitlines()[:10]:
        line = line.strip()
        if line.startswith("# pytest:"):
            return [m.strip() for m in line[len("# pytest:") :].split(",") if m.strip()]
    return []


def imported_names(tree: ast.AST) -> list[dict]:
    """The ``mellea``/``cli`` names a module imports: module, name (None for a module)."""
    found: list[dict] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in CHECKED_ROOTS:
                    found.append({"module": alias.name, "name": None, "line": node.lineno})
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module.split(".")[0] in CHECKED_ROOTS
        ):
            for alias in node.names:
                found.append({"module": node.module, "name": alias.name, "line": node.lineno})
    unique: dict[tuple, dict] = {}
    for item in sorted(found, key=lambda i: i["line"]):
        unique.setdefault((item["module"], item["name"]), item)
    return list(unique.values())


def top_level_imports(tree: ast.AST) -> set[str]:
    """Top-level package names of absolute imports."""
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def _string_value(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _call_name(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def service_reasons(path: str, source: str, tree: ast.AST, siblings: set[str]) -> list[str]:
    """Why an example needs something outside this process (empty: it needs nothing)."""
    reasons: list[str] = []
    for root in sorted(top_level_imports(tree)):
        if root in CHECKED_ROOTS or root in OUR_PACKAGES or root in sys.stdlib_module_names:
            continue
        if root == "docs" or root in siblings:
            continue  # upstream's own corpus (helpers, sibling modules)
        if root == "test":
            reasons.append("imports upstream's test helpers (test.*)")
        else:
            reasons.append(f"extra package: {root}")
    for item in imported_names(tree):
        reason = OUTSIDE_BACKEND_MODULES.get(item["module"])
        if reason:
            reasons.append(f"{reason} ({item['module']})")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node)
        if name in OUTSIDE_BACKENDS:
            reasons.append(f"{OUTSIDE_BACKENDS[name]} ({name})")
        if name in ("start_session", "start_backend"):
            backend = _string_value(node.args[0]) if node.args else None
            for kw in node.keywords:
                if kw.arg == "backend_name":
                    backend = _string_value(kw.value)
                if kw.arg == "model_id":
                    reasons.append(
                        f"loads a model other than the bundled one ({name}(model_id=...))"
                    )
            if backend and backend.lower() in OUTSIDE_BACKEND_NAMES:
                reasons.append(f"{OUTSIDE_BACKEND_NAMES[backend.lower()]} ({name}({backend!r}))")
        if name in ("getenv", "get") or (
            isinstance(node.func, ast.Attribute) and node.func.attr == "getenv"
        ):
            key = _string_value(node.args[0]) if node.args else None
            if key and key.isupper() and SECRET_ENV.search(key):
                reasons.append(f"reads {key} from the environment")
        if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
            owner = node.func.value.id
            if (owner, node.func.attr) in HTTP_CALLERS:
                reasons.append("calls a running server over HTTP (openai client)")
            if owner in ("requests", "httpx") and node.func.attr in ("get", "post", "stream"):
                reasons.append(f"calls a server over HTTP ({owner}.{node.func.attr})")
    for item in imported_names(tree):
        if item["module"].startswith("mellea.") and item["name"] in NAMES_NEEDING_PACKAGES:
            package = NAMES_NEEDING_PACKAGES[item["name"]]
            reasons.append(f"extra package: {package} (for {item['name']})")
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "packages":
            reasons.append("installs packages on demand (packages=..., PyPI)")
        if (
            isinstance(node, ast.Attribute)
            and node.attr in OUTSIDE_BACKEND_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id.endswith("Backend")
        ):
            reasons.append(f"{OUTSIDE_BACKEND_NAMES[node.attr]} ({node.value.id}.{node.attr})")
        if isinstance(node, ast.Subscript) and _string_value(node.slice):
            key = _string_value(node.slice)
            if (
                isinstance(node.value, ast.Attribute)
                and node.value.attr == "environ"
                and key.isupper()
                and SECRET_ENV.search(key)
            ):
                reasons.append(f"reads {key} from the environment")
    for marker in markers(source):
        if marker in OUTSIDE_MARKERS:
            reasons.append(OUTSIDE_MARKERS[marker])
    return list(dict.fromkeys(reasons))


def describe(path: str, source: str, siblings: set[str]) -> dict:
    """One example's record."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        return {"path": path, "syntax_error": str(exc), "imports": [], "needs_service": None}
    reasons = service_reasons(path, source, tree, siblings)
    name = path.rsplit("/", 1)[-1]
    return {
        "path": path,
        "is_program": name not in ("__init__.py", "conftest.py"),
        "upstream_markers": markers(source),
        "imports": imported_names(tree),
        "needs_service": bool(reasons),
        "service_reasons": reasons,
    }


def collect(git_dir: str, rev: str) -> dict:
    """The whole corpus record at ``rev``."""
    commit = git(git_dir, "rev-parse", rev).strip()
    paths = example_paths(git_dir, rev)
    modules_by_dir: dict[str, set[str]] = {}
    for p in paths:
        folder, _, name = p.rpartition("/")
        modules_by_dir.setdefault(folder, set()).add(name[:-3])
    examples = []
    for p in paths:
        source = git(git_dir, "show", f"{commit}:{p}")
        examples.append(describe(p, source, modules_by_dir[p.rpartition("/")[0]]))
    programs = [e for e in examples if e.get("is_program")]
    return {
        "source": "https://github.com/generative-computing/mellea",
        "commit": commit,
        "examples_root": EXAMPLES_ROOT,
        "generated_by": "tests/compat/upstream_examples/collect.py",
        "service_rule": __doc__.split("The rule for", 1)[1].strip(),
        "counts": {
            "files": len(examples),
            "programs": len(programs),
            "programs_needing_no_service": sum(1 for e in programs if not e["needs_service"]),
        },
        "examples": examples,
    }


def main() -> None:
    """Parse arguments, collect, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("git_dir", help="git directory of upstream mellea")
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    data = collect(args.git_dir, args.rev)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{args.out}: {data['counts']}")


if __name__ == "__main__":
    main()
