"""POST /api/v3/generate through real processes (checklist GEN-*): per-call decoding, the
worker-side loop and the ordinary loop give identical greedy and seeded sampled tokens; the
SSE stream is read by a real client; a client that disconnects frees the generation."""
from __future__ import annotations

import copy
import http.client
import json
import subprocess
import threading
import time

import pytest

from e2e_util import STORIES_DIR, binary, expect

CACHE_ROWS = 64


def graph_cli(*args):
    out = subprocess.run([str(binary()), "graph", str(STORIES_DIR / "config.json"), *args], capture_output=True,
                         text=True, timeout=30, check=True)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def grid(server, stories_golden):
    """An account with stories260K loaded and three compiled decode templates: argmax, a
    sample step with literal settings (overridden by generate), and a sample step whose
    temperature, topK, seed and step are bindings (so per-call decoding can sample too)."""
    token, key = server.account("generator")
    api = server.api
    model = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=key), 200)["modelId"]
    greedy = graph_cli("--model-id", model, "--compiled", "--tokens", "1", "--cache", str(CACHE_ROWS), "--argmax")
    sampled = graph_cli("--model-id", model, "--compiled", "--tokens", "1", "--cache", str(CACHE_ROWS), "--sample")
    bound = copy.deepcopy(sampled)
    for st in bound["steps"]:
        if st["op"] == "sample":
            st["params"] = {"temperature": {"$bind": "temperature"}, "topK": {"$bind": "topK"},
                            "seed": {"$bind": "seed"}, "step": {"$bind": "pos"}}
    ids = {}
    for name, g in (("greedy", greedy), ("sampled", sampled), ("bound", bound)):
        ids[name] = expect(api.post("/api/v3/graphs", {"label": name, "graph": g}, key=key), 200)["graphId"]
    return {"server": server, "api": api, "key": key, "model": model, "graphs": ids, "golden": stories_golden,
            "alloc": graph_cli("--alloc-cache", str(CACHE_ROWS))}


def prefilled_session(grid):
    """A session with KV caches, the prompt but its last token fed through the greedy graph
    (decisions.md: prefill prompt[:-1], then generate from the last prompt token)."""
    api, key = grid["api"], grid["key"]
    # One at a time: earlier sessions are done with (a key may hold 16).
    for old in grid.setdefault("sessions", []):
        api.delete(f"/api/v3/sessions/{old}", key=key)
    grid["sessions"].clear()
    sid = expect(api.post("/api/v3/sessions", {"modelId": grid["model"]}, key=key), 200)["session"]["sessionId"]
    grid["sessions"].append(sid)
    alloc = dict(grid["alloc"], session=sid)
    expect(api.post("/api/v3/graph", {"graph": alloc}, key=key), 200)
    prompt = grid["golden"]["prompt_ids"]
    for pos, tok in enumerate(prompt[:-1]):
        expect(api.post("/api/v3/graph", {"graphId": grid["graphs"]["greedy"], "session": sid,
                                          "bind": {"ids": [tok], "pos": pos}}, key=key), 200)
    return sid, prompt


def per_call(grid, graph, sid, first, start, n, extra=None):
    """The client-side loop: one /api/v3/graph round trip per token."""
    api, key = grid["api"], grid["key"]
    out, tok = [], first
    for i in range(n):
        bind = {"ids": [tok], "pos": start + i, **(extra or {})}
        r = expect(api.post("/api/v3/graph", {"graphId": graph, "session": sid, "bind": bind}, key=key), 200)
        tok = int(r["outputs"]["tok"]["data"][0])
        out.append(tok)
    return out


def generate(grid, sid, graph, first, start, n, **kw):
    body = {"graphId": graph, "sessionId": sid, "ids": [first], "startPos": start, "maxNewTokens": n,
            "stream": False, **kw}
    return expect(grid["api"].post("/api/v3/generate", body, key=grid["key"]), 200)


def test_greedy_tokens_are_identical_on_every_path(grid):
    golden = grid["golden"]["greedy_ids"]
    n = len(golden) - len(grid["golden"]["prompt_ids"])
    sid, prompt = prefilled_session(grid)
    calls = per_call(grid, grid["graphs"]["greedy"], sid, prompt[-1], len(prompt) - 1, n)
    assert prompt + calls == golden
    for worker_loop in (True, False):
        sid, prompt = prefilled_session(grid)
        r = generate(grid, sid, grid["graphs"]["greedy"], prompt[-1], len(prompt) - 1, n, workerLoop=worker_loop)
        assert prompt + r["tokens"] == golden
        assert r["ok"] is True and r["stopped"] == "max tokens" and r["workerLoop"] is worker_loop
        assert r["nextPos"] == len(prompt) - 1 + n
        assert r["roundTrips"] == (1 if worker_loop else n)


