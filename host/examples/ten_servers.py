#!/usr/bin/env python3
"""Several Turnstile servers on one Redis store (or Redis Cluster): what they cost each other.

Starts SERVERS (default 10) `turnstile serve` processes on one store and one fresh namespace,
with the invoice plugin, and measures:

1. Store round trips per call. The requests the servers sent to Redis while a fixed load of
   transitions ran: the `calls` of the top-level commands in `INFO commandstats` (EVALSHA,
   HMGET, PUBLISH/SPUBLISH, (S)SUBSCRIBE, ...; the commands a Lua script runs inside are not
   round trips and are left out), summed over every master of the store, divided by the calls.
   The servers also poll the store whatever the load (the timer task asks for due timers once
   a second, one EVALSHA per server, and on a cluster one per shard: 64 per server). That rate
   is measured first, with the servers idle, and the tables show the figure both with the polls
   and without them: each poll runs the due script, which runs ZRANGEBYLEX once when nothing is
   due (nothing else does, during the load), so polls = the ZRANGEBYLEX count. The counters
   are the whole node's: another client of the same Redis (a test running meanwhile) is
   counted too. The "new store conns" columns flag that: our servers keep their connections,
   so connections accepted during a measurement are someone else's (or a reconnection).
2. Deliveries per transition. MCP sessions (2025-11-25, one per server) on WATCHERS servers
   watch one instance (a `tools/list` whose `_meta` names its handle, as tests/multinode.rs
   does) and hold their GET event stream open; TRANSITIONS transitions are then made on it from
   the last server. Reported: the relayed deliveries per transition
   (`turnstile_changes_relayed_total` summed over every server; expected: the number of
   watching servers other than the mover's), the subscribers of the instance's channel that
   Redis reports (`PUBSUB NUMSUB`/`SHARDNUMSUB`), and the `list_changed` notifications the
   watching sessions received.
3. Lease moves: lease grants per call (`turnstile_leases_granted_total` summed over servers),
   and lease waits, BUSY and CONFLICT answers, under three routings of the same load:
     one       every call to server 0 (all instances on one server)
     affinity  each instance's calls to one server (instance i to server i mod SERVERS), as a
               load balancer hashing on a handle header does
     random    each call to a server picked at random
4. Throughput: the calls/s of each routing. The load is WORKERS threads, each with one
   instance of its own (minted before the clock starts), making CALLS transitions in turn
   (reject, submit, ...), every request a sessionless 2026-07-28 one, so that routing a call
   anywhere needs no session and the load itself watches nothing. The client is this Python
   script: on a small machine it shares the cores with the servers and bounds the calls/s.
   So the same comparison is made again with `turnstile load` (Rust) and
   host/examples/invoice_cycle.json, 2026-07-28: WORKERS clients against server 0, against
   WORKERS clients spread over the servers (one `turnstile load` process per server, started
   together, each with its share of the clients: affinity), LOAD_ITERATIONS passes each.

Run (PLUGIN_DIR holds libturnstile_plugin_invoice.so and nothing else):

    python3 host/examples/ten_servers.py target/release/turnstile PLUGIN_DIR \\
        [--store redis://127.0.0.1:6379 | redis+cluster://127.0.0.1:7001,127.0.0.1:7002,...] \\
        [--servers 10] [--workers 20] [--calls 100] [--rounds 2] [--transitions 50] \\
        [--watchers 1,3,10] [--load-iterations 100] [--base-port 18600]

Every server's stderr is kept in a temporary directory, and its WARN and ERROR lines are
summed up at the end. The namespace's keys are deleted from every node afterwards.
Standard library only.
"""

import argparse
import http.client
import json
import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from urllib.parse import urlsplit

# ---------------------------------------------------------------------------------------------
# Redis, spoken directly (RESP), for the counters and the clean-up.

