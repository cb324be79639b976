"""The operator's console (docs/api-reference.md, GET /api/v3/admin/actors and its stream;
docs/protocol.md, "Describing the grid"), through real processes: a coordinator with two
volunteers, a model, a session and a generation running on it. The picture lists every
long-lived actor, linked into a graph, and agrees with GET /api/v3/status; only an operator's
key reads it; the stream sends a snapshot within 2 s, generation events as they happen, and a
volunteer killed with SIGKILL as `lost`, then `recovered` once its model was placed again."""
from __future__ import annotations

import http.client
import json
import signal
import socket
import threading
import time

import pytest

from e2e_util import expect
from test_cluster import GOLDEN, Cluster, graph_cli, holder, start_cluster

CACHE = 128
# Every graph call on the volunteers waits this long first, so that a generation through the
# ordinary loop (one call per token) is still running when the picture is taken.
DELAY_MS = "40"


def operator_grid(start_server, tmp_path_factory, name):
    """A coordinator with two volunteers (each graph call delayed), an operator's key, stories260K
    on one volunteer, and a session with the first tokens of the prompt fed through a compiled
    greedy graph. (Also test_top.py's.)"""
    c = start_cluster(start_server, tmp_path_factory, name)
    server, api, key = c.server, c.server.api, c.key
    _, op_key = server.account("console-operator")
    r = server.admin("grant-admin", "console-operator")
    assert r.returncode == 0, r.stdout + r.stderr
    c.join("w_a", "1G", "--delay-ms", DELAY_MS)
    c.join("w_b", "1G", "--delay-ms", DELAY_MS)
    before = c.status(key)
    model = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=key, timeout=60), 200)["modelId"]
    on = holder(c.status(key), before)
    sid = expect(api.post("/api/v3/sessions", {"modelId": model, "label": "console"}, key=key), 200)["session"]["sessionId"]
    expect(api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", str(CACHE)), session=sid)}, key=key), 200)
    greedy = expect(api.post("/api/v3/graphs", {"label": "greedy", "graph": graph_cli(
        "--model-id", model, "--compiled", "--tokens", "1", "--cache", str(CACHE), "--argmax")}, key=key), 200)["graphId"]
    prompt = GOLDEN["prompt_ids"][:4]
    for pos, tok in enumerate(prompt[:-1]):
        expect(api.post("/api/v3/graph", {"graphId": greedy, "session": sid, "bind": {"ids": [tok], "pos": pos}}, key=key),
               200)
    return {"cluster": c, "api": api, "key": key, "op_key": op_key, "model": model, "holder": on, "session": sid,
            "graph": greedy, "prompt": prompt, "url": f"http://127.0.0.1:{server.port}"}


@pytest.fixture(scope="module")
def grid(start_server, tmp_path_factory):
    g = operator_grid(start_server, tmp_path_factory, "console")
    yield g
    g["cluster"].stop_all()
    g["cluster"].server.process.terminate()


def picture(grid):
    reply = grid["api"].get("/api/v3/admin/actors", key=grid["op_key"])
    body = expect(reply, 200)
    return body, {(a["kind"], a["id"]): a for a in body["actors"]}


def test_only_an_operator_reads_the_picture(grid):
    api = grid["api"]
    for path in ("/api/v3/admin/actors", "/api/v3/admin/actors/stream"):
        expect(api.get(path), 401, "x-api-key")
        expect(api.get(path, key=grid["key"]), 403, "operator")
        expect(api.get(path + "?since=3", key=grid["op_key"]), 400, "takes no query parameters", "since")
        expect(api.post(path, {}, key=grid["op_key"]), 400, "method POST", "GET")


def test_the_picture_lists_every_actor_linked_and_agrees_with_status(grid):
    api, key = grid["api"], grid["key"]
    body, actors = picture(grid)
    status = expect(api.get("/api/v3/status", key=key), 200)
    assert body["atMs"] > 0 and body["at"].endswith("Z")
    for k in [("coordinator", "coordinator"), ("pool", "pool"), ("accounts", "accounts"), ("worker", "w_a"),
              ("worker", "w_b"), ("model", grid["model"]), ("session", grid["session"]), ("graph", grid["graph"])]:
        assert k in actors, (k, sorted(actors))
        assert actors[k]["answered"], actors[k]
        assert actors[k]["messages"] >= 1, actors[k]
    # a closed graph: every link names an actor in the picture
    for a in body["actors"]:
        for link in a["links"]:
            kind, _, ident = link.partition(":")
            assert (kind, ident) in actors, (a["kind"], a["id"], link)
    coord = actors[("coordinator", "coordinator")]
    assert {"pool:pool", "worker:w_a", "worker:w_b"} <= set(coord["links"])
    assert coord["state"]["models"] == 1 and coord["state"]["sessions"] == 1 and coord["state"]["graphs"] == 1
    pool = actors[("pool", "pool")]
    assert set(pool["links"]) == {"worker:w_a", "worker:w_b"}
    for w in ("w_a", "w_b"):  # probed at least once, at most one probe period (5 s) and a call ago
        assert 0 < pool["state"][f"measuredMs.{w}"] and 0 <= pool["state"][f"lastAnswerAgoMs.{w}"] < 6000, pool
        # and each worker's own snapshot carries that age as its heartbeat
        assert actors[("worker", w)]["state"]["heartbeatAgeMs"] == pool["state"][f"lastAnswerAgoMs.{w}"]
    # the same workers, with the same memory, as GET /api/v3/status
    workers = {i: a for (k, i), a in actors.items() if k == "worker"}
    assert set(workers) == {w["workerId"] for w in status["pool"]}
    for w in status["pool"]:
        st = workers[w["workerId"]]["state"]
        assert st["freeBytes"] == w["freeBytes"] and st["totalBytes"] == w["totalBytes"], (st, w)
        assert st["backend"] == w["backend"] and st["kernels"] == w["kernels"]
        assert st["residentBytes"] + st["freeBytes"] <= st["totalBytes"]
    on, sid, model = grid["holder"], grid["session"], grid["model"]
    assert workers[on]["state"]["residentBytes"] > 0
    assert {f"model:{model}", f"session:{sid}"} <= set(workers[on]["links"])
    other = "w_b" if on == "w_a" else "w_a"
    assert workers[other]["state"]["residentBytes"] == 0 and workers[other]["links"] == []
    # the model where the status says it is; the session on that worker, with its step count
    assert model in next(w for w in status["pool"] if w["workerId"] == on)["models"]
    m = actors[("model", model)]
    assert m["state"]["placement"] == on and f"worker:{on}" in m["links"]
    assert m["state"]["source"] == "hf:local/stories260K" and m["state"]["residentBytes"] > 0
    s = actors[("session", sid)]
    assert {f"worker:{on}", f"model:{model}"} <= set(s["links"])
    assert s["state"]["label"] == "console" and s["state"]["worker"] == on
    got = expect(api.get(f"/api/v3/sessions/{sid}", key=key), 200)
    assert s["state"]["steps"] == got["steps"] == 1 + len(grid["prompt"]) - 1
    g = actors[("graph", grid["graph"])]
    assert g["state"]["label"] == "greedy" and g["state"]["compiledOn"] == 1 and g["state"]["steps"] > 0
    assert g["state"]["bound"] == "ids, pos" and g["state"]["validatedOn"] == on
    assert f"model:{model}" in g["links"]


def test_a_running_generation_is_in_the_picture_with_its_rate(grid):
    api, key, prompt = grid["api"], grid["key"], grid["prompt"]
    n = 40
    conn = http.client.HTTPConnection("127.0.0.1", grid["cluster"].server.port, timeout=30)
    body = {"graphId": grid["graph"], "sessionId": grid["session"], "ids": [prompt[-1]], "startPos": len(prompt) - 1,
            "maxNewTokens": n, "workerLoop": False}
    conn.request("POST", "/api/v3/generate", json.dumps(body), {"x-api-key": key})
    resp = conn.getresponse()
    assert resp.status == 200
    events = sse_events(resp)
    assert next(events)[0] == "token"  # it is running
    _, actors = picture(grid)
    gens = [a for (k, _), a in actors.items() if k == "generation"]
    assert len(gens) == 1, gens
    gen = gens[0]
    assert gen["answered"], gen
    assert f"session:{grid['session']}" in gen["links"] and f"worker:{grid['holder']}" in gen["links"]
    assert f"graph:{grid['graph']}" in gen["links"]
    assert 1 <= gen["state"]["tokens"] < n and gen["state"]["maxNewTokens"] == n
    assert gen["state"]["tokensPerSecond"] > 0 and gen["state"]["workerLoop"] == 0
    assert actors[("coordinator", "coordinator")]["state"]["generations"] == 1
    rest = [e for e in events]
    assert rest[-1][0] == "done" and len([e for e in rest if e[0] == "token"]) == n - 1
    conn.close()
    _, after = picture(grid)
    assert not [a for (k, _), a in after.items() if k == "generation"]


def test_a_speculative_generation_shows_its_acceptance_while_it_runs(grid):
    """A speculative generation's snapshot counts the drafts proposed and accepted so far, as
    its passes report them (ISSUE 14: "tokens/s and acceptance of a generation"), and agrees
    with what the generation answers at its end."""
    api, key, model = grid["api"], grid["key"], grid["model"]
    golden, prompt = GOLDEN["greedy_ids"], GOLDEN["prompt_ids"]
    sid = expect(api.post("/api/v3/sessions", {"modelId": model, "label": "speculative"}, key=key), 200)["session"]["sessionId"]
    expect(api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", str(CACHE)), session=sid)}, key=key), 200)
    for pos, tok in enumerate(prompt[:-1]):
        expect(api.post("/api/v3/graph", {"graphId": grid["graph"], "session": sid, "bind": {"ids": [tok], "pos": pos}},
                        key=key), 200)
    verify = expect(api.post("/api/v3/graphs", {"label": "verify5", "graph": graph_cli(
        "--model-id", model, "--compiled", "--tokens", "5", "--cache", str(CACHE), "--argmax")}, key=key), 200)["graphId"]
    n = len(golden) - len(prompt)
    conn = http.client.HTTPConnection("127.0.0.1", grid["cluster"].server.port, timeout=60)
    # the ordinary loop: each pass is a delayed call on the volunteer, so the picture catches it
    body = {"graphId": grid["graph"], "sessionId": sid, "ids": [prompt[-1]], "startPos": len(prompt) - 1,
            "maxNewTokens": n, "workerLoop": False,
            "speculative": {"graphIds": [verify], "context": golden + prompt, "always": True}}
    conn.request("POST", "/api/v3/generate", json.dumps(body), {"x-api-key": key})
    resp = conn.getresponse()
    assert resp.status == 200
    events = sse_events(resp)
    assert next(events)[0] == "token"  # the first pass (a verify pass) has produced its tokens
    _, actors = picture(grid)
    gens = [a for (k, _), a in actors.items() if k == "generation"]
    assert len(gens) == 1, gens
    live = gens[0]["state"]
    assert live["speculative"] == 1 and live["tokens"] < n, live
    # the text repeats what the context holds: drafts are proposed and (greedy) accepted
    assert 4 <= live["drafted"] and 1 <= live["accepted"] <= live["drafted"], live
    assert live["acceptance"] == round(live["accepted"] / live["drafted"], 3), live
    rest = list(events)
    assert rest[-1][0] == "done", rest[-1]
    done = rest[-1][1]
    assert done["tokens"] == golden[len(prompt):], done
    spec = done["speculation"]
    assert live["drafted"] <= spec["drafted"] and live["accepted"] <= spec["accepted"], (live, spec)
    conn.close()
    expect(api.delete(f"/api/v3/sessions/{sid}", key=key), 200)


def test_errors_a_worker_sends_back_are_among_the_coordinators_last_errors(grid):
    """An error the coordinator answers only once the worker has replied (here the worker's
    validation of a product whose widths disagree) is kept in its snapshot like one it answers
    at once."""
    api, key, model = grid["api"], grid["key"], grid["model"]
    graph = {"inputs": [{"name": "x", "shape": [1, 3], "data": [1.0, 2.0, 3.0]},
                        {"name": "w", "model": model, "weight": "model.layers.0.self_attn.q_proj.weight"}],
             "steps": [{"op": "matmul", "in": ["x", "w"], "out": "y", "params": {"transB": True}}],
             "outputs": ["y"]}
    reply = expect(api.post("/api/v3/graph", {"graph": graph}, key=key), 400, "matmul")
    _, actors = picture(grid)
    errors = actors[("coordinator", "coordinator")]["errors"]
    assert reply["error"] in errors, (reply, errors)


def test_a_worker_that_cannot_answer_is_listed_without_waiting_for_it(grid):
    """A volunteer stopped (SIGSTOP) cannot answer: the picture comes all the same, within the
    describe timeout, listing it from what the coordinator knows, answered false."""
    c = grid["cluster"]
    other = "w_b" if grid["holder"] == "w_a" else "w_a"
    proc = c.workers[other].proc
    proc.send_signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        _, actors = picture(grid)
        took = time.monotonic() - t0
    finally:
        proc.send_signal(signal.SIGCONT)
    assert took < 4.0, took
    stuck = actors[("worker", other)]
    assert stuck["answered"] is False and stuck["errors"] == ["did not answer describe in time"], stuck
    assert "backend" not in stuck["state"]  # (nothing it did not say is made up)
    assert actors[("worker", grid["holder"])]["answered"] and actors[("coordinator", "coordinator")]["answered"]
    _, again = picture(grid)
    assert again[("worker", other)]["answered"]


def test_a_load_in_progress_is_described_with_its_progress(grid, slow_model):
    """A load job blocks on its model host while it loads; the coordinator describes it from the
    progress the job reports: seen while it runs, with numbers that only grow, gone after."""
    api, key = grid["api"], grid["key"]
    answer = {}

    def load():
        answer["reply"] = api.post("/api/v3/models", {"source": slow_model, "quantize": "q4"}, key=key, timeout=120)

    loader = threading.Thread(target=load)
    loader.start()
    seen = []
    while loader.is_alive():
        _, actors = picture(grid)
        seen += [a for (k, _), a in actors.items() if k == "load"]
        time.sleep(0.01)
    loader.join()
    model = expect(answer["reply"], 200)["modelId"]
    assert seen, "no picture caught the load in progress"
    assert {a["id"] for a in seen} == {model}
    last = None
    for a in seen:
        st = a["state"]
        assert a["answered"] and st["source"] == slow_model and st["recovery"] == 0 and st["phase"] in ("placing", "transferring")
        assert st["tensorsDone"] <= st["tensors"] and st["transferredBytes"] <= st["publishedBytes"]
        if last is not None:
            assert st["transferredBytes"] >= last["transferredBytes"] and st["tensorsDone"] >= last["tensorsDone"]
        last = st
    assert last["tensors"] == 1 + 1 + 6 * 9 and last["publishedBytes"] > 70_000_000
    _, after = picture(grid)
    assert not [a for (k, _), a in after.items() if k == "load"]
    assert after[("model", model)]["state"]["tensors"] == last["tensors"]
    expect(api.delete(f"/api/v3/models/{model}", key=key), 200)


def test_a_spread_model_is_described_through_its_pipeline(start_server, tmp_path_factory):
    """A model no single volunteer can hold is spread over two: its pipeline actor describes its
    parts, and the model and a session on it link to the pipeline, which links to both workers."""
    c = start_cluster(start_server, tmp_path_factory, "console-spread")
    try:
        api, key = c.server.api, c.key
        _, op_key = c.server.account("spread-operator")
        assert c.server.admin("grant-admin", "spread-operator").returncode == 0
        c.join("w_left", "1000K")
        c.join("w_right", "1000K")
        model = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=key, timeout=60), 200)["modelId"]
        sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
        expect(api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", "16"), session=sid)}, key=key), 200)
        body = expect(api.get("/api/v3/admin/actors", key=op_key), 200)
        actors = {(a["kind"], a["id"]): a for a in body["actors"]}
        pipe_id = f"pipeline of {model}"
        pipe = actors[("pipeline", pipe_id)]
        assert pipe["answered"] and pipe["state"]["parts"] == 2 and pipe["state"]["partsLost"] == 0
        assert set(pipe["links"]) == {f"model:{model}", "worker:w_left", "worker:w_right"}
        assert pipe["state"]["sessions"] == 1 and pipe["messages"] >= 2
        listed = next(m for m in expect(api.get("/api/v3/models", key=key), 200)["models"] if m["modelId"] == model)
        assert pipe["state"]["residentBytes"] == listed["residentBytes"]
        m = actors[("model", model)]
        assert f"pipeline:{pipe_id}" in m["links"] and {"worker:w_left", "worker:w_right"} <= set(m["links"])
        assert m["state"]["placement"].startswith("spread over ")
        sess = actors[("session", sid)]
        assert f"pipeline:{pipe_id}" in sess["links"] and sess["state"]["worker"] == pipe_id and sess["state"]["steps"] == 1
        for a in body["actors"]:
            for link in a["links"]:
                kind, _, ident = link.partition(":")
                assert (kind, ident) in actors, (a["kind"], a["id"], link)
    finally:
        c.stop_all()
        c.server.process.terminate()


def sse_events(resp):
    """Yields (event, data) from a text/event-stream response until it ends."""
    event = None
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.decode().rstrip("\r\n")
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            yield event, json.loads(line[6:])


def test_the_stream_sends_snapshots_and_the_grids_events(grid):
    c, api, key, prompt = grid["cluster"], grid["api"], grid["key"], grid["prompt"]
    conn = http.client.HTTPConnection("127.0.0.1", c.server.port, timeout=30)
    t0 = time.monotonic()
    conn.request("GET", "/api/v3/admin/actors/stream", headers={"x-api-key": grid["op_key"]})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/event-stream")
    got, stop = [], threading.Event()

    def read():
        try:
            for ev in sse_events(resp):
                got.append((time.monotonic(), ev))
                if stop.is_set():
                    return
        except (OSError, http.client.HTTPException, ValueError):
            return  # (the test closed the connection)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def wait_for(cond, what, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, ev in list(got):
                if cond(ev):
                    return at, ev
            time.sleep(0.05)
        pytest.fail(f"waited {timeout} s for {what}; got {[e for _, e in got]}")

    at, first = wait_for(lambda ev: ev[0] == "snapshot", "a first snapshot", 2.0)
    assert at - t0 < 2.0
    assert ("worker", "w_a") in {(a["kind"], a["id"]) for a in first[1]["actors"]}
    # a second one about a second later
    wait_for(lambda ev: ev[0] == "snapshot" and ev[1]["atMs"] >= first[1]["atMs"] + 900, "a second snapshot", 3.0)
    # a generation's start and end, as they happen
    body = {"graphId": grid["graph"], "sessionId": grid["session"], "ids": [prompt[-1]], "startPos": len(prompt) - 1,
            "maxNewTokens": 3, "stream": False}
    expect(api.post("/api/v3/generate", body, key=key, timeout=60), 200)
    _, started = wait_for(lambda ev: ev[0] == "grid" and ev[1]["what"] == "started", "a generation's start", 3.0)
    assert started[1]["kind"] == "generation" and started[1]["detail"] == grid["session"]
    _, ended = wait_for(lambda ev: ev[0] == "grid" and ev[1]["what"] == "ended" and ev[1]["id"] == started[1]["id"],
                        "its end", 3.0)
    assert ended[1]["detail"].startswith("max tokens after 3 tokens")
    assert ended[1]["seq"] > started[1]["seq"]
    # a chat reply is a generation too
    chat = expect(api.post("/api/v3/chat", {"model": grid["model"], "messages": [{"role": "user", "content": "Once upon"}],
                                           "maxTokens": 4, "temperature": 0, "stream": False}, key=key, timeout=60), 200)
    n = chat["usage"]["completionTokens"]
    _, cstart = wait_for(lambda ev: ev[0] == "grid" and ev[1]["what"] == "started" and ev[1]["id"] != started[1]["id"],
                         "a chat reply's start", 3.0)
    _, cend = wait_for(lambda ev: ev[0] == "grid" and ev[1]["what"] == "ended" and ev[1]["id"] == cstart[1]["id"],
                       "its end", 3.0)
    assert cend[1]["detail"] == f"chat reply ended after {n} tokens" and n >= 1
    # the volunteer holding the model dies: lost, then recovered once the model is placed again
    on = grid["holder"]
    c.kill(on)
    _, lost = wait_for(lambda ev: ev[0] == "grid" and ev[1]["what"] == "lost", "the lost event", 10.0)
    assert lost[1]["kind"] == "worker" and lost[1]["id"] == on
    _, rec = wait_for(lambda ev: ev[0] == "grid" and ev[1]["what"] == "recovered", "the recovered event", 20.0)
    assert rec[1]["id"] == on and rec[1]["seq"] > lost[1]["seq"]
    # and the next snapshot shows the model on the volunteer left
    other = "w_b" if on == "w_a" else "w_a"

    def moved(ev):
        if ev[0] != "snapshot":
            return False
        actors = {(a["kind"], a["id"]): a for a in ev[1]["actors"]}
        m = actors.get(("model", grid["model"]))
        return ("worker", on) not in actors and m is not None and m["state"]["placement"] == other
    wait_for(moved, "a snapshot with the model on " + other, 5.0)
    stop.set()
    conn.sock.shutdown(socket.SHUT_RDWR)  # (the reader's next read ends)
    reader.join(timeout=5)
    conn.close()