def test_seeded_sampling_is_identical_on_every_path(grid):
    settings = {"temperature": 0.8, "topK": 40, "seed": 7}
    n = 24
    sid, prompt = prefilled_session(grid)
    calls = per_call(grid, grid["graphs"]["bound"], sid, prompt[-1], len(prompt) - 1, n, extra=settings)
    results = [calls]
    for graph in ("bound", "sampled"):  # bound settings, and literal ones overridden by generate
        for worker_loop in (True, False):
            sid, prompt = prefilled_session(grid)
            r = generate(grid, sid, grid["graphs"][graph], prompt[-1], len(prompt) - 1, n, workerLoop=worker_loop,
                         **settings)
            assert r["seed"] == 7
            results.append(r["tokens"])
    assert all(r == calls for r in results), results
    # a sampled run differs from greedy decoding (the settings took effect) and another seed differs
    assert calls != grid["golden"]["greedy_ids"][len(prompt):len(prompt) + n]
    sid, prompt = prefilled_session(grid)
    other = generate(grid, sid, grid["graphs"]["sampled"], prompt[-1], len(prompt) - 1, n, **{**settings, "seed": 8})
    assert other["tokens"] != calls


def test_stop_ids_and_unseeded_runs(grid):
    golden = grid["golden"]["greedy_ids"]
    sid, prompt = prefilled_session(grid)
    stop = golden[len(prompt) + 3]
    r = generate(grid, sid, grid["graphs"]["greedy"], prompt[-1], len(prompt) - 1, 20, stopIds=[stop])
    assert r["stopped"] == "stop token" and r["tokens"][-1] == stop and len(r["tokens"]) == 4
    assert r["nextPos"] == len(prompt) - 1 + 4
    assert 84 <= r["seed"] <= 2147483646  # drawn from the OS when not given


def floats(xs):
    return [float(x) for x in xs]


def test_integers_written_as_doubles_give_the_same_tokens(grid, verify_graphs):
    """41.0 is 41 wherever generate takes an integer (GEN-*): startPos, maxNewTokens, ids,
    stopIds, topK, seed and speculative.context. They used to be read as the double's raw
    bits (ids and positions far out of range, seeds changed)."""
    golden = grid["golden"]["greedy_ids"]
    greedy, sampled = grid["graphs"]["greedy"], grid["graphs"]["sampled"]
    sid, prompt = prefilled_session(grid)
    stop = golden[len(prompt) + 3]  # as in test_stop_ids_and_unseeded_runs: its first occurrence
    as_ints = generate(grid, sid, greedy, prompt[-1], len(prompt) - 1, 12, stopIds=[stop])
    sid, prompt = prefilled_session(grid)
    as_doubles = generate(grid, sid, greedy, float(prompt[-1]), float(len(prompt) - 1), 12.0, stopIds=[float(stop)])
    assert as_doubles["tokens"] == as_ints["tokens"] == golden[len(prompt):len(prompt) + 4]
    assert as_doubles["nextPos"] == as_ints["nextPos"] and as_doubles["stopped"] == "stop token"

    settings = {"temperature": 0.8, "topK": 40, "seed": 7}
    sid, prompt = prefilled_session(grid)
    plain = generate(grid, sid, sampled, prompt[-1], len(prompt) - 1, 16, **settings)
    sid, prompt = prefilled_session(grid)
    doubled = generate(grid, sid, sampled, float(prompt[-1]), float(len(prompt) - 1), 16.0,
                       **{**settings, "topK": 40.0, "seed": 7.0})
    assert doubled["tokens"] == plain["tokens"] and doubled["seed"] == 7

    spec = {"graphIds": [verify_graphs[("argmax", 5)]], "always": True}
    sid, prompt = prefilled_session(grid)
    ints = generate(grid, sid, greedy, prompt[-1], len(prompt) - 1, 12, speculative={**spec, "context": golden + prompt})
    sid, prompt = prefilled_session(grid)
    dbls = generate(grid, sid, greedy, prompt[-1], len(prompt) - 1, 12,
                    speculative={**spec, "context": floats(golden + prompt)})
    assert dbls["tokens"] == ints["tokens"] == golden[len(prompt):len(prompt) + 12]
    assert dbls["speculation"] == ints["speculation"]