# Commands the servers send themselves (never from inside a Lua script). `info` is left out:
# this script sends it.
TOP_LEVEL = {
    "evalsha", "eval", "script|load", "script|exists", "hmget", "publish", "spublish",
    "subscribe", "ssubscribe", "unsubscribe", "sunsubscribe", "ping", "config|get", "lrange",
    "zlexcount", "keys", "hello", "client|setinfo", "client|setname", "select", "readonly",
    "cluster|slots", "cluster|shards", "cluster|nodes", "command", "command|docs",
}
# Sent top-level by the servers in a few places (machine definitions, listings) but also run
# inside the scripts: not counted, shown apart in the raw deltas.
ALSO_IN_SCRIPTS = {"get", "set", "hset", "zadd", "del", "zrangebylex"}


class Redis:
    """One connection to one Redis node."""

    def __init__(self, host, port):
        self.address = (host, port)
        self.sock = socket.create_connection(self.address, timeout=10)
        self.file = self.sock.makefile("rb")

    def send(self, *commands):
        """Sends every command (a tuple of arguments) at once, returns their replies in order."""
        out = bytearray()
        for command in commands:
            out += b"*%d\r\n" % len(command)
            for arg in command:
                arg = arg if isinstance(arg, bytes) else str(arg).encode()
                out += b"$%d\r\n%s\r\n" % (len(arg), arg)
        self.sock.sendall(out)
        return [self._reply() for _ in commands]

    def command(self, *args):
        return self.send(args)[0]

    def _reply(self):
        line = self.file.readline()[:-2]
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            if int(rest) < 0:
                return None
            data = self.file.read(int(rest) + 2)[:-2]
            return data.decode(errors="replace")
        if kind == b"*":
            return None if int(rest) < 0 else [self._reply() for _ in range(int(rest))]
        raise RuntimeError(f"unexpected reply from Redis: {line!r}")

    def close(self):
        self.sock.close()


def store_masters(store):
    """The (host, port) of every master of the store: the node of a redis:// URL, or every
    master of the cluster behind a redis+cluster:// one."""
    parts = urlsplit(store)
    seeds = []
    for node in parts.netloc.rsplit("@", 1)[-1].split(","):
        host, _, port = node.partition(":")
        seeds.append((host or "127.0.0.1", int(port or 6379)))
    if parts.scheme != "redis+cluster":
        return seeds[:1]
    link = Redis(*seeds[0])
    masters = []
    for line in link.command("CLUSTER", "NODES").splitlines():
        fields = line.split()
        if "master" in fields[2].split(",") and "fail" not in fields[2]:
            host, port = fields[1].split("@")[0].rsplit(":", 1)
            masters.append((host, int(port)))
    link.close()
    return sorted(masters)


class Store:
    """The store's masters, their command counters and pub/sub subscribers."""

    def __init__(self, url):
        self.cluster = url.startswith("redis+cluster")
        self.nodes = [Redis(*address) for address in store_masters(url)]

    def commandstats(self):
        """calls per command, summed over the masters."""
        total = Counter()
        for node in self.nodes:
            for line in node.command("INFO", "commandstats").splitlines():
                match = re.match(r"cmdstat_([^:]+):calls=(\d+)", line)
                if match:
                    total[match.group(1)] += int(match.group(2))
        return total

    def connections(self):
        """Connections the masters have accepted so far. Our servers keep theirs open, so new
        ones during a measurement are another client's (whose commands are counted too: the
        counters are the whole node's) or a reconnection."""
        total = 0
        for node in self.nodes:
            match = re.search(r"total_connections_received:(\d+)", node.command("INFO", "stats"))
            total += int(match.group(1))
        return total

    def subscribers(self, namespace):
        """{channel: subscribers} of the namespace's change channels, over every master."""
        pattern = f"*{namespace}*"
        found = Counter()
        for node in self.nodes:
            if self.cluster:
                channels = node.command("PUBSUB", "SHARDCHANNELS", pattern) or []
                if channels:
                    counts = node.command("PUBSUB", "SHARDNUMSUB", *channels)
                    for channel, n in zip(counts[::2], counts[1::2]):
                        found[channel] += n
            else:
                channels = node.command("PUBSUB", "CHANNELS", pattern) or []
                if channels:
                    counts = node.command("PUBSUB", "NUMSUB", *channels)
                    for channel, n in zip(counts[::2], counts[1::2]):
                        found[channel] += n
        return found

    def delete_namespace(self, namespace):
        """Deletes every key naming the namespace, one DEL per key (keys of a cluster differ in
        slot). Returns how many were deleted."""
        deleted = 0
        for node in self.nodes:
            cursor = "0"
            while True:
                cursor, keys = node.command("SCAN", cursor, "MATCH", f"*{namespace}*",
                                            "COUNT", 1000)
                if keys:
                    deleted += sum(r for r in node.send(*[("DEL", k) for k in keys])
                                   if isinstance(r, int))
                if cursor == "0":
                    break
        return deleted


