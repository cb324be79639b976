"""Abuse limits (issue: hardening; docs/operators.md, "Abuse limits"), each on its own
`mpakt serve` with small limits set by its flags: failed logins per username and per address
(429 with Retry-After), open connections in all and per address (503 / 429 with Retry-After),
slow clients trickling a header or a body (dropped after the timeout, while an idle keep-alive
connection is not), and generations running at once per key (429 naming the limit, other keys
unaffected). The server stays up through all of it."""
from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from e2e_util import STORIES_DIR, cluster_port, expect
from test_cluster import Cluster, graph_cli

GOLDEN = json.loads((STORIES_DIR / "goldens" / "stories260K_once_upon.json").read_text())


def test_failed_logins_are_limited_per_username_and_per_address(start_server):
    server = start_server("--dev", "--login-failures-per-user", "3", "--login-failures-per-address", "5",
                          "--login-window-s", "60")
    api = server.api
    for name in ("alice", "bob"):
        server.sign_up(name)
    for _ in range(3):
        expect(api.post("/api/accounts/login", {"username": "alice", "password": "wrong password"}), 401)
    # the username is locked for the window, even with the right password, and the answer says when
    r = api.post("/api/accounts/login", {"username": "ALICE", "password": "a long password"})
    expect(r, 429, "too many failed logins", "try again in")
    assert 1 <= int(r.headers["Retry-After"]) <= 60, r.headers
    # bob is not locked by alice's failures, and a good login does not count
    server.login("bob")
    # ... until this address has failed 5 times in all
    for _ in range(2):
        expect(api.post("/api/accounts/login", {"username": "bob", "password": "wrong password"}), 401)
    r = api.post("/api/accounts/login", {"username": "bob", "password": "a long password"})
    expect(r, 429, "from this address")
    assert "Retry-After" in r.headers
    # sign-up and everything else go on
    server.sign_up("carol")
    server.assert_up()


def raw_request(port, data, timeout=5.0):
    """Sends raw bytes on a new connection and returns what comes back until the server closes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk
    finally:
        s.close()


def status_of(raw):
    line = raw.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) > 1 else None


def test_open_connections_are_capped_per_address_and_in_all(start_server):
    server = start_server("--dev", "--max-connections", "4", "--max-connections-per-address", "3")
    held = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(3)]
    try:
        time.sleep(0.2)
        r = raw_request(server.port, b"GET /api/versions HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(r) == 429 and b"Retry-After: 1" in r and b"--max-connections-per-address" in r, r
        # a closed connection frees its place
        held.pop().close()
        deadline = time.monotonic() + 5
        while status_of(raw_request(server.port, b"GET /api/versions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) != 200:
            assert time.monotonic() < deadline, "the closed connection's place was never freed"
            time.sleep(0.05)
    finally:
        for s in held:
            s.close()
    server.assert_up()
    # the total: no per-address limit, two connections in all
    total = start_server("--dev", "--max-connections", "2", "--max-connections-per-address", "0")
    held = [socket.create_connection(("127.0.0.1", total.port), timeout=5) for _ in range(2)]
    try:
        time.sleep(0.2)
        r = raw_request(total.port, b"GET /api/versions HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(r) == 503 and b"--max-connections" in r and b"Retry-After: 1" in r, r
    finally:
        for s in held:
            s.close()
    time.sleep(0.2)
    total.assert_up()


def dropped_after(port, first, trickle, limit=10.0):
    """Sends `first`, then one byte of `trickle` every 0.2 s; returns the seconds until the
    server closed the connection (None if it never did within `limit`)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=limit)
    t0 = time.monotonic()
    try:
        s.sendall(first)
        for b in trickle:
            time.sleep(0.2)
            try:
                s.sendall(bytes([b]))
            except (BrokenPipeError, ConnectionResetError):
                return time.monotonic() - t0
            if time.monotonic() - t0 > limit:
                return None
        s.settimeout(limit)
        try:
            return time.monotonic() - t0 if s.recv(1) == b"" else None
        except ConnectionResetError:
            return time.monotonic() - t0
    finally:
        s.close()


def test_slow_clients_are_dropped_but_idle_ones_are_not(start_server):
    server = start_server("--dev", "--header-timeout-ms", "1000", "--body-timeout-ms", "1000")
    # a header trickling one byte at a time
    took = dropped_after(server.port, b"GET /api/versions HTTP/1.1\r\n", b"X-Slow: " + b"a" * 100)
    assert took is not None and took < 4, took
    # a body trickling (the header was quick)
    head = b"POST /api/accounts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    took = dropped_after(server.port, head, b'{"username": "' + b"a" * 80)
    assert took is not None and took < 4, took
    # an idle keep-alive connection is kept past those timeouts, and answered once it asks
    s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    try:
        time.sleep(1.5)
        s.sendall(b"GET /api/versions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        assert status_of(out) == 200, out[:200]
    finally:
        s.close()
    server.assert_up()


def test_generations_running_at_once_are_limited_per_key(start_server, tmp_path_factory):
    """A volunteer answering every graph call 300 ms late keeps a generation (the ordinary
    loop: one call per token) running for seconds; the key's second generation and a chat are
    429 meanwhile, another key's are not, and once it ends the key may generate again."""
    cport = cluster_port()
    server = start_server("--dev", "--workers", "0", "--cluster-port", str(cport), "--generations-per-key", "1")
    c = Cluster(server, cport, tmp_path_factory.mktemp("genlimit"))
    c.key = server.account("busy")[1]
    other = server.account("other")[1]
    api = server.api
    try:
        c.join("w_slow", "256M", "--delay-ms", "300")

        def prepared(key):
            model = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=key, timeout=60), 200)["modelId"]
            step = expect(api.post("/api/v3/graphs", {"graph": graph_cli("--model-id", model, "--compiled", "--tokens", "1",
                                                                         "--cache", "64", "--argmax")}, key=key), 200)["graphId"]
            sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
            expect(api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", "64"), session=sid)}, key=key,
                            timeout=30), 200)
            return {"graphId": step, "sessionId": sid, "ids": [GOLDEN["prompt_ids"][0]], "startPos": 0,
                    "workerLoop": False, "stream": False}

        mine, theirs = prepared(c.key), prepared(other)
        first = {}
        t = threading.Thread(target=lambda: first.update(r=api.post("/api/v3/generate", {**mine, "maxNewTokens": 12},
                                                                    key=c.key, timeout=60)))
        t.start()
        time.sleep(1.0)  # the first is running (12 tokens at 300 ms each)
        expect(api.post("/api/v3/generate", {**mine, "maxNewTokens": 1}, key=c.key, timeout=30), 429,
               "already runs 1 generations")
        expect(api.post("/api/v3/chat", {"model": "hf:local/stories260K", "messages": [{"role": "user", "content": "hi"}],
                                         "stream": False}, key=c.key, timeout=30), 429, "generations")
        # another key is not held back by this one's
        r = expect(api.post("/api/v3/generate", {**theirs, "maxNewTokens": 2}, key=other, timeout=60), 200)
        assert len(r["tokens"]) == 2
        t.join()
        assert first["r"].status == 200 and len(first["r"].json["tokens"]) == 12, first["r"]
        # the slot is free again once the generation ended
        expect(api.post("/api/v3/generate", {**mine, "startPos": 13, "maxNewTokens": 1}, key=c.key, timeout=60), 200)
        server.assert_up()
    finally:
        c.stop_all()
