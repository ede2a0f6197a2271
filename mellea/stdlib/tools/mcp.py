"""Tools served by MCP servers, as ``MelleaTool`` s (needs the ``mcp`` package).

``discover_mcp_tools(connection)`` lists a server's tools as :class:`MCPToolSpec` s;
``spec.as_mellea_tool()`` gives a tool that opens a session per call. Connections
come from :func:`http_connection`, :func:`sse_connection` or :func:`stdio_connection`.
Without ``mcp`` installed, opening a session raises an ImportError naming it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import Any

from mellea.core.optional import import_optional

MCP_MISSING = "MCP tools need the 'mcp' package; install it with `pip install mcp`"


def _mcp() -> Any:
    return import_optional("mcp", MCP_MISSING)


class MCPToolSpec:
    """One tool of an MCP server: name, description, parameter schema and connection."""

    def __init__(
        self, name: str, description: str, input_schema: dict[str, Any], connection: dict[str, Any]
    ) -> None:
        self.name = name
        self.description = description
        self.input_schema = input_schema
        self._connection = connection

    def as_mellea_tool(self) -> Any:
        """A ``MelleaTool`` calling this tool (a fresh session per call)."""
        from mellea.backends.tools import MelleaTool

        schema = {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema,
            },
        }
        return MelleaTool(self.name, _sync_caller(self._connection, self.name), schema)

    def __repr__(self) -> str:
        return f"MCPToolSpec(name={self.name!r})"


def _headers(api_key: str | None, headers: dict[str, str] | None) -> dict[str, str]:
    found = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    found.update(headers or {})
    return found


def http_connection(
    url: str,
    *,
    api_key: str | None = None,
    headers: dict[str, str] | None = None,
    connect_timeout: float = 30.0,
    read_timeout: float = 300.0,
) -> dict[str, Any]:
    """A Streamable HTTP connection (``api_key`` becomes a bearer token)."""
    return {
        "transport": "streamable_http",
        "url": url,
        "headers": _headers(api_key, headers),
        "connect_timeout": connect_timeout,
        "read_timeout": read_timeout,
    }


def sse_connection(
    url: str,
    *,
    api_key: str | None = None,
    headers: dict[str, str] | None = None,
    connect_timeout: float = 30.0,
    read_timeout: float = 300.0,
) -> dict[str, Any]:
    """An SSE connection (``api_key`` becomes a bearer token)."""
    return {
        **http_connection(
            url,
            api_key=api_key,
            headers=headers,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
        ),
        "transport": "sse",
    }


def stdio_connection(
    command: str,
    *,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300.0,
) -> dict[str, Any]:
    """A server run as a child process speaking MCP on its stdin/stdout."""
    connection: dict[str, Any] = {"transport": "stdio", "command": command, "read_timeout": timeout}
    if args:
        connection["args"] = list(args)
    if env:
        connection["env"] = dict(env)
    return connection


@asynccontextmanager
async def _open_session(connection: dict[str, Any]) -> AsyncGenerator[Any, None]:
    """An initialized MCP client session over the connection's transport."""
    _mcp()
    from mcp import ClientSession

    transport = connection.get("transport", "streamable_http")
    connect = connection.get("connect_timeout", 30.0)
    read_timeout = connection.get("read_timeout", 300.0)
    if transport == "streamable_http":
        from mcp.client import streamable_http

        client = (
            getattr(streamable_http, "streamablehttp_client", None)
            or streamable_http.streamable_http_client
        )
        async with (
            client(
                connection["url"],
                headers=connection.get("headers") or None,
                timeout=connect,
                sse_read_timeout=read_timeout,
            ) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await session.initialize()
            yield session
    elif transport == "sse":
        from mcp.client.sse import sse_client

        async with (
            sse_client(
                url=connection["url"],
                headers=connection.get("headers") or None,
                timeout=connect,
                sse_read_timeout=read_timeout,
            ) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session
    elif transport == "stdio":
        from mcp import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=connection["command"],
            args=connection.get("args", []),
            env=connection.get("env"),
        )
        async with (
            asyncio.timeout(read_timeout),
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session
    else:
        raise ValueError(f"unknown MCP transport {transport!r}")


async def discover_mcp_tools(connection: dict[str, Any]) -> list[MCPToolSpec]:
    """The server's tools (one session, opened and closed)."""
    async with _open_session(connection) as session:
        listed = await session.list_tools()
    return [
        MCPToolSpec(t.name, t.description or "", t.inputSchema or {}, connection)
        for t in listed.tools
    ]


def flatten_content(result: Any) -> str:
    """An MCP call result as text: text blocks and embedded text resources; binary
    content as ``[binary: type]``; an error result as ``[tool error] ...``."""
    parts: list[str] = []
    for block in getattr(result, "content", None) or []:
        text = getattr(block, "text", None)
        resource = getattr(block, "resource", None)
        if isinstance(text, str):
            parts.append(text)
        elif resource is not None and isinstance(getattr(resource, "text", None), str):
            parts.append(resource.text)
        elif getattr(block, "mimeType", None) or (
            resource is not None and getattr(resource, "mimeType", None)
        ):
            parts.append(f"[binary: {getattr(block, 'mimeType', None) or resource.mimeType}]")
        elif getattr(block, "uri", None) is not None:
            parts.append(f"[resource: {block.uri}]")
    if getattr(result, "isError", False):
        return "[tool error] " + ("\n".join(parts) or "tool call failed")
    return "\n".join(parts)


async def _call(connection: dict[str, Any], name: str, arguments: dict[str, Any]) -> str:
    async with _open_session(connection) as session:
        return flatten_content(await session.call_tool(name, arguments=arguments))


def _sync_caller(connection: dict[str, Any], name: str) -> Callable[..., str]:
    def call(**kwargs: Any) -> str:
        from mellea.core._sync import run_sync

        # MCP servers expect a missing field, not null
        return run_sync(_call(connection, name, {k: v for k, v in kwargs.items() if v is not None}))

    return call


__all__ = [
    "MCPToolSpec",
    "discover_mcp_tools",
    "http_connection",
    "sse_connection",
    "stdio_connection",
]