def round_trips(before, after):
    """(requests counted, of which timer polls, {command: delta} of every command that moved)
    between two `commandstats` readings."""
    delta = {name: after[name] - before.get(name, 0) for name in after
             if after[name] != before.get(name, 0) and name != "info"}
    counted = sum(n for name, n in delta.items() if name in TOP_LEVEL)
    return counted, delta.get("zrangebylex", 0), delta


# ---------------------------------------------------------------------------------------------
# MCP over Streamable HTTP.

HEADERS = {"content-type": "application/json",
           "accept": "application/json, text/event-stream"}
CLIENT_INFO = {"name": "ten_servers.py", "version": "1"}


def messages(response):
    """The JSON-RPC messages of an answer: a JSON body or a stream of SSE `data:` lines."""
    text = response.read().decode()
    if response.getheader("content-type", "").startswith("application/json"):
        return [json.loads(text)] if text.strip() else []
    # An event stream may open with an event of empty data (a priming event to resume from).
    return [json.loads(line[6:]) for line in text.splitlines()
            if line.startswith("data: ") and line[6:].strip()]


def answer_of(response, what):
    for message in messages(response):
        if message.get("id") == 1:
            if "error" in message:
                raise RuntimeError(f"{what}: {message['error']}")
            return message["result"]
    raise RuntimeError(f"no answer to {what}: HTTP {response.status}")


def call(conn, tool, arguments):
    """A sessionless (2026-07-28) tools/call: it watches nothing and may go to any server."""
    params = {"name": tool, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO}}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    conn.request("POST", "/mcp", body, {**HEADERS, "mcp-protocol-version": "2026-07-28",
                                        "mcp-method": "tools/call", "mcp-name": tool})
    return answer_of(conn.getresponse(), tool)


def outcome(result):
    if not result.get("isError"):
        return "ok"
    return (result.get("structuredContent") or {}).get("error", {}).get("code", "error")


def next_move(i, arguments):
    """The i-th transition of an invoice already submitted: reject, submit, reject, ..."""
    if i % 2 == 0:
        return "invoice.reject", {"reason": "load", **arguments}
    return "invoice.submit", {"amount": 5, **arguments}


class Session:
    """A 2025-11-25 MCP session on one server, with its GET event stream open, counting the
    `notifications/tools/list_changed` that arrive on it."""

    def __init__(self, port):
        self.port = port
        self.list_changed = 0
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": CLIENT_INFO}})
        conn.request("POST", "/mcp", body, HEADERS)
        response = conn.getresponse()
        self.id = response.getheader("mcp-session-id")
        answer_of(response, "initialize")
        self.headers = {**HEADERS, "mcp-session-id": self.id,
                        "mcp-protocol-version": "2025-11-25"}
        conn.request("POST", "/mcp", json.dumps(
            {"jsonrpc": "2.0", "method": "notifications/initialized"}), self.headers)
        conn.getresponse().read()
        self.conn = conn
        self.stream = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.stream.request("GET", "/mcp", headers={**self.headers,
                                                    "accept": "text/event-stream"})
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        try:
            response = self.stream.getresponse()
            while True:
                line = response.fp.readline()
                if not line:
                    return
                if line.startswith(b"data: ") and b"notifications/tools/list_changed" in line:
                    self.list_changed += 1
        except (OSError, http.client.HTTPException, ValueError, AttributeError):
            return

    def watch(self, handle):
        """tools/list naming the handle: the session watches the instance from now on."""
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                           "params": {"_meta": {"handle": handle}}})
        self.conn.request("POST", "/mcp", body, self.headers)
        tools = answer_of(self.conn.getresponse(), "tools/list")["tools"]
        return sorted(tool["name"] for tool in tools)

    def close(self):
        try:
            self.conn.request("DELETE", "/mcp", headers=self.headers)
            self.conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            pass
        self.conn.close()
        try:
            self.stream.sock.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError):
            pass
        self.reader.join(5)
        self.stream.close()


