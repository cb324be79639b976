"""Helpers for the end-to-end tests: locating things, starting real `mpakt` processes on
loopback, raw HTTP calls, and writing small safetensors files."""

from __future__ import annotations

import http.client
import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
# ../shared beside the checkout; MPAKT_SHARED_DIR where it lies elsewhere (a GPU machine's copy of
# the device pack: backends/cuda/run_device_checks.sh)
SHARED_DIR = Path(os.environ.get("MPAKT_SHARED_DIR") or REPO_ROOT.parent / "shared")
CLIENTS_DIR = REPO_ROOT / "clients"
STORIES_DIR = SHARED_DIR / "models" / "stories260K"

# An error answer takes milliseconds; a request left unanswered this long is a hung request.
PROMPT_S = 2.0
# Anything that runs a graph or loads a model.
WORK_S = 60.0


def binary() -> Path:
    return Path(os.environ.get("MPAKT_BINARY") or REPO_ROOT / "build" / "mpakt")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def cluster_port() -> int:
    """A port for `--cluster-port` whose neighbour, the default data port (the cluster port + 1),
    is free as well. Both lie below the kernel's ephemeral range where it leaves room: a port
    from free_port() is one the kernel also hands to outgoing connections, so the neighbour of
    one could be taken by any client connection between this check and the server's bind (and
    the server then runs with no data port)."""
    eph = min(_ephemeral_low(), 65535)
    below = eph - 2 > 4096  # (else every port is ephemeral: pairs around kernel-chosen ones)
    for _ in range(200):
        port = random.randrange(max(1024, eph - 12000), eph - 2) if below else min(free_port(), 65534)
        socks = []
        try:
            for p in (port, port + 1):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no pair of free neighbouring ports for a cluster port")


# --------------------------------------------------------------------------- processes

# Every Process started in this pytest run, in start order: conftest.py prints what each of
# them logged while a test ran when that test fails.
STARTED = []


class Process:
    """A child process whose output goes to a log file, started and awaited by its ready line."""

    def __init__(self, name, argv, log_path, cwd=None):
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = Path(log_path)
        self.cwd = cwd
        self.proc = None

    def start(self, ready_pattern, timeout=30.0):
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=self.cwd)
        STARTED.append(self)
        deadline = time.monotonic() + timeout
        rx = re.compile(ready_pattern)
        while time.monotonic() < deadline:
            m = rx.search(self.output())
            if m:
                return m
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        rc = self.proc.poll()
        out = self.output()
        self.kill()
        raise RuntimeError(f"{self.name} did not become ready ({'exited with ' + str(rc) if rc is not None else 'timed out after %gs' % timeout})\n"
                           f"command: {' '.join(self.argv)}\n--- output ---\n{out}")

    def output(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_size(self):
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def log_since(self, offset, max_bytes=6000):
        """What the process logged after byte `offset`: the last `max_bytes` of it, cut at a
        line start."""
        try:
            with open(self.log_path, "rb") as f:
                size = f.seek(0, 2)
                start = max(offset, size - max_bytes)
                f.seek(start)
                data = f.read()
        except FileNotFoundError:
            return ""
        if start > offset:
            data = b"[...]" + data[data.find(b"\n"):] if b"\n" in data else data
        return data.decode("utf-8", "replace")

    def state(self):
        if self.proc is None:
            return "not started"
        rc = self.proc.poll()
        return "running" if rc is None else f"exited with {rc}"

    def terminate(self):
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)

    def kill(self):
        if self.alive():
            self.proc.kill()
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if getattr(self, "_log", None):
            self._log.close()
            self._log = None


def stop_all(processes, grace=3.0):
    """SIGTERM to every process at once, then SIGKILL whatever is still running after `grace`."""
    for p in processes:
        p.terminate()
    deadline = time.monotonic() + grace
    for p in processes:
        if p.proc is None:
            continue
        try:
            p.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in processes:
        p.kill()


def start_with_free_port(make_process, ready_pattern, attempts=3, timeout=30.0):
    """Starts make_process(port) on a free port, retrying when another process took the port."""
    last = None
    for _ in range(attempts):
        port = free_port()
        proc = make_process(port)
        try:
            proc.start(ready_pattern, timeout)
            return proc, port
        except RuntimeError as e:
            last = e
            if "already in use" not in str(e):
                raise
    raise last


# --------------------------------------------------------------------------- raw HTTP


class Reply:
    def __init__(self, status, body, headers):
        self.status = status
        self.body = body
        self.headers = headers
        try:
            self.json = json.loads(body.decode("utf-8")) if body else None
        except ValueError:
            self.json = None

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    @property
    def error(self):
        return self.json.get("error") if isinstance(self.json, dict) else None

    def __repr__(self):
        return f"Reply({self.status}, {self.text[:300]!r})"


