"""Scenarios driven with the official Python `mcp` SDK, 1.x line (protocol 2025-11-25, sessions).

Usage: python mcp1_client.py SCENARIO URL
  session-lifecycle  server without handle flags: the menu, FORBIDDEN, submit → approve →
                     discharge with a `list_changed` on the GET stream after each transition
  handle-lifecycle   server with --state-handle-key: mint a handle, drive it by handle,
                     `tools/list` with `_meta.handle` follows it, `list_changed` arrives
  shared-handle      server with --state-handle-key: sessions touching one handle (by minting,
                     listing or calling with it) are all notified of a transition by any of
                     them, also after another one ended; a session that never touched it
                     hears nothing
  stateless          server with --stateless: a lifecycle over a new connection per request,
                     kept by the handle; forged and malformed handles are refused
  model-client       server with --state-handle-key: a model-style agent builds every call
                     from the `tools/list` schemas alone and drives two invoices through their
                     lifecycles, interleaved, in one session and without ever sending `_meta`
  primitives-session server without handle flags: prompts/list, resources/list and
                     resources/templates/list show what the session's invoice is offered, the
                     checklist and `invoice://session` are refused out of state (FORBIDDEN) and
                     served in it, and prompts/resources `list_changed` arrive exactly when a
                     transition changed that list; another session hears nothing
  primitives-handles:ALICE,CAROL  server with --state-handle-key and these bearer tokens: the
                     same for `invoice://<handle>`, with `_meta.handle` and without,
                     `resources/updated` for a subscriber, and nothing of it for another principal
  plugin-logs        server with the testkit plugin: every log line a call's plugin writes has
                     arrived, in order, when the SDK returns the call's result
  never-relists      server without handle flags: `tools/list` once, then submit → approve →
                     discharge, each call chosen from the previous result's next step
  submit-invoice:TOKEN  server with --state-handle-key and this bearer token: submits one
                     invoice and leaves it in review (the operator console's test finds it)
  tickets-resolve    server with --state-handle-key serving the ticket desk upstream
                     (plugins/tickets): the desk's own question (an elicitation it sends
                     Turnstile) reaches this client; a decline moves nothing, an accept resolves
  lost-reply:H1,H2,...  server with --state-handle-key whose store connection is cut right after
                     each save to draft (tests/lost_replies.rs arms the proxy): `invoice.reject`
                     on each of these invoices (in review), reporting what the SDK hands back for
                     each call, then where each invoice is (`invoice.status`)
  task-failover:URL,PID  two servers on one shared store with the migration plugin, in handle
                     mode; URL and PID are the first's: `migration.apply` started as a task
                     (2025-11-25, `call_tool_as_task`) there, read working here, the first
                     killed with SIGKILL, then polled here until it ends, and its result asked
                     for; reports what the SDK hands back and where the migration is
  task-cancel:TOKEN  server with the migration plugin in handle mode and this bearer token:
                     `migration.apply` started as a task, cancelled mid-run with `tasks/cancel`,
                     read cancelled, its result refused; then where the migration is, and
                     the step taken again as a task to its end
URL may also be `stdio:["PROGRAM", "ARG", ...]`: each connection starts that server over stdio.
Prints a JSON summary on stdout; exits 1 with `FAILED: ...` on stderr on any failed expectation.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import secrets
import signal
import sys
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import McpError

from turnstile_e2e import (
    CHECKLIST,
    INVOICE_READABLE,
    MENU,
    PROMPTS,
    START,
    STDIO_SERVER_LOGS,
    Failed,
    ListChanges,
    ListedTool,
    ToolOutcome,
    drive_two_invoices,
    error_code,
    expect,
    expect_equal,
    expect_handle,
    expect_checklist,
    expect_invoice_document,
    expect_menu,
    expect_names,
    expect_refusal,
    invoice_resources,
    invoice_templates,
    run,
    stdio_command,
    stdio_server_log,
)

SDK = f"mcp {importlib.metadata.version('mcp')}"


@dataclass
class Notices:
    """What the server pushed to one session besides `tools/list_changed`."""

    name: str
    prompts: ListChanges = field(init=False)
    resources: ListChanges = field(init=False)
    updated: ListChanges = field(init=False)
    updated_uris: list[str] = field(default_factory=list)
    # `notifications/message` data, in the order the SDK handed them on.
    logs: list[Any] = field(default_factory=list)
    # `notifications/tasks/status`: (taskId, status), in order.
    task_statuses: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.prompts = ListChanges(self.name, "notifications/prompts/list_changed")
        self.resources = ListChanges(self.name, "notifications/resources/list_changed")
        self.updated = ListChanges(self.name, "notifications/resources/updated")

    def counts(self, tools: ListChanges) -> dict[str, int]:
        return {
            "tools": tools.count,
            "prompts": self.prompts.count,
            "resources": self.resources.count,
            "updated": self.updated.count,
        }


@dataclass
class Connection:
    """One MCP session (one `initialize`), with what the server pushed to it."""

    name: str
    session: ClientSession
    changes: ListChanges
    protocol: str
    session_id: str | None
    capabilities: types.ServerCapabilities
    notices: Notices

    async def tools(self, handle: str | None = None) -> list[types.Tool]:
        params = None
        if handle is not None:
            params = types.PaginatedRequestParams(_meta=types.RequestParams.Meta(handle=handle))
        result = await self.session.list_tools(params=params)
        expect(result.nextCursor is None, f"{self.name}: unexpected pagination in tools/list")
        # 1.x keeps fields it does not model (2026-07-28's cache hint) as extras.
        ttl = (result.model_extra or {}).get("ttlMs")
        expect_equal(ttl, 0, f"{self.name}: ttlMs of tools/list (a menu that depends on state is not cacheable)")
        return result.tools

    async def menu(self, wanted: list[str], what: str, handle: str | None = None) -> list[str]:
        names = [tool.name for tool in await self.tools(handle)]
        return expect_menu(names, wanted, f"{self.name}: {what}")

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return await self.session.call_tool(name, arguments)

    async def call_ok(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Calls a tool that must succeed; returns its structuredContent."""
        result = await self.call(name, arguments)
        expect(
            not result.isError,
            f"{self.name}: {name} {arguments} failed: {_text(result)!r} {result.structuredContent!r}",
        )
        expect(
            isinstance(result.structuredContent, dict),
            f"{self.name}: {name} returned no structuredContent: {result!r}",
        )
        return result.structuredContent

    async def call_refused(self, name: str, arguments: dict[str, Any], code: str) -> dict[str, Any]:
        """Calls a tool that must be refused with `structuredContent.error.code == code`."""
        result = await self.call(name, arguments)
        expect(
            result.isError is True,
            f"{self.name}: {name} {arguments} should be refused with {code}, but it succeeded: "
            f"{result.structuredContent!r}",
        )
        expect_equal(
            error_code(result.structuredContent),
            code,
            f"{self.name}: structuredContent.error.code of {name} {arguments} (text {_text(result)!r})",
        )
        return result.structuredContent

    async def state(self, handle: str | None = None) -> str:
        arguments = {} if handle is None else {"handle": handle}
        structured = await self.call_ok("invoice.status", arguments)
        return structured.get("state")

    async def prompts(self, handle: str | None = None) -> list[types.Prompt]:
        result = await self.session.list_prompts(params=_list_params(handle))
        _expect_uncacheable(result, f"{self.name}: prompts/list")
        return result.prompts

    async def resources(self, handle: str | None = None) -> list[types.Resource]:
        result = await self.session.list_resources(params=_list_params(handle))
        _expect_uncacheable(result, f"{self.name}: resources/list")
        return result.resources

    async def templates(self, handle: str | None = None) -> list[types.ResourceTemplate]:
        result = await self.session.list_resource_templates(params=_list_params(handle))
        _expect_uncacheable(result, f"{self.name}: resources/templates/list")
        return result.resourceTemplates

    async def get_prompt(
        self, name: str, arguments: dict[str, str], handle: str | None = None
    ) -> types.GetPromptResult:
        """`prompts/get`; with `handle`, named in `_meta` (1.x's `get_prompt` takes no `_meta`,
        so the request is built as it would build it, plus `_meta`)."""
        if handle is None:
            return await self.session.get_prompt(name, arguments)
        params = types.GetPromptRequestParams(
            name=name, arguments=arguments, _meta=types.RequestParams.Meta(handle=handle)
        )
        return await self.session.send_request(
            types.ClientRequest(types.GetPromptRequest(params=params)), types.GetPromptResult
        )


