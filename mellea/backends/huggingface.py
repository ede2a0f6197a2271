"""Upstream's Hugging Face backend name, served by our local engine."""

from __future__ import annotations

from typing import Any

from mellea.backends.local import LocalBackend


class LocalHFBackend(LocalBackend):
    """Upstream's ``LocalHFBackend`` constructor over :class:`LocalBackend`.

    ``formatter`` and the cache options are accepted and have no effect (the engine
    applies the model's chat template and keeps its own prefix cache). Adapters:
    upstream's ``add_adapter``/``list_adapters``/``base_model_name`` (see
    :mod:`mellea.backends.adapters`); ``default_to_constraint_checking_alora`` routes
    plain requirement checks to an added ``requirement-check`` aLoRA.
    """

    def __init__(
        self,
        model_id: Any = None,
        formatter: Any = None,
        use_caches: bool = True,
        cache: Any = None,
        custom_config: Any = None,
        default_to_constraint_checking_alora: bool = True,
        model_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Load ``model_id`` (a name, a directory or a ``ModelIdentifier``) on the local engine."""
        del use_caches, cache, custom_config
        super().__init__(model_id, model_options=model_options, **kwargs)
        self.formatter = formatter
        self.default_to_constraint_checking_alora = default_to_constraint_checking_alora


__all__ = ["LocalHFBackend"]