class Api:
    """Plain HTTP against one server: a new connection per call, as curl would do."""

    def __init__(self, port, host="127.0.0.1", timeout=10.0):
        self.host = host
        self.port = port
        self.base_url = f"http://{host}:{port}"
        self.timeout = timeout

    def call(self, method, path, body=None, key=None, token=None, raw=None, headers=None, timeout=None):
        """Sends one request. `body` is JSON-encoded; `raw` (str or bytes) is sent as is.
        A request with no answer within `timeout` seconds (the Api's default unless given)
        fails the test as a hung request."""
        timeout = self.timeout if timeout is None else timeout
        h = {"Accept": "application/json"}
        if key is not None:
            h["x-api-key"] = key
        if token is not None:
            h["Authorization"] = "Bearer " + token
        payload = None
        if raw is not None:
            payload = raw.encode("utf-8") if isinstance(raw, str) else raw
            h["Content-Type"] = "application/json"
        elif body is not None:
            payload = json.dumps(body).encode("utf-8")
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, path, body=payload, headers=h)
            resp = conn.getresponse()
            data = resp.read()
            return Reply(resp.status, data, dict(resp.getheaders()))
        except (socket.timeout, TimeoutError):
            pytest.fail(f"{method} {path}: no answer within {timeout:g} s — the server left the request hanging "
                        f"(body: {(payload or b'')[:200]!r})", pytrace=False)
        finally:
            conn.close()

    def get(self, path, **kw):
        return self.call("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.call("POST", path, body, **kw)

    def delete(self, path, **kw):
        return self.call("DELETE", path, **kw)


def expect(reply, status, *fragments):
    """Asserts the status, the {"error": ...} shape of an error reply, and that its message
    contains each fragment. Returns the decoded JSON."""
    assert reply.status == status, f"expected {status}, got {reply!r}"
    if status >= 400:
        assert isinstance(reply.json, dict) and set(reply.json) == {"error"} and isinstance(reply.error, str), \
            f"an error reply must be exactly {{\"error\": \"...\"}}, got {reply.text!r}"
        for f in fragments:
            assert f in reply.error, f"error message {reply.error!r} should mention {f!r}"
    return reply.json


class Server:
    """A running `mpakt serve` and what a test needs to talk to it."""

    def __init__(self, process, port, data_dir, flags):
        self.process = process
        self.port = port
        self.data_dir = Path(data_dir)
        self.flags = flags
        self.api = Api(port)
        self.base_url = self.api.base_url

    def admin(self, *args):
        r = subprocess.run([str(binary()), "admin", *args, "--data-dir", str(self.data_dir)], capture_output=True,
                           text=True, timeout=30)
        return r

    def approve(self, username):
        r = self.admin("approve", username)
        assert r.returncode == 0, f"mpakt admin approve {username} failed ({r.returncode}): {r.stdout}{r.stderr}"
        return r

    def sign_up(self, username, password="a long password", approve=True):
        r = self.api.post("/api/accounts", {"username": username, "password": password})
        expect(r, 201)
        if approve and r.json.get("status") != "approved":
            self.approve(username)
        return r.json

    def login(self, username, password="a long password"):
        r = self.api.post("/api/accounts/login", {"username": username, "password": password})
        return expect(r, 200)["token"]

    def new_key(self, token, label="test"):
        r = self.api.post("/api/keys", {"label": label}, token=token)
        return expect(r, 201)["key"]

    def account(self, username):
        """Signs up (and approves) an account and returns (token, key)."""
        self.sign_up(username)
        token = self.login(username)
        return token, self.new_key(token)

    def volunteer_token(self):
        """The join token `mpakt serve --dev --cluster-port` makes at start and prints."""
        m = re.search(r"mpakt worker --join \S+ --coordinator-fingerprint [0-9a-f]{64} --token (mpv_\S+)", self.process.output())
        assert m, f"no volunteer token in the output of mpakt serve:\n{self.process.output()[-2000:]}"
        return m.group(1)

    def coordinator_fingerprint(self):
        """The SHA-256 fingerprint of the cluster port's certificate, as the banner prints it."""
        m = re.search(r"mpakt worker --join \S+ --coordinator-fingerprint ([0-9a-f]{64})", self.process.output())
        assert m, f"no cluster fingerprint in the output of mpakt serve:\n{self.process.output()[-2000:]}"
        return m.group(1)

    def link_args(self):
        """What a volunteer of this coordinator is told to trust."""
        return ["--coordinator-fingerprint", self.coordinator_fingerprint()]

    def assert_up(self):
        assert self.process.alive(), f"mpakt serve on port {self.port} died:\n{self.process.output()[-3000:]}"
        r = self.api.get("/api/versions", timeout=10)
        assert r.status == 200, f"/api/versions after the test: {r!r}"
        # an actor that died of an exception leaves the process up but its requests unanswered
        out = self.process.output()
        assert "unhandled exception" not in out, f"an actor of mpakt serve died:\n{out[-3000:]}"


def kill_window(api, key, prefilled, decode, expected, runs=3):
    """How long an undisturbed decode takes, for kill tests whose kills must land inside one:
    0.9 of the shortest of `runs` decodes (each on a fresh session from `prefilled()`, giving
    `expected`), so one slow run (the machine busy for a moment) does not stretch the window
    past the decodes the kills are meant to land in."""
    took = []
    for _ in range(runs):
        sid = prefilled()
        t0 = time.monotonic()
        assert decode(sid) == expected
        took.append(time.monotonic() - t0)
        expect(api.delete(f"/api/v3/sessions/{sid}", key=key), 200)
    return min(took) * 0.9


# --------------------------------------------------------------------------- safetensors


_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
                "F8_E4M3": 1, "F8_E5M2": 1}


def write_safetensors(path, tensors, metadata=None):
    """tensors: name -> (dtype, shape, raw bytes). Writes a valid safetensors file."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        n = 1
        for d in shape:
            n *= d
        assert len(raw) == n * _DTYPE_BYTES[dtype], name
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors_index(path):
    """(header dict without __metadata__, data bytes, file bytes) of a safetensors file."""
    raw = Path(path).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    return header, raw[8 + n :], raw


def import_client():
    if str(CLIENTS_DIR) not in sys.path:
        sys.path.insert(0, str(CLIENTS_DIR))
    import mpakt_grid

    return mpakt_grid
