"""Plugins: handlers that observe, change or block what a program does at named hook points.

::

    from mellea.plugins import HookType, block, hook, register

    @hook(HookType.GENERATION_PRE_CALL)
    async def no_long_prompts(payload, ctx):
        if len(str(payload.action)) > 2000:
            return block("prompt too long", code="TOO_LONG")

    register(no_long_prompts)
"""

from __future__ import annotations

from mellea.plugins.base import Plugin, PluginResult, PluginViolationError
from mellea.plugins.decorators import hook
from mellea.plugins.manager import is_internal_tool
from mellea.plugins.pluginset import PluginSet
from mellea.plugins.registry import block, modify, plugin_scope, register, unregister
from mellea.plugins.types import HookType, PluginMode

__all__ = [
    "HookType",
    "Plugin",
    "PluginMode",
    "PluginResult",
    "PluginSet",
    "PluginViolationError",
    "block",
    "hook",
    "is_internal_tool",
    "modify",
    "plugin_scope",
    "register",
    "unregister",
]
