"""The ``Intrinsic`` component: run a named adapter function on a conversation."""

from __future__ import annotations

from mellea.backends.adapters.catalog import AdapterType, fetch_intrinsic_metadata
from mellea.core.base import Component, Span, TemplateRepresentation
from mellea.core.thunk import ModelOutputThunk


class Intrinsic(Component[str]):
    """An adapter function from the catalog, as the action of ``act``/``aact``.

    The backend runs the adapter that implements ``intrinsic_name`` on the context
    (its ``io.yaml`` shapes the request, ``intrinsic_kwargs`` fill its instruction)
    and the output is the function's result as JSON text. ``adapter_types`` orders
    the adapter kinds tried (default: the catalog's).
    """

    def __init__(
        self,
        intrinsic_name: str,
        intrinsic_kwargs: dict | None = None,
        adapter_types: tuple[AdapterType, ...] | None = None,
    ) -> None:
        self.metadata = fetch_intrinsic_metadata(intrinsic_name)
        self.intrinsic_kwargs = dict(intrinsic_kwargs or {})
        self._adapter_types = adapter_types

    @property
    def intrinsic_name(self) -> str:
        """The adapter function's catalog name."""
        return self.metadata.name

    @property
    def adapter_types(self) -> tuple[AdapterType, ...]:
        """The adapter kinds that may run it, in the order they are tried."""
        if self._adapter_types is not None:
            return self._adapter_types
        return self.metadata.adapter_types

    def parts(self) -> list[Span]:
        """An intrinsic has no sub-parts."""
        return []

    def format_for_llm(self) -> TemplateRepresentation | str:
        """Not shown to a model: an intrinsic is an action, not part of a context."""
        raise NotImplementedError(
            "`Intrinsic` doesn't implement format_for_llm: use an Intrinsic as the action, "
            "not as a part of the context"
        )

    def _parse(self, computed: ModelOutputThunk) -> str:
        return computed.value if computed.value is not None else ""


__all__ = ["Intrinsic"]