def test_fractional_integers_are_refused_naming_the_field(grid):
    api, key = grid["api"], grid["key"]
    sid, prompt = prefilled_session(grid)
    base = {"graphId": grid["graphs"]["sampled"], "sessionId": sid, "ids": [prompt[-1]], "startPos": len(prompt) - 1,
            "stream": False}
    for field, value in (("startPos", len(prompt) - 0.5), ("maxNewTokens", 41.5), ("topK", 4.5), ("seed", 7.25)):
        expect(api.post("/api/v3/generate", {**base, field: value}, key=key), 400, field, "integer", str(value))
    expect(api.post("/api/v3/generate", {**base, "ids": [41.5]}, key=key), 400, "ids[0]", "41.5")
    expect(api.post("/api/v3/generate", {**base, "stopIds": [1, 2.5]}, key=key), 400, "stopIds[1]", "2.5")
    expect(api.post("/api/v3/generate", {**base, "ids": [1e300]}, key=key), 400, "ids[0]")
    expect(api.post("/api/v3/generate", {**base, "maxNewTokens": 5000.0}, key=key), 400, "maxNewTokens", "4096")
    expect(api.post("/api/v3/generate", {**base, "seed": 2.0 ** 60}, key=key), 400, "seed")
    expect(api.post("/api/v3/generate", {**base, "speculative": {"graphIds": [grid["graphs"]["sampled"]],
                                                                  "context": [3, 0.5]}}, key=key),
           400, "speculative.context[1]")


def read_sse(resp, limit=None):
    """Yields (event, data) from a text/event-stream response."""
    event, n = None, 0
    while True:
        line = resp.readline()  # de-chunked; b"" at the end of the body
        if not line:
            return
        line = line.decode().rstrip("\r\n")
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            yield event, json.loads(line[6:])
            n += 1
            if event == "done" or (limit is not None and n >= limit):
                return


def test_sse_stream_is_read_by_a_real_client(grid):
    sid, prompt = prefilled_session(grid)
    conn = http.client.HTTPConnection("127.0.0.1", grid["server"].port, timeout=30)
    body = {"graphId": grid["graphs"]["greedy"], "sessionId": sid, "ids": [prompt[-1]], "startPos": len(prompt) - 1,
            "maxNewTokens": 10}
    conn.request("POST", "/api/v3/generate", json.dumps(body), {"x-api-key": grid["key"]})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/event-stream")
    events = list(read_sse(resp))
    assert resp.read().strip() == b""  # nothing after the done event; the stream ends with the last chunk
    tokens = [d for e, d in events if e == "token"]
    done = [d for e, d in events if e == "done"]
    assert len(tokens) == 10 and len(done) == 1 and events[-1][0] == "done"
    assert [t["index"] for t in tokens] == list(range(10))
    assert [t["pos"] for t in tokens] == list(range(len(prompt) - 1, len(prompt) + 9))
    assert all(set(t) == {"token", "index", "pos", "ms"} for t in tokens)
    d = done[0]
    for field in ("ok", "tokens", "stopped", "elapsedMs", "tokensPerSecond", "roundTrips", "workerLoop", "nextPos"):
        assert field in d
    assert d["tokens"] == [t["token"] for t in tokens] == grid["golden"]["greedy_ids"][len(prompt):len(prompt) + 10]
    # the connection is reusable after the stream (chunked transfer)
    conn.request("GET", "/api/versions")
    assert conn.getresponse().status == 200
    conn.close()


def slow_generate_graph():
    """A decode template that takes milliseconds per token (a 1536 x 1536 product of fresh
    zeros each step), so a disconnect lands mid-generation."""
    return {"inputs": [{"name": "ids", "shape": [1], "bind": "ids"}],
            "steps": [{"op": "zeros", "in": [], "out": "w", "params": {"shape": [1536, 1536]}},
                      {"op": "zeros", "in": [], "out": "x0", "params": {"shape": [1, 1536]}},
                      {"op": "rope", "in": ["x0"], "out": "x", "params": {"headDim": 1536, "offset": {"$bind": "pos"}}},
                      {"op": "matmul", "in": ["x", "w"], "out": "y", "params": {"transB": True}},
                      {"op": "argmax", "in": ["y"], "out": "tok"}],
            "outputs": ["tok"]}


