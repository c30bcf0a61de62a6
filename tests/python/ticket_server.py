"""A small gated MCP server written with the official Python SDK (mcp 1.x, low-level API), for
`tests/load.rs`: a second, independent implementation for `turnstile load` to load, and, on
request, one that breaks the gating contract on purpose.

Each session owns one ticket: new --start--> working --finish--> done (final). `ticket.log_work`
is listed while working and moves nothing; `ticket.status` is always listed and read-only. A
tool outside its states is refused the way the contract defines a refusal: an `isError` result
whose `structuredContent.error.code` is `FORBIDDEN`. A transition sends
`notifications/tools/list_changed` to the session that made it.

In the `handles*` modes tickets are shared instead, named by a handle (`turnstile load
--handle-key handle`): a `ticket.start` without one opens a new ticket (it answers the handle),
every other call names it in its `handle` argument, and a `tools/list` with `_meta.handle` lists
that ticket's tools. A session that named a ticket (or opened it) is subscribed to it, and each
transition notifies every subscribed session. Such a ticket never ends: `ticket.reopen` takes it
from done back to working.

Usage: python ticket_server.py MODE, MODE being
  good              keeps the contract;
  forbid-listed     lists `ticket.finish` while working but refuses it (FORBIDDEN);
  wrong-session     sends each transition's list_changed to another live session, not the caller's;
  handles           shared tickets, keeping the contract;
  handles-skip-one  shared tickets; each transition's list_changed skips one subscribed session
                    (not the caller);
  handles-twice     shared tickets; one subscribed session (not the caller) hears each transition
                    twice.

Prints its endpoint (`http://127.0.0.1:PORT/mcp`) on stdout once it listens.
"""

import logging
import socket
import sys
import uuid
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
assert MODE in (
    "good", "forbid-listed", "wrong-session", "handles", "handles-skip-one", "handles-twice"
), f"unknown mode {MODE}"
HANDLES = MODE.startswith("handles")

# Each tool spells out its own JSON Schema, as an independent server would; the alike shapes are
# deliberate.
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

if HANDLES:
    TOOLS["ticket.reopen"] = types.Tool(
        name="ticket.reopen",
        description="Reopen the ticket.",
        inputSchema={"type": "object", "properties": {}},
    )
    # Every tool but the one that opens a ticket names it by its handle.
    for name, tool in TOOLS.items():
        if name != "ticket.start":
            properties = dict(tool.inputSchema.get("properties", {}))
            properties["handle"] = {"type": "string"}
            required = list(tool.inputSchema.get("required", [])) + ["handle"]
            TOOLS[name] = tool.model_copy(
                update={"inputSchema": {**tool.inputSchema, "properties": properties,
                                        "required": required}}
            )
    MENU["done"] = ["ticket.reopen", "ticket.status"]
    MOVES[("done", "ticket.reopen")] = "working"

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
# In the handles modes: each ticket's state, and the sessions subscribed to it, by handle.
tickets: dict = {}
watchers: dict = {}


def current_session():
    session = server.request_context.session
    live.add(session)
    return session


def meta_handle():
    meta = server.request_context.meta
    extra = getattr(meta, "model_extra", None) or {}
    return extra.get("handle")


def touch(handle, session):
    watchers.setdefault(handle, weakref.WeakSet()).add(session)


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    session = current_session()
    if HANDLES:
        handle = meta_handle()
        if handle in tickets:
            touch(handle, session)
        return [TOOLS[name] for name in MENU[tickets.get(handle, "new")]]
    state = states.get(session, "new")
    return [TOOLS[name] for name in MENU[state]]


async def notify_watchers(handle, caller):
    """Each subscribed session hears the transition once, or, on purpose, not quite."""
    subscribed = list(watchers.get(handle, ()))
    others = [session for session in subscribed if session is not caller]
    for session in subscribed:
        times = 1
        if MODE == "handles-skip-one" and others and session is others[0]:
            times = 0
        if MODE == "handles-twice" and others and session is others[0]:
            times = 2
        for _ in range(times):
            await session.send_tool_list_changed()


async def call_shared(name: str, arguments: dict) -> types.CallToolResult:
    session = current_session()
    handle = arguments.get("handle")
    if handle is None and name == "ticket.start":
        handle = uuid.uuid4().hex
        tickets[handle] = "working"
        touch(handle, session)
        await notify_watchers(handle, session)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"ticket {handle} is working")],
            structuredContent={"handle": handle, "state": "working"},
        )
    if handle not in tickets:
        raise ValueError(f"unknown ticket {handle}")
    touch(handle, session)
    state = tickets[handle]
    if name not in MENU[state]:
        return refusal(name, state)
    after = MOVES.get((state, name), state)
    tickets[handle] = after
    if after != state:
        await notify_watchers(handle, session)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"ticket is {after}")],
        structuredContent={"handle": handle, "state": after},
    )


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
    if name not in TOOLS:
        raise ValueError(f"unknown tool {name}")
    if HANDLES:
        return await call_shared(name, arguments)
    session = current_session()
    state = states.get(session, "new")
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
