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
  primitives        server with --state-handle-key: prompts/list, resources/list and
                    resources/templates/list with `_meta.handle` follow the invoice, get and read
                    are refused out of state (FORBIDDEN) and served in it, and a listen naming the
                    handle hears each list's `list_changed` exactly when a transition changed it
  by-the-book       2026-07-28 without the gated-lists extension: one stable `tools/list`, then
                    two invoices driven to `discharged` from each result's next step alone
  lost-reply:H1,H2,...  server with --state-handle-key whose store connection is cut right after
                    each save to draft (tests/lost_replies.rs arms the proxy): `invoice.reject` on
                    each of these invoices (in review), reporting what the SDK hands back for each
                    call, then where each invoice is (`invoice.status`)
URL may also be `stdio:["PROGRAM", "ARG", ...]`: each client starts that server over stdio.
Prints a JSON summary on stdout; exits 1 with `FAILED: ...` on stderr on any failed expectation.
"""

# Deliberately parallel to mcp1_client.py: each script stands alone on its own SDK line, written
# as that SDK's users write it; what both need lives in turnstile_e2e.py.
from __future__ import annotations

import importlib.metadata
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client import advertise
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    Subscription,
    SubscriptionLost,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError

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
MODERN = "2026-07-28"
# Turnstile's extension: 2026-07-28 lists that follow the instances a request names, and
# `list_changed` for their transitions. Scenarios 3 to 8 test those menus, so they declare it;
# `by-the-book` does not, and sees the stable lists the revision asks for.
GATED = [advertise("dev.turnstile/gated-lists")]
NEXT_STEP = "dev.turnstile/next-step"
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
async def listen(client: Client, handle: str | list[str], **kinds: bool) -> AsyncIterator[Subscription]:
    """`client.listen(tools_list_changed=True)` (or the kinds given, as `listen`'s keywords) with
    `_meta: {"handle": handle}` on the request.

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
        async with client.listen(**(kinds or {"tools_list_changed": True})) as subscription:
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
    async with Client(url, extensions=GATED) as client, Client(url, extensions=GATED) as other_client:
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
        async with Client(url, extensions=GATED) as client:
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
    async with Client(url, extensions=GATED) as client:
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

    async with Client(url, extensions=GATED) as client:
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


# --- 8. prompts and resources over 2026-07-28 ----------------------------------------------------

FOCUS = "the VAT number"
EVERY_LIST = {"tools_list_changed": True, "prompts_list_changed": True, "resources_list_changed": True}


async def offered(client: Client, state: str, token: str, what: str, handle: str | None = None) -> dict[str, Any]:
    """The three lists for prompts and resources, each exactly what one invoice in `state` (named
    `token` in its resources' URIs) is offered; with `handle` named in `_meta`."""
    meta = None if handle is None else {"handle": handle}
    prompts = await client.list_prompts(meta=meta)
    resources = await client.list_resources(meta=meta)
    templates = await client.list_resource_templates(meta=meta)
    for listed, name in [(prompts, "prompts/list"), (resources, "resources/list"), (templates, "templates/list")]:
        # The SDK caches lists under a key that ignores `_meta`: a list that depends on it must say 0.
        expect_equal(listed.ttl_ms, 0, f"ttlMs of {name} {what}")
        expect(listed.next_cursor is None, f"{name} {what}: unexpected pagination")
    for prompt in prompts.prompts:
        if prompt.name == CHECKLIST:
            arguments = [(argument.name, argument.required) for argument in prompt.arguments or []]
            expect_equal(arguments, [("focus", False)], "the checklist's arguments")
    for resource in resources.resources:
        expect_equal(resource.mime_type, "application/json", f"mimeType of {resource.uri}")
    return {
        "prompts": expect_names([p.name for p in prompts.prompts], PROMPTS[state], f"prompts/list {what}"),
        "resources": expect_names(
            [r.uri for r in resources.resources], invoice_resources(state, token), f"resources/list {what}"
        ),
        "templates": expect_names(
            [t.uri_template for t in templates.resource_templates],
            invoice_templates(state),
            f"resources/templates/list {what}",
        ),
    }


async def refusal(request: Any, what: str) -> tuple[int, Any]:
    """The JSON-RPC error `request` is answered with; fails if it is answered with a result."""
    try:
        result = await request
    except MCPError as error:
        return error.code, error.data
    raise Failed(f"{what}: expected a JSON-RPC error, got the result {result!r}")


async def get_checklist(client: Client, state: str, amount: str, what: str, handle: str | None = None) -> Any:
    """`prompts/get` of the checklist: served in review (reading the amount), refused elsewhere.
    Returns `"served"` or the refusal's data."""
    meta = None if handle is None else {"handle": handle}
    if CHECKLIST in PROMPTS[state]:
        result = await client.get_prompt(CHECKLIST, {"focus": FOCUS}, meta=meta)
        expect(len(result.messages) == 1, f"{what}: expected one message, got {result.messages!r}")
        content = result.messages[0].content
        expect(isinstance(content, types.TextContent), f"{what}: expected text, got {content!r}")
        expect_checklist(content.text, amount, FOCUS, what)
        return "served"
    code, data = await refusal(client.get_prompt(CHECKLIST, {}, meta=meta), what)
    return expect_refusal(code, data, "prompt", CHECKLIST, state, what)


async def read_invoice(client: Client, uri: str, state: str, amount: Any, what: str) -> Any:
    """`resources/read` of the invoice: its JSON from review on, refused before. Returns the
    state it showed, or the refusal's data."""
    if state in INVOICE_READABLE:
        result = await client.read_resource(uri)
        expect(len(result.contents) == 1, f"{what}: expected one content, got {result.contents!r}")
        content = result.contents[0]
        expect(isinstance(content, types.TextResourceContents), f"{what}: expected text, got {content!r}")
        expect_equal(content.uri, uri, f"{what}: the content's uri")
        return expect_invoice_document(content.text, content.mime_type, state, amount, what)["state"]
    code, data = await refusal(client.read_resource(uri), what)
    return expect_refusal(code, data, "resource", uri, state, what)


class ListenCounts:
    """The `list_changed` events one listen stream received, per list."""

    def __init__(self, name: str) -> None:
        self.kinds = {
            "tools": ListChanges(name, "tools list_changed"),
            "prompts": ListChanges(name, "prompts list_changed"),
            "resources": ListChanges(name, "resources list_changed"),
        }

    async def count(self, subscription: Subscription) -> None:
        kinds = {ToolsListChanged: "tools", PromptsListChanged: "prompts", ResourcesListChanged: "resources"}
        async for event in subscription:
            self.kinds[kinds[type(event)]].record()

    async def wait_for(self, wanted: dict[str, int], why: str) -> dict[str, int]:
        for kind, changes in self.kinds.items():
            await changes.wait_for(wanted[kind], why)
        return self.counts()

    def counts(self) -> dict[str, int]:
        return {kind: changes.count for kind, changes in self.kinds.items()}


# Reject, submit again, approve, discharge: every list shrinks and grows at least once.
HANDLE_STEPS = [
    ("invoice.reject", {"reason": "missing PO number"}, "draft"),
    ("invoice.submit", {"amount": 250}, "review"),
    ("invoice.approve", {}, "approved"),
    ("invoice.discharge", {}, "discharged"),
]


@asynccontextmanager
async def connect(url: str) -> AsyncIterator[Client]:
    """`mcp.Client` for a URL; for a `stdio:[...]` target, over the SDK's stdio client, which
    starts that server as its child (its log goes to `STDIO_SERVER_LOGS`)."""
    command = stdio_command(url)
    if command is None:
        async with Client(url, extensions=GATED) as client:
            yield client
        return
    parameters = StdioServerParameters(command=command[0], args=command[1:])
    with stdio_server_log() as log:
        async with Client(stdio_client(parameters, errlog=log), extensions=GATED) as client:
            yield client


async def primitives(url: str) -> dict[str, Any]:
    """Handle mode over 2026-07-28: without a handle a client is offered what a new invoice is
    (nothing); with `_meta.handle` the lists, the checklist and `invoice://<handle>` follow that
    invoice through `HANDLE_STEPS`; a `subscriptions/listen` naming the handle hears exactly the
    list_changed events of the lists each transition changed, one naming another handle none.
    Over stdio each client starts its own server."""
    async with connect(url) as client, connect(url) as other_client:
        expect_equal(client.protocol_version, MODERN, "protocol version mcp.Client negotiated")
        capabilities = client.server_capabilities
        expect(
            capabilities.prompts is not None and capabilities.prompts.list_changed is True,
            f"the server should advertise prompts.listChanged, got {capabilities!r}",
        )
        expect(
            capabilities.resources is not None and capabilities.resources.list_changed is True,
            f"the server should advertise resources.listChanged, got {capabilities!r}",
        )
        views = {"no handle": await offered(client, "draft", "-", "without a handle")}
        refusals = {"prompt without a handle": await get_checklist(client, "draft", "", "prompts/get without a handle")}

        handle = await mint(client, {"amount": 250, "customer": "Initech"})
        other = await mint(other_client, {"amount": 11})
        uri = f"invoice://{handle}"
        views["review"] = await offered(client, "review", handle, "with _meta.handle in review", handle)
        # The cached-list trap: the SDK caches lists under a key that ignores `_meta`. Over HTTP
        # a request without a handle is about a new invoice; over stdio the connection is a
        # session, and a list without a handle shows what the instances it touched are offered.
        if stdio_command(url) is None:
            views["no handle again"] = await offered(client, "draft", "-", "without a handle after one with a handle")
        else:
            views["no handle again"] = await offered(client, "review", handle, "of the stdio session that minted")
        served = [
            {
                "state": "review",
                "prompt": await get_checklist(client, "review", "250.00", "prompts/get in review", handle),
                "resource": await read_invoice(client, uri, "review", 250, "resources/read in review"),
            }
        ]

        by_handle = ListenCounts("listen naming the handle")
        by_other = ListenCounts("listen naming another handle")
        notices = []
        async with (
            listen(client, handle, **EVERY_LIST) as sub,
            listen(other_client, other, **EVERY_LIST) as sub_other,
            anyio.create_task_group() as tasks,
        ):
            for subscription in (sub, sub_other):
                honored = subscription.honored
                expect(
                    (honored.tools_list_changed, honored.prompts_list_changed, honored.resources_list_changed)
                    == (True, True, True),
                    f"subscriptions/listen should honor every list_changed, got {honored!r}",
                )
            tasks.start_soon(by_handle.count, sub)
            tasks.start_soon(by_other.count, sub_other)

            wanted = {"tools": 0, "prompts": 0, "resources": 0}
            state = "review"
            for tool, arguments, after in HANDLE_STEPS:
                what = f"after {tool} ({state} -> {after})"
                # As a client does, it calls what it was shown (see mcp1_client's scenario 8).
                await menu(client, MENU[state], f"with _meta.handle before {tool}", handle)
                structured = await call_ok(client, tool, {**arguments, "handle": handle})
                expect_equal(structured.get("handle"), handle, f"structuredContent.handle of {tool}")
                wanted["tools"] += 1
                wanted["prompts"] += PROMPTS[state] != PROMPTS[after]
                wanted["resources"] += invoice_resources(state, handle) != invoice_resources(after, handle)
                await by_handle.wait_for(wanted, what)
                # Whatever else is under way arrives within a round trip and a pause (2026-07-28
                # has no ping: the round trip is a request that changes nothing).
                await client.list_tools(meta={"handle": handle})
                await anyio.sleep(0.3)
                notices.append(by_handle.counts())
                state = after
                views.setdefault(state, await offered(client, state, handle, f"with _meta.handle {what}", handle))
                served.append(
                    {
                        "state": state,
                        "prompt": await get_checklist(client, state, "250.00", f"prompts/get {what}", handle),
                        "resource": await read_invoice(client, uri, state, 250, f"resources/read {what}"),
                    }
                )
            await by_other.kinds["tools"].stays_at(0, "only the other handle's listener, which never changed")
            other_counts = by_other.counts()
            tasks.cancel_scope.cancel()
        return {
            "protocol": client.protocol_version,
            "handle": handle,
            "views": views,
            "refusals": refusals,
            "served": served,
            "notices": notices,
            "other": other_counts,
            "server_logs": STDIO_SERVER_LOGS,
        }


# --- 9. by the book: stable lists and the next step ------------------------------------------


def next_tools(result: types.CallToolResult, what: str) -> tuple[str, list[str]]:
    """The next step a result ends with, as a model reads it (the last text block: "Invoice <h>
    is now in <state>. Next: a, b.") and as `_meta` says it; both must agree."""
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    expect(bool(texts), f"{what}: no text in the result")
    sentence = texts[-1]
    meta = (result.meta or {}).get(NEXT_STEP)
    expect(isinstance(meta, dict), f"{what}: no {NEXT_STEP} in _meta: {result.meta!r}")
    if meta["status"] == "done":
        expect("there is no next step" in sentence, f"{what}: a final state should say so: {sentence!r}")
        return meta["state"], []
    expect("Next: " in sentence, f"{what}: the last text block names no next step: {sentence!r}")
    named = sentence.split("Next: ", 1)[1].rstrip(".").split(", ")
    expect_equal(named, meta["available"], f"{what}: the text's next tools and _meta's")
    return meta["state"], named


async def by_the_book(url: str) -> dict[str, Any]:
    """2026-07-28 without the gated-lists extension: one `tools/list`, which is the same bytes
    whatever was done since (and cacheable); then two invoices driven to `discharged`,
    interleaved, each call chosen from the previous result's next step alone; an out-of-order
    call is refused FORBIDDEN."""
    async with Client(url) as client, Client(url) as other:
        expect_equal(client.protocol_version, MODERN, "protocol version mcp.Client negotiated")
        listed = await client.list_tools()
        expect(listed.ttl_ms is not None and listed.ttl_ms > 0, f"a stable list is cacheable: ttlMs {listed.ttl_ms}")
        catalog = sorted(tool.name for tool in listed.tools)
        for tool in ("invoice.approve", "invoice.discharge", "invoice.submit"):
            expect(tool in catalog, f"{tool} in the stable list {catalog}")
        approve = next(tool for tool in listed.tools if tool.name == "invoice.approve")
        expect("`review`" in (approve.description or ""), f"invoice.approve says when: {approve.description!r}")

        # The path each invoice should take, and the tool its next step must offer at each turn.
        plans = {"A": ["invoice.approve", "invoice.discharge"], "B": ["invoice.reject", "invoice.submit",
                                                                     "invoice.approve", "invoice.discharge"]}
        handles: dict[str, str] = {}
        offered: dict[str, list[str]] = {}
        trail: list[dict[str, Any]] = []
        for label, amount in (("A", 40), ("B", 60)):
            result = await client.call_tool("invoice.submit", {"amount": amount})
            expect(not result.is_error, f"minting {label}: {_text(result)!r}")
            handles[label] = expect_handle((result.structured_content or {}).get("handle"), f"handle of {label}")
            now, offered[label] = next_tools(result, f"minting {label}")
            trail.append({"invoice": label, "tool": "invoice.submit", "state": now, "next": offered[label]})
        refused = await call_refused(other, "invoice.discharge", {"handle": handles["A"]}, "FORBIDDEN")
        expect_equal(refused["error"]["state"], "review", "the refusal's state")
        while any(plans.values()):
            for label in ("A", "B"):
                if not plans[label]:
                    continue
                tool = plans[label].pop(0)
                expect(tool in offered[label], f"{label}: {tool} should be a next step, offered {offered[label]}")
                arguments: dict[str, Any] = {"handle": handles[label]}
                if tool == "invoice.reject":
                    arguments["reason"] = "wrong PO"
                if tool == "invoice.submit":
                    arguments["amount"] = 61
                result = await other.call_tool(tool, arguments)
                expect(not result.is_error, f"{label}: {tool} failed: {_text(result)!r}")
                now, offered[label] = next_tools(result, f"{label}: {tool}")
                trail.append({"invoice": label, "tool": tool, "state": now, "next": offered[label]})
        again = await other.list_tools()
        expect_equal(sorted(tool.name for tool in again.tools), catalog, "the list after every transition")
        final = {label: await state(client, handle) for label, handle in handles.items()}
        return {"protocol": client.protocol_version, "catalog": catalog, "trail": trail, "final": final}


# --- a person confirms the payout, across servers -----------------------------------------------


async def confirm_across_servers(url: str, second_url: str) -> dict[str, Any]:
    """Protocol 2026-07-28, where servers send no requests: paying out an invoice over the
    confirmation threshold returns an input-required result, which the SDK answers from its
    elicitation callback and retries with `inputResponses` and `requestState`. Then by hand: a
    state sealed by one server is completed by a second server sharing the key and the store,
    and a tampered state is refused with a JSON-RPC error."""
    asked: list[str] = []

    async def person(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"reference": "R-7"})

    async with Client(url, elicitation_callback=person) as client:
        # As a client does before it calls: the list, every tool of it (the SDK checks results
        # against it).
        await client.list_tools()
        handle = await mint(client, {"amount": 8000, "customer": "ACME"})
        await call_ok(client, "invoice.approve", {"handle": handle})
        paid = await call_ok(client, "invoice.discharge", {"handle": handle})
        expect_equal(paid.get("state"), "discharged", "the state after the SDK's retry")
        expect_equal(len(asked), 1, "the person was asked once")

    # Both declare elicitation (a 2026-07-28 request that declares no forms is refused -32021).
    async with (
        Client(url, elicitation_callback=person) as one,
        Client(second_url, elicitation_callback=person) as two,
    ):
        await one.list_tools()
        await two.list_tools()
        second = await mint(one, {"amount": 9000})
        await call_ok(one, "invoice.approve", {"handle": second})
        first = await one.session.call_tool("invoice.discharge", {"handle": second}, allow_input_required=True)
        expect(isinstance(first, types.InputRequiredResult), f"an input-required result, got {first!r}")
        keys = sorted((first.input_requests or {}).keys())
        expect(len(keys) == 1 and first.request_state, f"one request and a state: {first!r}")
        answer = {keys[0]: types.ElicitResult(action="accept", content={"reference": "R-8"})}
        try:
            await two.session.call_tool(
                "invoice.discharge",
                {"handle": second},
                input_responses=answer,
                request_state=first.request_state + "-TAMPERED",
                allow_input_required=True,
            )
            raise Failed("a tampered requestState was accepted")
        except MCPError as error:
            expect_equal(error.error.code, -32602, "the tampered state's JSON-RPC error code")
        expect_equal(await state(two, second), "approved", "nothing moved on the tampered retry")
        done = await two.session.call_tool(
            "invoice.discharge",
            {"handle": second},
            input_responses=answer,
            request_state=first.request_state,
            allow_input_required=True,
        )
        expect(isinstance(done, types.CallToolResult) and not done.is_error, f"completed on the second server: {done!r}")
        expect_equal((done.structured_content or {}).get("state"), "discharged", "the state the second server left")
        return {"protocol": one.protocol_version, "asked": asked, "keys": keys}


