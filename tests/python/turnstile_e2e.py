"""SDK-independent helpers for the Python client scenarios that drive a real `turnstile serve`.

Each scenario script prints one JSON summary line on stdout and exits 0, or prints
`FAILED: <what was expected and what was seen>` on stderr and exits 1. Exit code 2 is a usage
error. The Rust test `tests/python_clients.rs` runs the scripts and checks both.

The summary carries `stderr`: every line the process wrote to its standard error while the
scenario ran and its event loop shut down (the SDKs log their warnings there, such as a failed
session termination on close), so the Rust test can assert that a clean run prints none. Log
records are written with their level first (`WARNING client: ...`): Python's fallback handler
prints the bare message, and a warning such as "Tool X not listed by server, cannot validate any
structured content" would not say it is one.

A scenario may take one parameter: `SCENARIO:ARG` calls the scenario function with `(url, ARG)`.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import re
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

import anyio
import jsonschema

if sys.version_info < (3, 11):  # anyio depends on the backport there
    from exceptiongroup import BaseExceptionGroup

HANDLE_RE = re.compile(r"^invoice-[0-9a-f]{32}$")

# What a user sees in each state of the invoice workflow (`tools/list` of that instance).
MENU = {
    "draft": ["invoice.status", "invoice.submit"],
    "review": ["invoice.approve", "invoice.reject", "invoice.status"],
    "approved": ["invoice.discharge", "invoice.status"],
    "discharged": ["invoice.status"],
}
# `tools/list` without a handle in handle mode, before touching an instance: the tools that start a
# new instance, and `invoice.status`, bound to the workflow in no state (always visible; its schema
# requires a handle).
START = ["invoice.status", "invoice.submit"]

# The invoice plugin's prompts and resources (issue 15), gated like its tools: the review checklist
# is offered only in review; the invoice itself, `invoice://{handle}` (`invoice://session` for a
# session's own instance in session mode), from review on.
CHECKLIST = "invoice.review_checklist"
INVOICE_TEMPLATE = "invoice://{handle}"
# The host's own instance resource of every workflow (issue 37), offered whatever the state.
HOST_TEMPLATE = "turnstile://invoice/{handle}"
PROMPTS = {"draft": [], "review": [CHECKLIST], "approved": [], "discharged": []}
INVOICE_READABLE = {"review", "approved", "discharged"}

# JSON-RPC error codes `prompts/get` and `resources/read` refuse with (`mcp/reply/primitives.rs`):
# a prompt or resource out of its instance's state is invalid params with `data.code` FORBIDDEN.
INVALID_PARAMS = -32602


def invoice_resources(state: str, token: str) -> list[str]:
    """`resources/list` of one invoice in `state`, named by `token` (a handle, or `session`)."""
    return [f"invoice://{token}"] if state in INVOICE_READABLE else []


def invoice_templates(state: str) -> list[str]:
    """`resources/templates/list` of one invoice in `state`: the host's template of invoice
    instances (`turnstile://invoice/{handle}`, in every state), and the plugin's own."""
    return [HOST_TEMPLATE] + ([INVOICE_TEMPLATE] if state in INVOICE_READABLE else [])


def expect_names(names: Iterable[str], wanted: Iterable[str], what: str) -> list[str]:
    names = sorted(names)
    expect_equal(names, sorted(wanted), what)
    return names


def expect_refusal(code: int, data: Any, kind: str, name: str, state: str, what: str) -> dict[str, Any]:
    """A `prompts/get` or `resources/read` refused because `name` is not offered in `state`:
    JSON-RPC invalid params whose `data` says FORBIDDEN, the kind, the state and what is
    available. Returns `data` for the summary."""
    expect_equal(code, INVALID_PARAMS, f"{what}: JSON-RPC error code (data {data!r})")
    expect(isinstance(data, dict), f"{what}: the error carries no data object: {data!r}")
    expect_equal(data.get("code"), "FORBIDDEN", f"{what}: data.code")
    expect_equal(data.get("kind"), kind, f"{what}: data.kind")
    expect_equal(data.get("name"), name, f"{what}: data.name")
    expect_equal(data.get("workflow"), "invoice", f"{what}: data.workflow")
    expect_equal(data.get("state"), state, f"{what}: data.state")
    expect(isinstance(data.get("available"), list), f"{what}: data.available is not a list: {data!r}")
    return data


