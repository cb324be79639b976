"""A worker busy with a long graph (issue: hardening, the stall defects).

- A graph past --graph-timeout-ms is stopped on its worker: the 504 names the limit and says
  how far the graph got, the session is exactly as before the call (caches, retained values,
  step count), and the worker is free at once for another key's call.
- A client that disconnects mid-graph stops it too, with the same guarantees.
- While a worker computes, /api/v3/status and /api/versions answer at once and list it as busy
  (since when, which graph), and a load that fits is accepted and completes meanwhile; a
  volunteer computing longer than the middleman's five-second heartbeat window stays in the pool.
- Two concurrent loads that together exceed the capacity: exactly one is refused at the
  capacity check with the spec's wording, and nothing is half-loaded.

Every process is real. Timings are generous bounds against the long graph's own duration
(estimated from how many of its steps ran before it was stopped), never tight figures.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from e2e_util import PROMPT_S, WORK_S, Api, expect

# A matmul of two [64, K] zero matrices (transB) per step: milliseconds each (about 3 ms on a
# 2-vCPU Xeon's blocked product), and a graph of STEPS of them runs for a minute or more
# unless stopped. Zeros keep the JSON tiny.
K = 65536
STEPS = 20000


def long_graph(session=None, cache=None, retain=None, steps=STEPS):
    """Writes row 0 of the session's cache `cache` in place first (when given), then computes
    for minutes; retains `retain` (when given) at the end."""
    inputs, st = [], []
    if cache:
        inputs = [{"name": "c", "session": cache}, {"name": "row", "shape": [1, 4], "data": [-1, -2, -3, -4]}]
        st.append({"op": "cache_write", "in": ["c", "row"], "out": "c2", "params": {"offset": 0}})
    st += [{"op": "zeros", "in": [], "out": "a", "params": {"shape": [64, K]}},
           {"op": "zeros", "in": [], "out": "b", "params": {"shape": [64, K]}}]
    st += [{"op": "matmul", "in": ["a", "b"], "out": f"m{i}", "params": {"transB": True}} for i in range(steps)]
    g = {"inputs": inputs, "steps": st, "outputs": [f"m{steps - 1}"]}
    if session:
        g["session"] = session
    if retain:
        g["retain"] = {retain: f"m{steps - 1}"}
    return g


def small_graph():
    return {"inputs": [{"name": "x", "shape": [2], "data": [1, 2]}], "steps": [{"op": "add", "in": ["x", "x"], "out": "y"}],
            "outputs": ["y"]}


def new_session(api, key):
    return expect(api.post("/api/v3/sessions", {}, key=key), 200)["session"]["sessionId"]


def prepare_cache(api, key, sid):
    """kc = [[0..3], [4..7], [8..11], [12..15]] in the session, written by two calls."""
    g = {"session": sid, "inputs": [{"name": "v", "shape": [4, 4], "data": list(range(16))}],
         "steps": [{"op": "zeros", "in": [], "out": "z", "params": {"shape": [4, 4]}},
                   {"op": "cache_write", "in": ["z", "v"], "out": "kc", "params": {"offset": 0}}],
         "outputs": [], "retain": {"kc": "kc"}}
    expect(api.post("/api/v3/graph", {"graph": g}, key=key, timeout=WORK_S), 200)


def session_state(api, key, sid):
    """(tensor names, steps, kc's values): the session's info, then a graph that outputs the
    cache. That read counts a step itself, so `steps` is given as it was before the read: two
    calls of this with nothing in between answer the same."""
    info = expect(api.get("/api/v3/sessions/" + sid, key=key), 200)
    g = {"session": sid, "inputs": [{"name": "c", "session": "kc"}], "steps": [{"op": "add", "in": ["c", "c"], "out": "d"}],
         "outputs": ["c"]}
    out = expect(api.post("/api/v3/graph", {"graph": g}, key=key, timeout=WORK_S), 200)["outputs"]["c"]["data"]
    after = expect(api.get("/api/v3/sessions/" + sid, key=key), 200)["steps"]
    assert after == info["steps"] + 1
    return sorted(t["name"] for t in info["tensors"]), info["steps"] - read_steps(sid), out


_reads = {}


def read_steps(sid):
    """How many reads session_state made of this session before (each counted a step)."""
    n = _reads.get(sid, 0)
    _reads[sid] = n + 1
    return n


def local_worker(status):
    assert status["workers"] >= 1, status
    return status["pool"][0]


def wait_busy(api, key, deadline_s=WORK_S):
    """Polls /api/v3/status until a worker is busy; returns that status (each poll must answer
    at once)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        t0 = time.monotonic()
        st = expect(api.get("/api/v3/status", key=key, timeout=PROMPT_S * 5), 200)
        assert time.monotonic() - t0 < PROMPT_S * 5
        busy = [w for w in st["pool"] if w.get("busy")]
        if busy:
            return st
        time.sleep(0.05)
    pytest.fail("no worker became busy")


class Call(threading.Thread):
    """One HTTP call on its own thread, timed."""

    def __init__(self, api, method, path, body, key, timeout):
        super().__init__(daemon=True)
        self.args = (method, path, body, key, timeout)
        self.api = api
        self.reply = None
        self.elapsed = None

    def run(self):
        method, path, body, key, timeout = self.args
        t0 = time.monotonic()
        self.reply = self.api.call(method, path, body, key=key, timeout=timeout)
        self.elapsed = time.monotonic() - t0


def stopped_steps(message):
    """'... stopped after N of M steps ...' -> (N, M)."""
    import re

    m = re.search(r"stopped after (\d+) of (\d+) steps", message)
    assert m, message
    return int(m.group(1)), int(m.group(2))


# --------------------------------------------------------------------------- a limit that stops


LIMIT_MS = 3000


@pytest.fixture(scope="module")
def limited(start_server):
    """A coordinator whose graphs may run 3 s, with one embedded worker."""
    server = start_server("--dev", "--graph-timeout-ms", str(LIMIT_MS))
    yield server
    server.assert_up()


def test_a_graph_past_the_limit_is_stopped_applies_nothing_and_frees_the_worker(limited):
    api = Api(limited.port, timeout=WORK_S)
    _, key = limited.account("stopper")
    _, other = limited.account("bystander")
    sid = new_session(api, key)
    prepare_cache(api, key, sid)
    names_before, steps_before, kc_before = session_state(api, key, sid)
    assert names_before == ["kc"] and kc_before[:4] == [0, 1, 2, 3]

    t0 = time.monotonic()
    long = Call(api, "POST", "/api/v3/graph", {"graph": long_graph(sid, "kc", "extra")}, key, WORK_S + LIMIT_MS / 1000)
    long.start()
    st = wait_busy(api, key)
    busy = local_worker(st)["busy"]
    assert busy["graph"] == "inline" and busy["session"] == sid and busy["steps"] == STEPS + 3
    long.join()
    reply = long.reply
    err = expect(reply, 504, "--graph-timeout-ms", f"{LIMIT_MS} ms", "stopped after", "nothing it wrote was kept")["error"]
    done, total = stopped_steps(err)
    assert total == STEPS + 3 and done < total
    # Another key's call right after: the worker is free at once.
    t1 = time.monotonic()
    expect(api.post("/api/v3/graph", {"graph": small_graph()}, key=other, timeout=WORK_S), 200)
    small_s = time.monotonic() - t1
    # What the whole graph would have taken, from how far it got in its limit.
    whole_s = long.elapsed * total / max(done, 1)
    assert whole_s > 10 * LIMIT_MS / 1000, f"the long graph is not long ({whole_s:.1f} s)"
    assert long.elapsed + small_s < whole_s / 4, (long.elapsed, small_s, whole_s)
    assert long.elapsed < LIMIT_MS / 1000 + 30, "the 504 came long after the limit"
    # The session is exactly as before the stopped call: no cache row, no retained value, no step.
    assert session_state(api, key, sid) == (names_before, steps_before, kc_before)
    assert time.monotonic() - t0 < whole_s / 2
    assert local_worker(expect(api.get("/api/v3/status", key=key), 200))["busy"] is None


def test_a_call_waiting_behind_a_long_graph_waits_at_most_its_limit(limited):
    api = Api(limited.port, timeout=WORK_S)
    _, key = limited.account("waiter")
    long = Call(api, "POST", "/api/v3/graph", {"graph": long_graph()}, key, WORK_S)
    long.start()
    wait_busy(api, key)
    # Sent while the long graph runs: it either runs once the long graph is stopped, or is
    # answered with a 504 saying it never ran — never after the long graph's full duration.
    waiting = Call(api, "POST", "/api/v3/graph", {"graph": small_graph()}, key, WORK_S)
    waiting.start()
    long.join()
    waiting.join()
    err = expect(long.reply, 504, "--graph-timeout-ms")["error"]
    done, total = stopped_steps(err)
    whole_s = long.elapsed * total / max(done, 1)
    assert waiting.elapsed < whole_s / 4, (waiting.elapsed, whole_s)
    if waiting.reply.status != 200:
        expect(waiting.reply, 504, "was not run", "--graph-timeout-ms", "nothing was applied")


# --------------------------------------------------------------------------- a client that leaves


@pytest.fixture(scope="module")
def patient(start_server, host_url):
    """A coordinator whose graphs may run a minute, with one embedded worker."""
    server = start_server("--dev", "--graph-timeout-ms", "60000")
    yield server
    server.assert_up()


def send_and_leave(port, key, body):
    """Sends a graph call on a raw socket and returns the socket (closing it leaves)."""
    payload = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /api/v3/graph HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nx-api-key: " + key.encode() +
              b"\r\nContent-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    return s


def test_a_client_that_disconnects_stops_its_graph(patient):
    api = Api(patient.port, timeout=WORK_S)
    _, key = patient.account("leaver")
    _, other = patient.account("stayer")
    sid = new_session(api, key)
    prepare_cache(api, key, sid)
    before = session_state(api, key, sid)
    s = send_and_leave(patient.port, key, {"graph": long_graph(sid, "kc", "extra")})
    st = wait_busy(api, key)
    assert local_worker(st)["busy"]["session"] == sid
    time.sleep(0.5)
    t0 = time.monotonic()
    s.close()
    # The next call is prompt: far less than the minute the graph was allowed.
    expect(api.post("/api/v3/graph", {"graph": small_graph()}, key=other, timeout=WORK_S), 200)
    assert time.monotonic() - t0 < 20
    assert local_worker(expect(api.get("/api/v3/status", key=key), 200))["busy"] is None
    assert session_state(api, key, sid) == before


def test_deleting_a_session_or_graph_answers_its_calls_in_flight(patient):
    """A call running in a session (or on a compiled graph) that is deleted meanwhile is
    answered at once — 404, saying so — not left waiting for the graph limit."""
    api = Api(patient.port, timeout=WORK_S)
    _, key = patient.account("deleter")
    def delete_during(body, path, what):
        long = Call(api, "POST", "/api/v3/graph", body, key, WORK_S)
        long.start()
        wait_busy(api, key)
        t0 = time.monotonic()
        expect(api.delete(path, key=key, timeout=WORK_S), 200)
        long.join()
        expect(long.reply, 404, f"{what} was deleted during this call")
        assert time.monotonic() - t0 < 20, "the call waited for the graph limit"

    sid = new_session(api, key)
    delete_during({"graph": long_graph(sid)}, f"/api/v3/sessions/{sid}", f"session {sid}")
    expect(api.get(f"/api/v3/sessions/{sid}", key=key), 404)
    gid = expect(api.post("/api/v3/graphs", {"graph": long_graph()}, key=key), 200)["graphId"]
    delete_during({"graphId": gid}, f"/api/v3/graphs/{gid}", f"graph {gid}")
    # the worker is not left running them for the rest of the minute: another call gets through
    t0 = time.monotonic()
    expect(api.post("/api/v3/graph", {"graph": small_graph()}, key=key, timeout=WORK_S), 200)
    assert time.monotonic() - t0 < 70


def test_a_busy_worker_answers_status_and_takes_a_load(patient):
    api = Api(patient.port, timeout=WORK_S)
    _, key = patient.account("watcher")
    s = send_and_leave(patient.port, key, {"graph": long_graph()})
    try:
        wait_busy(api, key)
        # status and versions answer at once, listing the worker as busy
        t0 = time.monotonic()
        st = expect(api.get("/api/v3/status", key=key, timeout=PROMPT_S * 5), 200)
        assert time.monotonic() - t0 < PROMPT_S
        assert st["workers"] == 1
        w = local_worker(st)
        busy = w["busy"]
        assert busy["graph"] == "inline" and busy["steps"] == STEPS + 2 and 0 <= busy["stepsDone"] <= busy["steps"]
        assert busy["since"].endswith("Z") and busy["forMs"] >= 0 and busy["compiling"] is False
        t0 = time.monotonic()
        v = expect(api.get("/api/versions", timeout=PROMPT_S * 5), 200)
        assert time.monotonic() - t0 < PROMPT_S
        assert v["limits"]["workers"] == 1
        # a load that fits is accepted, and its tensors arrive while the graph runs
        r = api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=key, timeout=WORK_S)
        body = expect(r, 200)
        assert body["residentBytes"] > 0
        still = local_worker(expect(api.get("/api/v3/status", key=key), 200))
        assert still["busy"] is not None, "the load waited for the graph"
        assert still["freeBytes"] <= w["freeBytes"] - body["residentBytes"]
    finally:
        s.close()
    # the loaded model is usable once the graph is stopped
    end = time.monotonic() + WORK_S
    while local_worker(expect(api.get("/api/v3/status", key=key), 200))["busy"] and time.monotonic() < end:
        time.sleep(0.05)
    g = {"inputs": [{"name": "e", "model": body["modelId"], "weight": "model.embed_tokens.weight"}],
         "steps": [{"op": "reshape", "in": ["e"], "out": "r", "params": {"shape": [-1]}}], "outputs": []}
    expect(api.post("/api/v3/graph", {"graph": g}, key=key, timeout=WORK_S), 200)