def _list_params(handle: str | None) -> types.PaginatedRequestParams | None:
    if handle is None:
        return None
    return types.PaginatedRequestParams(_meta=types.RequestParams.Meta(handle=handle))


def _expect_uncacheable(result: types.Result, what: str) -> None:
    expect(getattr(result, "nextCursor", None) is None, f"{what}: unexpected pagination")
    ttl = (result.model_extra or {}).get("ttlMs")
    expect_equal(ttl, 0, f"ttlMs of {what} (a list that depends on state is not cacheable)")


async def refusal(request: Awaitable[Any], what: str) -> tuple[int, Any]:
    """The JSON-RPC error `request` is answered with; fails if it is answered with a result."""
    try:
        result = await request
    except McpError as error:
        return error.error.code, error.error.data
    raise Failed(f"{what}: expected a JSON-RPC error, got the result {result!r}")


def _text(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


@asynccontextmanager
async def transport(url: str, token: str | None = None) -> AsyncIterator[tuple[Any, Any, Callable[[], str | None]]]:
    """The SDK's Streamable HTTP client for a URL (sending `token` as a bearer token, if any);
    for a `stdio:[...]` target, its stdio client, which starts that server as its child (its log
    goes to `STDIO_SERVER_LOGS`)."""
    command = stdio_command(url)
    if command is None:
        headers = None if token is None else {"Authorization": f"Bearer {token}"}
        async with (
            create_mcp_http_client(headers=headers) as http,
            streamable_http_client(url, http_client=http) as (read, write, get_session_id),
        ):
            yield read, write, get_session_id
        return
    parameters = StdioServerParameters(command=command[0], args=command[1:])
    with stdio_server_log() as log:
        async with stdio_client(parameters, errlog=log) as (read, write):
            yield read, write, lambda: None


@asynccontextmanager
async def connect(
    url: str, name: str, token: str | None = None, elicitation_callback: Any = None
) -> AsyncIterator[Connection]:
    """Opens a session (as the principal of `token`, if any); `list_changed` notifications (GET
    stream) are counted in `changes`, those of prompts and resources, and `resources/updated`, in
    `notices`."""
    changes = ListChanges(name)
    notices = Notices(name)

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ServerNotification):
            notification = message.root
            if isinstance(notification, types.ToolListChangedNotification):
                changes.record()
            elif isinstance(notification, types.PromptListChangedNotification):
                notices.prompts.record()
            elif isinstance(notification, types.ResourceListChangedNotification):
                notices.resources.record()
            elif isinstance(notification, types.ResourceUpdatedNotification):
                notices.updated_uris.append(str(notification.params.uri))
                notices.updated.record()
            elif isinstance(notification, types.LoggingMessageNotification):
                notices.logs.append(notification.params.data)
            elif isinstance(notification, types.TaskStatusNotification):
                notices.task_statuses.append((notification.params.taskId, notification.params.status))
        elif isinstance(message, Exception):
            # The SDK hands transport errors to the message handler; a test must see them.
            print(f"{name}: transport error: {message!r}", file=sys.stderr, flush=True)

    async with transport(url, token) as (read, write, get_session_id):
        async with ClientSession(
            read, write, message_handler=on_message, elicitation_callback=elicitation_callback
        ) as session:
            initialized = await session.initialize()
            capabilities = initialized.capabilities
            expect(
                capabilities.tools is not None and capabilities.tools.listChanged is True,
                f"{name}: the server should advertise tools.listChanged, got {capabilities!r}",
            )
            yield Connection(
                name,
                session,
                changes,
                str(initialized.protocolVersion),
                get_session_id(),
                capabilities,
                notices,
            )


async def settle(connection: Connection) -> int:
    """Lets notifications already under way arrive (a round trip, then a short pause), and
    returns the count to measure the next step against."""
    await connection.session.send_ping()
    await anyio.sleep(0.3)
    return connection.changes.count


# --- 1. session mode ---------------------------------------------------------------------------