def expect_checklist(text: str, amount: str, focus: str | None, what: str) -> None:
    """The review checklist's text: it reads the submitted amount from the instance."""
    expect(f"of {amount}." in text, f"{what}: the checklist should name the amount {amount}: {text!r}")
    if focus is not None:
        expect(focus in text, f"{what}: the checklist should carry the focus {focus!r}: {text!r}")


def expect_invoice_document(text: str, mime_type: Any, state: str, amount: Any, what: str) -> dict[str, Any]:
    """The invoice resource's one content: JSON with the instance's state and amount."""
    expect_equal(mime_type, "application/json", f"{what}: mimeType")
    try:
        document = json.loads(text)
    except ValueError as error:
        raise Failed(f"{what}: the invoice is not JSON ({error}): {text!r}") from None
    expect_equal(document.get("state"), state, f"{what}: the invoice's state")
    expect_equal(document.get("amount"), amount, f"{what}: the invoice's amount")
    return document


# The log of every server a scenario started over stdio, in order (see `stdio_server_log`).
STDIO_SERVER_LOGS: list[str] = []


def stdio_command(target: str) -> list[str] | None:
    """The command line of the server a `stdio:["PROGRAM", "ARG", ...]` target (a JSON list)
    names, which the SDK's stdio client starts as its child; None for a URL."""
    if not target.startswith("stdio:"):
        return None
    command = json.loads(target.removeprefix("stdio:"))
    expect(
        isinstance(command, list) and command and all(isinstance(arg, str) for arg in command),
        f"a stdio target is `stdio:` and a JSON list of strings, got {target!r}",
    )
    return command


@contextmanager
def stdio_server_log() -> Iterator[TextIO]:
    """A file for a stdio server's stderr (its log), kept apart from the SDK's own stderr and
    appended to `STDIO_SERVER_LOGS` when the server is done, for the summary."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        try:
            yield log
        finally:
            log.seek(0)
            STDIO_SERVER_LOGS.append(log.read())


# How long a notification may take to arrive, and how long "nothing arrives" is watched.
NOTIFY_TIMEOUT_S = 10.0
QUIET_PERIOD_S = 1.0


class Failed(Exception):
    """A failed expectation: what the user would have seen differs from the contract."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise Failed(message)


def expect_equal(seen: Any, wanted: Any, what: str) -> None:
    if seen != wanted:
        raise Failed(f"{what}: expected {wanted!r}, got {seen!r}")


def expect_menu(names: Iterable[str], wanted: Iterable[str], what: str) -> list[str]:
    names = sorted(names)
    expect_equal(names, sorted(wanted), f"tools/list {what}")
    return names


def expect_handle(value: Any, what: str) -> str:
    expect(
        isinstance(value, str) and HANDLE_RE.match(value) is not None,
        f"{what}: expected a handle `invoice-` + 32 lowercase hex digits, got {value!r}",
    )
    return value


class ListChanges:
    """Counts the notifications of one kind a client received (by default
    `notifications/tools/list_changed`), with bounded waits."""

    def __init__(self, name: str, method: str = "notifications/tools/list_changed") -> None:
        self.name = name
        self.method = method
        self.count = 0
        self._changed = anyio.Event()

    def record(self) -> None:
        self.count += 1
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, n: int, why: str, timeout: float = NOTIFY_TIMEOUT_S) -> None:
        """Waits until at least `n` notifications have arrived; fails after `timeout`."""
        deadline = time.monotonic() + timeout
        while self.count < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failed(
                    f"{self.name}: expected {self.method} #{n} within "
                    f"{timeout:.0f} s ({why}); received {self.count}"
                )
            with anyio.move_on_after(min(left, 0.1)):
                await self._changed.wait()

    async def stays_at(self, n: int, why: str, quiet: float = QUIET_PERIOD_S) -> None:
        """Asserts that no notification beyond `n` arrives during a quiet period."""
        await anyio.sleep(quiet)
        expect(
            self.count == n,
            f"{self.name}: expected no further {self.method} ({why}); "
            f"count went from {n} to {self.count} within {quiet:.1f} s",
        )


def error_code(structured: Any) -> Any:
    """`structuredContent.error.code` of a tool error result, or None."""
    if isinstance(structured, dict) and isinstance(structured.get("error"), dict):
        return structured["error"].get("code")
    return None