# The big call of the test below, in a process of its own: its client work (encoding, reading
# and checking 213 MB) must not hold the probing thread's interpreter lock.
BIG_CALL = r"""
import base64, http.client, json, struct, sys, time
port, key, n, mode = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
if mode == "parse":  # n values in as JSON numbers, their sum out
    raw = (b'{"graph": {"inputs": [{"name": "x", "shape": [' + str(n).encode() + b'], "data": [' +
           b",".join([b"1.25"] * n) + b']}], "steps": [{"op": "reduce_sum", "in": ["x"], "out": "s"}], "outputs": ["s"]}}')
else:  # n values in as base64, twice them out as base64 ("base64") or JSON numbers ("render")
    body = {"graph": {"inputs": [{"name": "x", "shape": [n], "dataB64": "@"}],
                      "steps": [{"op": "scale", "in": ["x"], "out": "y", "params": {"factor": 2.0}}], "outputs": ["y"]}}
    if mode == "base64":
        body["encoding"] = "base64"
    raw = json.dumps(body).encode().replace(b'"@"', b'"' + base64.b64encode(struct.pack("<f", 1.25) * n) + b'"')
print("sending", flush=True)
t0 = time.monotonic()
c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
c.request("POST", "/api/v3/graph", body=raw, headers={"x-api-key": key, "content-type": "application/json"})
r = c.getresponse()
body = r.read()
elapsed = time.monotonic() - t0
ok = False
if r.status == 200 and mode == "parse":
    s = json.loads(body)["outputs"]["s"]["data"][0]
    ok = abs(s - 1.25 * n) <= 1e-4 * n
elif r.status == 200 and mode == "base64":
    y = json.loads(body)["outputs"]["y"]
    v = base64.b64decode(y["dataB64"])
    ok = y["shape"] == [n] and len(v) == 4 * n and v[:8] == struct.pack("<f", 2.5) * 2 and v[-4:] == struct.pack("<f", 2.5)
elif r.status == 200:  # (32 M numbers: checked as text, not parsed into Python floats)
    head = b'{"outputs":{"y":{"shape":[' + str(n).encode() + b'],"data":[2.5,2.5,'
    ok = body.startswith(head) and body.endswith(b',2.5]}},"steps":1}') and body.count(b",") == n + 1
print(json.dumps({"status": r.status, "ok": ok, "elapsed": elapsed, "head": body[:300].decode("utf-8", "replace")}))
"""


