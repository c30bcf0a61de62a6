"""Ticket desk: a small upstream MCP server for Turnstile to gate, written with the official
Python MCP SDK (`mcp==1.30.0`, FastMCP).

It knows nothing about workflows. Turnstile connects to it as an MCP client, offers its tools as
`tickets.<tool>` and decides, from `tickets.machine.json` and the bindings in
`tickets.upstream.toml`, which of them may be called when. Each tools/call Turnstile forwards
carries `_meta["dev.turnstile/instance"] = {"workflow", "state", "handle"?}`; the desk keeps one
ticket per handle ("default" without one), in memory.

Tools: open(title), assign(assignee), resolve(note) (asks the person to confirm with an
elicitation first), fail(reason) (always an isError result), slow(seconds), reopen(), status(),
purge() (deletes every ticket; the binding hides it). Every result's structuredContent carries
the process id as "pid".

Run:
    python3 server.py                      # MCP over stdio (logs on stderr only)
    python3 server.py --http 127.0.0.1:0   # Streamable HTTP at http://HOST:PORT/mcp; port 0
                                           # picks a free one; the URL is printed as the one
                                           # line on stdout once the socket listens

Environment:
    TICKETS_CALL_LOG=PATH        append one JSON line per tools/call received, before it runs:
                                 {"tool", "arguments", "meta" (the whole _meta), "pid"}; and
                                 {"cancelled": <tool>, "pid"} when the client cancels a call
    TICKETS_SLOW_START_MS=N      sleep N ms before serving (start-up timeout tests)

Needs `pip install -r requirements.txt` (mcp==1.30.0) in the Python that runs it.
"""

import argparse
import asyncio
import itertools
import json
import logging
import os
import socket
import sys
import time
from typing import Any

import mcp.types as types
from mcp.server.fastmcp import Context, FastMCP
from mcp.shared.exceptions import McpError
from pydantic import BaseModel, Field

INSTANCE_META_KEY = "dev.turnstile/instance"
PID = os.getpid()

# The tickets, by handle ("default" for calls without one). In memory: they live as long as the
# process.
tickets: dict[str, dict[str, Any]] = {}
numbers = itertools.count(1)


def log(message: str) -> None:
    print(f"tickets: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Reading the request's `_meta`

def meta_dict(meta: types.RequestParams.Meta | None) -> dict[str, Any]:
    """The request's whole `_meta` as a JSON object ({} without one).

    In mcp 1.x `_meta` is parsed into `RequestParams.Meta`, a pydantic model that declares only
    `progressToken` and allows extra fields: every other key (such as "dev.turnstile/instance")
    is kept, as parsed JSON, in its `model_extra`.
    """
    if meta is None:
        return {}
    whole = dict(meta.model_extra or {})
    if meta.progressToken is not None:
        whole["progressToken"] = meta.progressToken
    return whole


def instance_of(ctx: Context) -> dict[str, Any]:
    """`_meta["dev.turnstile/instance"]` of the current request, or {}."""
    meta = ctx.request_context.meta
    extra = (getattr(meta, "model_extra", None) or {}) if meta is not None else {}
    instance = extra.get(INSTANCE_META_KEY)
    return instance if isinstance(instance, dict) else {}


def ticket_key(ctx: Context) -> str:
    handle = instance_of(ctx).get("handle")
    return str(handle) if handle else "default"


# ---------------------------------------------------------------------------------------------
# Results

def ok(data: dict[str, Any]) -> types.CallToolResult:
    """A successful result: `data` (with the pid) as structuredContent and as JSON text.

    The tools return `CallToolResult` themselves (FastMCP then passes it through and declares no
    outputSchema), so that successes and refusals are built the same way.
    """
    structured = {**data, "pid": PID}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(structured))],
        structuredContent=structured,
    )


def refused(text: str, **data: Any) -> types.CallToolResult:
    """An isError result with our own text and structuredContent (including the pid).

    Raising an exception in a FastMCP tool also gives isError, but its text becomes
    "Error executing tool NAME: MESSAGE" and it carries no structuredContent.
    """
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structuredContent={"error": text, **data, "pid": PID},
        isError=True,
    )


def ticket_of(ctx: Context) -> tuple[str, dict[str, Any] | None]:
    key = ticket_key(ctx)
    return key, tickets.get(key)


def no_ticket(key: str) -> types.CallToolResult:
    return refused(f"no ticket is open for {key!r}: call open first", key=key)