# ---------------------------------------------------------------------------------------------
# The servers.

def scrape(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return text


def metric(text, name, labels=""):
    """The sum of a counter's samples (those whose labels contain `labels`)."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"{name}(\{{[^}}]*\}})? (\S+)$", line)
        if match and labels in (match.group(1) or ""):
            total += float(match.group(2))
    return total


class Servers:
    def __init__(self, turnstile, plugins, store, count, base_port, namespace):
        self.dir = tempfile.mkdtemp(prefix="ten_servers_")
        self.ports = [base_port + n for n in range(count)]
        self.processes = []
        for port in self.ports:
            log = open(f"{self.dir}/{port}.log", "wb")
            self.processes.append(subprocess.Popen(
                [turnstile, "serve", "--http", f"127.0.0.1:{port}", "--plugins", plugins,
                 "--data-dir", f"{self.dir}/{port}", "--state-handle-key", "--idle-after", "0",
                 "--store", store, "--store-namespace", namespace],
                stdout=log, stderr=log))
        deadline = time.monotonic() + 30
        for port, process in zip(self.ports, self.processes):
            while True:
                try:
                    scrape(port)
                    break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"server on {port} did not start: see {self.dir}")
                    time.sleep(0.1)

    def total(self, name, labels=""):
        return sum(metric(scrape(port), name, labels) for port in self.ports)

    def each(self, name, labels=""):
        return [metric(scrape(port), name, labels) for port in self.ports]

    def stop(self):
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def warnings(self):
        """WARN and ERROR lines of every server's log, timestamps and colours taken out:
        {line: count}."""
        found = Counter()
        for port in self.ports:
            with open(f"{self.dir}/{port}.log", errors="replace") as log:
                for line in log:
                    line = re.sub(r"\x1b\[[0-9;]*m", "", line).strip()
                    if re.search(r"\b(WARN|ERROR)\b", line):
                        line = re.sub(r"^\S*\d{4}-\d\d-\d\dT\S+\s+", "", line)
                        found[line[:300]] += 1
        return found


# ---------------------------------------------------------------------------------------------
# The measurements.

def background(store, seconds):
    """Requests per second the idle servers send (timer polls)."""
    before = store.commandstats()
    time.sleep(seconds)
    counted, _, delta = round_trips(before, store.commandstats())
    return counted / seconds, delta


def drive(mode, servers, store, workers, calls):
    """WORKERS threads, one instance each, CALLS transitions each, routed by `mode`."""
    ports = servers.ports
    codes = Counter()
    lock = threading.Lock()
    ready = threading.Barrier(workers + 1)
    go = threading.Event()
    failures = []

    def worker(n):
        try:
            conns = {port: http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                     for port in ports}
            home = ports[0] if mode == "one" else ports[n % len(ports)]
            minted = call(conns[home], "invoice.submit", {"amount": 5})
            handle = minted["structuredContent"]["handle"]
        except Exception as error:  # noqa: BLE001 - reported below
            failures.append(repr(error))
            ready.abort()
            raise
        ready.wait()
        go.wait()
        seen = Counter()
        for i in range(calls):
            port = random.choice(ports) if mode == "random" else home
            tool, arguments = next_move(i, {"handle": handle})
            try:
                seen[outcome(call(conns[port], tool, arguments))] += 1
            except (OSError, http.client.HTTPException, RuntimeError) as error:
                seen[type(error).__name__] += 1
                conns[port].close()
        with lock:
            codes.update(seen)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(workers)]
    for thread in threads:
        thread.start()
    ready.wait()
    time.sleep(0.1)  # the mints' own lease hold and announcement settle
    names = ("turnstile_leases_granted_total", "turnstile_lease_waits_total",
             "turnstile_lease_fenced_total")
    before = {name: servers.total(name) for name in names}
    busy_before = servers.total("turnstile_lease_waits_total", 'outcome="busy"')
    stats_before, conns_before = store.commandstats(), store.connections()
    started = time.monotonic()
    go.set()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    counted, polls, delta = round_trips(stats_before, store.commandstats())
    new_conns = store.connections() - conns_before
    after = {name: servers.total(name) for name in names}
    busy = servers.total("turnstile_lease_waits_total", 'outcome="busy"') - busy_before
    total = workers * calls
    return {
        "mode": mode, "calls": total, "seconds": elapsed, "calls_per_s": total / elapsed,
        "requests_per_call": counted / total,
        "requests_per_call_less_polls": (counted - polls) / total,
        "grants_per_call": (after[names[0]] - before[names[0]]) / total,
        "lease_waits": after[names[1]] - before[names[1]], "busy_waits": busy,
        "fenced": after[names[2]] - before[names[2]],
        "outcomes": dict(codes), "commands": delta, "failures": failures,
        "new_conns": new_conns,
    }


def load_tool(spread, turnstile, servers, store, workers, iterations):
    """`turnstile load` with the invoice cycle: all clients against server 0, or (spread) one
    process per server with its share of the clients, all started together."""
    scenario = os.path.join(os.path.dirname(os.path.abspath(__file__)), "invoice_cycle.json")
    ports = servers.ports if spread else servers.ports[:1]
    shares = [workers // len(ports) + (1 if n < workers % len(ports) else 0)
              for n in range(len(ports))]
    stats_before, conns_before = store.commandstats(), store.connections()
    grants_before = servers.total("turnstile_leases_granted_total")
    started = time.monotonic()
    processes = [subprocess.Popen(
        [turnstile, "load", f"http://127.0.0.1:{port}/mcp", "--scenario", scenario,
         "--handle-key", "handle", "--protocol", "2026-07-28", "--sessions", str(share),
         "--iterations", str(iterations), "--warmup", "0", "--json", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for port, share in zip(ports, shares) if share > 0]
    reports = [json.loads(process.communicate()[0]) for process in processes]
    wall = time.monotonic() - started
    counted, polls, delta = round_trips(stats_before, store.commandstats())
    new_conns = store.connections() - conns_before
    grants = servers.total("turnstile_leases_granted_total") - grants_before
    runs = [report["runs"][0] for report in reports]
    calls = sum(run["calls"] for run in runs)
    return {
        "mode": f"spread over {len(processes)}" if spread else "one server",
        "processes": len(processes), "calls": calls,
        "calls_per_s": sum(run["calls_per_second"] for run in runs),
        "calls_per_wall_s": calls / wall, "slowest_s": max(run["measured_seconds"] for run in runs),
        "requests_per_call": counted / calls, "requests_per_call_less_polls": (counted - polls) / calls,
        "grants_per_call": grants / calls,
        "exit_codes": ",".join(sorted({str(report["exit_code"]) for report in reports})),
        "commands": delta, "new_conns": new_conns,
    }


def wait_for(check, timeout, interval=0.05):
    """Polls `check` until it returns true or the time is up; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def deliveries(k, servers, store, namespace, transitions):
    """Sessions on the first k servers watch one instance; the last server moves it."""
    ports = servers.ports
    mover = ports[-1]
    conn = http.client.HTTPConnection("127.0.0.1", mover, timeout=30)
    handle = call(conn, "invoice.submit", {"amount": 5})["structuredContent"]["handle"]
    sessions = [Session(port) for port in ports[:k]]
    menus = {tuple(session.watch(handle)) for session in sessions}
    # A server subscribes to the instance's channel once its first session watches it.
    subscribed = wait_for(lambda: sum(store.subscribers(namespace).values()) >= k, 5)
    subscribers = sum(store.subscribers(namespace).values())
    relayed_before = servers.each("turnstile_changes_relayed_total")
    heard_before = [session.list_changed for session in sessions]
    stats_before, conns_before = store.commandstats(), store.connections()
    started = time.monotonic()
    codes = Counter()
    for i in range(transitions):
        tool, arguments = next_move(i, {"handle": handle})
        codes[outcome(call(conn, tool, arguments))] += 1
    elapsed = time.monotonic() - started
    expected = sum(1 for port in ports[:k] if port != mover) * transitions

    def relayed_now():
        return sum(servers.each("turnstile_changes_relayed_total")) - sum(relayed_before)

    wait_for(lambda: relayed_now() >= expected, 3)
    time.sleep(0.3)  # anything beyond the expected arrives too
    counted, polls, commands = round_trips(stats_before, store.commandstats())
    new_conns = store.connections() - conns_before
    relayed = [a - b for a, b in zip(servers.each("turnstile_changes_relayed_total"),
                                     relayed_before)]
    heard = [session.list_changed - before for session, before in zip(sessions, heard_before)]
    for session in sessions:
        session.close()
    conn.close()
    wait_for(lambda: sum(store.subscribers(namespace).values()) == 0, 5)
    return {
        "watching": k, "watching_not_mover": expected // max(transitions, 1),
        "subscribers": subscribers if subscribed else f"{subscribers} (of {k})",
        "transitions": transitions, "outcomes": dict(codes),
        "relayed_per_transition": sum(relayed) / transitions,
        "relayed_by_server": [int(n) for n in relayed],
        "list_changed_per_session_per_transition": sum(heard) / len(heard) / transitions,
        "requests_per_transition": counted / transitions,
        "requests_per_transition_less_polls": (counted - polls) / transitions,
        "menus": len(menus), "commands": commands, "new_conns": new_conns,
    }


# ---------------------------------------------------------------------------------------------

def table(rows, columns):
    """Prints rows (dicts) under the given (title, key, format) columns."""
    cells = [[title for title, _, _ in columns]]
    for row in rows:
        cells.append([fmt.format(row[key]) if not isinstance(row[key], str) else row[key]
                      for _, key, fmt in columns])
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for n, line in enumerate(cells):
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths)))
        if n == 0:
            print("  ".join("-" * width for width in widths))


