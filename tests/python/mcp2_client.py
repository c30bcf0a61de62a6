"""Scenarios driven with the official Python `mcp` SDK, 2.x line (protocol 2026-07-28, no sessions).

Usage: python mcp2_client.py SCENARIO URL
  handle-lifecycle  server with --state-handle-key: mint a handle with `mcp.Client`, drive it by
                    handle, `list_tools(meta=...)` follows it, and `subscriptions/listen` streams
                    naming the handle in `_meta` receive `list_changed` on each transition
                    (one naming another handle hears nothing)
  stateless         server with --stateless: a lifecycle over a new `mcp.Client` per request,
                    kept by the handle; forged and malformed handles are refused; independent
                    clients racing for one transition: exactly one wins
  model-client      server with --state-handle-key: a model-style agent builds every call from
                    the `tools/list` schemas alone and drives two invoices through their
                    lifecycles, interleaved, naming the handles it holds in `_meta` of
                    `tools/list` (no sessions on 2026-07-28)
  listen-idle[:S]   `Client.listen(tools_list_changed=True)` without a handle stays open S
                    seconds (default 30) without the server ending it, then the client closes it
Prints a JSON summary on stdout; exits 1 with `FAILED: ...` on stderr on any failed expectation.
"""

from __future__ import annotations

import importlib.metadata
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.subscriptions import Subscription, SubscriptionLost, ToolsListChanged

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
MODERN = "2026-07-28"
RACERS = 6