def during_big_call(server, key, n, mode, probe):
    """Runs BIG_CALL (in a process of its own, so its parsing holds no lock of ours) and
    `probe()` over and over until it ends; its report (checked to be right) and each probe's
    time."""
    big = subprocess.Popen([sys.executable, "-c", BIG_CALL, str(server.port), key, str(n), mode], stdout=subprocess.PIPE,
                           text=True)
    try:
        assert big.stdout.readline().strip() == "sending"
        waits = []
        while big.poll() is None:
            t0 = time.monotonic()
            probe()
            waits.append(time.monotonic() - t0)
            time.sleep(0.02)
        out = json.loads(big.stdout.read())
    finally:
        big.kill()
    assert out["status"] == 200 and out["ok"], out
    return out, waits


def probe_durations(server, offset):
    """Seconds the server took over each GET of /api/v3/status or a session that it logged after
    byte `offset` of its log (one JSON object per line)."""
    with open(server.process.log_path, "rb") as f:
        f.seek(offset)
        lines = f.read().decode("utf-8", "replace").splitlines()
    out = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("method") == "GET" and entry.get("route") in ("/api/v3/status", "/api/v3/sessions/:sessionId"):
            out.append(float(entry["duration_ms"]) / 1000)
    return out


def test_a_large_graph_body_holds_up_no_one(patient):
    """A graph call of about 213 MB (40 M values as base64 in, and out again) is decoded, and its
    answer rendered, at the edge on a thread of its own; the coordinator only routes the typed
    call. Meanwhile /api/v3/status and another key's calls to the coordinator answer at once.
    (The coordinator used to parse and copy such a body on its one thread: status went
    unanswered for 3.8 s with a 179 MB body.)"""
    api = Api(patient.port, timeout=WORK_S)
    _, key = patient.account("bulk")
    _, other = patient.account("bystander2")
    n = 40 * 1024 * 1024
    def probe():
        expect(api.get("/api/v3/status", key=other, timeout=WORK_S), 200)
        expect(api.get("/api/v3/sessions/s_000000000000000000000000", key=other, timeout=WORK_S), 404)

    logged_from = patient.process.log_size()
    out, waits = during_big_call(patient, key, n, "base64", probe)
    assert len(waits) >= 5, f"the big call took {out['elapsed']:.1f} s; only {len(waits)} probes ran meanwhile"
    # The server's own time for each probe (its request log: from the request read to the answer
    # sent) is what a coordinator busy with the body would lengthen; the client's wall time also
    # holds the machine's scheduling of this test's processes, so it is bounded more loosely.
    served = probe_durations(patient, logged_from)
    assert len(served) >= 2 * len(waits) - 2, (len(served), len(waits))
    assert max(served) < PROMPT_S, f"the server took {max(served):.2f} s over a status or session lookup during the big call"
    assert max(waits) < 3 * PROMPT_S, f"a status + session lookup waited {max(waits):.2f} s during the big call ({out['elapsed']:.1f} s)"


