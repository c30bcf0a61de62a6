"""A small gated MCP server written with the official Python SDK (mcp 1.x, low-level API), for
`tests/load.rs`: a second, independent implementation for `turnstile load` to load, and, on
request, one that breaks the gating contract on purpose.

Each session owns one ticket: new --start--> working --finish--> done (final). `ticket.log_work`
is listed while working and moves nothing; `ticket.status` is always listed and read-only. A
tool outside its states is refused the way the contract defines a refusal: an `isError` result
whose `structuredContent.error.code` is `FORBIDDEN`. A transition sends
`notifications/tools/list_changed` to the session that made it.

Usage: python ticket_server.py MODE, MODE being
  good            keeps the contract;
  forbid-listed   lists `ticket.finish` while working but refuses it (FORBIDDEN);
  wrong-session   sends each transition's list_changed to another live session, not the caller's.

Prints its endpoint (`http://127.0.0.1:PORT/mcp`) on stdout once it listens.
"""

import logging
import socket
import sys
import weakref
from contextlib import asynccontextmanager

import anyio
import mcp.types as types
import uvicorn
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.routing import Route

MODE = sys.argv[1] if len(sys.argv) > 1 else "good"
assert MODE in ("good", "forbid-listed", "wrong-session"), f"unknown mode {MODE}"

TOOLS = {
    "ticket.start": types.Tool(
        name="ticket.start",
        description="Open the ticket.",
        inputSchema={
            "type": "object",
            "properties": {
                "title": {"type": "string", "minLength": 1, "maxLength": 40},
                "priority": {"type": "integer", "minimum": 1, "maximum": 5},
            },
            "required": ["title", "priority"],
            "additionalProperties": False,
        },
    ),
    "ticket.log_work": types.Tool(
        name="ticket.log_work",
        description="Log hours on the ticket.",
        inputSchema={
            "type": "object",
            "properties": {
                "hours": {"type": "number", "exclusiveMinimum": 0, "maximum": 8},
                "tags": {
                    "type": "array",
                    "items": {"enum": ["bug", "ops", "docs"]},
                    "uniqueItems": True,
                },
            },
            "required": ["hours"],
        },
    ),
    "ticket.finish": types.Tool(
        name="ticket.finish",
        description="Close the ticket.",
        inputSchema={
            "type": "object",
            "properties": {"resolution": {"enum": ["fixed", "wontfix"]}},
            "required": ["resolution"],
        },
    ),
    "ticket.status": types.Tool(
        name="ticket.status",
        description="The ticket's state.",
        inputSchema={"type": "object", "properties": {}},
        annotations=types.ToolAnnotations(readOnlyHint=True),
    ),
}

# Which tools each state lists, and where a tool takes the ticket.
MENU = {
    "new": ["ticket.start", "ticket.status"],
    "working": ["ticket.log_work", "ticket.finish", "ticket.status"],
    "done": ["ticket.status"],
}
MOVES = {("new", "ticket.start"): "working", ("working", "ticket.finish"): "done"}

class TicketServer(Server):
    """Declares `tools.listChanged`, which the SDK only does when asked."""

    def create_initialization_options(self, notification_options=None, experimental_capabilities=None):
        return super().create_initialization_options(
            NotificationOptions(tools_changed=True), experimental_capabilities
        )


server = TicketServer("ticket-server")
# Per session: its ticket's state; and every live session, for the wrong-session mode.
states: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
live: "weakref.WeakSet" = weakref.WeakSet()


def current_session():
    session = server.request_context.session
    live.add(session)
    return session


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    state = states.get(current_session(), "new")
    return [TOOLS[name] for name in MENU[state]]


def refusal(name: str, state: str) -> types.CallToolResult:
    allowed = MENU[state]
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{name} is not available in state {state}")],
        structuredContent={"error": {"code": "FORBIDDEN", "tool": name, "state": state,
                                     "allowed": allowed}},
        isError=True,
    )


@server.call_tool()
async def call_tool(name: str, arguments: dict) -> types.CallToolResult:
    session = current_session()
    state = states.get(session, "new")
    if name not in TOOLS:
        raise ValueError(f"unknown tool {name}")
    if name not in MENU[state]:
        return refusal(name, state)
    if MODE == "forbid-listed" and name == "ticket.finish":
        return refusal(name, state)
    after = MOVES.get((state, name), state)
    states[session] = after
    if after != state:
        if MODE == "wrong-session":
            others = [other for other in list(live) if other is not session]
            if others:
                await others[0].send_tool_list_changed()
        else:
            await session.send_tool_list_changed()
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"ticket is {after}")],
        structuredContent={"state": after},
    )


def main() -> None:
    # mcp 1.30 logs a traceback (ERROR "Error in standalone SSE writer") each time a session with
    # an open GET stream ends, and a WARNING for each call of a tool the caller's menu lacks
    # (which a load tester's probes are): neither is a fault of this server or of its client.
    logging.getLogger("mcp.server.streamable_http").setLevel(logging.CRITICAL)
    logging.getLogger("mcp.server.lowlevel.server").setLevel(logging.ERROR)
    manager = StreamableHTTPSessionManager(app=server, stateless=False)

    @asynccontextmanager
    async def lifespan(_app):
        async with manager.run():
            yield

    class Endpoint:
        """A plain ASGI app, so Starlette hands it the raw request (SSE included)."""

        async def __call__(self, scope, receive, send):
            await manager.handle_request(scope, receive, send)

    app = Starlette(routes=[Route("/mcp", endpoint=Endpoint())], lifespan=lifespan)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit it: without, every answer waits ~40 ms for a delayed ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    print(f"http://127.0.0.1:{port}/mcp", flush=True)
    config = uvicorn.Config(app, log_level="warning")
    anyio.run(uvicorn.Server(config).serve, [sock])


if __name__ == "__main__":
    main()