# ---------------------------------------------------------------------------------------------
# The tools

mcp = FastMCP(
    "tickets",
    instructions="A small ticket desk: open a ticket, assign it, resolve it (after the person "
    "confirms), reopen it.",
    log_level="WARNING",
)


@mcp.tool()
async def open(title: str, ctx: Context) -> types.CallToolResult:  # noqa: A001 (the tool's name)
    """Open a new ticket with this title (replaces any ticket of this instance)."""
    key = ticket_key(ctx)
    ticket = {"ticket": f"T-{next(numbers)}", "title": title, "status": "open", "assignee": None,
              "note": None, "key": key}
    tickets[key] = ticket
    return ok({"ticket": ticket["ticket"], "title": title, "status": "open"})


@mcp.tool()
async def assign(assignee: str, ctx: Context) -> types.CallToolResult:
    """Assign the open ticket to someone."""
    key, ticket = ticket_of(ctx)
    if ticket is None:
        return no_ticket(key)
    ticket["assignee"] = assignee
    ticket["status"] = "assigned"
    return ok({"ticket": ticket["ticket"], "assignee": assignee})


class Confirmation(BaseModel):
    """What the person is asked before a ticket is resolved."""

    confirm: bool = Field(description="Resolve the ticket?")


@mcp.tool()
async def resolve(ctx: Context, note: str = "") -> types.CallToolResult:
    """Resolve the ticket, with an optional note. Asks the person to confirm first."""
    key, ticket = ticket_of(ctx)
    if ticket is None:
        return no_ticket(key)
    try:
        answer = await ctx.elicit(
            message=f"Resolve ticket {ticket['ticket']} ({ticket['title']})?", schema=Confirmation
        )
    except McpError as e:  # e.g. the client did not declare the elicitation capability
        return refused(f"could not ask the person to confirm: {e.error.message}",
                       ticket=ticket["ticket"])
    # answer.action is "accept" (then answer.data is the validated Confirmation), "decline" or
    # "cancel".
    if answer.action != "accept" or not answer.data.confirm:
        why = "confirm was false" if answer.action == "accept" else f"answer: {answer.action}"
        return refused(f"the person declined to resolve ticket {ticket['ticket']} ({why})",
                       ticket=ticket["ticket"], action=answer.action)
    ticket["status"] = "resolved"
    ticket["note"] = note
    return ok({"ticket": ticket["ticket"], "status": "resolved"})


@mcp.tool()
async def fail(reason: str = "") -> types.CallToolResult:
    """Ask the desk for something it always refuses (answers an isError result)."""
    return refused(f"the desk refused: {reason or 'no reason given'}")


@mcp.tool()
async def slow(seconds: float) -> types.CallToolResult:
    """Take this many seconds to answer."""
    await asyncio.sleep(seconds)
    return ok({"slept": seconds})


@mcp.tool()
async def reopen(ctx: Context) -> types.CallToolResult:
    """Reopen the resolved ticket."""
    key, ticket = ticket_of(ctx)
    if ticket is None:
        return no_ticket(key)
    ticket["status"] = "open"
    return ok({"ticket": ticket["ticket"], "status": "open"})


@mcp.tool()
async def status(ctx: Context) -> types.CallToolResult:
    """The ticket of this instance, or {"ticket": null} if none was opened."""
    key, ticket = ticket_of(ctx)
    if ticket is None:
        return ok({"ticket": None, "key": key})
    return ok(dict(ticket))


@mcp.tool()
async def purge() -> types.CallToolResult:
    """Delete every ticket of every instance."""
    count = len(tickets)
    tickets.clear()
    return ok({"purged": count})


# ---------------------------------------------------------------------------------------------
# The call log: one JSON line per tools/call, written when the request arrives (before argument
# validation and before the tool runs), so unknown tools and bad arguments are logged too.

async def escalate(ctx: Context, reason: str = "") -> types.CallToolResult:
    """Hand the ticket to a human (a tool the desk adds while it runs: see `grow`)."""
    key, ticket = ticket_of(ctx)
    if ticket is None:
        return no_ticket(key)
    ticket["escalated"] = reason or True
    return ok(dict(ticket))


