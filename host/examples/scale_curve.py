#!/usr/bin/env python3
"""A curve, not a point (issue 51, item 7): each store filled with 1k, 10k, 100k and 1M invoice
instances, and at each size what a call, the server and the store cost; then, once, at the largest
size reached, 100,000 `after` timers falling due at once and retention deleting 100,000.

    cargo build --release                       # the binary and the invoice plugin, target/release
    python3 host/examples/scale_curve.py        # every store, every size: hours at 1M
    STORES="memory postgres" SIZES="1000 10000" TIMERS=10000 RETAINED=10000 \\
        python3 host/examples/scale_curve.py

Python 3's standard library only: Redis is spoken to over a socket (a few RESP commands),
PostgreSQL through `psql`. Environment (defaults in brackets):

  STORES        stores, in order [memory embedded redis redis-cluster postgres]
  SIZES         instance counts, ascending; each store is filled up to each in turn
                [1000 10000 100000 1000000]
  TIMERS        `after` timers made to fall due at once at the largest size (0: skip) [100000]
  RETAINED      instances retention deletes at once at the largest size (0: skip) [100000]
  OUT           the markdown file written (after every row); a CSV beside it (.csv)
                [scale_curve.md]
  TURNSTILE     the binary [target/release/turnstile]; PLUGINS its plugin dir [target/release]
                (only libturnstile_plugin_invoice.so is served: every mint is then `invoice.submit`)
  WORK          data directories and server logs [a new directory under $TMPDIR]; KEEP=1 keeps
                it and the stores' data
  REDIS_URL     [redis://127.0.0.1:6379]; REDIS_CLUSTER_URL [what tests/redis-cluster.sh prints:
                it starts the test cluster on ports 7001-7003 if none is healthy, and then forms
                it anew, flushing it];
  POSTGRES_URL  [postgres://postgres@127.0.0.1:5432/test]. Each run uses a namespace of its own
                (`--store-namespace curve_<store>_<pid>`), deleted at the end unless KEEP=1.
  MINT_SESSIONS clients minting [32]; HOT_SESSIONS, HOT_SECONDS clients and seconds of each hot
                load [16, 5]; COLD_CALLS calls on instances loaded from the store [500];
                COUNT_REPEATS timings of each count query, the median kept [3];
                IDLE_AFTER the server's --idle-after [5]; PORT [18460]
  TIMER_DEADLINE, RETAIN_AFTER  seconds (default: worked out from the fill rates measured)

What each column is, and how it is measured, is in the markdown file's notes (NOTES below). A
store where anything is off gets a FAILED row (the reason) instead of figures, and the exit code is
1: a load run with an error, a violation or a call that was not `ok`, a count that is not the
number minted, a timer that fired or a record that expired before the server was stopped, an
instance still live where one loaded from the store is measured. Its work directory is then kept.
"""

from __future__ import annotations

import csv
import datetime
import http.client
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def env(name: str, default: str) -> str:
    value = os.environ.get(name, "").strip()
    return value or default