def commands_line(commands):
    return ", ".join(f"{name}{'*' if name in TOP_LEVEL else ''}={n}"
                     for name, n in sorted(commands.items(), key=lambda kv: -kv[1]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("turnstile")
    parser.add_argument("plugins", help="a directory holding only libturnstile_plugin_invoice.so")
    parser.add_argument("--store", default="redis://127.0.0.1:6379")
    parser.add_argument("--servers", type=int, default=10)
    parser.add_argument("--workers", type=int, default=20, help="instances, one thread each")
    parser.add_argument("--calls", type=int, default=100, help="transitions per instance")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--modes", default="one,affinity,random")
    parser.add_argument("--transitions", type=int, default=50,
                        help="transitions on the watched instance, per watcher count")
    parser.add_argument("--watchers", default="1,3,10",
                        help="numbers of servers with a session watching the instance")
    parser.add_argument("--load-iterations", type=int, default=100,
                        help="scenario passes per `turnstile load` client (0: skip that part)")
    parser.add_argument("--idle-seconds", type=float, default=3)
    parser.add_argument("--base-port", type=int, default=18600)
    parser.add_argument("--verbose", action="store_true", help="every command's count too")
    args = parser.parse_args()

    namespace = "tenserv_" + uuid.uuid4().hex[:12]
    store = Store(args.store)
    print(f"store {args.store} ({len(store.nodes)} master(s)), {args.servers} servers, "
          f"namespace {namespace}")
    servers = Servers(args.turnstile, args.plugins, args.store, args.servers, args.base_port,
                      namespace)
    try:
        time.sleep(1)
        idle_rate, idle_delta = background(store, args.idle_seconds)
        print(f"\nidle servers: {idle_rate:.1f} store requests/s ({idle_delta})")

        runs = []
        for round_ in range(1, args.rounds + 1):
            for mode in args.modes.split(","):
                run = drive(mode, servers, store, args.workers, args.calls)
                run["round"] = round_
                runs.append(run)
                if args.verbose:
                    print(json.dumps(run))
        for run in runs:
            run["outcomes"] = " ".join(f"{k}={v}" for k, v in sorted(run["outcomes"].items()))
        print(f"\nload: {args.workers} instances x {args.calls} transitions, "
              f"sessionless 2026-07-28 calls")
        table(runs, [("round", "round", "{}"), ("routing", "mode", "{}"),
                     ("calls", "calls", "{}"), ("s", "seconds", "{:.2f}"),
                     ("calls/s", "calls_per_s", "{:.0f}"),
                     ("store req/call", "requests_per_call", "{:.3f}"),
                     ("less polls", "requests_per_call_less_polls", "{:.3f}"),
                     ("grants/call", "grants_per_call", "{:.3f}"),
                     ("lease waits", "lease_waits", "{:.0f}"),
                     ("busy", "busy_waits", "{:.0f}"), ("fenced", "fenced", "{:.0f}"),
                     ("new store conns", "new_conns", "{}"), ("outcomes", "outcomes", "{}")])
        print("\nstore commands during the load (last round; * = counted as a round trip):")
        for run in runs[-len(args.modes.split(",")):]:
            print(f"  {run['mode']:>8}: " + commands_line(run["commands"]))
        failures = [f for run in runs for f in run["failures"]]
        if failures:
            print(f"\nworker failures: {failures[:5]}")

        if args.load_iterations > 0:
            loads = []
            for round_ in range(1, args.rounds + 1):
                for spread in (False, True):
                    run = load_tool(spread, args.turnstile, servers, store, args.workers,
                                    args.load_iterations)
                    run["round"] = round_
                    loads.append(run)
            print(f"\nturnstile load: {args.workers} clients, invoice_cycle.json x "
                  f"{args.load_iterations}, 2026-07-28")
            table(loads, [("round", "round", "{}"), ("target", "mode", "{}"),
                          ("calls", "calls", "{}"),
                          ("calls/s (sum of reports)", "calls_per_s", "{:.0f}"),
                          ("calls/s (wall)", "calls_per_wall_s", "{:.0f}"),
                          ("slowest s", "slowest_s", "{:.2f}"),
                          ("store req/call", "requests_per_call", "{:.3f}"),
                          ("less polls", "requests_per_call_less_polls", "{:.3f}"),
                          ("grants/call", "grants_per_call", "{:.3f}"),
                          ("new store conns", "new_conns", "{}"),
                          ("exit", "exit_codes", "{}")])
            print("\nstore commands during turnstile load (last round):")
            for run in loads[-2:]:
                print(f"  {run['mode']:>14}: " + commands_line(run["commands"]))

        rows = []
        for k in (int(n) for n in args.watchers.split(",")):
            if k > args.servers:
                continue
            row = deliveries(k, servers, store, namespace, args.transitions)
            row["outcomes"] = " ".join(f"{k}={v}" for k, v in sorted(row["outcomes"].items()))
            row["relayed_by_server"] = ",".join(map(str, row["relayed_by_server"]))
            row["subscribers"] = str(row["subscribers"])
            rows.append(row)
        print(f"\ndeliveries: sessions on the first k servers watch one instance; "
              f"{args.transitions} transitions on it from server {args.servers - 1}")
        table(rows, [("k watching", "watching", "{}"),
                     ("not the mover's", "watching_not_mover", "{}"),
                     ("channel subscribers", "subscribers", "{}"),
                     ("relayed/transition", "relayed_per_transition", "{:.2f}"),
                     ("list_changed/session/tr", "list_changed_per_session_per_transition",
                      "{:.2f}"),
                     ("store req/tr", "requests_per_transition", "{:.2f}"),
                     ("less polls", "requests_per_transition_less_polls", "{:.2f}"),
                     ("new store conns", "new_conns", "{}"), ("outcomes", "outcomes", "{}"),
                     ("relayed by server", "relayed_by_server", "{}")])
        print("\nstore commands during the transitions (* = counted as a round trip):")
        for row in rows:
            print(f"  k={row['watching']:>2}: " + commands_line(row["commands"]))
    finally:
        servers.stop()
        deleted = store.delete_namespace(namespace)
        print(f"\nclean-up: {deleted} keys of {namespace} deleted")
        warnings = servers.warnings()
        print(f"server WARN/ERROR lines: {sum(warnings.values())}")
        for line, n in warnings.most_common(10):
            print(f"  {n} x {line}")
        # A Redis without `appendonly yes` draws a WARN at every start: expected here.
        if any("appendonly no" not in line for line in warnings):
            print(f"  (logs kept in {servers.dir})")
        else:
            shutil.rmtree(servers.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