def _text(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def menu(client: Client, wanted: list[str], what: str, handle: str | None = None) -> list[str]:
    meta = None if handle is None else {"handle": handle}
    result = await client.list_tools(meta=meta)
    # A menu that depends on the handle must not be cached: the SDK's cache key ignores `_meta`.
    expect_equal(result.ttl_ms, 0, f"ttlMs of tools/list {what}")
    return expect_menu([tool.name for tool in result.tools], wanted, what)


async def call_ok(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    expect(not result.is_error, f"{name} {arguments} failed: {_text(result)!r} {result.structured_content!r}")
    expect(isinstance(result.structured_content, dict), f"{name} returned no structuredContent: {result!r}")
    return result.structured_content


async def call_refused(client: Client, name: str, arguments: dict[str, Any], code: str) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    expect(
        result.is_error is True,
        f"{name} {arguments} should be refused with {code}, but it succeeded: {result.structured_content!r}",
    )
    expect_equal(
        error_code(result.structured_content),
        code,
        f"structuredContent.error.code of {name} {arguments} (text {_text(result)!r})",
    )
    return result.structured_content


async def state(client: Client, handle: str) -> str:
    return (await call_ok(client, "invoice.status", {"handle": handle})).get("state")


async def mint(client: Client, arguments: dict[str, Any]) -> str:
    result = await client.call_tool("invoice.submit", arguments)
    expect(not result.is_error, f"invoice.submit without a handle failed: {_text(result)!r}")
    handle = expect_handle(
        (result.structured_content or {}).get("handle"), "structuredContent.handle of invoice.submit"
    )
    expect(handle in _text(result), f"the text of invoice.submit should carry {handle}: {_text(result)!r}")
    return handle


@asynccontextmanager
async def listen(client: Client, handle: str | list[str]) -> AsyncIterator[Subscription]:
    """`client.listen(tools_list_changed=True)` with `_meta: {"handle": handle}` on the request.

    mcp 2.3.0's `Client.listen()` takes no `meta` argument, so the handle is added to the
    `subscriptions/listen` request's `_meta` by wrapping the session's request stamp (the hook
    that writes the protocol version into every request's `_meta`) while the request is built.
    """
    session = client.session
    stamp = session._stamp  # noqa: SLF001 - see the docstring

    def stamp_with_handle(data: dict[str, Any], opts: Any) -> None:
        stamp(data, opts)
        if data.get("method") == "subscriptions/listen":
            data.setdefault("params", {}).setdefault("_meta", {})["handle"] = handle

    session._stamp = stamp_with_handle  # noqa: SLF001
    try:
        # The request is written and acknowledged while entering, so the stamp is restored after.
        async with client.listen(tools_list_changed=True) as subscription:
            session._stamp = stamp  # noqa: SLF001
            yield subscription
    finally:
        session._stamp = stamp  # noqa: SLF001


async def count_events(subscription: Subscription, changes: ListChanges) -> None:
    async for event in subscription:
        if isinstance(event, ToolsListChanged):
            changes.record()


# --- 3. handle mode over 2026-07-28 ------------------------------------------------------------


async def handle_lifecycle(url: str) -> dict[str, Any]:
    async with Client(url) as client, Client(url) as other_client:
        expect_equal(client.protocol_version, MODERN, "protocol version mcp.Client negotiated")
        tools_capability = client.server_capabilities.tools
        expect(
            tools_capability is not None and tools_capability.list_changed is True,
            f"the server should advertise tools.listChanged, got {client.server_capabilities!r}",
        )
        menus = {"no handle": await menu(client, START, "without a handle")}
        await call_refused(client, "invoice.approve", {}, "HANDLE_REQUIRED")

        handle = await mint(client, {"amount": 10, "customer": "Initech"})
        other = await mint(other_client, {"amount": 11})
        expect(handle != other, "two mints returned the same handle")

        by_handle = ListChanges("listen naming the handle")
        by_list = ListChanges("listen naming [other, handle]")
        by_other = ListChanges("listen naming another handle")
        async with (
            listen(client, handle) as sub,
            listen(client, [other, handle]) as sub_list,
            listen(other_client, other) as sub_other,
            anyio.create_task_group() as tasks,
        ):
            for subscription in (sub, sub_list, sub_other):
                honored = subscription.honored.tools_list_changed
                expect(
                    honored is True, f"subscriptions/listen should honor toolsListChanged, got {subscription.honored!r}"
                )
            tasks.start_soon(count_events, sub, by_handle)
            tasks.start_soon(count_events, sub_list, by_list)
            tasks.start_soon(count_events, sub_other, by_other)

            menus["review"] = await menu(client, MENU["review"], "with _meta.handle in review", handle)
            # The cached-list trap: the SDK caches tools/list under a key that ignores `_meta`.
            menus["no handle again"] = await menu(client, START, "without a handle after one with a handle")
            menus["other client, no handle"] = await menu(other_client, START, "of another client")
            await call_refused(client, "invoice.discharge", {"handle": handle}, "FORBIDDEN")

            for number, (tool, current) in enumerate(
                [("invoice.approve", "approved"), ("invoice.discharge", "discharged")], start=1
            ):
                structured = await call_ok(client, tool, {"handle": handle})
                expect_equal(structured.get("handle"), handle, f"structuredContent.handle of {tool}")
                await by_handle.wait_for(number, f"after {tool} on the handle")
                await by_list.wait_for(number, f"after {tool} on a handle in the list")
                menus[current] = await menu(client, MENU[current], f"with _meta.handle after {tool}", handle)
                expect_equal(await state(client, handle), current, f"invoice.status after {tool}")
            await by_other.stays_at(0, "only the other handle's listener, which never changed")
            expect_equal(await state(other_client, other), "review", "the other instance's state")
            tasks.cancel_scope.cancel()
        return {
            "protocol": client.protocol_version,
            "handle": handle,
            "menus": menus,
            "listen_events": {"handle": by_handle.count, "list": by_list.count, "other": by_other.count},
        }


# --- 5. stateless over 2026-07-28 --------------------------------------------------------------


async def stateless(url: str) -> dict[str, Any]:
    clients = 0

    @asynccontextmanager
    async def fresh() -> AsyncIterator[Client]:
        nonlocal clients
        clients += 1
        async with Client(url) as client:
            expect_equal(client.protocol_version, MODERN, "protocol version mcp.Client negotiated")
            yield client

    async with fresh() as client:
        await menu(client, START, "without a handle")
    async with fresh() as client:
        handle = await mint(client, {"amount": 3.5})
    states = []
    for tool, before, after in [
        ("invoice.approve", "review", "approved"),
        ("invoice.discharge", "approved", "discharged"),
    ]:
        async with fresh() as client:
            await menu(client, MENU[before], f"with _meta.handle before {tool}", handle)
        async with fresh() as client:
            structured = await call_ok(client, tool, {"handle": handle})
            expect_equal(structured.get("handle"), handle, f"structuredContent.handle of {tool}")
        async with fresh() as client:
            states.append(await state(client, handle))
            expect_equal(states[-1], after, f"invoice.status from a new client after {tool}")
    refusals = {}
    async with fresh() as client:
        forged = "invoice-" + secrets.token_hex(16)
        refusals["forged"] = error_code(
            await call_refused(client, "invoice.approve", {"handle": forged}, "UNKNOWN_HANDLE")
        )
        refusals["malformed"] = error_code(
            await call_refused(client, "invoice.approve", {"handle": "invoice-1234"}, "INVALID_HANDLE")
        )
        refusals["missing"] = error_code(await call_refused(client, "invoice.approve", {}, "HANDLE_REQUIRED"))

    # RACERS independent clients race for one transition of one instance: exactly one wins, the
    # others see FORBIDDEN, and the instance moved exactly once.
    async with fresh() as client:
        contested = await mint(client, {"amount": 1})
    outcomes: list[str] = []

    async def race() -> None:
        async with fresh() as client:
            result = await client.call_tool("invoice.approve", {"handle": contested})
            outcomes.append(error_code(result.structured_content) if result.is_error else "ok")

    async with anyio.create_task_group() as tasks:
        for _ in range(RACERS):
            tasks.start_soon(race)
    race_summary = {outcome: outcomes.count(outcome) for outcome in sorted(set(outcomes))}
    expect_equal(race_summary, {"FORBIDDEN": RACERS - 1, "ok": 1}, f"outcomes of {RACERS} racing approves")
    async with fresh() as client:
        expect_equal(await state(client, contested), "approved", "state after the race")
    return {"handle": handle, "states": states, "clients": clients, "refusals": refusals, "race": race_summary}


# --- 6. a model-style client over 2026-07-28 -----------------------------------------------------


class HandleAgent:
    """The model-style agent's view of one `mcp.Client`: no session, so it names the handles it
    holds in `_meta` of `tools/list`, one handle as a string, several as a list."""

    name = "model"

    def __init__(self, client: Client) -> None:
        self.client = client

    async def list_tools(self, handles: list[str]) -> list[ListedTool]:
        meta = None
        if handles:
            meta = {"handle": handles[0] if len(handles) == 1 else handles}
        result = await self.client.list_tools(meta=meta)
        expect(result.next_cursor is None, "unexpected pagination in tools/list")
        expect_equal(result.ttl_ms, 0, f"ttlMs of tools/list with _meta {meta}")
        return [ListedTool(tool.name, tool.input_schema) for tool in result.tools]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        result = await self.client.call_tool(name, arguments)
        return ToolOutcome(bool(result.is_error), result.structured_content, _text(result))

    async def transitions_seen(self, n: int, why: str) -> None:
        # No session, no GET stream: `list_changed` comes only through `subscriptions/listen`,
        # which scenario 3 covers.
        return None


async def model_client(url: str) -> dict[str, Any]:
    async with Client(url) as client:
        expect_equal(client.protocol_version, MODERN, "protocol version mcp.Client negotiated")
        summary = await drive_two_invoices(HandleAgent(client), names_handles=True)
        return {"protocol": client.protocol_version, **summary}


# --- 7. an idle listen without a handle --------------------------------------------------------


async def listen_idle(url: str, seconds: str = "30") -> dict[str, Any]:
    """Opens `subscriptions/listen` for `tools_list_changed` without naming a handle, keeps it
    open `seconds`, checks the server has not ended it, then closes it from the client.

    No event is expected: without a handle the listen covers the catalog (the starting tools),
    and nothing changes the plugin directory during this scenario, so nothing can make that list
    change."""
    duration = float(seconds)
    ended: str | None = None
    events = 0

    async def watch(subscription: Subscription) -> None:
        nonlocal ended, events
        try:
            async for _ in subscription:
                events += 1
            ended = "ended by the server (graceful close)"
        except SubscriptionLost as lost:
            ended = f"lost: {lost}"

    async with Client(url) as client:
        expect_equal(client.protocol_version, MODERN, "protocol version mcp.Client negotiated")
        opened = anyio.current_time()
        async with client.listen(tools_list_changed=True) as subscription:
            expect(
                subscription.honored.tools_list_changed is True,
                f"subscriptions/listen should honor toolsListChanged, got {subscription.honored!r}",
            )
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(watch, subscription)
                await anyio.sleep(duration)
                open_for = round(anyio.current_time() - opened, 1)
                expect(ended is None, f"the listen without a handle {ended} after {open_for} s")
                # The client is still usable beside its open listen.
                await menu(client, START, "beside an open listen")
                expect(ended is None, f"the listen without a handle {ended} after a tools/list")
                tasks.cancel_scope.cancel()
        # Closed from the client's side (leaving `listen`); the client carries on.
        await menu(client, START, "after closing the listen")
        # Give the server a moment to notice the closed stream before its log is read.
        await anyio.sleep(0.5)
    expect_equal(events, 0, "list_changed events on a listen without a handle (the catalog cannot change)")
    return {"protocol": MODERN, "open_seconds": open_for, "events": events, "ended_by_server": ended}


if __name__ == "__main__":
    run(
        {
            "handle-lifecycle": handle_lifecycle,
            "stateless": stateless,
            "model-client": model_client,
            "listen-idle": listen_idle,
        },
        SDK,
    )