def run(
    scenarios: dict[str, Callable[..., Awaitable[dict[str, Any]]]],
    sdk: str,
    argv: list[str] | None = None,
) -> None:
    """`script.py SCENARIO[:ARG] URL`: runs one scenario and reports it (see the module docstring)."""
    argv = sys.argv[1:] if argv is None else argv
    name, _, parameter = (argv[0] if argv else "").partition(":")
    if len(argv) != 2 or name not in scenarios:
        print(f"usage: {sys.argv[0]} {{{','.join(scenarios)}}}[:ARG] URL", file=sys.stderr)
        sys.exit(2)
    url = argv[1]
    arguments = (url, parameter) if parameter else (url,)
    started = time.monotonic()
    with StderrTee() as stderr:
        # Into the tee (it took over file descriptor 2, which `sys.stderr` writes to).
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        try:
            summary = anyio.run(scenarios[name], *arguments)
            # Whatever the SDK's objects print when they are collected belongs to the run too.
            gc.collect()
        except Failed as failure:
            print(f"FAILED: [{sdk} {argv[0]}] {failure}", file=sys.stderr)
            sys.exit(1)
        except BaseException as error:  # noqa: BLE001 - report anything else as a failure too
            # A failed expectation inside the SDK's task groups arrives wrapped in exception groups.
            inner = _first_leaf(error)
            if isinstance(inner, Failed):
                print(f"FAILED: [{sdk} {argv[0]}] {inner}", file=sys.stderr)
            else:
                traceback.print_exception(error, file=sys.stderr)
                print(f"FAILED: [{sdk} {argv[0]}] unexpected {type(inner).__name__}: {inner}", file=sys.stderr)
            sys.exit(1)
    summary = {"scenario": argv[0], "sdk": sdk, "ok": True, **summary, "stderr": stderr.lines()}
    summary["seconds"] = round(time.monotonic() - started, 2)
    print(json.dumps(summary, sort_keys=True))