@pytest.mark.parametrize("worker_loop", [True, False])
def test_disconnect_mid_stream_frees_the_generation(grid, worker_loop):
    api, key = grid["api"], grid["key"]
    graph = expect(api.post("/api/v3/graphs", {"label": "slow", "graph": slow_generate_graph()}, key=key), 200)["graphId"]
    sid = expect(api.post("/api/v3/sessions", {}, key=key), 200)["session"]["sessionId"]
    grid.setdefault("sessions", []).append(sid)
    conn = http.client.HTTPConnection("127.0.0.1", grid["server"].port, timeout=30)
    body = {"graphId": graph, "sessionId": sid, "ids": [0], "startPos": 0, "maxNewTokens": 4096,
            "workerLoop": worker_loop}
    conn.request("POST", "/api/v3/generate", json.dumps(body), {"x-api-key": key})
    resp = conn.getresponse()
    first = list(read_sse(resp, limit=2))
    assert [e for e, _ in first] == ["token", "token"]
    if worker_loop:
        assert expect(api.get("/api/v3/status", key=key), 200)["generations"] >= 1
    conn.sock.close()
    conn.close()
    deadline = time.time() + 10
    while True:
        status = expect(api.get("/api/v3/status", key=key), 200)
        if status["generations"] == 0:
            break
        assert time.time() < deadline, f"the generation still runs after the client left: {status}"
        time.sleep(0.05)
    # the session and the server are fine: a short generation runs to its end
    r = expect(api.post("/api/v3/generate", {**body, "maxNewTokens": 3, "stream": False}, key=key), 200)
    assert r["stopped"] == "max tokens" and len(r["tokens"]) == 3
    grid["server"].assert_up()


def test_generate_refuses_bad_requests(grid, server):
    api, key = grid["api"], grid["key"]
    sid, prompt = prefilled_session(grid)
    base = {"graphId": grid["graphs"]["greedy"], "sessionId": sid, "ids": [prompt[-1]], "startPos": len(prompt) - 1}
    expect(api.post("/api/v3/generate", {**base, "maxNewTokens": 5000}, key=key), 400, "maxNewTokens", "4096")
    expect(api.post("/api/v3/generate", {**base, "maxNewTokens": 0}, key=key), 400, "maxNewTokens")
    expect(api.post("/api/v3/generate", {**base, "temperature": 0.7}, key=key), 400, "argmax", "sample")
    expect(api.post("/api/v3/generate", {**base, "ids": []}, key=key), 400, "ids")
    expect(api.post("/api/v3/generate", {**base, "ids": ["a"]}, key=key), 400, "ids[0]")
    expect(api.post("/api/v3/generate", {k: v for k, v in base.items() if k != "startPos"}, key=key), 400, "startPos")
    expect(api.post("/api/v3/generate", {**base, "topP": 2}, key=key), 400, "topP")
    expect(api.post("/api/v3/generate", {**base, "stream": "yes"}, key=key), 400, "stream")
    expect(api.post("/api/v3/generate", {**base, "colour": 1}, key=key), 400, "colour")
    expect(api.post("/api/v3/generate", {**base, "graphId": "gt_nope"}, key=key), 404, "gt_nope")
    expect(api.post("/api/v3/generate", {**base, "sessionId": "s_nope"}, key=key), 404, "s_nope")
    expect(api.post("/api/v3/generate", raw="{not json", key=key), 400, "JSON")
    expect(api.post("/api/v3/generate", base), 401)
    # a template that does not bind pos is refused when generate uses it, not when compiled
    no_pos = {"inputs": [{"name": "ids", "shape": [1], "bind": "ids"}],
              "steps": [{"op": "zeros", "in": [], "out": "l", "params": {"shape": [1, 4]}},
                        {"op": "argmax", "in": ["l"], "out": "tok"}], "outputs": ["tok"]}
    g = expect(api.post("/api/v3/graphs", {"graph": no_pos}, key=key), 200)["graphId"]
    expect(api.post("/api/v3/generate", {**base, "graphId": g}, key=key), 400, "pos")
    # another account's session and graph are unknown to this one
    _, other = server.account("generator-b")
    expect(api.post("/api/v3/generate", base, key=other), 404)
    server.assert_up()