# --- a save whose store reply was lost -------------------------------------------------------------


async def answer_of(client: Client, handle: str) -> dict[str, Any]:
    """`invoice.reject` on `handle`, and everything this SDK hands its user for it: the result's
    text blocks, `isError`, `structuredContent.error` and the next step in `_meta`; or, if the SDK
    raises instead of returning a result, what it raised."""
    answer: dict[str, Any] = {"handle": handle, "raised": None}
    try:
        result = await client.call_tool("invoice.reject", {"handle": handle, "reason": "lost reply"})
    except Exception as error:  # noqa: BLE001 - what the SDK raises is what its user is shown
        answer["raised"] = f"{type(error).__name__}: {error}"
        return answer
    answer["isError"] = result.is_error
    answer["texts"] = [block.text for block in result.content if isinstance(block, types.TextContent)]
    answer["error"] = (result.structured_content or {}).get("error")
    answer["next"] = (result.meta or {}).get(NEXT_STEP)
    return answer


async def state_once_readable(client: Client, handle: str) -> str:
    """`invoice.status` of `handle`, called again (for up to 5 s) while it fails: a call may meet
    a pooled store connection the proxy left dead."""
    seen = ""
    for _ in range(50):
        result = await client.call_tool("invoice.status", {"handle": handle})
        if not result.is_error:
            return (result.structured_content or {}).get("state")
        seen = _text(result)
        await anyio.sleep(0.1)
    raise Failed(f"invoice.status of {handle} never answered: {seen!r}")


async def lost_reply(url: str, handles: str) -> dict[str, Any]:
    """Handle mode, behind a store proxy that breaks the connection right after each save to
    draft (the test minted the invoices, in review, and armed the proxy): `invoice.reject` on
    each handle, reporting what the SDK shows for each call, then where each invoice really is."""
    listed = handles.split(",")
    async with Client(url, extensions=GATED) as client:
        expect_equal(client.protocol_version, MODERN, "protocol version mcp.Client negotiated")
        # As a client does before it calls: the menu (the SDK checks results against it). Listed
        # once, before any save was cut: what this scenario is about is the calls.
        await menu(client, MENU["review"], "with _meta.handle in review", listed[0])
        calls = [await answer_of(client, handle) for handle in listed]
        states = {handle: await state_once_readable(client, handle) for handle in listed}
        return {"protocol": client.protocol_version, "calls": calls, "states": states}


if __name__ == "__main__":
    run(
        {
            "handle-lifecycle": handle_lifecycle,
            "stateless": stateless,
            "model-client": model_client,
            "listen-idle": listen_idle,
            "primitives": primitives,
            "by-the-book": by_the_book,
            "confirm-across-servers": confirm_across_servers,
            "lost-reply": lost_reply,
        },
        SDK,
    )
