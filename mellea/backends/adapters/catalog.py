"""The catalog of adapter functions ("intrinsics") mellea knows by name.

Each entry says where upstream publishes the LoRA and aLoRA adapters that implement a
function: a Hugging Face repository and a pinned revision. There is no model hub
here: :mod:`mellea.backends.adapters.locate` finds the same files in a local
directory, and names this repository when they are missing.
"""

from __future__ import annotations

import enum

import pydantic


def validate_revision(revision: str) -> str:
    """A hub revision (branch, tag or commit): non-empty, without surrounding spaces."""
    if not revision.strip():
        raise ValueError("revision must be a non-empty string")
    if revision != revision.strip():
        raise ValueError("revision must not have leading or trailing whitespace")
    return revision


class AdapterType(enum.Enum):
    """A LoRA adapter, or an activated LoRA (its weights apply from its invocation
    tokens on, so the base model's cache of everything before is reused)."""

    LORA = "lora"
    ALORA = "alora"


class IntrinsicsCatalogEntry(pydantic.BaseModel):
    """One adapter function: its name, capability token and where its adapters live."""

    name: str
    capability: str | None = None
    internal_name: str | None = None
    repo_id: str
    revision: str
    adapter_types: tuple[AdapterType, ...] = (AdapterType.LORA, AdapterType.ALORA)

    @pydantic.field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not value.strip() or value != value.strip():
            raise ValueError("name must be non-empty, without leading or trailing whitespace")
        return value

    @pydantic.field_validator("revision")
    @classmethod
    def _check_revision(cls, value: str) -> str:
        return validate_revision(value)

    @property
    def effective_capability(self) -> str:
        """The capability token: ``capability`` when set, else ``name``."""
        return self.capability if self.capability is not None else self.name


_RAG_REPO = "ibm-granite/granitelib-rag-r1.0"
_CORE_R1_REPO = "ibm-granite/granitelib-core-r1.0"
_GUARDIAN_REPO = "ibm-granite/granitelib-guardian-r1.0"

# The revisions upstream pins (its catalog at the commit tests/compat was collected from).
_RAG_SHA = "2f0b2c79c6731068625aca8045c2eb2e8912b353"
_CORE_R1_SHA = "d0a2a96a4cd07e96f0fe7ca29a42bfe088299d43"
_GUARDIAN_SHA = "773b254e98f993a605ec4b6259634906e0e64e8e"


def _entry(name: str, repo: str, sha: str, capability: str | None = None) -> IntrinsicsCatalogEntry:
    return IntrinsicsCatalogEntry(name=name, capability=capability, repo_id=repo, revision=sha)


_INTRINSICS_CATALOG_ENTRIES: list[IntrinsicsCatalogEntry] = [
    # core
    _entry("context-attribution", _CORE_R1_REPO, _CORE_R1_SHA, "context_attribution"),
    _entry("requirement-check", _CORE_R1_REPO, _CORE_R1_SHA, "requirement_check"),
    _entry("uncertainty", _CORE_R1_REPO, _CORE_R1_SHA),
    # RAG
    _entry("answerability", _RAG_REPO, _RAG_SHA),
    _entry("citations", _RAG_REPO, _RAG_SHA),
    _entry("context_relevance", _RAG_REPO, _RAG_SHA),  # Granite 4.0 only upstream
    _entry("hallucination_detection", _RAG_REPO, _RAG_SHA),
    _entry("query_clarification", _RAG_REPO, _RAG_SHA),
    _entry("query_rewrite", _RAG_REPO, _RAG_SHA),
    # guardian
    _entry("policy-guardrails", _GUARDIAN_REPO, _GUARDIAN_SHA, "policy_guardrails"),
    _entry("guardian-core", _GUARDIAN_REPO, _GUARDIAN_SHA, "guardian_core"),
    _entry("factuality-detection", _GUARDIAN_REPO, _GUARDIAN_SHA, "factuality_detection"),
    _entry("factuality-correction", _GUARDIAN_REPO, _GUARDIAN_SHA, "factuality_correction"),
]

# Upstream's catalog is process-wide and `CustomIntrinsicAdapter` adds to it, so a
# program's own adapter function can be named by `Intrinsic(...)`; ours does the same.
_INTRINSICS_CATALOG: dict[str, IntrinsicsCatalogEntry] = {
    e.name: e for e in _INTRINSICS_CATALOG_ENTRIES
}


def known_intrinsic_names() -> list[str]:
    """Every adapter function name the catalog knows."""
    return list(_INTRINSICS_CATALOG)


def fetch_intrinsic_metadata(intrinsic_name: str) -> IntrinsicsCatalogEntry:
    """The catalog entry for ``intrinsic_name`` (a copy); a ValueError lists the known names."""
    entry = _INTRINSICS_CATALOG.get(intrinsic_name)
    if entry is None:
        raise ValueError(
            f"Unknown intrinsic name '{intrinsic_name}'. Valid names are {known_intrinsic_names()}"
        )
    return entry.model_copy()


def add_catalog_entry(entry: IntrinsicsCatalogEntry) -> None:
    """Make ``entry`` known by its name (what `CustomIntrinsicAdapter` does); an
    existing name is kept."""
    if entry.name not in _INTRINSICS_CATALOG:
        _INTRINSICS_CATALOG_ENTRIES.append(entry)
        _INTRINSICS_CATALOG[entry.name] = entry


__all__ = [
    "AdapterType",
    "IntrinsicsCatalogEntry",
    "add_catalog_entry",
    "fetch_intrinsic_metadata",
    "known_intrinsic_names",
    "validate_revision",
]