async def session_lifecycle(url: str) -> dict[str, Any]:
    async with connect(url, "session") as c:
        expect_equal(c.protocol, "2025-11-25", "negotiated protocol version")
        expect(c.session_id is not None, "session mode: the server should assign an Mcp-Session-Id")
        menus = {"draft": await c.menu(MENU["draft"], "in draft")}
        forbidden = await c.call_refused("invoice.approve", {}, "FORBIDDEN")
        error = forbidden["error"]
        expect_equal(error.get("tool"), "invoice.approve", "FORBIDDEN error.tool")
        expect_equal(error.get("state"), "draft", "FORBIDDEN error.state")
        expect_equal(sorted(error.get("allowed") or []), MENU["draft"], "FORBIDDEN error.allowed")
        expect_equal(await c.state(), "draft", "state after a refused call")
        await c.changes.stays_at(0, "a refused call changes nothing", quiet=0.3)

        steps = [
            ("invoice.submit", {"amount": 120.5, "customer": "ACME"}, "review"),
            ("invoice.approve", {"note": "ok"}, "approved"),
            ("invoice.discharge", {}, "discharged"),
        ]
        for number, (tool, arguments, state) in enumerate(steps, start=1):
            await c.call_ok(tool, arguments)
            await c.changes.wait_for(number, f"after {tool}")
            menus[state] = await c.menu(MENU[state], f"after {tool}")
            expect_equal(await c.state(), state, f"invoice.status after {tool}")
        # invoice.status changes no state: no notification for it.
        await c.changes.stays_at(len(steps), "invoice.status changes no state", quiet=0.3)
        return {"protocol": c.protocol, "menus": menus, "list_changed": c.changes.count, "forbidden": error}


# --- 2. handle mode ----------------------------------------------------------------------------