def test_restoring_a_big_checkpoint_holds_up_no_one(patient):
    """A session holding 400 MB is checkpointed and restored twice (CKP). The coordinator keeps
    the checkpoint and sends the worker a copy of it: that copy is made on a helper thread, so
    /api/v3/status, which the coordinator answers on its one scheduler thread, is answered at
    once meanwhile. (Made on that thread, it held every status for 0.7 s here.)"""
    api = Api(patient.port, timeout=WORK_S)
    _, key = patient.account("restorer")
    _, other = patient.account("bystander4")
    sid = new_session(api, key)
    n = 100 * 1024 * 1024
    g = {"session": sid, "inputs": [], "steps": [{"op": "zeros", "in": [], "out": "z", "params": {"shape": [n]}}],
         "outputs": [], "retain": {"big": "z"}}
    expect(api.post("/api/v3/graph", {"graph": g}, key=key, timeout=WORK_S), 200)
    assert expect(api.post(f"/api/v3/sessions/{sid}/checkpoint", {}, key=key, timeout=WORK_S), 200)["bytes"] == 4 * n
    logged_from = patient.process.log_size()
    stop = threading.Event()
    probes = []

    def probe():
        mine = Api(patient.port, timeout=WORK_S)
        while not stop.is_set():
            expect(mine.get("/api/v3/status", key=other, timeout=WORK_S), 200)
            probes.append(1)
            time.sleep(0.01)

    t = threading.Thread(target=probe)
    t.start()
    try:
        for _ in range(2):
            done = expect(api.post(f"/api/v3/sessions/{sid}/restore", {}, key=key, timeout=WORK_S), 200)
            assert done["bytes"] == 4 * n and done["tensors"] == 1, done
    finally:
        stop.set()
        t.join()
    served = probe_durations(patient, logged_from)
    assert served and max(served) < PROMPT_S / 4, f"the server took {max(served or [0]):.2f} s over a status call during a restore"
    assert len(served) >= 5, f"only {len(served)} status calls ran during the restores (they waited {sum(served):.2f} s)"
    expect(api.delete(f"/api/v3/sessions/{sid}", key=key), 200)