@mcp.tool()
async def grow(ctx: Context) -> types.CallToolResult:
    """Add the tool `escalate` to the desk and tell the client its tools changed (a server
    whose tools change while it runs, as `notifications/tools/list_changed` announces)."""
    if "escalate" not in {tool.name for tool in await mcp.list_tools()}:
        mcp.add_tool(escalate, name="escalate")
    await ctx.session.send_tool_list_changed()
    return ok({"tools": sorted(tool.name for tool in await mcp.list_tools())})


@mcp.prompt()
def triage(title: str) -> str:
    """How to triage a ticket: what to ask first, whom to assign it to."""
    return (f"Triage the ticket {title!r}: ask what is broken and since when, "
            "then assign it to whoever owns that system.")


@mcp.resource("desk://policy", mime_type="text/markdown")
def policy() -> str:
    """The desk's policy: what may be closed without the person who opened it."""
    return "# Desk policy\n\nA ticket is resolved only with its opener's consent."


@mcp.resource("desk://tickets/{ticket}", mime_type="application/json")
def ticket_resource(ticket: str) -> str:
    """One ticket, as the desk keeps it."""
    for entry in tickets.values():
        if entry and entry.get("ticket") == ticket:
            return json.dumps(entry)
    return json.dumps({"ticket": None})


def install_call_log(path: str) -> None:
    server = mcp._mcp_server  # the low-level Server FastMCP registers its handlers on
    handle_call = server.request_handlers[types.CallToolRequest]

    async def logged(request: types.CallToolRequest):
        line = json.dumps({
            "tool": request.params.name,
            "arguments": request.params.arguments or {},
            "meta": meta_dict(request.params.meta),
            "pid": PID,
        }) + "\n"
        append(line)
        try:
            return await handle_call(request)
        except asyncio.CancelledError:
            # The client sent notifications/cancelled for it: noted, then the cancel goes on.
            append(json.dumps({"cancelled": request.params.name, "pid": PID}) + "\n")
            raise

    def append(line: str) -> None:
        # One write(2) of the whole line in O_APPEND mode: the lines of several processes
        # appending to the same file do not interleave.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    server.request_handlers[types.CallToolRequest] = logged


# ---------------------------------------------------------------------------------------------
# Serving

def serve_http(address: str) -> None:
    import anyio
    import uvicorn

    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        sys.exit(f"tickets: --http wants HOST:PORT, not {address!r}")
    bind_host = host.strip("[]")
    # The host's name decides the DNS-rebinding protection (on for 127.0.0.1, localhost, ::1).
    mcp.settings.host = bind_host
    if bind_host not in ("127.0.0.1", "localhost", "::1"):
        mcp.settings.transport_security = None
    family, kind, proto, _, sockaddr = socket.getaddrinfo(
        bind_host, int(port), type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit it: without, every answer waits ~40 ms for a delayed ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(sockaddr)
    # Listen before telling anyone: connections made now wait in the backlog until uvicorn
    # accepts them, instead of being refused.
    sock.listen(128)
    actual = sock.getsockname()[1]
    url_host = f"[{bind_host}]" if ":" in bind_host else bind_host
    url = f"http://{url_host}:{actual}/mcp"
    log(f"serving Streamable HTTP at {url} (pid {PID})")
    print(url, flush=True)
    config = uvicorn.Config(mcp.streamable_http_app(), log_level="warning", access_log=False)
    anyio.run(uvicorn.Server(config).serve, [sock])


def main() -> None:
    parser = argparse.ArgumentParser(description="Ticket desk MCP server (stdio by default).")
    parser.add_argument("--http", metavar="HOST:PORT",
                        help="serve Streamable HTTP at http://HOST:PORT/mcp (port 0: any free port)")
    args = parser.parse_args()

    slow_start = os.environ.get("TICKETS_SLOW_START_MS")
    if slow_start:
        log(f"slow start: sleeping {slow_start} ms")
        time.sleep(int(slow_start) / 1000)
    call_log = os.environ.get("TICKETS_CALL_LOG")
    if call_log:
        install_call_log(call_log)
    # The SDK logs on stderr. mcp 1.30 also logs a traceback (ERROR "Error in standalone SSE
    # writer") each time an HTTP session with an open GET stream ends: not a fault, so hidden.
    logging.getLogger("mcp").setLevel(logging.WARNING)
    logging.getLogger("mcp.server.streamable_http").setLevel(logging.CRITICAL)

    if args.http:
        serve_http(args.http)
    else:
        log(f"serving over stdio (pid {PID})")
        mcp.run("stdio")


if __name__ == "__main__":
    main()