class StderrTee:
    """Copies everything written to file descriptor 2 (Python's `sys.stderr`, the `logging`
    last-resort handler the SDKs' warnings go to, `warnings`, and native code alike) into a
    buffer while still passing it through to the real stderr as it is written, so a run that is
    killed still shows how far it got."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._saved = -1
        self._thread: threading.Thread | None = None

    def __enter__(self) -> StderrTee:
        sys.stderr.flush()
        read_end, write_end = os.pipe()
        self._saved = os.dup(2)
        os.dup2(write_end, 2)
        os.close(write_end)
        self._thread = threading.Thread(target=self._pump, args=(read_end,), daemon=True)
        self._thread.start()
        return self

    def _pump(self, read_end: int) -> None:
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                self._chunks.append(chunk)
                os.write(self._saved, chunk)

    def __exit__(self, *exc: object) -> None:
        sys.stderr.flush()
        os.dup2(self._saved, 2)  # closes the pipe's last write end: the pump sees its end
        if self._thread is not None:
            self._thread.join(timeout=5)
        os.close(self._saved)

    def lines(self) -> list[str]:
        return b"".join(self._chunks).decode("utf-8", "replace").splitlines()


def _first_leaf(error: BaseException) -> BaseException:
    """The exception to report from (nested) exception groups raised by task groups: the first
    failed expectation if there is one, else the first non-group exception."""
    leaves = list(_leaves(error))
    return next((leaf for leaf in leaves if isinstance(leaf, Failed)), leaves[0] if leaves else error)


def _leaves(error: BaseException) -> Iterable[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


# --- A model-style client ------------------------------------------------------------------------
#
# An LLM agent knows nothing of Turnstile: it reads `tools/list` and builds every call from the
# listed tool's `inputSchema`. These helpers do the same, so a scenario shows that the schemas
# alone are enough to drive a workflow, handle included.

# How the agent recognises the property that names the workflow instance: by its description, as
# a model would, not by its name (the key is configurable with `--state-handle-key`).
HANDLE_DESCRIPTION = "workflow instance"
# The placeholder an agent writes into a required string property it has nothing better for.
PLACEHOLDER = "as discussed with the customer"
# Tools that start a new instance: their handle property is optional (omit it to start one).
STARTERS = {"invoice.submit"}

# Two invoices driven through their whole lifecycles, interleaved: (invoice, tool, state after).
TWO_INVOICES = [
    ("A", "invoice.submit", "review"),
    ("B", "invoice.submit", "review"),
    ("A", "invoice.approve", "approved"),
    ("B", "invoice.reject", "draft"),
    ("B", "invoice.submit", "review"),
    ("B", "invoice.approve", "approved"),
    ("A", "invoice.discharge", "discharged"),
    ("B", "invoice.discharge", "discharged"),
]
AMOUNTS = {"A": 120.5, "B": 80}


@dataclass
class ListedTool:
    name: str
    input_schema: dict[str, Any]


@dataclass
class ToolOutcome:
    is_error: bool
    structured: Any
    text: str


class ModelTransport(Protocol):
    """What the model-style agent needs from an SDK."""

    name: str

    async def list_tools(self, handles: list[str]) -> list[ListedTool]:
        """`tools/list`, naming `handles` in `_meta` (none: a plain list)."""
        ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolOutcome: ...

    async def transitions_seen(self, n: int, why: str) -> int | None:
        """Waits for the `n`-th `list_changed` where the SDK receives them during a scenario
        (1.x: the GET stream); returns the count, or None where it does not."""
        ...


def handle_property(tool: ListedTool) -> str | None:
    """The property of `tool`'s input schema whose description says it names the workflow
    instance; fails if more than one does."""
    properties = tool.input_schema.get("properties") or {}
    named = [
        name
        for name, spec in properties.items()
        if isinstance(spec, dict) and HANDLE_DESCRIPTION in str(spec.get("description", "")).lower()
    ]
    expect(len(named) <= 1, f"{tool.name}: several properties name the workflow instance: {named}")
    return named[0] if named else None


def model_arguments(tool: ListedTool, handle: str | None, amount: float | int) -> dict[str, Any]:
    """The arguments an agent writes for `tool`, from its input schema only: the handle it holds
    into the handle property, `amount` a number, other required strings a placeholder, and no
    property the schema does not declare (strict clients drop unknown arguments). Fails where the
    schema leaves the agent stuck: a handle to pass but no property for it, a required handle it
    does not hold, a required property it cannot fill."""
    schema = tool.input_schema
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    key = handle_property(tool)
    arguments: dict[str, Any] = {}
    if handle is not None:
        expect(
            key is not None,
            f"{tool.name} acts on an invoice the agent holds a handle for, but its input schema "
            f"declares no property naming the workflow instance: {schema}",
        )
        arguments[key] = handle
    else:
        expect(
            key not in required,
            f"{tool.name} requires `{key}` (the workflow instance), but the agent holds no handle "
            f"for this invoice: {schema}",
        )
    for name, spec in properties.items():
        if name == key:
            continue
        kind = spec.get("type") if isinstance(spec, dict) else None
        if name == "amount":
            arguments[name] = amount
        elif name in required:
            expect(kind == "string", f"{tool.name}: the agent cannot fill required `{name}` of type {kind!r}")
            arguments[name] = PLACEHOLDER
    undeclared = set(arguments) - set(properties)
    expect(not undeclared, f"{tool.name}: the agent would send undeclared {sorted(undeclared)}")
    # A strict client checks what it sends against the schema it was given.
    errors = sorted(
        error.message for error in jsonschema.validators.validator_for(schema)(schema).iter_errors(arguments)
    )
    expect(not errors, f"{tool.name}: arguments {arguments} do not match the listed schema: {errors}")
    return arguments


def check_handle_schemas(tools: list[ListedTool], key: str, what: str) -> dict[str, str]:
    """Every listed tool's schema declares the handle property `key` (recognised by its
    description), required except on the tools that start an instance. Returns
    `{tool: "required" | "optional"}`."""
    seen = {}
    for tool in tools:
        found = handle_property(tool)
        expect_equal(found, key, f"{what}: the property of {tool.name} that names the workflow instance")
        required = key in (tool.input_schema.get("required") or [])
        expect_equal(
            required,
            tool.name not in STARTERS,
            f"{what}: `{key}` required in {tool.name}'s schema {tool.input_schema}",
        )
        seen[tool.name] = "required" if required else "optional"
    return seen


def pick(tools: list[ListedTool], name: str, what: str) -> ListedTool:
    for tool in tools:
        if tool.name == name:
            return tool
    raise Failed(f"{what}: the agent wants {name}, which tools/list does not show: {[t.name for t in tools]}")


def union_menu(states: Iterable[str], with_start: bool) -> list[str]:
    names = set(START) if with_start else set()
    for state in states:
        names |= set(MENU[state])
    return sorted(names)


@dataclass
class ModelRun:
    """What the model-style agent saw and sent, for the summary."""

    handles: dict[str, str] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    schemas: dict[str, str] = field(default_factory=dict)

    def redact(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """`arguments` with the handles written as `<A>`, `<B>`, so the summary is stable."""
        names = {handle: f"<{label}>" for label, handle in self.handles.items()}
        return {key: names.get(value, value) if isinstance(value, str) else value for key, value in arguments.items()}


async def drive_two_invoices(agent: ModelTransport, *, names_handles: bool, key: str = "handle") -> dict[str, Any]:
    """Drives invoices A and B through `TWO_INVOICES` as a model would. Each step lists the tools,
    picks the one it wants by name and fills its arguments from its schema; then it asks
    `invoice.status` the same way.

    `names_handles=False` (a session, 2025-11-25): no request ever carries `_meta`; a plain list
    shows the menus of every instance the session touched plus the starting tools.
    `names_handles=True` (2026-07-28, no session): the agent names the handle of the invoice it
    acts on in `tools/list`'s `_meta` and sees exactly that invoice's menu (no handle yet: the
    starting tools); after each step it lists with all its handles, and sees the union."""
    run = ModelRun()
    transitions = 0
    last_menu: list[str] = []

    async def listing(label: str, what: str) -> list[ListedTool]:
        nonlocal last_menu
        held = run.handles.get(label)
        if names_handles:
            handles = [held] if held else []
            wanted = MENU[run.states[label]] if held else START
        else:
            handles = []
            wanted = union_menu(run.states.values(), with_start=True)
        tools = await agent.list_tools(handles)
        last_menu = expect_menu([t.name for t in tools], wanted, f"{agent.name}: {what}")
        run.schemas.update(check_handle_schemas(tools, key, f"{agent.name}: {what}"))
        return tools

    async def call(label: str, name: str, what: str) -> ToolOutcome:
        tools = await listing(label, what)
        held = run.handles.get(label)
        arguments = model_arguments(pick(tools, name, what), held, AMOUNTS[label])
        outcome = await agent.call_tool(name, arguments)
        expect(
            not outcome.is_error,
            f"{agent.name}: {what}: {name} {arguments} failed: {outcome.text!r} {outcome.structured!r}",
        )
        expect(isinstance(outcome.structured, dict), f"{agent.name}: {name} returned no structuredContent")
        if held is None:
            minted = expect_handle(outcome.structured.get("handle"), f"{what}: structuredContent.handle of {name}")
            expect(minted in outcome.text, f"{what}: the text of {name} should carry {minted}: {outcome.text!r}")
            expect(minted not in run.handles.values(), f"{what}: {name} minted a handle already held")
            run.handles[label] = minted
        else:
            expect_equal(outcome.structured.get("handle"), held, f"{what}: structuredContent.handle of {name}")
        run.steps.append({"invoice": label, "tool": name, "arguments": run.redact(arguments)})
        return outcome

    async def status(label: str, what: str) -> str:
        outcome = await call(label, "invoice.status", f"invoice.status of {label} {what}")
        run.steps.pop()  # a status question is not a step of the lifecycle
        return outcome.structured.get("state")

    for number, (label, tool, after) in enumerate(TWO_INVOICES, start=1):
        what = f"step {number} ({tool} on invoice {label})"
        await call(label, tool, what)
        run.states[label] = after
        run.steps[-1]["state"] = after
        seen = await agent.transitions_seen(number, f"after {what}")
        if seen is not None:
            transitions = seen
        expect_equal(await status(label, f"after {what}"), after, f"invoice.status of {label} after {what}")
        if names_handles:
            held = [run.handles[name] for name in sorted(run.handles)]
            tools = await agent.list_tools(held)
            run.steps[-1]["menu of all handles"] = expect_menu(
                [t.name for t in tools],
                union_menu(run.states.values(), with_start=False),
                f"{agent.name}: _meta naming all handles after {what}",
            )
            check_handle_schemas(tools, key, f"_meta naming all handles after {what}")
        else:
            # What the plain list showed when the agent asked for the status just now.
            run.steps[-1]["menu"] = last_menu
    final = {label: await status(label, "at the end") for label in sorted(run.handles)}
    return {
        "handles": run.handles,
        "final": final,
        "steps": run.steps,
        "schemas": dict(sorted(run.schemas.items())),
        "handle_property": key,
        "list_changed": transitions if transitions else None,
    }