async def mint(c: Connection, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Starts an invoice with `invoice.submit` and no handle; returns the minted handle."""
    result = await c.call("invoice.submit", arguments)
    expect(not result.isError, f"{c.name}: invoice.submit without a handle failed: {_text(result)!r}")
    structured = result.structuredContent or {}
    handle = expect_handle(structured.get("handle"), f"{c.name}: structuredContent.handle of invoice.submit")
    expect(handle in _text(result), f"{c.name}: the text of invoice.submit should carry {handle}: {_text(result)!r}")
    return handle, structured


async def handle_lifecycle(url: str) -> dict[str, Any]:
    async with connect(url, "handles") as c:
        expect_equal(c.protocol, "2025-11-25", "negotiated protocol version")
        fresh = await c.tools()
        menus = {"fresh session": expect_menu([t.name for t in fresh], START, "of a fresh session")}
        for tool in fresh:
            if tool.name == "invoice.submit":
                properties = tool.inputSchema.get("properties") or {}
                expect(
                    "handle" in properties, f"invoice.submit's input schema should have `handle`: {tool.inputSchema}"
                )

        await c.call_refused("invoice.approve", {}, "HANDLE_REQUIRED")
        handle, _ = await mint(c, {"amount": 99, "customer": "ACME"})
        # The minting session touched the instance, whose state changed draft → review.
        await c.changes.wait_for(1, "invoice.submit minted an instance and moved it to review")
        base = await settle(c)

        menus["review"] = await c.menu(MENU["review"], "with _meta.handle in review", handle)
        menus["no handle"] = await c.menu(
            sorted(set(MENU["review"]) | set(START)), "without a handle after touching one"
        )
        forbidden = await c.call_refused("invoice.discharge", {"handle": handle}, "FORBIDDEN")
        expect_equal(forbidden["error"].get("state"), "review", "FORBIDDEN error.state by handle")
        expect_equal(await c.state(handle), "review", "invoice.status by handle")

        steps = [
            ("invoice.reject", {"reason": "missing PO number"}, "draft"),
            # With a handle, the starting tool acts on that instance: nothing new is minted.
            ("invoice.submit", {"amount": 100}, "review"),
            ("invoice.approve", {"note": "fine"}, "approved"),
            ("invoice.discharge", {}, "discharged"),
        ]
        for number, (tool, arguments, state) in enumerate(steps, start=1):
            structured = await c.call_ok(tool, {**arguments, "handle": handle})
            expect_equal(structured.get("handle"), handle, f"structuredContent.handle of {tool}")
            await c.changes.wait_for(base + number, f"after {tool} by handle")
            menus[state] = await c.menu(MENU[state], f"with _meta.handle after {tool}", handle)
            expect_equal(await c.state(handle), state, f"invoice.status by handle after {tool}")
        return {"protocol": c.protocol, "handle": handle, "menus": menus, "list_changed": c.changes.count}


async def submit_invoice(url: str, token: str) -> dict[str, Any]:
    """Handle mode, as the principal of `token`: one invoice submitted and left in review, for the
    operator console's browser test (`tests/console.rs`) to watch arrive and find by handle."""
    async with connect(url, "submitter", token) as c:
        handle, _ = await mint(c, {"amount": 250, "customer": "ACME"})
        expect_equal(await c.state(handle), "review", "invoice.status by handle after submit")
        return {"protocol": c.protocol, "handle": handle}


# --- 4. two sessions on one handle -------------------------------------------------------------


async def shared_handle(url: str) -> dict[str, Any]:
    async with (
        connect(url, "alice") as alice,
        connect(url, "bob") as bob,
        connect(url, "dave") as dave,
        connect(url, "carol") as carol,
    ):
        handle, _ = await mint(alice, {"amount": 7})
        await alice.changes.wait_for(1, "alice minted and submitted the invoice")
        # Bob touches the instance by listing it, Dave by calling a tool with it; Carol never does.
        await bob.menu(MENU["review"], "with alice's handle", handle)
        expect_equal(await dave.state(handle), "review", "dave reads alice's invoice by handle")
        await carol.menu(START, "of a session that touched nothing")
        # Erin touches it too, then ends her session (DELETE): the others must still be notified.
        async with connect(url, "erin") as erin:
            await erin.menu(MENU["review"], "with alice's handle", handle)
        a0, b0, d0, c0 = await settle(alice), await settle(bob), await settle(dave), await settle(carol)
        expect_equal((b0, d0, c0), (0, 0, 0), "list_changed counts of bob, dave, carol before any transition")

        # A transition by alice notifies alice, bob and dave.
        await alice.call_ok("invoice.approve", {"handle": handle})
        await alice.changes.wait_for(a0 + 1, "alice approved her invoice")
        await bob.changes.wait_for(b0 + 1, "alice approved the invoice bob listed")
        await dave.changes.wait_for(d0 + 1, "alice approved the invoice dave called")
        await carol.changes.stays_at(c0, "carol never touched the invoice")
        a1, b1, d1 = await settle(alice), await settle(bob), await settle(dave)

        # A transition by bob notifies all three as well.
        await bob.menu(MENU["approved"], "by handle after alice approved", handle)
        await bob.call_ok("invoice.discharge", {"handle": handle})
        await bob.changes.wait_for(b1 + 1, "bob discharged the invoice")
        await alice.changes.wait_for(a1 + 1, "bob discharged alice's invoice")
        await dave.changes.wait_for(d1 + 1, "bob discharged the invoice dave called")
        await carol.changes.stays_at(c0, "carol never touched the invoice")
        expect_equal(await carol.state(handle), "discharged", "carol reads the state by handle")
        sessions = [alice, bob, dave, carol]
        return {
            "handle": handle,
            "list_changed": {s.name: s.changes.count for s in sessions},
            "distinct_sessions": len({s.session_id for s in sessions} - {None}),
        }


# --- 5. stateless ------------------------------------------------------------------------------


async def stateless(url: str) -> dict[str, Any]:
    connections = 0

    @asynccontextmanager
    async def fresh() -> AsyncIterator[Connection]:
        nonlocal connections
        connections += 1
        async with connect(url, f"connection {connections}") as c:
            expect(c.session_id is None, f"--stateless should assign no Mcp-Session-Id, got {c.session_id!r}")
            yield c

    async with fresh() as c:
        await c.menu(START, "without a handle")
    async with fresh() as c:
        handle, _ = await mint(c, {"amount": 250, "customer": "Globex"})
    states = []
    for tool, arguments, state in [
        ("invoice.approve", {}, "approved"),
        ("invoice.discharge", {}, "discharged"),
    ]:
        async with fresh() as c:
            await c.menu(MENU[_before(state)], f"with _meta.handle before {tool}", handle)
        async with fresh() as c:
            structured = await c.call_ok(tool, {**arguments, "handle": handle})
            expect_equal(structured.get("handle"), handle, f"structuredContent.handle of {tool}")
        async with fresh() as c:
            states.append(await c.state(handle))
            expect_equal(states[-1], state, f"invoice.status on a new connection after {tool}")
    async with fresh() as c:
        await c.call_refused("invoice.submit", {"amount": 1, "handle": handle}, "FORBIDDEN")

    forged = "invoice-" + secrets.token_hex(16)
    refusals = {}
    async with fresh() as c:
        refusals["forged"] = error_code(await c.call_refused("invoice.approve", {"handle": forged}, "UNKNOWN_HANDLE"))
        refusals["malformed"] = error_code(
            await c.call_refused("invoice.approve", {"handle": "invoice-not-a-handle"}, "INVALID_HANDLE")
        )
        other = "payment-" + secrets.token_hex(16)
        refusals["other workflow"] = error_code(
            await c.call_refused("invoice.approve", {"handle": other}, "INVALID_HANDLE")
        )
        refusals["missing"] = error_code(await c.call_refused("invoice.approve", {}, "HANDLE_REQUIRED"))
        refusals["forged status"] = error_code(
            await c.call_refused("invoice.status", {"handle": "invoice-" + secrets.token_hex(16)}, "UNKNOWN_HANDLE")
        )
    return {"handle": handle, "states": states, "connections": connections, "refusals": refusals}


def _before(state: str) -> str:
    return {"approved": "review", "discharged": "approved"}[state]


# --- 6. a model-style client -------------------------------------------------------------------


class SessionAgent:
    """The model-style agent's view of one 2025-11-25 session: it never sends `_meta` (the
    session remembers the instances it touched), and hears `list_changed` on the GET stream."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.name = connection.name

    async def list_tools(self, handles: list[str]) -> list[ListedTool]:
        expect(not handles, f"{self.name}: this agent names no handles in _meta")
        return [ListedTool(tool.name, tool.inputSchema) for tool in await self.connection.tools()]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        result = await self.connection.call(name, arguments)
        return ToolOutcome(bool(result.isError), result.structuredContent, _text(result))

    async def transitions_seen(self, n: int, why: str) -> int:
        await self.connection.changes.wait_for(n, why)
        return self.connection.changes.count


async def model_client(url: str) -> dict[str, Any]:
    async with connect(url, "model") as c:
        expect_equal(c.protocol, "2025-11-25", "negotiated protocol version")
        expect(c.session_id is not None, "handle mode over 2025-11-25 keeps the session")
        summary = await drive_two_invoices(SessionAgent(c), names_handles=False)
        # Eight transitions, eight notifications; the status questions changed nothing.
        await c.changes.stays_at(len(summary["steps"]), "invoice.status changes no state", quiet=0.5)
        summary["list_changed"] = c.changes.count
        return {"protocol": c.protocol, **summary}


# --- 8. prompts and resources ------------------------------------------------------------------

FOCUS = "the VAT number"


def _prompt_text(result: types.GetPromptResult, what: str) -> str:
    expect(len(result.messages) == 1, f"{what}: expected one message, got {result.messages!r}")
    content = result.messages[0].content
    expect(isinstance(content, types.TextContent), f"{what}: expected text, got {content!r}")
    return content.text


async def offered(c: Connection, state: str, token: str, what: str, handle: str | None = None) -> dict[str, Any]:
    """The three lists a client reads for prompts and resources, each exactly what one invoice
    in `state` (named `token` in its resources' URIs) is offered."""
    prompts = await c.prompts(handle)
    for prompt in prompts:
        if prompt.name == CHECKLIST:
            arguments = [(argument.name, argument.required) for argument in prompt.arguments or []]
            expect_equal(arguments, [("focus", False)], f"{c.name}: the checklist's arguments")
    resources = await c.resources(handle)
    for resource in resources:
        expect_equal(resource.mimeType, "application/json", f"{c.name}: mimeType of {resource.uri}")
    templates = await c.templates(handle)
    return {
        "prompts": expect_names([p.name for p in prompts], PROMPTS[state], f"{c.name}: prompts/list {what}"),
        "resources": expect_names(
            [str(r.uri) for r in resources], invoice_resources(state, token), f"{c.name}: resources/list {what}"
        ),
        "templates": expect_names(
            [t.uriTemplate for t in templates], invoice_templates(state), f"{c.name}: resources/templates/list {what}"
        ),
    }


async def get_checklist(c: Connection, state: str, amount: str, what: str, handle: str | None = None) -> Any:
    """`prompts/get` of the checklist: served in review (reading the amount), refused elsewhere.
    Returns `"served"` or the refusal's data."""
    if CHECKLIST in PROMPTS[state]:
        result = await c.get_prompt(CHECKLIST, {"focus": FOCUS}, handle)
        expect_checklist(_prompt_text(result, what), amount, FOCUS, f"{c.name}: {what}")
        return "served"
    code, data = await refusal(c.get_prompt(CHECKLIST, {}, handle), f"{c.name}: {what}")
    return expect_refusal(code, data, "prompt", CHECKLIST, state, f"{c.name}: {what}")


async def read_invoice(c: Connection, uri: str, state: str, amount: Any, what: str) -> Any:
    """`resources/read` of the invoice: its JSON from review on, refused before. Returns the
    state it showed, or the refusal's data."""
    if state in INVOICE_READABLE:
        result = await c.session.read_resource(uri)
        expect(len(result.contents) == 1, f"{c.name}: {what}: expected one content, got {result.contents!r}")
        content = result.contents[0]
        expect(isinstance(content, types.TextResourceContents), f"{c.name}: {what}: expected text, got {content!r}")
        expect_equal(str(content.uri), uri, f"{c.name}: {what}: the content's uri")
        document = expect_invoice_document(content.text, content.mimeType, state, amount, f"{c.name}: {what}")
        return document["state"]
    code, data = await refusal(c.session.read_resource(uri), f"{c.name}: {what}")
    return expect_refusal(code, data, "resource", uri, state, f"{c.name}: {what}")


async def counted(c: Connection, wanted: dict[str, int], why: str) -> dict[str, int]:
    """Waits for the notifications `wanted` (counts per kind), lets any extra one arrive, and
    returns the counts seen: the caller reports them, so one too many shows."""
    await c.changes.wait_for(wanted["tools"], why)
    await c.notices.prompts.wait_for(wanted["prompts"], why)
    await c.notices.resources.wait_for(wanted["resources"], why)
    await c.notices.updated.wait_for(wanted["updated"], why)
    await settle(c)
    return c.notices.counts(c.changes)


def _uri_redacted(data: Any, uri: str) -> Any:
    """`data.uri` of a refusal, as `<the uri>` when it is the one asked for (the summary stays
    the same whichever handle was named)."""
    seen = data.get("uri") if isinstance(data, dict) else None
    return "<the uri>" if seen == uri else seen


def _expect_primitive_capabilities(c: Connection) -> None:
    capabilities = c.capabilities
    expect(
        capabilities.prompts is not None and capabilities.prompts.listChanged is True,
        f"{c.name}: the server should advertise prompts.listChanged, got {capabilities!r}",
    )
    expect(
        capabilities.resources is not None
        and capabilities.resources.listChanged is True
        and capabilities.resources.subscribe is True,
        f"{c.name}: the server should advertise resources.listChanged and subscribe, got {capabilities!r}",
    )


# Submit, reject, submit again, approve, discharge: every list grows and shrinks at least once.
SESSION_STEPS = [
    ("invoice.submit", {"amount": 1234.5, "customer": "ACME"}, "review"),
    ("invoice.reject", {"reason": "missing PO number"}, "draft"),
    ("invoice.submit", {"amount": 1234.5}, "review"),
    ("invoice.approve", {"note": "ok"}, "approved"),
    ("invoice.discharge", {}, "discharged"),
]


async def primitives_session(url: str) -> dict[str, Any]:
    """Session mode: each session's own invoice is `invoice://session`. Alice's three lists, her
    checklist and her invoice follow her invoice through `SESSION_STEPS`, each transition sends
    exactly the list_changed notifications of the lists it changed, and Bob, whose invoice stays
    a draft, is offered nothing and hears nothing."""
    token, uri, amount = "session", "invoice://session", 1234.5
    async with connect(url, "alice") as alice, connect(url, "bob") as bob:
        expect_equal(alice.protocol, "2025-11-25", "negotiated protocol version")
        _expect_primitive_capabilities(alice)
        # Both sessions watch their own invoice from their first listing.
        views = {"draft": await offered(alice, "draft", token, "in draft")}
        await offered(bob, "draft", token, "in draft")
        refusals = {
            "prompt in draft": await get_checklist(alice, "draft", "", "prompts/get in draft"),
            "resource in draft": await read_invoice(alice, uri, "draft", amount, "resources/read in draft"),
        }
        wanted = {"tools": 0, "prompts": 0, "resources": 0, "updated": 0}
        await settle(alice)
        expect_equal(alice.notices.counts(alice.changes), wanted, "notifications before any transition")

        state = "draft"
        notices = []
        served = []
        for tool, arguments, after in SESSION_STEPS:
            what = f"after {tool} ({state} -> {after})"
            # As a client does, it calls what it was shown (the SDK checks a result against the
            # output schema of its last listing, and warns when the tool was not on it).
            await alice.menu(MENU[state], f"before {tool}")
            await alice.call_ok(tool, arguments)
            wanted["tools"] += 1
            wanted["prompts"] += PROMPTS[state] != PROMPTS[after]
            wanted["resources"] += invoice_resources(state, token) != invoice_resources(after, token)
            notices.append(await counted(alice, wanted, what))
            state = after
            expect_equal(await alice.state(), state, f"invoice.status {what}")
            views.setdefault(state, await offered(alice, state, token, what))
            served.append(
                {
                    "state": state,
                    "prompt": await get_checklist(alice, state, "1234.50", f"prompts/get {what}"),
                    "resource": await read_invoice(alice, uri, state, amount, f"resources/read {what}"),
                }
            )

        # Bob's `invoice://session` is his own invoice, still a draft: Alice's is out of his reach.
        await offered(bob, "draft", token, "while alice's invoice moved")
        refusals["bob's resource"] = await read_invoice(bob, uri, "draft", None, "bob's resources/read")
        refusals["bob's prompt"] = await get_checklist(bob, "draft", "", "bob's prompts/get")
        await settle(bob)
        return {
            "protocol": alice.protocol,
            "views": views,
            "refusals": refusals,
            "served": served,
            "notices": notices,
            "bob": bob.notices.counts(bob.changes),
            "server_logs": STDIO_SERVER_LOGS,
        }


async def primitives_handles(url: str, tokens: str) -> dict[str, Any]:
    """Handle mode with authentication (`tokens`: Alice's and Carol's bearer tokens, comma
    separated): the invoice is `invoice://<handle>`. Alice, who minted it, is offered its
    checklist and invoice (with `_meta.handle` or without), and as a subscriber hears
    `resources/updated` once per transition. Carol is offered what a new invoice is (nothing),
    hears nothing, and holding Alice's handle can neither list, get, read nor subscribe to what
    is Alice's: she is answered as for a handle nobody minted."""
    alice_token, carol_token = tokens.split(",")
    async with connect(url, "alice", alice_token) as alice, connect(url, "carol", carol_token) as carol:
        _expect_primitive_capabilities(alice)
        views = {"carol before": await offered(carol, "draft", "-", "of a session that touched nothing")}
        await alice.menu(START, "before minting")
        handle, _ = await mint(alice, {"amount": 80})
        uri = f"invoice://{handle}"
        wanted = {"tools": 1, "prompts": 1, "resources": 1, "updated": 0}
        notices = [await counted(alice, wanted, "invoice.submit minted an instance in review")]
        views["review by handle"] = await offered(alice, "review", handle, "with _meta.handle in review", handle)
        views["review, touched"] = await offered(alice, "review", handle, "without a handle after minting")
        served = {
            "prompt by handle": await get_checklist(alice, "review", "80.00", "prompts/get by handle", handle),
            "resource": await read_invoice(alice, uri, "review", 80, "resources/read in review"),
        }
        # A prompts/get without a handle is about a new invoice, in draft: refused.
        refusals = {"carol's prompt": await get_checklist(carol, "draft", "", "prompts/get without a handle")}
        await alice.session.subscribe_resource(uri)

        state = "review"
        for tool, after in [("invoice.approve", "approved"), ("invoice.discharge", "discharged")]:
            what = f"after {tool} by handle"
            await alice.menu(MENU[state], f"with _meta.handle before {tool}", handle)
            await alice.call_ok(tool, {"handle": handle})
            wanted["tools"] += 1
            wanted["prompts"] += PROMPTS[state] != PROMPTS[after]
            wanted["updated"] += 1
            state = after
            notices.append(await counted(alice, wanted, what))
            views[after] = await offered(alice, after, handle, what, handle)
            served[after] = await read_invoice(alice, uri, after, 80, f"resources/read {what}")
        expect_equal(alice.notices.updated_uris, [uri, uri], "the URIs of resources/updated")
        views["carol after"] = await offered(carol, "draft", "-", "of a session that touched nothing, at the end")

        # Carol names Alice's handle, and a handle nobody minted: each is answered the same.
        never_minted = "invoice-" + "0" * 32
        for label, named in [("alice's", handle), ("never minted", never_minted)]:
            named_uri = f"invoice://{named}"
            what = f"carol with {label} handle"
            code, data = await refusal(carol.session.read_resource(named_uri), f"{what}: resources/read")
            refusals[f"read {label}"] = {"code": code, "uri": _uri_redacted(data, named_uri)}
            code, data = await refusal(carol.session.subscribe_resource(named_uri), f"{what}: resources/subscribe")
            refusals[f"subscribe {label}"] = {"code": code, "uri": _uri_redacted(data, named_uri)}
            code, data = await refusal(carol.prompts(named), f"{what}: prompts/list")
            refusals[f"list prompts {label}"] = {"code": code, "data": data}
            code, data = await refusal(carol.get_prompt(CHECKLIST, {}, named), f"{what}: prompts/get")
            refusals[f"get prompt {label}"] = {"code": code, "data": data}
        await settle(carol)
        return {
            "handle": handle,
            "views": views,
            "served": served,
            "refusals": refusals,
            "notices": notices,
            "carol": carol.notices.counts(carol.changes),
        }


# --- 9. a plugin's log lines ---------------------------------------------------------------------


async def plugin_logs(url: str) -> dict[str, Any]:
    """A call's log lines have all arrived when the SDK returns the call's result, in order."""
    async with connect(url, "logs") as c:
        await c.session.set_logging_level("info")
        rounds = []
        for round_ in range(20):
            c.notices.logs.clear()
            result = await c.call("testkit.report", {"count": 3, "level": "warning"})
            expect(not result.isError, f"round {round_}: testkit.report failed: {result!r}")
            steps = [entry.get("step") if isinstance(entry, dict) else entry for entry in c.notices.logs]
            expect_equal(steps, [1, 2, 3], f"round {round_}: log lines heard when the result came")
            rounds.append(steps)
        c.notices.logs.clear()
        await c.call("testkit.report", {"count": 2, "level": "debug"})
        await settle(c)
        expect_equal(c.notices.logs, [], "lines below the session's level")
        return {"protocol": c.protocol, "rounds": len(rounds), "server_logs": STDIO_SERVER_LOGS}


# --- 9. a client that never re-lists -------------------------------------------------------------


async def never_relists(url: str) -> dict[str, Any]:
    """Session mode, as the clients that keep their first list behave: `tools/list` once, then
    every call chosen from the next step the previous result ends with ("Invoice is now in
    review. Next: invoice.approve, ..."), through to `discharged`."""
    async with connect(url, "never-relists") as c:
        first = sorted(tool.name for tool in (await c.session.list_tools()).tools)
        plan = ["invoice.submit", "invoice.approve", "invoice.discharge"]
        offered = first
        trail = []
        for tool in plan:
            expect(tool in offered, f"{tool} should be offered, the last result offered {offered}")
            arguments = {"amount": 80, "customer": "ACME"} if tool == "invoice.submit" else {}
            result = await c.call(tool, arguments)
            expect(not result.isError, f"{tool} failed: {_text(result)!r}")
            # The move's list_changed comes on the call's own stream, ahead of its result.
            expect_equal(c.changes.count, len(trail) + 1, f"list_changed heard when {tool} returned")
            sentence = [block.text for block in result.content if isinstance(block, types.TextContent)][-1]
            trail.append(sentence)
            if "Next: " in sentence:
                offered = sentence.split("Next: ", 1)[1].rstrip(".").split(", ")
            else:
                expect("there is no next step" in sentence, f"{tool}: no next step named: {sentence!r}")
                offered = []
        expect_equal(offered, [], "after the discharge, nothing comes next")
        # Closes at once: nothing of its calls is still on its way (this SDK logs an ERROR for a
        # message that reaches a stream it is closing).
        return {"protocol": c.protocol, "first_list": first, "trail": trail}


# --- 10. a person confirms the payout -----------------------------------------------------------


class Person:
    """Answers the server's elicitations from a script of (action, content) pairs, and keeps
    what it was asked. `meanwhile` runs before an answer is given (another client's move)."""

    def __init__(self, answers: list[tuple[str, dict[str, Any] | None]]) -> None:
        self.answers = answers
        self.asked: list[dict[str, Any]] = []
        self.meanwhile: Callable[[], Awaitable[None]] | None = None

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append({"message": params.message, "schema": params.requestedSchema})
        if self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            await meanwhile()
        action, content = self.answers.pop(0)
        return types.ElicitResult(action=action, content=content)


async def audit_of(c: Connection, handle: str) -> list[dict[str, Any]]:
    """The audit trail the instance's resource shows (newest entries)."""
    read = await c.session.read_resource(f"turnstile://invoice/{handle}")
    return json.loads(read.contents[0].text)["audit"]


async def confirm_discharge(url: str) -> dict[str, Any]:
    """Handle mode. Paying out an invoice over the confirmation threshold asks the person: a
    decline changes nothing; an accept pays out, and the reference the person gave is in the
    audit trail. Then a race: while the person thinks, another session pays the invoice out; the
    confirmed call is refused FORBIDDEN, and one payout is recorded."""
    person = Person([("decline", None), ("accept", {"reference": "R-42"})])
    async with connect(url, "confirmer", elicitation_callback=person) as c:
        handle, _ = await mint(c, {"amount": 8000, "customer": "ACME"})
        await c.call_ok("invoice.approve", {"handle": handle})
        # As a client does before it calls: the menu (the SDK checks results against it).
        expect("invoice.discharge" in [t.name for t in await c.tools(handle)], "discharge offered")
        declined = await c.call("invoice.discharge", {"handle": handle})
        expect(declined.isError, f"a declined payout must be an error: {_text(declined)!r}")
        error = (declined.structuredContent or {}).get("error", {})
        expect_equal(error.get("code"), "DECLINED", "the declined payout's code")
        status = await c.call_ok("invoice.status", {"handle": handle})
        expect_equal(status.get("state"), "approved", "the state after the decline")
        paid = await c.call_ok("invoice.discharge", {"handle": handle})
        expect_equal(paid.get("state"), "discharged", "the state after the accept")
        trail = await audit_of(c, handle)
        payout = trail[-1]
        expect_equal(payout.get("event"), "DISCHARGE", "the last audit entry's event")
        expect_equal(payout.get("confirmation"), {"reference": "R-42"}, "what the person confirmed")
        expect_equal(len(person.asked), 2, "the person was asked once per payout attempt")

        # The race: the second payout is made by another session while the person thinks.
        racer = Person([("accept", {})])
        async with connect(url, "racer", elicitation_callback=racer) as other:
            second, _ = await mint(c, {"amount": 9000})
            await c.call_ok("invoice.approve", {"handle": second})

            await other.tools(second)

            async def pay_out_first() -> None:
                await other.call_ok("invoice.discharge", {"handle": second})

            person.answers.append(("accept", {"reference": "too late"}))
            person.meanwhile = pay_out_first
            late = await c.call("invoice.discharge", {"handle": second})
            expect(late.isError, f"the late payout must be refused: {_text(late)!r}")
            code = (late.structuredContent or {}).get("error", {}).get("code")
            expect_equal(code, "FORBIDDEN", "the late payout's code")
            payouts = [e for e in await audit_of(c, second) if e.get("event") == "DISCHARGE"]
            expect_equal(len(payouts), 1, "payouts recorded for the raced invoice")
            expect_equal(payouts[0].get("confirmation"), {}, "the racer's confirmation")
        return {"protocol": c.protocol, "asked": person.asked[0], "trail": trail}


# --- 11. an upstream's question, answered by the person ------------------------------------------


async def tickets_resolve(url: str) -> dict[str, Any]:
    """Handle mode, the ticket desk of plugins/tickets (an MCP server of its own, written with
    this SDK) behind Turnstile as an upstream. `tickets.resolve` makes the desk ask the person to
    confirm: an elicitation the desk sends Turnstile, which puts it to this client. A decline
    leaves the ticket in `open` (nothing fired); an accept resolves it."""
    person = Person([("decline", None), ("accept", {"confirm": True})])
    async with connect(url, "resolver", elicitation_callback=person) as c:
        opened = await c.call_ok("tickets.open", {"title": "the printer is on fire"})
        handle = opened.get("handle")
        expect(isinstance(handle, str) and handle.startswith("tickets-"), f"a minted handle: {opened!r}")
        expect_equal(opened.get("state"), "open", "the state after tickets.open")
        # As a client does before it calls: the menu (the SDK checks results against it).
        menu = sorted(tool.name for tool in await c.tools(handle))
        expect("tickets.resolve" in menu, f"tickets.resolve offered in open: {menu}")
        declined = await c.call("tickets.resolve", {"handle": handle, "note": "rebooted"})
        expect(declined.isError is True, f"a declined resolve must be an error: {_text(declined)!r}")
        expect_equal(len(person.asked), 1, "the person was asked once for the declined resolve")
        after_decline = await c.call_ok("tickets.status", {"handle": handle})
        resolved = await c.call_ok("tickets.resolve", {"handle": handle, "note": "rebooted"})
        expect_equal(len(person.asked), 2, "the person was asked once per resolve")
        after_accept = await c.call_ok("tickets.status", {"handle": handle})
        return {
            "protocol": c.protocol,
            "handle": handle,
            "asked": person.asked,
            "declined": {"structured": declined.structuredContent, "text": _text(declined)},
            "after_decline": after_decline,
            "resolved": resolved,
            "after_accept": after_accept,
        }


# --- 12. a save whose store reply was lost ---------------------------------------------------------

NEXT_STEP = "dev.turnstile/next-step"


async def answer_of(c: Connection, handle: str) -> dict[str, Any]:
    """`invoice.reject` on `handle`, and everything this SDK hands its user for it: the result's
    text blocks, `isError`, `structuredContent.error` and the next step in `_meta`; or, if the SDK
    raises instead of returning a result, what it raised."""
    answer: dict[str, Any] = {"handle": handle, "raised": None}
    try:
        result = await c.call("invoice.reject", {"handle": handle, "reason": "lost reply"})
    except Exception as error:  # noqa: BLE001 - what the SDK raises is what its user is shown
        answer["raised"] = f"{type(error).__name__}: {error}"
        return answer
    answer["isError"] = result.isError
    answer["texts"] = [block.text for block in result.content if isinstance(block, types.TextContent)]
    answer["error"] = (result.structuredContent or {}).get("error")
    answer["next"] = (result.meta or {}).get(NEXT_STEP)
    return answer


async def state_once_readable(c: Connection, handle: str) -> str:
    """`invoice.status` of `handle`, called again (for up to 5 s) while it fails: a call may meet
    a pooled store connection the proxy left dead."""
    seen = ""
    for _ in range(50):
        result = await c.call("invoice.status", {"handle": handle})
        if not result.isError:
            return (result.structuredContent or {}).get("state")
        seen = _text(result)
        await anyio.sleep(0.1)
    raise Failed(f"invoice.status of {handle} never answered: {seen!r}")


async def lost_reply(url: str, handles: str) -> dict[str, Any]:
    """Handle mode, behind a store proxy that breaks the connection right after each save to
    draft (the test minted the invoices, in review, and armed the proxy): `invoice.reject` on
    each handle, reporting what the SDK shows for each call, then where each invoice really is."""
    listed = handles.split(",")
    async with connect(url, "lost-reply") as c:
        # As a client does before it calls: the menu (the SDK checks results against it). Listed
        # once, before any save was cut: what this scenario is about is the calls.
        await c.menu(MENU["review"], "with _meta.handle in review", listed[0])
        calls = [await answer_of(c, handle) for handle in listed]
        states = {handle: await state_once_readable(c, handle) for handle in listed}
        return {"protocol": c.protocol, "calls": calls, "states": states}


@contextmanager
def experimental_tasks() -> Iterator[None]:
    """1.x says, each time its `session.experimental` is used, that this API of its own goes in
    2.0 (where tasks are 2026-07-28's extension): that notice is about the SDK, not the server,
    and only it is silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="The experimental tasks API is deprecated", category=DeprecationWarning
        )
        yield


async def task_failover(url: str, first: str) -> dict[str, Any]:
    """`migration.apply` as a 2025-11-25 task on the first server (`first`: its URL and PID),
    polled on this one, which shares its store, after the first was killed with SIGKILL."""
    first_url, first_pid = first.rsplit(",", 1)
    with experimental_tasks():
        async with connect(first_url, "first") as a:
            handle = await backed_up_migration(a)
            # It runs only as a task: a plain call is refused, and nothing ran.
            try:
                plain = await a.session.call_tool("migration.apply", {"handle": handle, "confirm": True})
                raise Failed(f"a plain call of migration.apply was answered: {plain!r}")
            except McpError as error:
                refused_plainly = error.error.code
            created = await a.session.experimental.call_tool_as_task(
                "migration.apply", {"handle": handle, "confirm": True}
            )
            task_id = created.task.taskId
            expect_equal(created.task.status, "working", "the new task's status")
        async with connect(url, "second") as b:
            seen = await b.session.experimental.get_task(task_id)
            os.kill(int(first_pid), signal.SIGKILL)
            polled = [status.status async for status in b.session.experimental.poll_task(task_id)]
            ended = await b.session.experimental.get_task(task_id)
            try:
                result = await b.session.experimental.get_task_result(task_id, types.CallToolResult)
                outcome: dict[str, Any] = {"result": result.model_dump(mode="json", exclude_none=True)}
            except McpError as error:
                outcome = {"error": {"code": error.error.code, "message": error.error.message,
                                     "data": error.error.data}}
            await b.tools(handle)
            state = (await b.call_ok("migration.status", {"handle": handle})).get("state")
    return {
        "protocol": a.protocol,
        "handle": handle,
        "task_id": task_id,
        "refused_plainly": refused_plainly,
        "seen_on_second": seen.status,
        "polled": polled,
        "ended": {"status": ended.status, "statusMessage": ended.statusMessage},
        "outcome": outcome,
        "state": state,
    }


async def backed_up_migration(c: Connection) -> str:
    """A migration taken through its dry run and backup, listing its menu before each call as a
    client does: its handle."""
    dry_run = await c.call_ok("migration.dry_run", {})
    handle = dry_run.get("handle")
    expect(isinstance(handle, str), f"migration.dry_run gave no handle: {dry_run!r}")
    await c.tools(handle)
    await c.call_ok("migration.backup", {"handle": handle})
    listed = {tool.name for tool in await c.tools(handle)}
    expect("migration.apply" in listed, f"migration.apply not listed after a backup: {listed}")
    return handle


async def task_cancel(url: str, token: str) -> dict[str, Any]:
    """`migration.apply` as a 2025-11-25 task, cancelled while it works."""
    with experimental_tasks():
        async with connect(url, "canceller", token) as c:
            handle = await backed_up_migration(c)
            apply = {"handle": handle, "confirm": True}
            created = await c.session.experimental.call_tool_as_task("migration.apply", apply)
            task_id = created.task.taskId
            cancelled = await c.session.experimental.cancel_task(task_id)
            ended = await c.session.experimental.get_task(task_id)
            try:
                result = await c.session.experimental.get_task_result(task_id, types.CallToolResult)
                raise Failed(f"a cancelled task gave a result: {result!r}")
            except McpError as error:
                result_refused = error.error.code
            try:
                await c.session.experimental.cancel_task(task_id)
                raise Failed("a task cancelled twice was acknowledged twice")
            except McpError as error:
                cancelled_again = error.error.code
            state_after_cancel = (await c.call_ok("migration.status", {"handle": handle})).get("state")
            # The step can be taken again once the cancelled run's end is saved.
            again = None
            for _ in range(100):
                try:
                    again = await c.session.experimental.call_tool_as_task("migration.apply", apply)
                    break
                except McpError as error:
                    expect("BUSY" in error.error.message or "running" in error.error.message,
                           f"retrying migration.apply: {error.error.message!r}")
                    await anyio.sleep(0.1)
            expect(again is not None, "migration.apply stayed held after its task was cancelled")
            async for _ in c.session.experimental.poll_task(again.task.taskId):
                pass
            final = await c.session.experimental.get_task_result(again.task.taskId, types.CallToolResult)
            await c.tools(handle)
            state_at_end = (await c.call_ok("migration.status", {"handle": handle})).get("state")
            listed = await c.session.experimental.list_tasks()
            # Each task's end is told on the session (it may come just after its result).
            for _ in range(50):
                if len(c.notices.task_statuses) >= 2:
                    break
                await anyio.sleep(0.1)
            told = [
                {"task": "first" if task == task_id else "again", "status": status}
                for task, status in c.notices.task_statuses
            ]
    return {
        "protocol": c.protocol,
        "handle": handle,
        "cancel_answer": cancelled.status,
        "ended": ended.status,
        "result_refused": result_refused,
        "cancelled_again": cancelled_again,
        "state_after_cancel": state_after_cancel,
        "final_is_error": bool(final.isError),
        "state_at_end": state_at_end,
        "listed": [task.status for task in listed.tasks],
        "told": told,
    }


if __name__ == "__main__":
    run(
        {
            "session-lifecycle": session_lifecycle,
            "handle-lifecycle": handle_lifecycle,
            "shared-handle": shared_handle,
            "stateless": stateless,
            "model-client": model_client,
            "primitives-session": primitives_session,
            "primitives-handles": primitives_handles,
            "plugin-logs": plugin_logs,
            "never-relists": never_relists,
            "confirm-discharge": confirm_discharge,
            "submit-invoice": submit_invoice,
            "tickets-resolve": tickets_resolve,
            "lost-reply": lost_reply,
            "task-failover": task_failover,
            "task-cancel": task_cancel,
        },
        SDK,
    )