def test_a_checkpointed_sessions_journal_stays_within_the_keys_durable_budget(start_server):
    """The calls on a checkpointed session are kept for replay after a lost worker (its journal);
    with the key's checkpoints they count against its durable budget (`--durable-budget`). A
    call that would pass it is not kept (nor copied): the journal is marked unreplayable,
    which a restore after a loss reports (decisions.md, Journal). Without the bound, a key
    could make the coordinator hold 4,096 big bodies per session."""
    server = start_server("--dev", "--durable-budget", "1M")
    api = Api(server.port, timeout=WORK_S)
    _, key = server.account("journaler")
    _, op_key = server.account("journal-operator")
    r = server.admin("grant-admin", "journal-operator")
    assert r.returncode == 0, r.stdout + r.stderr
    sid = new_session(api, key)
    prepare_cache(api, key, sid)
    expect(api.post(f"/api/v3/sessions/{sid}/checkpoint", {}, key=key), 200)

    def journal():
        actors = expect(api.get("/api/v3/admin/actors", key=op_key), 200)["actors"]
        return next(a["state"] for a in actors if a["kind"] == "session" and a["id"] == sid)

    def call(values):  # an inline graph of that many values, its output not kept
        g = {"session": sid, "inputs": [{"name": "v", "shape": [values], "data": [1.5] * values}],
             "steps": [{"op": "add", "in": ["v", "v"], "out": "w"}], "outputs": []}
        expect(api.post("/api/v3/graph", {"graph": g}, key=key, timeout=WORK_S), 200)

    call(16)
    small = journal()
    assert small["journalCalls"] == 1 and small["journalBytes"] > 0 and "journalBroken" not in small, small
    call(100_000)  # about 400 KB of text: kept
    kept = journal()
    assert kept["journalCalls"] == 2 and kept["journalBytes"] > 400_000, kept
    call(200_000)  # about 800 KB more: past the 1 MB budget
    over = journal()
    assert over["journalCalls"] == 2 and over["journalBytes"] == kept["journalBytes"], over
    assert "durable budget" in over["journalBroken"], over
    # a new checkpoint starts a new journal
    expect(api.post(f"/api/v3/sessions/{sid}/checkpoint", {}, key=key), 200)
    call(16)
    fresh = journal()
    assert fresh["journalCalls"] == 1 and "journalBroken" not in fresh, fresh
    server.assert_up()