# --------------------------------------------------------------------------- speculative


@pytest.fixture(scope="module")
def verify_graphs(grid):
    """Verify passes over k+1 = 5 and 3 positions, greedy and sampled (one sample step over
    all rows: row r draws with counter step + r, as a one-token step at pos + r would)."""
    api, key, model = grid["api"], grid["key"], grid["model"]
    out = {}
    for kind in ("argmax", "sample"):
        for rows in (5, 3):
            g = graph_cli("--model-id", model, "--compiled", "--tokens", str(rows), "--cache", str(CACHE_ROWS), f"--{kind}")
            out[(kind, rows)] = expect(api.post("/api/v3/graphs", {"label": f"verify{rows}-{kind}", "graph": g}, key=key),
                                       200)["graphId"]
    return out


@pytest.mark.parametrize("worker_loop", [True, False])
@pytest.mark.parametrize("always", [True, False])
def test_speculative_greedy_tokens_equal_plain_decoding(grid, verify_graphs, worker_loop, always):
    golden = grid["golden"]["greedy_ids"]
    prompt = grid["golden"]["prompt_ids"]
    n = len(golden) - len(prompt)
    sid, prompt = prefilled_session(grid)
    # Context that repeats the golden continuation makes the drafts mostly right.
    context = golden + prompt
    spec = {"graphIds": [verify_graphs[("argmax", 5)], verify_graphs[("argmax", 3)]], "context": context,
            "always": always}
    r = generate(grid, sid, grid["graphs"]["greedy"], prompt[-1], len(prompt) - 1, n, workerLoop=worker_loop,
                 speculative=spec)
    assert prompt + r["tokens"] == golden
    s = r["speculation"]
    assert set(s) == {"verifies", "drafted", "accepted", "produced", "plain", "sharedVerifies"}
    assert 0 <= s["sharedVerifies"] <= s["verifies"]
    assert s["accepted"] <= s["drafted"] and s["produced"] == s["accepted"] + s["verifies"]
    assert s["produced"] + s["plain"] >= n  # every token came from a pass (the last may overshoot)
    if always:
        assert s["verifies"] > 0 and s["accepted"] > 0
    assert r["nextPos"] == len(prompt) - 1 + n
    if not worker_loop:
        assert r["roundTrips"] == s["verifies"] + s["plain"]


@pytest.mark.parametrize("worker_loop", [True, False])
def test_speculative_seeded_sampling_equals_plain_sampling(grid, verify_graphs, worker_loop):
    settings = {"temperature": 0.8, "topK": 40, "seed": 11}
    n = 24
    sid, prompt = prefilled_session(grid)
    plain = generate(grid, sid, grid["graphs"]["sampled"], prompt[-1], len(prompt) - 1, n, **settings)["tokens"]
    sid, prompt = prefilled_session(grid)
    spec = {"graphIds": [verify_graphs[("sample", 5)], verify_graphs[("sample", 3)]],
            "context": prompt + plain + prompt, "always": True}
    r = generate(grid, sid, grid["graphs"]["sampled"], prompt[-1], len(prompt) - 1, n, workerLoop=worker_loop,
                 speculative=spec, **settings)
    assert r["tokens"] == plain
    assert r["speculation"]["verifies"] > 0


def test_speculative_requests_are_checked(grid, verify_graphs):
    api, key = grid["api"], grid["key"]
    sid, prompt = prefilled_session(grid)
    base = {"graphId": grid["graphs"]["greedy"], "sessionId": sid, "ids": [prompt[-1]], "startPos": len(prompt) - 1,
            "maxNewTokens": 4, "stream": False}
    v5 = verify_graphs[("argmax", 5)]
    expect(api.post("/api/v3/generate", {**base, "speculative": {"graphIds": [v5] * 17}}, key=key), 400, "16")
    expect(api.post("/api/v3/generate", {**base, "speculative": {"graphIds": []}}, key=key), 400, "graphIds")
    expect(api.post("/api/v3/generate", {**base, "speculative": {"graphIds": ["gt_nope"]}}, key=key), 404, "gt_nope")
    expect(api.post("/api/v3/generate", {**base, "speculative": {"graphIds": [v5], "always": 1}}, key=key), 400, "always")
    expect(api.post("/api/v3/generate", {**base, "speculative": {"graphIds": [v5], "bogus": 1}}, key=key), 400, "bogus")
    # a one-position graph cannot verify drafts
    expect(api.post("/api/v3/generate", {**base, "speculative": {"graphIds": [grid["graphs"]["greedy"]]}}, key=key),
           400, "verify graph", "two or more")
    grid["server"].assert_up()


