"""The request and result formatting of adapter functions (intrinsics), from their io.yaml."""

from mellea.formatters.granite.intrinsics.input import IntrinsicsRewriter
from mellea.formatters.granite.intrinsics.output import IntrinsicsResultProcessor
from mellea.formatters.granite.intrinsics.util import obtain_io_yaml, obtain_lora

__all__ = ("IntrinsicsResultProcessor", "IntrinsicsRewriter", "obtain_io_yaml", "obtain_lora")
