"""Upload a trained adapter to the Hugging Face Hub, plainly or in the intrinsic layout.

The intrinsic layout (upstream's) puts the adapter under
``<intrinsic name>/<base model name>/<lora|alora>/`` in the repository, beside its
``io.yaml``, and an ``INTRINSIC_README.md`` in the adapter directory becomes the
repository's ``README.md``. Both need a Hugging Face token (``hf auth login`` or
``HF_TOKEN``) and network access to the hub; without either the upload stops with a
message saying which.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal


class UploadError(RuntimeError):
    """Why an upload cannot go ahead (no adapter, no token, the hub unreachable)."""


def adapter_info(weight_path: str | Path) -> tuple[str, Literal["lora", "alora"]]:
    """``(base model, adapter type)`` from the adapter directory's ``adapter_config.json``."""
    config_path = Path(weight_path) / "adapter_config.json"
    if not config_path.is_file():
        raise UploadError(f"{weight_path} is not an adapter directory (no adapter_config.json)")
    config = json.loads(config_path.read_text())
    base = config.get("base_model_name_or_path")
    if not base:
        raise UploadError(f"{config_path} names no base_model_name_or_path")
    return str(base), "alora" if config.get("alora_invocation_tokens") else "lora"


def intrinsic_path(model_name: str, base_model: str, adapter_type: str) -> str:
    """Where in the repository an intrinsic's adapter goes."""
    parts = model_name.split("/")
    if len(parts) != 2 or not all(parts):
        raise UploadError(f"--name must be <owner>/<intrinsic name>, not {model_name!r}")
    return f"{parts[1]}/{Path(base_model.rstrip('/')).name}/{adapter_type}"


def hub_api() -> tuple[Any, str]:
    try:
        import huggingface_hub
    except ImportError:
        raise UploadError("uploading needs the huggingface_hub package") from None
    token = huggingface_hub.get_token()
    if token is None:
        raise UploadError(
            "no Hugging Face token: run `hf auth login` or set HF_TOKEN (uploading needs "
            "the hub, which this machine may not reach)"
        )
    return huggingface_hub.HfApi(token=token), token


def on_hub(action: str, call: Any) -> Any:
    try:
        return call()
    except Exception as exc:  # network and hub errors, in whatever class the client raises
        raise UploadError(f"could not {action} on the Hugging Face Hub: {exc}") from exc


def upload_model(weight_path: str, model_name: str, private: bool = True) -> str:
    """Upload the adapter directory as the repository ``model_name``; returns its URL."""
    adapter_info(weight_path)
    api, _ = hub_api()
    url = on_hub(
        f"create {model_name}",
        lambda: api.create_repo(repo_id=model_name, private=private, exist_ok=True),
    )
    on_hub(
        f"upload to {model_name}",
        lambda: api.upload_folder(
            repo_id=model_name, folder_path=weight_path, commit_message="Upload adapter weights."
        ),
    )
    return str(url)


def upload_intrinsic(
    weight_path: str,
    model_name: str,
    base_model: str,
    type: Literal["lora", "alora"],
    io_yaml: str,
    private: bool = True,
) -> str:
    """Upload the adapter and ``io_yaml`` in the intrinsic layout; returns the repository URL."""
    if not Path(io_yaml).is_file():
        raise UploadError(f"no io.yaml at {io_yaml}")
    target = intrinsic_path(model_name, base_model, type)
    api, _ = hub_api()
    url = on_hub(
        f"create {model_name}",
        lambda: api.create_repo(repo_id=model_name, private=private, exist_ok=True),
    )
    with tempfile.TemporaryDirectory() as staging:
        folder = Path(staging) / "adapter"
        shutil.copytree(weight_path, folder, ignore=shutil.ignore_patterns("README.md"))
        shutil.copy2(io_yaml, folder / "io.yaml")
        on_hub(
            f"upload to {model_name}",
            lambda: api.upload_folder(
                repo_id=model_name,
                folder_path=str(folder),
                path_in_repo=target,
                commit_message="Upload adapter weights as intrinsic.",
            ),
        )
    readme = Path(weight_path) / "INTRINSIC_README.md"
    if readme.is_file():
        on_hub(
            f"upload the README to {model_name}",
            lambda: api.upload_file(
                path_or_fileobj=str(readme), path_in_repo="README.md", repo_id=model_name
            ),
        )
    return str(url)