# --------------------------------------------------------------------------- batching

LONG_ROWS = 512


@pytest.fixture(scope="module")
def long_graphs(grid):
    """Templates with 512-row caches, so generations last long enough to overlap."""
    api, key, model = grid["api"], grid["key"], grid["model"]
    out = {"alloc": graph_cli("--alloc-cache", str(LONG_ROWS))}
    for kind in ("argmax", "sample"):
        g = graph_cli("--model-id", model, "--compiled", "--tokens", "1", "--cache", str(LONG_ROWS), f"--{kind}")
        out[kind] = expect(api.post("/api/v3/graphs", {"label": f"long-{kind}", "graph": g}, key=key), 200)["graphId"]
    return out


def long_session(grid, long_graphs, prompt):
    api, key = grid["api"], grid["key"]
    sid = expect(api.post("/api/v3/sessions", {"modelId": grid["model"]}, key=key), 200)["session"]["sessionId"]
    expect(api.post("/api/v3/graph", {"graph": dict(long_graphs["alloc"], session=sid)}, key=key), 200)
    for pos, tok in enumerate(prompt[:-1]):
        expect(api.post("/api/v3/graph", {"graphId": long_graphs["argmax"], "session": sid,
                                          "bind": {"ids": [tok], "pos": pos}}, key=key), 200)
    return sid


def test_concurrent_generations_share_passes_and_keep_their_tokens(grid, long_graphs):
    """Conversations decoding at the same time on one model share multi-session passes
    (SES-14, CHAT-02), and each gets exactly the tokens it gets alone: greedy and seeded
    sampling with different settings, at different positions."""
    api, key = grid["api"], grid["key"]
    n = 440
    convs = [(grid["golden"]["prompt_ids"], {"temperature": 0}),
             ([1, 20, 30, 40, 50, 60], {"temperature": 0.9, "seed": 5}),
             ([1, 9], {"temperature": 0.7, "topK": 30, "seed": 9})]

    def body(sid, prompt, settings, stream):
        return {"graphId": long_graphs["sample"], "sessionId": sid, "ids": [prompt[-1]], "startPos": len(prompt) - 1,
                "maxNewTokens": n, "stream": stream, **settings}

    alone = []
    for prompt, settings in convs:
        sid = long_session(grid, long_graphs, prompt)
        r = expect(api.post("/api/v3/generate", body(sid, prompt, settings, False), key=key, timeout=60), 200)
        assert r["batched"] == 0 and len(r["tokens"]) == n
        alone.append(r["tokens"])
        api.delete(f"/api/v3/sessions/{sid}", key=key)
    assert len({tuple(t) for t in alone}) == 3
    golden = grid["golden"]["greedy_ids"][len(convs[0][0]):]
    assert alone[0][:len(golden)] == golden  # temperature 0 on the sample template is greedy

    for attempt in range(3):
        sids = [long_session(grid, long_graphs, p) for p, _ in convs]
        # The first generation streams; once its first token arrives the others start.
        conn = http.client.HTTPConnection("127.0.0.1", grid["server"].port, timeout=60)
        conn.request("POST", "/api/v3/generate", json.dumps(body(sids[0], *convs[0], True)), {"x-api-key": key})
        resp = conn.getresponse()
        events = read_sse(resp)
        first = next(events)
        assert first[0] == "token"
        results = [None] * len(convs)

        def run(i):
            results[i] = expect(api.post("/api/v3/generate", body(sids[i], *convs[i], False), key=key, timeout=60), 200)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(1, len(convs))]
        for t in threads:
            t.start()
        rest = list(events)
        for t in threads:
            t.join()
        conn.close()
        results[0] = rest[-1][1]
        assert rest[-1][0] == "done"
        for r, want in zip(results, alone):
            assert r["ok"] is True and r["tokens"] == want
        for sid in sids:
            api.delete(f"/api/v3/sessions/{sid}", key=key)
        if all(r["batched"] > 0 for r in results):
            break
    else:
        pytest.fail(f"three overlapping generations did not all share passes: {[r['batched'] for r in results]}")
    grid["server"].assert_up()
