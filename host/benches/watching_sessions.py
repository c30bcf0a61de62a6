"""Memory per watching session (BENCHMARKS.md, "Memory per watching session").

A watching session is what an agent keeps while it waits for an instance to move: a session
that touched the instance (`tools/list` naming its handle) and holds its GET event stream open.
Opens N of them against a server started with `--state-handle-key handle`, one after the other,
each on its own connection for the stream (POSTs share one keep-alive connection), and reports
the server's RSS growth per session: once all are open (live), then after WAIT_S (long enough
for `--session-passivate-after`). Then it moves the instance once and reports how long the
last of the N streams took to carry its `list_changed` (read here in one Python thread, so
an upper bound), and that every stream got it. Exits 1 if any stream missed it.

Usage: watching_sessions.py PORT PID N WAIT_S     (raise `ulimit -n` above N on both sides)"""
import http.client, json, selectors, socket, sys, time

port, pid, n, wait_s = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
PROTOCOL = "2025-11-25"
H = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1])


conn = http.client.HTTPConnection("127.0.0.1", port)


def exchange(method, path, body=None, headers=None):
    """One request on the shared keep-alive connection, opened again if the server closed it
    while it was idle (`--keepalive-timeout`)."""
    for attempt in (1, 2):
        try:
            conn.request(method, path, body, headers or {})
            response = conn.getresponse()
            return response, response.read().decode()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            conn.close()
            if attempt == 2:
                raise


def heap():
    """The server's live heap (jemalloc's `allocated`, from `/stats`), in KiB."""
    _, body = exchange("GET", "/stats")
    return json.loads(body)["memory"]["allocated"] // 1024


def post(session, message):
    headers = dict(H)
    if session:
        headers["Mcp-Session-Id"] = session
        headers["MCP-Protocol-Version"] = PROTOCOL
    response, body = exchange("POST", "/mcp", json.dumps(message), headers)
    if response.status >= 300:
        sys.exit(f"{message.get('method')}: HTTP {response.status}: {body}")
    for line in body.splitlines():  # an SSE-framed answer: its data line
        if line.startswith("data: "):
            body = line[6:]
    return response.getheader("mcp-session-id"), (json.loads(body) if body.strip() else None)


def open_session():
    session, _ = post(None, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {},
        "clientInfo": {"name": "watching", "version": "0"}}})
    post(session, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    return session


def call(session, name, arguments):
    _, answer = post(session, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                               "params": {"name": name, "arguments": arguments}})
    result = answer["result"]
    if result.get("isError"):
        sys.exit(f"{name} failed: {result}")
    return result["structuredContent"]


def watch(session, handle):
    """Touches the instance, then opens the session's event stream on a socket of its own."""
    _, answer = post(session, {"jsonrpc": "2.0", "id": 2, "method": "tools/list",
                               "params": {"_meta": {"handle": handle}}})
    assert answer["result"]["tools"], answer
    stream = socket.create_connection(("127.0.0.1", port))
    stream.sendall((f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                    f"Accept: text/event-stream\r\nMcp-Session-Id: {session}\r\n"
                    f"MCP-Protocol-Version: {PROTOCOL}\r\n\r\n").encode())
    head = stream.recv(4096)
    if not head.startswith(b"HTTP/1.1 200"):
        sys.exit(f"GET stream: {head[:200]!r}")
    stream.setblocking(False)
    return stream


owner = open_session()
handle = call(owner, "invoice.submit", {"amount": 5})["handle"]
# Warm up the server's paths before the baseline.
for _ in range(50):
    watch(open_session(), handle).close()
time.sleep(2)
before, heap_before = rss(), heap()
started = time.time()
streams = [watch(open_session(), handle) for _ in range(n)]
opened = time.time() - started
live = rss()
print(f"sessions={n} opened in {opened:.1f}s rss_before={before}KiB rss_live={live}KiB "
      f"per_session_live={(live - before) / n:.2f}KiB")
# Drain keep-alives while waiting, as a client would.
selector = selectors.DefaultSelector()
for index, stream in enumerate(streams):
    selector.register(stream, selectors.EVENT_READ, index)
deadline = time.time() + wait_s
while time.time() < deadline:
    for key, _ in selector.select(timeout=0.5):
        key.fileobj.recv(65536)
later, heap_later = rss(), heap()
print(f"after {wait_s:.0f}s: rss={later}KiB per_session={(later - before) / n:.2f}KiB "
      f"heap_per_session={(heap_later - heap_before) / n:.2f}KiB")

# One transition, timed to the last stream that carries its list_changed.
heard = [b""] * n
waiting = set(range(n))
sent = time.perf_counter()
call(owner, "invoice.approve", {"handle": handle})
answered = time.perf_counter() - sent
last = 0.0
deadline = time.time() + 30
while waiting and time.time() < deadline:
    for key, _ in selector.select(timeout=0.5):
        index = key.data
        heard[index] += key.fileobj.recv(65536)
        if index in waiting and b"list_changed" in heard[index]:
            waiting.discard(index)
            last = time.perf_counter() - sent
print(f"transition answered in {answered * 1000:.1f}ms; the last of {n - len(waiting)} streams "
      f"heard it {last * 1000:.1f}ms after the call was sent; missed: {len(waiting)}")
sys.exit(1 if waiting else 0)
