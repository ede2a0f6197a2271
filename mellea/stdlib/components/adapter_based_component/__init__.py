"""``AdapterBasedComponent``: a component whose answer comes from a LoRA/aLoRA adapter.

Upstream's newer name for :class:`~mellea.stdlib.components.intrinsic.Intrinsic`; the
two are the same class.
"""

from mellea.stdlib.components.intrinsic.intrinsic import Intrinsic as AdapterBasedComponent

__all__ = ["AdapterBasedComponent"]