@pytest.mark.parametrize("mode", ["parse", "render"])
def test_a_big_inline_graph_is_parsed_and_answered_off_the_workers_compute_thread(patient, mode):
    """A graph call of 32 M values, written as JSON numbers in the body ("parse", about 160 MB,
    parsed at the edge for routing and on the worker for its values) or in the answer
    ("render", about 130 MB). The worker parses the graph on a helper thread its front starts,
    and writes a big answer on a helper thread too, so its compute thread goes on serving other
    sessions' graph calls meanwhile. (Both used to happen on the compute thread: the same
    worker's other calls waited them out.)"""
    api = Api(patient.port, timeout=WORK_S)
    _, key = patient.account("bulkjson" + mode)
    _, other = patient.account("bystander3" + mode)
    n = 32 * 1024 * 1024
    out, waits = during_big_call(
        patient, key, n, mode, lambda: expect(api.post("/api/v3/graph", {"graph": small_graph()}, key=other, timeout=WORK_S), 200))
    assert len(waits) >= 5, f"the big call took {out['elapsed']:.1f} s; only {len(waits)} probes ran meanwhile"
    print(f"{mode}: big call {out['elapsed']:.1f} s, {len(waits)} small calls, longest {max(waits):.2f} s")
    # (the worker's parse or rendering alone is a third or more of the call: no small call may wait it out)
    assert max(waits) < min(PROMPT_S, out["elapsed"] / 4), \
        f"a small graph call waited {max(waits):.2f} s on the worker during the big call ({out['elapsed']:.1f} s)"