STORES = env("STORES", "memory embedded redis redis-cluster postgres").split()
SIZES = [int(size) for size in env("SIZES", "1000 10000 100000 1000000").split()]
TIMERS = int(env("TIMERS", "100000"))
RETAINED = int(env("RETAINED", "100000"))
OUT = os.path.abspath(env("OUT", "scale_curve.md"))
BIN = os.path.abspath(env("TURNSTILE", os.path.join(ROOT, "target/release/turnstile")))
PLUGINS = os.path.abspath(env("PLUGINS", os.path.join(ROOT, "target/release")))
KEEP = env("KEEP", "0") == "1"
REDIS_URL = env("REDIS_URL", "redis://127.0.0.1:6379")
POSTGRES_URL = env("POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
MINT_SESSIONS = int(env("MINT_SESSIONS", "32"))
HOT_SESSIONS = int(env("HOT_SESSIONS", "16"))
HOT_SECONDS = float(env("HOT_SECONDS", "5"))
COLD_CALLS = int(env("COLD_CALLS", "500"))
COUNT_REPEATS = int(env("COUNT_REPEATS", "3"))
IDLE_AFTER = int(env("IDLE_AFTER", "5"))
PORT = int(env("PORT", "18460"))
# How long a server may take to start, a fill to passivate, a burst to be handled: generous,
# since 1M instances on a busy 2-core machine take minutes.
START_TIMEOUT = float(env("START_TIMEOUT", "3600"))
IDLE_TIMEOUT = float(env("IDLE_TIMEOUT", "1800"))
BURST_TIMEOUT = float(env("BURST_TIMEOUT", "3600"))

# `invoice.submit` mints an instance in `review`, whose `after: reviewDeadline` the plugin reads
# from its configuration (plugins/invoice/src/lib.rs; the host passes TURNSTILE_PLUGIN_INVOICE_*).
DEADLINE_ENV = "TURNSTILE_PLUGIN_INVOICE_REVIEW_DEADLINE_MS"
TIMER_EVENT = "xstate.after.reviewDeadline."
# A status call on the session's own instance, then over and over (`turnstile load --scenario`).
STATUS_SCENARIO = {
    "version": 1,
    "start": [{"tool": "invoice.submit", "arguments": {"amount": 10}, "transition": True}],
    "repeat": [{"tool": "invoice.status", "arguments": {}}],
}
# Every call a transition: host/examples/invoice_cycle.json.
CYCLE_SCENARIO = os.path.join(ROOT, "host/examples/invoice_cycle.json")
# A new instance per pass (with --churn), taken to its final state: what retention deletes.
DISCHARGE_SCENARIO = {
    "version": 1,
    "repeat": [
        {"tool": "invoice.submit", "arguments": {"amount": 10}, "transition": True},
        {"tool": "invoice.approve", "arguments": {}, "transition": True},
        {"tool": "invoice.discharge", "arguments": {}, "transition": True},
    ],
}

CURVE_COLUMNS = [
    ("store", "store"),
    ("instances", "instances"),
    ("fill_per_s", "fill /s"),
    ("rss_mib", "RSS MiB"),
    ("fill_peak_rss_mib", "fill peak RSS MiB"),
    ("store_mib", "store MiB"),
    ("counts_ms", "counts ms"),
    ("metrics_ms", "/metrics ms"),
    ("status_p50_ms", "status p50"),
    ("status_p99_ms", "status p99"),
    ("status_per_s", "status /s"),
    ("transition_p50_ms", "transition p50"),
    ("transition_p99_ms", "transition p99"),
    ("transition_per_s", "transition /s"),
    ("cold_status_p50_ms", "cold status p50"),
    ("cold_status_p99_ms", "cold status p99"),
    ("cold_transition_p50_ms", "cold transition p50"),
    ("cold_transition_p99_ms", "cold transition p99"),
    ("stop_s", "stop s"),
    ("start_s", "start s"),
    ("note", "note"),
]
BURST_COLUMNS = [
    ("store", "store"),
    ("burst", "burst"),
    ("held", "instances held"),
    ("due", "due at once"),
    ("seconds", "all done s"),
    ("per_s", "done /s"),
    ("note", "note"),
]
NOTES = """\
Columns (per store and size; every figure from one run of `host/examples/scale_curve.py`):

- instances: the invoice workflow's total from the count query, after filling with
  `turnstile load --mint` (`invoice.submit`: each instance in `review`, its 48-hour timer pending).
- fill /s: mints per second of the fill up to this size (MINT_SESSIONS clients).
- RSS MiB: the server's VmRSS (/proc/PID/status) at rest, once `/stats` shows no live instance and
  no subscription (--idle-after IDLE_AFTER passivated them); fill peak: the highest during the fill.
- store MiB: embedded, the data directory on disk; Redis, `used_memory` (INFO memory) over what it
  was before the run (every node summed on a cluster; other clients' data meanwhile counts too);
  PostgreSQL, `pg_total_relation_size` of the
  namespace's tables; memory, none (it is in the RSS).
- counts ms: `GET /console/api/workflows` (the console's counts per state), the whole request on a
  new connection (as `curl -w %{time_total}`), median of COUNT_REPEATS; /metrics ms: `GET /metrics`,
  the same way (the note says when it has no `turnstile_instances` gauge to serve counts from).
- status / transition p50, p99 (ms): `turnstile load --scenario`, HOT_SESSIONS clients for
  HOT_SECONDS after 1 s of warm-up, each on its own instance (live in memory): `invoice.status`
  over and over; `host/examples/invoice_cycle.json` (reject, submit: every call a transition).
  status /s, transition /s: the calls those clients made per second, the server and the load
  tester sharing the cores: what a call costs the server, as the mean latency does (clients /
  rate). Compare sizes by these: on 2 cores the p50 of 16 clients is bimodal (a call answered
  at once, or one that waited for its turn on a core), and moves by 4x between runs of one
  server (0.09-0.44 ms seen) while the rate moves by a tenth.
- cold status / cold transition p50, p99 (ms): one client, one call after another, each on another
  passivated instance (so loaded from the store): `invoice.status` on COLD_CALLS instances in
  `review`, and `invoice.reject` on COLD_CALLS others (they stay in `draft`).
- stop s: SIGTERM until the process exited (0); start s: from starting the process until
  `/readyz` answers 200 (the memory store keeps nothing across a restart: not measured).

Bursts (once per store, at the largest size reached; on the memory store on a new, empty server,
since its instances end with the process):

- timers: TIMERS instances minted in `review` with `review_deadline_ms` short enough to fall due
  only after the fill, the server stopped (SIGSTOP) until every deadline has passed, then let go
  (SIGCONT): seconds until `turnstile_transitions_total{event="xstate.after.reviewDeadline..."}`
  counts them all (then the counts per state are checked).
- retention: RETAINED instances (rounded up to a multiple of HOT_SESSIONS) taken to `discharged` (submit, approve, discharge, each on a new
  session) under `--retain-final` short enough to expire only after the fill, the server stopped
  the same way until every one expired: seconds until they are gone, as the store counts its
  records (Redis: ZCARD of each shard's index; PostgreSQL: count(*) of the instances table) or,
  on the embedded and memory stores, as the count query says; polled every 50 ms, so the figure
  is late by up to one poll (its median time is in the note). The count query then checks it.
- instances held: in the store when the burst began, the burst's own included.
"""


class Failed(Exception):
    """Something the script cannot record a figure for."""


def log(message: str) -> None:
    stamp = datetime.datetime.now().strftime("%H:%M:%S")
    print(f"[{stamp}] {message}", file=sys.stderr, flush=True)


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def mib(n_bytes: float) -> float:
    return round(n_bytes / (1 << 20), 1)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


# --- Redis, in a few RESP commands ------------------------------------------------------------


class RespError(str):
    """An error reply."""


class Resp:
    def __init__(self, host: str, port: int, password: str | None = None, db: int = 0):
        self.sock = socket.create_connection((host, port), timeout=60)
        self.file = self.sock.makefile("rb")
        if password:
            self.call("AUTH", password)
        if db:
            self.call("SELECT", str(db))

    def send(self, *args: str) -> None:
        parts = [f"*{len(args)}\r\n".encode()]
        for arg in args:
            data = arg.encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(parts))

    def read(self, errors: bool = False):
        """The next reply; an error reply raises, or with `errors` is returned as a RespError."""
        line = self.file.readline()
        if not line:
            raise Failed("Redis closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            if errors:
                return RespError(rest.decode())
            raise Failed(f"Redis: {rest.decode()}")
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.file.read(n + 2)
            return data[:-2].decode(errors="replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise Failed(f"Redis: unexpected reply {line!r}")

    def call(self, *args: str):
        self.send(*args)
        return self.read()

    def scan(self, pattern: str) -> list[str]:
        keys, cursor = [], "0"
        while True:
            cursor, batch = self.call("SCAN", cursor, "MATCH", pattern, "COUNT", "1000")
            keys.extend(batch)
            if cursor == "0":
                return keys

    def delete(self, keys: list[str]) -> None:
        # One key per command: on a cluster node every key of a command must share a slot.
        for start in range(0, len(keys), 1000):
            batch = keys[start : start + 1000]
            for key in batch:
                self.send("UNLINK", key)
            for _ in batch:
                self.read()

    def used_memory(self) -> int:
        info = self.call("INFO", "memory")
        for line in info.splitlines():
            if line.startswith("used_memory:"):
                return int(line.split(":", 1)[1])
        raise Failed("Redis INFO memory has no used_memory")

    def close(self) -> None:
        self.sock.close()


def redis_nodes(url: str) -> list[tuple[str, int, str | None, int]]:
    """(host, port, password, db) of every node a store URL names."""
    parsed = urllib.parse.urlsplit(url)
    password = urllib.parse.unquote(parsed.password) if parsed.password else None
    db = int(parsed.path.strip("/") or 0) if parsed.path.strip("/").isdigit() else 0
    hosts = parsed.netloc.rsplit("@", 1)[-1]
    nodes = []
    for host in hosts.split(","):
        name, _, port = host.rpartition(":")
        nodes.append((name or "127.0.0.1", int(port or 6379), password, db))
    return nodes


def psql(sql: str) -> str:
    done = subprocess.run(
        ["psql", POSTGRES_URL, "-v", "ON_ERROR_STOP=1", "-qtAc", sql],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise Failed(f"psql: {done.stderr.strip()}")
    return done.stdout.strip()


# --- Stores -----------------------------------------------------------------------------------


class Store:
    """One store of the run: its URL, namespace, size and cleanup."""

    def __init__(self, kind: str, work: str):
        self.kind = kind
        self.namespace = f"curve_{kind.replace('-', '_')}_{os.getpid()}"
        self.data_dir = os.path.join(work, f"data-{kind}")
        self.baseline = 0
        if kind == "memory":
            self.url = "memory:"
        elif kind == "embedded":
            self.url = f"embedded:{self.data_dir}/state.redb"
        elif kind == "redis":
            self.url = REDIS_URL
        elif kind == "redis-cluster":
            self.url = os.environ.get("REDIS_CLUSTER_URL", "").strip() or cluster_url()
        elif kind == "postgres":
            self.url = POSTGRES_URL
        else:
            raise Failed(f"unknown store {kind!r}: memory, embedded, redis, redis-cluster, postgres")

    @property
    def persistent(self) -> bool:
        return self.kind != "memory"

    def patterns(self) -> list[str]:
        return [f"{self.namespace}:*", "{" + self.namespace + ":*"]

    def each_node(self):
        for host, port, password, db in redis_nodes(self.url):
            redis = Resp(host, port, password, db)
            try:
                yield redis
            finally:
                redis.close()

    def prepare(self) -> None:
        """Checks the store answers and holds nothing of this namespace; notes its baseline."""
        if self.kind == "embedded":
            os.makedirs(self.data_dir, exist_ok=True)
        elif self.kind.startswith("redis"):
            total = 0
            for redis in self.each_node():
                for pattern in self.patterns():
                    if redis.scan(pattern):
                        raise Failed(f"{self.kind}: keys {pattern} exist already")
                total += redis.used_memory()
            self.baseline = total
        elif self.kind == "postgres":
            if psql(f"select count(*) from pg_tables where tablename like '{self.namespace}\\_%'") != "0":
                raise Failed(f"postgres: tables {self.namespace}_* exist already")

    def size_bytes(self) -> int | None:
        if self.kind == "memory":
            return None
        if self.kind == "embedded":
            total = 0
            for directory, _, files in os.walk(self.data_dir):
                for name in files:
                    total += os.stat(os.path.join(directory, name)).st_blocks * 512
            return total
        if self.kind.startswith("redis"):
            return sum(redis.used_memory() for redis in self.each_node()) - self.baseline
        return int(
            psql(
                "select coalesce(sum(pg_total_relation_size(c.oid)), 0) from pg_class c "
                "join pg_namespace n on n.oid = c.relnamespace "
                f"where c.relkind = 'r' and c.relname like '{self.namespace}\\_%' "
                "and n.nspname = current_schema()"
            )
        )

    def instance_count(self) -> int | None:
        """How many instance records the store holds, read from the store itself (cheaper than
        the count query at HEAD, which reads every record): Redis, the `index` sorted sets'
        cardinality (on a cluster, every shard's, each asked of the node owning it); PostgreSQL,
        the instances table's rows. `None` for the memory and embedded stores."""
        if self.kind.startswith("redis"):
            if self.kind == "redis":
                shards = [self.namespace]
            else:
                shards = ["{%s:b%02d}" % (self.namespace, n) for n in range(64)]
            found: dict[str, int] = {}
            for redis in self.each_node():
                for shard in shards:
                    redis.send("ZCARD", f"{shard}:index")
                for shard in shards:
                    reply = redis.read(errors=True)
                    if isinstance(reply, RespError):
                        if not reply.startswith("MOVED"):
                            raise Failed(f"Redis: {reply}")
                    else:
                        found[shard] = reply
            if len(found) != len(shards):
                raise Failed(f"{self.kind}: {len(shards) - len(found)} index shards answered by no node")
            return sum(found.values())
        if self.kind == "postgres":
            return int(psql(f"select count(*) from {self.namespace}_instances"))
        return None

    def cleanup(self) -> None:
        if KEEP:
            log(f"{self.kind}: kept (KEEP=1): namespace {self.namespace}, {self.data_dir}")
            return
        try:
            if self.kind == "embedded":
                shutil.rmtree(self.data_dir, ignore_errors=True)
            elif self.kind.startswith("redis"):
                for redis in self.each_node():
                    for pattern in self.patterns():
                        redis.delete(redis.scan(pattern))
            elif self.kind == "postgres":
                tables = psql(
                    f"select string_agg(quote_ident(tablename), ', ') from pg_tables "
                    f"where tablename like '{self.namespace}\\_%'"
                )
                if tables:
                    psql(f"drop table if exists {tables} cascade")
                functions = psql(
                    "select string_agg(p.oid::regprocedure::text, ', ') from pg_proc p "
                    f"where p.proname like '{self.namespace}\\_%'"
                )
                if functions:
                    psql(f"drop function if exists {functions} cascade")
        except Failed as error:
            log(f"{self.kind}: cleanup failed: {error}")


def cluster_url() -> str:
    script = os.path.join(ROOT, "tests/redis-cluster.sh")
    done = subprocess.run(["bash", script], capture_output=True, text=True)
    if done.returncode != 0:
        raise Failed(f"tests/redis-cluster.sh: {done.stderr.strip()}")
    return done.stdout.strip().splitlines()[-1]


# --- The server -------------------------------------------------------------------------------


def http_get(port: int, path: str, timeout: float = 600) -> tuple[int, bytes, float]:
    """GET on a new connection, as curl does; the whole request timed."""
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        return response.status, body, time.perf_counter() - started
    finally:
        connection.close()


class Server:
    def __init__(self, store: Store, plugins: str, work: str, port: int):
        self.store = store
        self.plugins = plugins
        self.port = port
        self.log_path = os.path.join(work, f"server-{store.kind}.log")
        self.process: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{port}/mcp"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, env_extra: dict[str, str] | None = None, args: list[str] | None = None) -> float:
        """Starts the server; returns the seconds until `/readyz` answered 200."""
        command = [
            BIN, "serve",
            "--http", f"127.0.0.1:{self.port}",
            "--plugins", self.plugins,
            "--store", self.store.url,
            "--store-namespace", self.store.namespace,
            "--state-handle-key", "handle",
            "--data-dir", self.store.data_dir,
            "--idle-after", str(IDLE_AFTER),
            *(args or []),
        ]
        environment = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTILE_")}
        environment.update(env_extra or {})
        with open(self.log_path, "a") as log_file:
            log_file.write(f"\n=== {' '.join(command)} {env_extra or ''}\n")
            log_file.flush()
            started = time.perf_counter()
            self.process = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=log_file, env=environment
            )
        while True:
            if self.process.poll() is not None:
                raise Failed(f"the server exited ({self.process.returncode}) while starting:\n{self.tail()}")
            try:
                status, _, _ = http_get(self.port, "/readyz", timeout=5)
                if status == 200:
                    return time.perf_counter() - started
            except OSError:
                pass
            if time.perf_counter() - started > START_TIMEOUT:
                raise Failed(f"the server was not ready within {START_TIMEOUT:.0f} s:\n{self.tail()}")
            time.sleep(0.02)

    def stop(self) -> float:
        """SIGTERM; returns the seconds until the process exited, which must be with 0."""
        assert self.process is not None
        started = time.perf_counter()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise Failed("the server did not stop within the timeout after SIGTERM")
        took = time.perf_counter() - started
        self.process = None
        if code != 0:
            raise Failed(f"the server stopped with exit code {code}:\n{self.tail()}")
        return took

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait()
        self.process = None

    def tail(self, lines: int = 15) -> str:
        with open(self.log_path, errors="replace") as log_file:
            return "".join(log_file.readlines()[-lines:])

    def get(self, path: str) -> tuple[bytes, float]:
        status, body, took = http_get(self.port, path)
        if status != 200:
            raise Failed(f"GET {path}: {status} {body[:300]!r}")
        return body, took

    def counts(self) -> tuple[int, dict[str, int], float]:
        """The invoice workflow's total and counts per state, and how long the query took."""
        body, took = self.get("/console/api/workflows")
        for workflow in json.loads(body)["workflows"]:
            if workflow["id"] == "invoice":
                return workflow["total"], workflow["counts"], took
        raise Failed("/console/api/workflows lists no invoice workflow")

    def timers_fired(self) -> int:
        body, _ = self.get("/metrics")
        fired = 0
        for line in body.decode().splitlines():
            if line.startswith("turnstile_transitions_total{") and f'event="{TIMER_EVENT}' in line:
                fired += int(float(line.rsplit(" ", 1)[1]))
        return fired

    def rss_kib(self) -> int:
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise Failed("no VmRSS in /proc/PID/status")

    def wait_idle(self) -> float:
        """Waits until `/stats` shows no live instance and no subscription; returns how long."""
        started = time.perf_counter()
        while True:
            body, _ = self.get("/stats")
            stats = json.loads(body)
            live = stats["registry"]["instances"]
            subscriptions = stats["notifier"]["subscriptions"]
            if live == 0 and subscriptions == 0:
                return time.perf_counter() - started
            if time.perf_counter() - started > IDLE_TIMEOUT:
                raise Failed(f"still {live} live instances, {subscriptions} subscriptions after {IDLE_TIMEOUT:.0f} s")
            time.sleep(0.5)

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)


# --- turnstile load ---------------------------------------------------------------------------


def load(server: Server, what: str, args: list[str], outcomes_ok: bool = True) -> dict:
    """Runs `turnstile load` with a JSON report; fails on any error, violation or non-ok call."""
    command = [BIN, "load", server.url, "--handle-key", "handle", "--json", "--no-progress", *args]
    done = subprocess.run(command, capture_output=True, text=True)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise Failed(f"{what}: turnstile load exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    run = report["runs"][0]
    problems = []
    if report["exit_code"] != 0:
        problems.append(f"exit code {report['exit_code']}")
    if run["errors"]:
        problems.append(f"errors {run['errors']}")
    if run["violations"]:
        problems.append(f"violations {json.dumps(run['violations'])[:1500]}")
    if outcomes_ok and set(run["outcomes"]) - {"ok"}:
        problems.append(f"outcomes {run['outcomes']}")
    if problems:
        raise Failed(f"{what}: " + "; ".join(problems))
    return run


def scenario_file(work: str, name: str, scenario: dict) -> str:
    path = os.path.join(work, name)
    with open(path, "w") as file:
        json.dump(scenario, file)
    return path


def mint(server: Server, count: int) -> dict:
    run = load(
        server,
        f"--mint {count}",
        ["--mint", str(count), "--sessions", str(MINT_SESSIONS), "--server-pid", str(server.pid),
         "--after-mint-wait", str(IDLE_TIMEOUT)],
    )
    minted = run["mint"]
    if minted["minted"] != count:
        raise Failed(f"--mint {count} minted {minted['minted']}")
    if minted["sampled"] != minted["sampled_unchanged"]:
        raise Failed(f"--mint: {minted['sampled'] - minted['sampled_unchanged']} sampled instances changed")
    return minted


def hot(server: Server, scenario: str, what: str) -> dict:
    run = load(
        server,
        what,
        ["--scenario", scenario, "--sessions", str(HOT_SESSIONS), "--duration", str(HOT_SECONDS),
         "--warmup", "1"],
    )
    if run["call_latency_ms"]["count"] == 0:
        raise Failed(f"{what}: no call measured")
    return run


# --- One client, one call at a time, on instances loaded from the store -----------------------


class McpClient:
    """A session of MCP 2025-11-25 over Streamable HTTP, just enough to call tools."""

    def __init__(self, port: int):
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.session: str | None = None
        self.next_id = 0
        self.request(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": {},
             "clientInfo": {"name": "scale_curve", "version": "1"}},
        )
        if not self.session:
            raise Failed("initialize: no Mcp-Session-Id")
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, message: dict):
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
            headers["MCP-Protocol-Version"] = "2025-11-25"
        self.connection.request("POST", "/mcp", body=json.dumps(message), headers=headers)
        response = self.connection.getresponse()
        body = response.read()
        self.session = response.getheader("Mcp-Session-Id") or self.session
        if response.status not in (200, 202):
            raise Failed(f"{message.get('method')}: HTTP {response.status} {body[:300]!r}")
        return response.getheader("Content-Type", ""), body

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        kind, body = self.post({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        if "text/event-stream" in kind:
            messages = []
            for event in body.decode().replace("\r\n", "\n").split("\n\n"):
                data = "\n".join(line[5:].lstrip() for line in event.split("\n") if line.startswith("data:"))
                if data:
                    messages.append(json.loads(data))
        else:
            messages = [json.loads(body)]
        for message in messages:
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise Failed(f"{method}: {message['error']}")
                return message["result"]
        raise Failed(f"{method}: no answer in {body[:300]!r}")

    def call(self, tool: str, arguments: dict) -> float:
        started = time.perf_counter()
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        took = time.perf_counter() - started
        if result.get("isError"):
            raise Failed(f"{tool}: {json.dumps(result)[:500]}")
        return took

    def close(self) -> None:
        headers = {"Mcp-Session-Id": self.session or "", "MCP-Protocol-Version": "2025-11-25"}
        self.connection.request("DELETE", "/mcp", headers=headers)
        self.connection.getresponse().read()
        self.connection.close()


def cold_calls(server: Server) -> dict[str, float]:
    """`invoice.status` on COLD_CALLS passivated instances in review, `invoice.reject` on as many
    others: p50/p99 in ms. The server must show no live instance first."""
    if COLD_CALLS <= 0:
        return {}
    server.wait_idle()
    body, _ = server.get(f"/console/api/instances?workflow=invoice&state=review&limit={2 * COLD_CALLS}")
    handles = []
    for summary in json.loads(body)["instances"]:
        key = summary["key"]
        if not key.startswith("handle/"):
            raise Failed(f"instance key {key!r} is not handle/…")
        handles.append(key[len("handle/"):])
    if len(handles) < 2 * COLD_CALLS:
        raise Failed(f"only {len(handles)} instances in review for {2 * COLD_CALLS} cold calls")
    client = McpClient(server.port)
    try:
        status = [client.call("invoice.status", {"handle": h}) for h in handles[:COLD_CALLS]]
        reject = [client.call("invoice.reject", {"handle": h, "reason": "scale curve"}) for h in handles[COLD_CALLS:]]
    finally:
        client.close()
    return {
        "cold_status_p50_ms": ms(percentile(status, 0.5)),
        "cold_status_p99_ms": ms(percentile(status, 0.99)),
        "cold_transition_p50_ms": ms(percentile(reject, 0.5)),
        "cold_transition_p99_ms": ms(percentile(reject, 0.99)),
    }


# --- Output -----------------------------------------------------------------------------------


class Output:
    def __init__(self, header: str):
        self.header = header
        self.curve: list[dict] = []
        self.bursts: list[dict] = []

    def add(self, table: str, row: dict) -> None:
        rows, columns = (self.curve, CURVE_COLUMNS) if table == "curve" else (self.bursts, BURST_COLUMNS)
        rows.append(row)
        print("  ".join(f"{title}={fmt(row.get(key))}" for key, title in columns if row.get(key) not in (None, "")), flush=True)
        self.write()

    def write(self) -> None:
        lines = [self.header, ""]
        for rows, columns, title in ((self.curve, CURVE_COLUMNS, "The curve"), (self.bursts, BURST_COLUMNS, "Bursts")):
            if not rows:
                continue
            lines += [f"### {title}", "", "| " + " | ".join(t for _, t in columns) + " |",
                      "| " + " | ".join("---" if k in ("store", "note") else "---:" for k, _ in columns) + " |"]
            lines += ["| " + " | ".join(fmt(row.get(k)) for k, _ in columns) + " |" for row in rows]
            lines.append("")
        lines.append(NOTES)
        with open(OUT, "w") as file:
            file.write("\n".join(lines))
        with open(os.path.splitext(OUT)[0] + ".csv", "w", newline="") as file:
            writer = csv.writer(file)
            for rows, columns, title in ((self.curve, CURVE_COLUMNS, "curve"), (self.bursts, BURST_COLUMNS, "bursts")):
                if rows:
                    writer.writerow(["table"] + [k for k, _ in columns])
                    for row in rows:
                        writer.writerow([title] + [row.get(k, "") for k, _ in columns])


def fmt(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        if value >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}" if value < 10 else f"{value:.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


# --- The run ----------------------------------------------------------------------------------


def instances_gauge(metrics: bytes) -> int | None:
    """The invoice workflow's instances by `turnstile_instances{workflow,state}` (issue 51 item 2),
    summed over its states (the invoice machine is flat: each instance is in one); `None` when
    `/metrics` has no such gauge."""
    total = None
    for line in metrics.decode().splitlines():
        if line.startswith("turnstile_instances{") and 'workflow="invoice"' in line:
            total = (total or 0) + int(float(line.rsplit(" ", 1)[1]))
    return total


def curve(store: Store, server: Server, work: str, output: Output) -> dict:
    """Fills the store size by size, a row for each; returns what the bursts need."""
    status_scenario = scenario_file(work, "status.json", STATUS_SCENARIO)
    total, _, _ = server.counts()
    last_fill_rate = None
    transition_rate = None
    per_instance_bytes = 4096.0
    reached = total
    for size in SIZES:
        row: dict = {"store": store.kind}
        need = size - total
        if need < 0:
            raise Failed(f"{store.kind}: already {total} instances, more than {size}")
        if store.kind == "embedded":
            free = shutil.disk_usage(store.data_dir).free
            if need * per_instance_bytes * 1.5 > free:
                output.add("curve", {"store": store.kind, "instances": size,
                                     "note": f"not filled: about {mib(need * per_instance_bytes):,.0f} MiB more needed, {mib(free):,.0f} MiB free"})
                break
        if need > 0:
            log(f"{store.kind}: minting {need:,} (to {size:,})")
            minted = mint(server, need)
            row["fill_per_s"] = round(minted["mints_per_second"], 1)
            last_fill_rate = minted["mints_per_second"]
            if minted.get("memory"):
                row["fill_peak_rss_mib"] = round(minted["memory"]["peak_kib"] / 1024, 1)
        server.wait_idle()
        time.sleep(2.5)  # the memory-trim thread hands freed memory back every 2 s
        row["rss_mib"] = round(server.rss_kib() / 1024, 1)
        counts = []
        for _ in range(COUNT_REPEATS):
            total, _, took = server.counts()
            counts.append(took)
        if total != size:
            raise Failed(f"{store.kind}: the count query says {total} instances, {size} were made")
        metrics = []
        for _ in range(COUNT_REPEATS):
            body, took = server.get("/metrics")
            metrics.append(took)
        gauge = instances_gauge(body)
        deadline = time.perf_counter() + 5
        while gauge is not None and gauge != total and time.perf_counter() < deadline:
            time.sleep(0.5)
            gauge = instances_gauge(server.get("/metrics")[0])
        if gauge is None:
            row["note"] = "/metrics: no turnstile_instances gauge"
        elif gauge != total:
            # Not a figure of the row, so noted rather than fatal: hours of filling stay.
            row["note"] = f"WRONG: /metrics turnstile_instances says {gauge}, the count query {total}"
            log(f"{store.kind}: {row['note']}")
        row.update(
            instances=total,
            counts_ms=ms(statistics.median(counts)),
            metrics_ms=ms(statistics.median(metrics)),
        )
        size_bytes = store.size_bytes()
        if size_bytes is not None:
            row["store_mib"] = mib(size_bytes)
            per_instance_bytes = max(512.0, size_bytes / max(total, 1))
        log(f"{store.kind} at {total:,}: cold calls")
        row.update(cold_calls(server))
        log(f"{store.kind} at {total:,}: hot calls")
        status = hot(server, status_scenario, "status")
        cycle = hot(server, CYCLE_SCENARIO, "transition")
        transition_rate = cycle["calls_per_second"]
        row.update(
            status_p50_ms=status["call_latency_ms"]["p50"],
            status_p99_ms=status["call_latency_ms"]["p99"],
            status_per_s=round(status["calls_per_second"]),
            transition_p50_ms=cycle["call_latency_ms"]["p50"],
            transition_p99_ms=cycle["call_latency_ms"]["p99"],
            transition_per_s=round(transition_rate),
        )
        total, _, _ = server.counts()
        if store.persistent:
            server.wait_idle()
            row["stop_s"] = round(server.stop(), 2)
            row["start_s"] = round(server.start(), 2)
            again, _, _ = server.counts()
            if again != total:
                raise Failed(f"{store.kind}: {total} instances before the restart, {again} after")
        output.add("curve", row)
        reached = size
    return {"reached": reached, "fill_rate": last_fill_rate, "transition_rate": transition_rate}


def timers_burst(store: Store, server: Server, fill_rate: float | None) -> dict:
    """TIMERS instances whose review deadline passes while the server is stopped: seconds from
    letting it go until every timer fired."""
    rate = fill_rate or 500.0
    deadline = int(env("TIMER_DEADLINE", str(max(30, math.ceil(2 * TIMERS / rate) + 15))))
    log(f"{store.kind}: timers: review deadline {deadline} s, minting {TIMERS:,}")
    server.start({DEADLINE_ENV: str(deadline * 1000)})
    _, before, _ = server.counts()
    mint(server, TIMERS)
    filled = time.time()
    fired = server.timers_fired()
    if fired:
        raise Failed(f"{store.kind}: {fired} timers fired while minting: raise TIMER_DEADLINE above {deadline}")
    server.wait_idle()
    held, _, _ = server.counts()
    # Nothing may have fired by the moment the server stops.
    fired = server.timers_fired()
    server.pause()
    if fired:
        raise Failed(f"{store.kind}: {fired} timers fired before the stop: raise TIMER_DEADLINE above {deadline}")
    wait = filled + deadline + 1 - time.time()
    log(f"{store.kind}: timers: server stopped (SIGSTOP) for {wait:.0f} s, until every deadline passed")
    time.sleep(max(0.0, wait))
    started = time.perf_counter()
    server.resume()
    while (fired := server.timers_fired()) < TIMERS:
        if time.perf_counter() - started > BURST_TIMEOUT:
            raise Failed(f"{store.kind}: {fired} of {TIMERS} timers fired in {BURST_TIMEOUT:.0f} s")
        time.sleep(0.05)
    took = time.perf_counter() - started
    if fired != TIMERS:
        raise Failed(f"{store.kind}: {fired} timers fired, {TIMERS} were due")
    _, after, _ = server.counts()
    if after.get("draft", 0) - before.get("draft", 0) != TIMERS or after.get("review", 0) != before.get("review", 0):
        raise Failed(f"{store.kind}: counts before {before}, after the timers {after}")
    server.wait_idle()
    server.stop()
    return {"store": store.kind, "burst": "timers", "held": held, "due": TIMERS,
            "seconds": round(took, 2), "per_s": round(TIMERS / took),
            "note": f"review deadline {deadline} s"}


def retention_burst(store: Store, server: Server, work: str, transition_rate: float | None) -> dict:
    """RETAINED instances discharged, expiring while the server is stopped: seconds from letting
    it go until the count query shows them gone."""
    # A pass: a new session, three calls, the session closed: about six requests.
    rate = (transition_rate or 3000.0) / 6
    retain = int(env("RETAIN_AFTER", str(max(30, math.ceil(2 * RETAINED / rate) + 15))))
    iterations = math.ceil(RETAINED / HOT_SESSIONS)
    made = iterations * HOT_SESSIONS
    log(f"{store.kind}: retention: --retain-final {retain}, discharging {made:,}")
    server.start(args=["--retain-final", str(retain)])
    total_before, before, _ = server.counts()
    load(
        server,
        "discharge",
        ["--scenario", scenario_file(work, "discharge.json", DISCHARGE_SCENARIO), "--churn",
         "--sessions", str(HOT_SESSIONS), "--iterations", str(iterations), "--warmup", "0"],
    )
    filled = time.time()
    held, after, _ = server.counts()
    if held != total_before + made or after.get("discharged", 0) - before.get("discharged", 0) != made:
        raise Failed(
            f"{store.kind}: {held - total_before} instances made, {after.get('discharged', 0)} discharged "
            f"for {made} (some expired before the fill ended? raise RETAIN_AFTER above {retain})"
        )
    server.wait_idle()
    # Where the store can say how many records it holds, that is watched rather than the count
    # query (at HEAD a read of every record, seconds at 100,000): it must agree with it first.
    counted = store.instance_count()
    if counted is not None and counted != held:
        raise Failed(f"{store.kind}: the store holds {counted} records, the count query says {held}")
    # Nothing may have expired by the moment the server stops.
    still, _, _ = server.counts()
    server.pause()
    if still != held:
        raise Failed(f"{store.kind}: {held - still} deleted before the stop: raise RETAIN_AFTER above {retain}")
    wait = filled + retain + 1 - time.time()
    log(f"{store.kind}: retention: server stopped (SIGSTOP) for {wait:.0f} s, until every one expired")
    time.sleep(max(0.0, wait))
    started = time.perf_counter()
    server.resume()
    polls = []
    while True:
        polled = time.perf_counter()
        if counted is None:
            total, _, _ = server.counts()
        else:
            total = store.instance_count()
        polls.append(time.perf_counter() - polled)
        if total == total_before:
            break
        if total < total_before:
            raise Failed(f"{store.kind}: {total_before - total} more instances deleted than expired")
        if time.perf_counter() - started > BURST_TIMEOUT:
            raise Failed(f"{store.kind}: {total - total_before} of {made} left after {BURST_TIMEOUT:.0f} s")
        time.sleep(0.05)
    took = time.perf_counter() - started
    total, by_state, _ = server.counts()
    if total != total_before or by_state.get("discharged", 0) != before.get("discharged", 0):
        raise Failed(f"{store.kind}: after the deletes {total} instances, {by_state.get('discharged')} discharged")
    server.stop()
    watched = "the count query" if counted is None else "the store's own count"
    return {"store": store.kind, "burst": "retention", "held": held, "due": made,
            "seconds": round(took, 2), "per_s": round(made / took),
            "note": f"--retain-final {retain}; watched {watched}, {ms(statistics.median(polls))} ms a poll"}


def run_store(kind: str, work: str, plugins: str, output: Output) -> None:
    store = Store(kind, work)
    server = Server(store, plugins, work, PORT + STORES.index(kind))
    try:
        store.prepare()
        log(f"{kind}: {store.url} namespace {store.namespace}, log {server.log_path}")
        server.start()
        reached = curve(store, server, work, output)
        server.stop()
        # A restart empties the memory store: its bursts run each on a new, empty server.
        fresh = "" if store.persistent else "memory: a new, empty server; "
        if TIMERS > 0:
            row = timers_burst(store, server, reached["fill_rate"])
            row["note"] = fresh + row["note"]
            output.add("bursts", row)
        if RETAINED > 0:
            row = retention_burst(store, server, work, reached["transition_rate"])
            row["note"] = fresh + row["note"]
            output.add("bursts", row)
    finally:
        server.kill()
        store.cleanup()


def main() -> int:
    if sys.argv[1:]:
        print(__doc__)
        return 0 if sys.argv[1] in ("-h", "--help") else 2
    if not os.access(BIN, os.X_OK):
        print(f"no {BIN}: cargo build --release first (or set TURNSTILE)", file=sys.stderr)
        return 2
    library = os.path.join(PLUGINS, "libturnstile_plugin_invoice.so")
    if not os.path.exists(library):
        print(f"no {library}: cargo build --release first (or set PLUGINS)", file=sys.stderr)
        return 2
    if SIZES != sorted(SIZES) or not SIZES or SIZES[0] <= 0:
        print("SIZES must be ascending positive counts", file=sys.stderr)
        return 2
    work = os.environ.get("WORK") or tempfile.mkdtemp(prefix="scale_curve.")
    os.makedirs(work, exist_ok=True)
    plugins = os.path.join(work, "plugins")
    os.makedirs(plugins, exist_ok=True)
    if not os.path.exists(os.path.join(plugins, "libturnstile_plugin_invoice.so")):
        os.symlink(library, os.path.join(plugins, "libturnstile_plugin_invoice.so"))
    commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
    version = subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout.strip()
    built = datetime.datetime.fromtimestamp(os.path.getmtime(BIN)).strftime("%Y-%m-%d %H:%M")
    header = (
        f"## Scale curve, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC\n\n"
        f"`{version}` ({BIN}, built {built}), checkout `{commit}`, {os.cpu_count()} cores; "
        f"STORES=\"{' '.join(STORES)}\" SIZES=\"{' '.join(map(str, SIZES))}\" TIMERS={TIMERS} RETAINED={RETAINED} "
        f"MINT_SESSIONS={MINT_SESSIONS} HOT_SESSIONS={HOT_SESSIONS} HOT_SECONDS={HOT_SECONDS:g} "
        f"COLD_CALLS={COLD_CALLS} IDLE_AFTER={IDLE_AFTER}\n\n"
        f"    python3 host/examples/scale_curve.py"
    )
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    output = Output(header)
    log(f"work directory {work}; writing {OUT}")
    failed = False
    for kind in STORES:
        try:
            run_store(kind, work, plugins, output)
        except Failed as error:
            failed = True
            log(f"{kind}: FAILED: {error}")
            output.add("curve", {"store": kind, "note": f"FAILED: {str(error).splitlines()[0][:200]}"})
        except KeyboardInterrupt:
            log("interrupted")
            return 130
        except Exception as error:  # a surprise (e.g. a report of another shape): said whole
            failed = True
            log(f"{kind}: FAILED:\n{traceback.format_exc()}")
            output.add("curve", {"store": kind, "note": f"FAILED: {type(error).__name__}: {error}"[:200]})
    if not KEEP and not failed and not os.environ.get("WORK"):
        shutil.rmtree(work, ignore_errors=True)
    log(f"wrote {OUT} and {os.path.splitext(OUT)[0]}.csv")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
