#!/usr/bin/env python3
"""Lease moves under affinity against random routing (issue 38, item 5).

Starts SERVERS `turnstile serve --stateless` processes on one store, then drives WORKERS
instances of the invoice workflow, each with CALLS transitions (reject, submit, ...), from one
thread per instance, routing each call either to the instance's own server (affinity: what a
load balancer hashing on a handle header gives) or to a random server. Reports, per mode, the
lease grants per call (summed from every server's /metrics), the calls answered BUSY or
CONFLICT, and calls/s.

    python3 host/examples/lease_routing.py target/release/turnstile PLUGIN_DIR \
        [--store redis://127.0.0.1:6379] [--servers 3] [--workers 12] [--calls 60] \
        [--lease-idle MS]

PLUGIN_DIR holds libturnstile_plugin_invoice.so. Standard library only.
"""

import argparse
import http.client
import json
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid


def call(conn, tool, arguments):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}})
    conn.request("POST", "/mcp", body, {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2025-11-25",
    })
    response = conn.getresponse()
    text = response.read().decode()
    for line in text.splitlines():
        if line.startswith("data: ") and '"id":1' in line:
            return json.loads(line[6:])["result"]
    raise RuntimeError(f"no answer to {tool}: {response.status} {text[:200]}")


def counter(port, metric, labels=""):
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(metric) and labels in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def run(mode, ports, workers, calls):
    codes = {}
    lock = threading.Lock()

    def worker(n):
        conns = {port: http.client.HTTPConnection("127.0.0.1", port) for port in ports}
        home = ports[n % len(ports)]
        minted = call(conns[home], "invoice.submit", {"amount": 5})
        handle = minted["structuredContent"]["handle"]
        for i in range(calls):
            port = home if mode == "affinity" else random.choice(ports)
            tool, arguments = (("invoice.reject", {"reason": "load"}) if i % 2 == 0
                               else ("invoice.submit", {"amount": 5}))
            arguments["handle"] = handle
            result = call(conns[port], tool, arguments)
            code = "ok"
            if result.get("isError"):
                code = result.get("structuredContent", {}).get("error", {}).get("code", "?")
            with lock:
                codes[code] = codes.get(code, 0) + 1

    grants_before = sum(counter(p, "turnstile_leases_granted_total") for p in ports)
    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    grants = sum(counter(p, "turnstile_leases_granted_total") for p in ports) - grants_before
    total = workers * calls
    return {"mode": mode, "calls": total, "calls_per_second": round(total / elapsed),
            "lease_grants_per_call": round(grants / total, 3), "outcomes": codes}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("turnstile")
    parser.add_argument("plugins")
    parser.add_argument("--store", default="redis://127.0.0.1:6379")
    parser.add_argument("--servers", type=int, default=3)
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--lease-idle", type=int, help="the servers' --lease-idle (ms)")
    args = parser.parse_args()
    namespace = "routing_" + uuid.uuid4().hex[:12]
    data = tempfile.mkdtemp()
    ports = [18500 + n for n in range(args.servers)]
    servers = [subprocess.Popen(
        [args.turnstile, "serve", "--http", f"127.0.0.1:{port}", "--plugins", args.plugins,
         "--data-dir", f"{data}/{port}", "--stateless", "--idle-after", "0",
         "--store", args.store, "--store-namespace", namespace]
        + (["--lease-idle", str(args.lease_idle)] if args.lease_idle is not None else []),
        stderr=subprocess.DEVNULL) for port in ports]
    try:
        time.sleep(2)
        for _ in range(args.rounds):
            for mode in ("affinity", "random"):
                print(json.dumps(run(mode, ports, args.workers, args.calls)))
                sys.stdout.flush()
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait()
        if args.store.startswith("redis"):
            keys = subprocess.run(["redis-cli", "--scan", "--pattern", namespace + ":*"],
                                  capture_output=True, text=True).stdout.split()
            for start in range(0, len(keys), 500):
                subprocess.run(["redis-cli", "del", *keys[start:start + 500]],
                               capture_output=True)
        elif args.store.startswith("postgres"):
            tables = ", ".join(f"{namespace}_{t}" for t in ("audit", "instances", "machines"))
            subprocess.run(["psql", "-qtA", args.store, "-c", f"drop table if exists {tables}"],
                           capture_output=True)


if __name__ == "__main__":
    main()
