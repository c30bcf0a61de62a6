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
Prints a JSON summary on stdout; exits 1 with `FAILED: ...` on stderr on any failed expectation.
"""

from __future__ import annotations

import importlib.metadata
import secrets
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from turnstile_e2e import (
    MENU,
    START,
    ListChanges,
    ListedTool,
    ToolOutcome,
    drive_two_invoices,
    error_code,
    expect,
    expect_equal,
    expect_handle,
    expect_menu,
    run,
)

SDK = f"mcp {importlib.metadata.version('mcp')}"


@dataclass
class Connection:
    """One MCP session (one `initialize`), with what the server pushed to it."""

    name: str
    session: ClientSession
    changes: ListChanges
    protocol: str
    session_id: str | None

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


def _text(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


@asynccontextmanager
async def connect(url: str, name: str) -> AsyncIterator[Connection]:
    """Opens a session; `list_changed` notifications (GET stream) are counted in `changes`."""
    changes = ListChanges(name)

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ToolListChangedNotification
        ):
            changes.record()
        elif isinstance(message, Exception):
            # The SDK hands transport errors to the message handler; a test must see them.
            print(f"{name}: transport error: {message!r}", file=sys.stderr, flush=True)

    async with streamable_http_client(url) as (read, write, get_session_id):
        async with ClientSession(read, write, message_handler=on_message) as session:
            initialized = await session.initialize()
            expect(
                initialized.capabilities.tools is not None and initialized.capabilities.tools.listChanged is True,
                f"{name}: the server should advertise tools.listChanged, got {initialized.capabilities!r}",
            )
            yield Connection(name, session, changes, str(initialized.protocolVersion), get_session_id())


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


if __name__ == "__main__":
    run(
        {
            "session-lifecycle": session_lifecycle,
            "handle-lifecycle": handle_lifecycle,
            "shared-handle": shared_handle,
            "stateless": stateless,
            "model-client": model_client,
        },
        SDK,
    )