# --------------------------------------------------------------------------- concurrent loads


def test_two_loads_that_do_not_fit_together_one_is_refused_at_the_capacity_check(start_server, slow_model):
    # local/slow is about 77 MB resident: one fits in 120 MB, two do not.
    server = start_server("--dev", "--worker-memory", "120M")
    api = Api(server.port, timeout=WORK_S)
    _, key_a = server.account("loader_a")
    _, key_b = server.account("loader_b")
    total = expect(api.get("/api/v3/status", key=key_a), 200)["freeBytes"]
    loads = [Call(api, "POST", "/api/v3/models", {"source": "hf:local/slow"}, k, WORK_S * 2) for k in (key_a, key_b)]
    for c in loads:
        c.start()
    for c in loads:
        c.join()
    statuses = sorted(c.reply.status for c in loads)
    assert statuses == [200, 503], [c.reply for c in loads]
    ok = next(c.reply.json for c in loads if c.reply.status == 200)
    refused = next(c.reply for c in loads if c.reply.status == 503)
    expect(refused, 503, "model needs", "MB is free across 1 worker(s)", "load fewer layers or wait for more volunteers")
    # nothing half-loaded: the pool holds exactly the one model
    st = expect(api.get("/api/v3/status", key=key_a), 200)
    assert st["freeBytes"] == total - ok["residentBytes"]
    mine = [expect(api.get("/api/v3/models", key=k), 200)["models"] for k in (key_a, key_b)]
    assert sorted(len(m) for m in mine) == [0, 1]
    server.assert_up()


# --------------------------------------------------------------------------- a busy volunteer


def test_a_volunteer_computing_past_the_heartbeat_window_stays_in_the_pool(start_server, tmp_path_factory):
    from test_cluster import start_cluster

    cluster = start_cluster(start_server, tmp_path_factory, "busyvolunteer")
    try:
        cluster.join("w_busy", "1G")
        api = Api(cluster.server.port, timeout=WORK_S)
        s = send_and_leave(cluster.server.port, cluster.key, {"graph": long_graph()})
        try:
            wait_busy(api, cluster.key)
            # Longer than the middleman's five seconds without heartbeats: still there, busy.
            time.sleep(6.5)
            t0 = time.monotonic()
            st = cluster.status(cluster.key)
            assert time.monotonic() - t0 < PROMPT_S
            assert st["workers"] == 1, st
            w = st["pool"][0]
            assert w["workerId"] == "w_busy" and w["busy"]["graph"] == "inline" and w["busy"]["forMs"] >= 6000
        finally:
            s.close()
        # the volunteer is free again once its client has gone
        cluster.wait_for(lambda st: st["pool"] and st["pool"][0]["busy"] is None, "the volunteer to be idle", timeout=20)
        expect(api.post("/api/v3/graph", {"graph": small_graph()}, key=cluster.key, timeout=WORK_S), 200)
    finally:
        cluster.stop_all()
