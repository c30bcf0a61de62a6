"""SDK-independent helpers for the Python client scenarios that drive a real `turnstile serve`.

Each scenario script prints one JSON summary line on stdout and exits 0, or prints
`FAILED: <what was expected and what was seen>` on stderr and exits 1. Exit code 2 is a usage
error. The Rust test `tests/python_clients.rs` runs the scripts and checks both.
"""

from __future__ import annotations

import json
import re
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio

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
    """Counts `notifications/tools/list_changed` a client received, with bounded waits."""

    def __init__(self, name: str) -> None:
        self.name = name
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
                    f"{self.name}: expected notifications/tools/list_changed #{n} within "
                    f"{timeout:.0f} s ({why}); received {self.count}"
                )
            with anyio.move_on_after(min(left, 0.1)):
                await self._changed.wait()

    async def stays_at(self, n: int, why: str, quiet: float = QUIET_PERIOD_S) -> None:
        """Asserts that no notification beyond `n` arrives during a quiet period."""
        await anyio.sleep(quiet)
        expect(
            self.count == n,
            f"{self.name}: expected no further notifications/tools/list_changed ({why}); "
            f"count went from {n} to {self.count} within {quiet:.1f} s",
        )


def error_code(structured: Any) -> Any:
    """`structuredContent.error.code` of a tool error result, or None."""
    if isinstance(structured, dict) and isinstance(structured.get("error"), dict):
        return structured["error"].get("code")
    return None


def run(
    scenarios: dict[str, Callable[[str], Awaitable[dict[str, Any]]]],
    sdk: str,
    argv: list[str] | None = None,
) -> None:
    """`script.py SCENARIO URL`: runs one scenario and reports it (see the module docstring)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in scenarios:
        print(f"usage: {sys.argv[0]} {{{','.join(scenarios)}}} URL", file=sys.stderr)
        sys.exit(2)
    name, url = argv
    started = time.monotonic()
    try:
        summary = anyio.run(scenarios[name], url)
    except Failed as failure:
        print(f"FAILED: [{sdk} {name}] {failure}", file=sys.stderr)
        sys.exit(1)
    except BaseException as error:  # noqa: BLE001 - report anything else as a failure too
        # A failed expectation inside the SDK's task groups arrives wrapped in exception groups.
        inner = _first_leaf(error)
        if isinstance(inner, Failed):
            print(f"FAILED: [{sdk} {name}] {inner}", file=sys.stderr)
        else:
            traceback.print_exception(error, file=sys.stderr)
            print(f"FAILED: [{sdk} {name}] unexpected {type(inner).__name__}: {inner}", file=sys.stderr)
        sys.exit(1)
    summary = {"scenario": name, "sdk": sdk, "ok": True, **summary}
    summary["seconds"] = round(time.monotonic() - started, 2)
    print(json.dumps(summary, sort_keys=True))


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
