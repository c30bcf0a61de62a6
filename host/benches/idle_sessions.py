"""Idle-session memory and session setup time (BENCHMARKS.md, "Memory and passivation").

Opens N sessions (initialize + notifications/initialized) over one keep-alive connection,
one after the other; reports setup latency and the server's RSS growth per session, then waits
(for passivation) and reports RSS again. Usage: idle_sessions.py PORT PID N WAIT_S"""
import http.client, json, sys, time, statistics
port, pid, n, wait_s = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1])
conn = http.client.HTTPConnection("127.0.0.1", port)
H = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
init = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "idle", "version": "0"}}})
done = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
# warm up
def open_one():
    conn.request("POST", "/mcp", init, H); r = conn.getresponse(); sid = r.getheader("mcp-session-id"); r.read()
    h = dict(H); h["Mcp-Session-Id"] = sid; h["MCP-Protocol-Version"] = "2025-11-25"
    conn.request("POST", "/mcp", done, h); r = conn.getresponse(); r.read()
    assert r.status == 202, r.status
    return sid
for _ in range(200): open_one()
time.sleep(1)
before = rss()
lat = []
t0 = time.time()
for _ in range(n):
    s = time.perf_counter(); open_one(); lat.append(time.perf_counter() - s)
after = rss()
lat.sort()
print(f"sessions={n} setup p50={lat[len(lat)//2]*1000:.2f}ms p99={lat[int(len(lat)*0.99)]*1000:.2f}ms "
      f"rss_before={before}KiB rss_after={after}KiB per_session={(after-before)/n:.2f}KiB")
time.sleep(wait_s)
later = rss()
print(f"after {wait_s}s: rss={later}KiB per_session={(later-before)/n:.2f}KiB")
