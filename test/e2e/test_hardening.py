"""Hostile requests against a real `mpakt serve`: each gets a 4xx naming what was wrong, the
error body is always strict UTF-8 JSON, and the server stays up (the module's autouse fixture
checks /api/versions after every test).

Covers the router's unknown paths and methods (EP-01 … EP-23), JSON nesting depth on every
endpoint that reads a body, integers written as doubles, text that is not UTF-8 in what
errors echo (ERR-12 style messages naming the field), and a bounded flood of malformed,
truncated, deeply nested, oversized and mutated requests to every endpoint, after which the
server still decodes exactly.
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import time

import pytest

from e2e_util import PROMPT_S, REPO_ROOT, Api, expect

# A body nested a million levels deep: 2 MB, far past any recursion the stack survives.
DEEP = b"[" * 1_000_000 + b"]" * 1_000_000


@pytest.fixture(scope="module")
def api(server):
    return Api(server.port, timeout=PROMPT_S)


@pytest.fixture(scope="module")
def creds(server):
    """(login token, key) of an approved account."""
    return server.account("hardy")


@pytest.fixture(autouse=True)
def _server_still_up(server):
    yield
    server.assert_up()


def strict_error(reply, status, *fragments):
    """The reply is `status` (None: any 4xx) with an {"error": ...} body that decodes as
    strict UTF-8."""
    assert reply.status == status if status is not None else 400 <= reply.status < 500, reply
    text = reply.body.decode("utf-8")  # raises on any byte that is not well-formed UTF-8
    body = json.loads(text)
    assert set(body) == {"error"}, body
    for f in fragments:
        assert f in body["error"], (f, body["error"])
    return body["error"]


def scale_graph():
    return {"inputs": [{"name": "x", "shape": [2], "data": [1.0, 2.0]}],
            "steps": [{"op": "scale", "in": ["x"], "out": "y", "params": {"factor": 2.0}}], "outputs": ["y"]}


# --------------------------------------------------------------------------- the router


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE", "PUT", "PATCH"])
@pytest.mark.parametrize("path", ["/api", "/api/", "//api//"])
def test_bare_api_path_is_404_and_the_server_lives(api, method, path):
    # Used to read a path segment that was not there and kill the server, with no key needed.
    expect(api.call(method, path), 404, method, "/api")


def test_bare_api_path_head_is_404(api):
    assert api.call("HEAD", "/api").status == 404


@pytest.mark.parametrize("method,path,status,fragments", [
    ("GET", "/api/v3", 404, ["GET /api/v3"]),
    ("GET", "/api/v1", 404, ["/api/v1"]),
    ("GET", "/api/keys/k_x/more", 404, ["/api/keys/k_x/more"]),
    ("GET", "/api/v3/models/m_x/graph/more", 404, []),
    ("PUT", "/api/versions", 400, ["PUT", "/api/versions", "GET"]),
    ("DELETE", "/api/v3/models/inspect", 400, ["DELETE", "GET"]),  # inspect is its own resource
    ("GET", "/api/v3/models/m_x/graph", 400, ["GET", "POST"]),
    ("PUT", "/api/v3/sessions/s_x", 400, ["PUT", "GET, DELETE"]),
    ("GET", "/api/admin/accounts/x/approve", 400, ["GET", "POST"]),
    ("POST", "/api/v1/tensors/t_x", 400, ["POST", "DELETE"]),
], ids=lambda x: x if isinstance(x, str) else None)
def test_unknown_paths_and_methods_are_answered_in_one_place(api, creds, method, path, status, fragments):
    expect(api.call(method, path, key=creds[1]), status, *fragments)


def test_routes_check_their_auth_level(api, creds):
    expect(api.post("/api/admin/accounts/nobody/approve", {}, key=creds[1]), 403, "operator")
    expect(api.post("/api/admin/accounts/nobody/approve", {}), 401)
    expect(api.delete("/api/keys/k_x"), 401, "Bearer")
    expect(api.get("/api/v3/graphs"), 401)
    expect(api.get("/api/v1/tensors/t_x", key=creds[1]), 400, "DELETE")


# --------------------------------------------------------------------------- JSON depth


def deep_targets(creds):
    token, key = creds
    return [
        ("/api/accounts/login", {}),
        ("/api/accounts", {}),
        ("/api/keys", {"token": token}),
        ("/api/v2/tensors", {"key": key}),
        ("/api/v1/graph", {"key": key}),
        ("/api/v3/graph", {"key": key}),
        ("/api/v3/graphs", {"key": key}),
        ("/api/v3/generate", {"key": key}),
        ("/api/v3/chat", {"key": key}),
        ("/api/v3/models", {"key": key}),
        ("/api/v3/sessions", {"key": key}),
    ]


# Endpoints whose bodies are small by nature refuse big ones before parsing (decisions.md, "Body
# sizes"): these 2 MB bodies get 413 there, and a body nested 600 deep gets the depth refusal.
SMALL_BODY_CAPS = {"/api/accounts/login": 65536, "/api/accounts": 65536, "/api/keys": 65536,
                   "/api/v3/models": 1 << 20, "/api/v3/sessions": 1 << 20}


def test_a_million_levels_of_nesting_are_refused_everywhere(api, creds):
    for path, auth in deep_targets(creds):
        inner = b'{"graph": {"inputs": ' + DEEP + b"}}"  # inside an ordinary field, as a client's body would be
        if path in SMALL_BODY_CAPS:
            for body in (DEEP, inner):
                strict_error(api.call("POST", path, raw=body, timeout=30, **auth), 413,
                             f"takes a body of at most {SMALL_BODY_CAPS[path]} bytes; this one has {len(body)}")
            strict_error(api.call("POST", path, raw=b"[" * 600 + b"]" * 600, timeout=30, **auth), 400, "deeper than 256")
            continue
        r = api.call("POST", path, raw=DEEP, timeout=30, **auth)
        strict_error(r, 400, "deeper than 256")
        strict_error(api.call("POST", path, raw=inner, timeout=30, **auth), 400, "256")
    # the server is alive and a normal request works afterwards
    r = api.post("/api/v3/graph", {"graph": scale_graph()}, key=creds[1], timeout=30)
    assert expect(r, 200)["outputs"]["y"]["data"] == [2, 4]


def test_tensor_upload_nested_a_hundred_thousand_deep_is_refused(api, creds):
    # Used to die after parsing, copying the value recursively.
    body = b'{"shape": [1], "data": ' + b"[" * 100_000 + b"1" + b"]" * 100_000 + b"}"
    strict_error(api.call("POST", "/api/v2/tensors", raw=body, key=creds[1], timeout=30), 400, "256")
    expect(api.post("/api/v2/tensors", {"shape": [1], "data": [3]}, key=creds[1]), 200)


def test_nesting_within_the_limit_still_reads(api, creds):
    # 200 levels: parsed, then refused by the field check, not by the depth guard.
    body = b'{"shape": [1], "data": [1], "x": ' + b"[" * 200 + b"]" * 200 + b"}"
    expect(api.call("POST", "/api/v2/tensors", raw=body, key=creds[1]), 400, "unknown field", "x")


# --------------------------------------------------------------------------- integers written as doubles


def test_integral_doubles_are_integers_for_random_and_chat(api, creds):
    key = creds[1]
    r = expect(api.get("/api/v3/random?count=3.0&min=5.0&max=9", key=key), 200)
    assert len(r["numbers"]) == 3 and all(5 <= x <= 9 for x in r["numbers"])
    expect(api.get("/api/v3/random?count=2.5", key=key), 400, "count")
    chat = {"model": "m_000000000000000000000000", "messages": [{"role": "user", "content": "hi"}]}
    # accepted as integers: the refusal is for the model, not the numbers
    expect(api.post("/api/v3/chat", {**chat, "maxTokens": 8.0, "topK": 4.0, "seed": 7.0}, key=key), 404, "m_0")
    for field, value in (("maxTokens", 8.5), ("topK", 4.5), ("seed", 7.25)):
        expect(api.post("/api/v3/chat", {**chat, field: value}, key=key), 400, f"chat request {field}", str(value))
    expect(api.post("/api/v3/chat", {**chat, "maxTokens": 5000.0}, key=key), 400, "maxTokens", "4096")


def test_shapes_read_integral_doubles(api, creds):
    t = expect(api.post("/api/v2/tensors", {"shape": [2.0], "data": [1, 2]}, key=creds[1]), 200)
    assert t["shape"] == [2]
    expect(api.post("/api/v2/tensors", {"shape": [1.5], "data": [1, 2]}, key=creds[1]), 400, "shape[0]", "1.5")


# --------------------------------------------------------------------------- UTF-8 in errors


BAD_BYTES = ["%C0%AF", "%ED%A0%80", "%F4%90%80%80", "%FF", "%E2%82"]  # overlong, surrogate, > U+10FFFF, stray, cut


@pytest.mark.parametrize("bad", BAD_BYTES)
def test_ids_in_paths_that_are_not_utf8_give_strict_utf8_errors(api, creds, bad):
    key = creds[1]
    strict_error(api.delete(f"/api/v3/models/m_{bad}", key=key), 404, "m_")
    strict_error(api.get(f"/api/v3/sessions/s_{bad}", key=key), 404, "s_")
    strict_error(api.delete(f"/api/v3/graphs/gt_{bad}", key=key), 404, "gt_")
    strict_error(api.get(f"/api/v3/{bad}", key=key), 404, "no endpoint")
    strict_error(api.post(f"/api/v3/models/m_{bad}/graph", {}, key=key), 404, "m_")


@pytest.mark.parametrize("bad", [b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xff"])
def test_bodies_that_are_not_utf8_are_refused_naming_the_byte(api, creds, bad):
    key = creds[1]
    graph = json.dumps({"graph": scale_graph()}).encode().replace(b'"name": "x"', b'"name": "x' + bad + b'"')
    strict_error(api.call("POST", "/api/v3/graph", raw=graph, key=key), 400, "not valid UTF-8", "byte")
    model = b'{"model": "m_' + bad + b'", "messages": [{"role": "user", "content": "hi"}]}'
    strict_error(api.call("POST", "/api/v3/chat", raw=model, key=key), 400, "not valid UTF-8")
    load = b'{"source": "hf:local/x' + bad + b'"}'
    strict_error(api.call("POST", "/api/v3/models", raw=load, key=key), 400, "not valid UTF-8")


def test_a_lone_surrogate_escape_is_refused(api, creds):
    raw = json.dumps({"label": "a\udc00b", "modelId": "m_x"})  # json.dumps writes the escape \udc00
    strict_error(api.call("POST", "/api/v3/sessions", raw=raw, key=creds[1]), 400, "lone low surrogate")


def test_value_names_echoed_by_errors_stay_utf8(api, creds):
    # valid UTF-8 from the body is echoed as is
    g = scale_graph()
    g["steps"][0]["in"] = ["caf\u00e9"]
    msg = strict_error(api.post("/api/v3/graph", {"graph": g}, key=creds[1]), 400)
    assert "caf\u00e9" in msg


def test_inspect_source_that_is_not_utf8(api, creds):
    strict_error(api.get("/api/v3/models/inspect?source=hf:local/x%C0%AF", key=creds[1], timeout=30), None, "local/x")


def test_safetensors_name_that_is_not_utf8_is_refused_naming_its_position(api, creds, hub_dir):
    folder = hub_dir / "local" / "badname"
    folder.mkdir(parents=True, exist_ok=True)
    header = b'{"ok": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "x\xc0\xaf": {"dtype": "F32", ' \
             b'"shape": [1], "data_offsets": [4, 8]}}'
    header += b" " * ((8 - len(header) % 8) % 8)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    msg = strict_error(api.get("/api/v3/models/inspect?source=hf:local/badname", key=creds[1], timeout=30), 400,
                       "safetensors header", "not valid UTF-8")
    assert "byte 63" in msg and "byte 65" in msg, msg


# --------------------------------------------------------------------------- a flood of bad requests

CHAT_GOLDEN = json.loads((REPO_ROOT / "test" / "fixtures" / "chat" / "stories260K_greedy.json").read_text())
FLOOD_REQUESTS = 6000  # about 20 s alone on 2 cores
FLOOD_BUDGET_S = 45.0  # the flood stops here whatever it reached (bounded in time)
FLOOD_BODY_LIMIT = 256 * 1024


@pytest.fixture(scope="module")
def flood(start_server):
    """A server of its own with a small body limit (oversized bodies cost little), and what the
    requests need to reach real things: an account, a key, a model, a session and a compiled
    graph."""
    server = start_server("--dev", "--body-limit", "256K")
    token, key = server.account("flooder")
    api = Api(server.port, timeout=30)
    model = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=key, timeout=60), 200)["modelId"]
    sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
    compiled = {"inputs": [{"name": "ids", "shape": [1], "bind": "ids"}],
                "steps": [{"op": "scale", "in": ["ids"], "out": "y", "params": {"factor": {"$bind": "pos"}}}],
                "outputs": ["y"]}
    gid = expect(api.post("/api/v3/graphs", {"graph": compiled}, key=key), 200)["graphId"]
    return {"server": server, "api": api, "token": token, "key": key, "model": model, "session": sid, "graph": gid,
            "compiled": compiled}


def flood_targets(f):
    """Every endpoint with a request it would accept: (method, path, body or None, auth)."""
    key, token, model, sid, gid = f["key"], f["token"], f["model"], f["session"], f["graph"]
    k, t = {"key": key}, {"token": token}
    chat = {"model": model, "messages": [{"role": "user", "content": "Once upon a time"}], "maxTokens": 4,
            "temperature": 0, "stream": False}
    generate = {"graphId": gid, "sessionId": sid, "ids": [1], "startPos": 0, "maxNewTokens": 2, "stream": False}
    return [
        ("GET", "/api/versions", None, {}),
        ("GET", "/api/ops", None, {}),
        ("GET", "/llms.txt", None, {}),
        ("POST", "/api/accounts", {"username": "flood_new", "password": "a long password"}, {}),
        ("POST", "/api/accounts/login", {"username": "flooder", "password": "a long password"}, {}),
        ("POST", "/api/keys", {"label": "flood"}, t),
        ("GET", "/api/keys", None, t),
        ("DELETE", "/api/keys/k_000000000000000000000000", None, t),
        ("POST", "/api/admin/accounts/flood_new/approve", {}, k),
        ("GET", "/api/v3/status", None, k),
        ("GET", "/metrics", None, k),
        ("POST", "/api/v3/admin/workers/w_000000000000000000000000/check", {}, k),
        ("GET", "/api/v3/models/inspect?source=hf:local/stories260K", None, k),
        ("POST", "/api/v3/models", {"source": "hf:local/stories260K", "include": ["model.norm.weight"]}, k),
        ("GET", "/api/v3/models", None, k),
        ("DELETE", "/api/v3/models/m_000000000000000000000000", None, k),
        ("POST", f"/api/v3/models/{model}/graph", {"ids": [1, 2], "pos": 0, "cacheRows": 64, "output": "argmax",
                                                   "compiled": False, "allocate": False, "history": False}, k),
        ("POST", "/api/v3/sessions", {"modelId": model, "label": "flood"}, k),
        ("GET", f"/api/v3/sessions/{sid}", None, k),
        ("DELETE", "/api/v3/sessions/s_000000000000000000000000", None, k),
        ("POST", f"/api/v3/sessions/{sid}/checkpoint", {}, k),
        ("POST", f"/api/v3/sessions/{sid}/restore", {}, k),
        ("POST", "/api/v3/graph", {"graph": scale_graph()}, k),
        ("POST", "/api/v3/graph", {"graphId": gid, "bind": {"ids": [2], "pos": 3}}, k),
        ("POST", "/api/v3/graphs", {"label": "flood", "graph": f["compiled"]}, k),
        ("GET", "/api/v3/graphs", None, k),
        ("DELETE", "/api/v3/graphs/gt_000000000000000000000000", None, k),
        ("POST", "/api/v3/chat", chat, k),
        ("POST", "/api/v3/generate", generate, k),
        ("GET", "/api/v3/random?count=3&min=1&max=9", None, k),
        ("POST", "/api/v2/tensors", {"shape": [2], "data": [1, 2]}, k),
        ("DELETE", "/api/v2/tensors/t_000000000000000000000000", None, k),
        ("POST", "/api/v2/graph", {"graph": scale_graph()}, k),
        ("GET", "/v1/models", None, k),
        ("GET", f"/v1/models/{model}", None, k),
        ("POST", "/v1/chat/completions", {"model": model, "messages": chat["messages"], "max_tokens": 4, "stop": ["."],
                                          "logprobs": True, "top_logprobs": 2, "stream": False}, k),
        ("POST", "/v1/completions", {"model": model, "prompt": "Once", "max_tokens": 4, "logprobs": 2, "stop": "x",
                                     "stream": True, "stream_options": {"include_usage": True}}, k),
    ]


def bad_body(body, rng):
    """A hostile variant of a body the endpoint accepts (bytes): malformed, truncated, deeply
    nested, oversized, mutated, or of the wrong JSON type."""
    from test_fuzz_graphs import mutate

    text = json.dumps(body if body is not None else {}).encode()
    kind = rng.randrange(9)
    if kind == 0:  # truncated anywhere
        return text[: rng.randrange(len(text))]
    if kind == 1:  # bytes replaced by anything, UTF-8 or not
        b = bytearray(text)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind == 2:  # deeply nested, inside a field or as the whole body
        depth = rng.choice([257, 1000, 50_000])
        deep = b"[" * depth + b"]" * depth
        return deep if rng.random() < 0.3 else text[:-1] + b', "x": ' + deep + b"}" if len(text) > 2 else deep
    if kind == 3:  # over the body limit
        return b'{"x": "' + b"a" * (FLOOD_BODY_LIMIT + rng.randrange(1024)) + b'"}'
    if kind == 4:  # the wrong JSON type, or not JSON
        return rng.choice([b"null", b"[]", b'"body"', b"12", b"{", b"}", b"{\"a\":}", b"\xff\xfe", b"", b"{}" * 3,
                           b"{\"a\": 1e99999}", b"{\"a\": -0, \"a\": 1}", b"{\"\\ud800\": 1}"])
    if kind == 5:  # a huge string or number in a field
        return text[:-1] + (b', "' if len(text) > 2 else b'"') + b"k\": \"" + b"\xc3\xa9" * 50_000 + b'"}' \
            if rng.random() < 0.5 else text.replace(b"1", b"1" + b"0" * 400, 1)
    # kinds 6-8: the body mutated as JSON (values, types, dropped and renamed fields)
    out = body if isinstance(body, (dict, list)) else {"x": body}
    for _ in range(rng.randint(1, 4)):
        out = mutate(out, rng)
    return json.dumps(out).encode()


def bad_path(path, rng):
    """The path with an id or the query replaced by something hostile."""
    junk = rng.choice(["%C0%AF", "%00", "%", "%zz", "..%2F..%2Fetc", "x" * 5000, "%F0%9F%98%80", "m_%FF", "?", "#",
                       "%20%0D%0Ax-api-key:%20k"])
    parts = path.split("/")
    i = rng.randrange(2, len(parts)) if len(parts) > 2 else len(parts) - 1
    parts[i] = junk if rng.random() < 0.5 else parts[i] + junk
    return "/".join(parts)


def answer_is_sane(r, what):
    assert r.status < 500, f"{what}: a server error for bad input: {r!r}"
    if r.status >= 400 and r.body:
        assert isinstance(r.json, dict) and set(r.json) == {"error"} and r.error, f"{what}: {r!r}"
        if isinstance(r.json["error"], dict):  # the OpenAI-compatible API's shape (/v1)
            assert set(r.json["error"]) == {"message", "type", "param", "code"} and r.json["error"]["message"], what
        r.body.decode("utf-8")  # strict UTF-8, whatever the request held


@pytest.mark.timeout(240)
def test_a_flood_of_bad_requests_to_every_endpoint(flood):
    """Malformed, truncated, deeply nested, oversized and randomly mutated bodies, hostile ids
    and queries, wrong methods, on every endpoint (fixed seed, bounded in time): none gets a
    5xx, every error is one {"error": ...} in strict UTF-8, and afterwards the server is up and
    decodes exactly as before. MPAKT_FLOOD_SEED picks another seed, to explore by hand."""
    api, server = flood["api"], flood["server"]
    rng = random.Random(int(os.environ.get("MPAKT_FLOOD_SEED", "20261201")))
    targets = flood_targets(flood)
    auth_of = lambda a: {"key": a["key"] if "key" in a else None, "token": a["token"] if "token" in a else None}
    deadline = time.monotonic() + FLOOD_BUDGET_S
    sent, statuses = 0, {}
    while sent < FLOOD_REQUESTS and time.monotonic() < deadline:
        method, path, body, auth = targets[sent % len(targets)]
        roll = rng.random()
        if roll < 0.7:
            raw = bad_body(body, rng)
            r = api.call("POST" if body is None and rng.random() < 0.5 else method, path, raw=raw, timeout=30,
                         **auth_of(auth))
            what = f"{method} {path} with {raw[:120]!r}"
        elif roll < 0.9:
            p = bad_path(path, rng)
            r = api.call(method, p, raw=json.dumps(body) if body is not None else None, timeout=30, **auth_of(auth))
            what = f"{method} {p[:200]}"
        else:
            m = rng.choice(["PUT", "PATCH", "DELETE", "POST", "GET", "OPTIONS", "TRACE"])
            r = api.call(m, path, raw=json.dumps(body) if body is not None else None, timeout=30, **auth_of(auth))
            what = f"{m} {path}"
        answer_is_sane(r, f"request {sent}: {what}")
        statuses[r.status] = statuses.get(r.status, 0) + 1
        sent += 1
    assert sent >= 300, f"only {sent} requests in {FLOOD_BUDGET_S:g} s"
    server.assert_up()
    # ... and decodes transformers' greedy text, for a new key (the flood's valid requests
    # used up its key's sessions) that loads the model afresh
    key = server.account("after_flood")[1]
    case = CHAT_GOLDEN["cases"][0]
    done = expect(api.post("/api/v3/chat", {"model": "hf:local/stories260K", "messages": [{"role": "user", "content": case["prompt"]}],
                                            "maxTokens": CHAT_GOLDEN["max_new_tokens"], "temperature": 0, "stream": False},
                           key=key, timeout=60), 200)
    assert done["text"] == case["text"], done
    print(f"flood: {sent} requests, answers {dict(sorted(statuses.items()))}")


RAW_REQUESTS = [
    # (bytes sent, then the connection is closed for writing; None = any 4xx or no answer)
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET / HTTP/9.9\r\n\r\n", 400),
    (b"GET /api/versions HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", 400),
    (b"GET /api/versions HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", 431),
    (b"POST /api/v3/graph HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n", 413),
    (b"POST /api/v3/graph HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
    (b"POST /api/v3/graph HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}", 400),
    (b"POST /api/v3/graph HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", 400),
    (b"POST /api/v3/graph HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + b"ffffffffff\r\n", 413),
    (b"GET /api/v3/%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"GET http://[::1 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"POST /api/v3/graph HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"graph\":", None),  # cut short
    (b"GET /api/versions HTTP/1.1\r\nHo", None),  # cut inside the header
]


def raw_exchange(port, data):
    """Sends `data` on a fresh connection, half-closes it, and returns the status of the answer
    (None when the server closed the connection without one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=PROMPT_S * 5) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        got = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
    if not got:
        return None, got
    return int(got.split(b" ", 2)[1]), got


@pytest.mark.parametrize("data,status", RAW_REQUESTS, ids=range(len(RAW_REQUESTS)))
def test_malformed_http_is_refused_and_the_server_lives(flood, data, status):
    got_status, got = raw_exchange(flood["server"].port, data)
    if status is None:
        assert got_status is None or 400 <= got_status < 500, got[:300]
    else:
        assert got_status == status, got[:300]
        body = got.split(b"\r\n\r\n", 1)[1]
        assert b'"error"' in body, got[:300]
    flood["server"].assert_up()


def test_a_field_of_the_wrong_type_is_named(flood):
    """Every top-level field of every endpoint's body, given a value of a type no field takes
    (an object holding an array): 4xx, and the error names the field."""
    api = flood["api"]
    unnamed = []
    for method, path, body, auth in flood_targets(flood):
        if not isinstance(body, dict):
            continue
        for field in body:
            r = api.call(method, path, raw=json.dumps({**body, field: {"x": []}}), timeout=30,
                         key=auth.get("key"), token=auth.get("token"))
            assert 400 <= r.status < 500, f"{method} {path} with {field} an object: {r!r}"
            said = r.error if isinstance(r.error, str) else json.dumps(r.error)  # (/v1: OpenAI's error object)
            if field not in said:
                unnamed.append(f"{method} {path} {field}: {r.status} {r.error}")
    assert not unnamed, "\n".join(unnamed)


def test_a_keys_compiled_graphs_stay_within_its_graph_budget(start_server):
    """The coordinator holds a compiled graph's text for as long as it exists: a key's templates
    together stay within `--graph-budget` (here 64 KiB), so 32 templates of up to the body
    limit cannot pile up gigabytes per key. Past it, 413 naming both numbers; deleting one makes
    room again; another key has its own budget."""
    server = start_server("--dev", "--graph-budget", "64K")
    api = Api(server.port, timeout=PROMPT_S * 5)
    _, key = server.account("templater")
    _, other = server.account("templater2")
    limits = expect(api.get("/api/versions"), 200)["limits"]
    assert limits["compiledGraphBytesPerKey"] == 64 * 1024, limits

    def template(n):  # a constant of n values, scaled by a bound factor: about 4n bytes of text
        return {"inputs": [{"name": "c", "shape": [n], "data": [1.5] * n}],
                "steps": [{"op": "scale", "in": ["c"], "out": "y", "params": {"factor": {"$bind": "f"}}}],
                "outputs": ["y"]}

    first = expect(api.post("/api/v3/graphs", {"label": "a", "graph": template(9000)}, key=key), 200)["graphId"]
    refused = expect(api.post("/api/v3/graphs", {"label": "b", "graph": template(9000)}, key=key), 413,
                     "compiled graph needs", "compiled-graph budget are available")
    assert "delete one first" in refused["error"], refused
    expect(api.post("/api/v3/graphs", {"label": "b", "graph": template(9000)}, key=other), 200)
    expect(api.delete(f"/api/v3/graphs/{first}", key=key), 200)
    second = expect(api.post("/api/v3/graphs", {"label": "b", "graph": template(9000)}, key=key), 200)["graphId"]
    out = expect(api.post("/api/v3/graph", {"graphId": second, "bind": {"f": 2}}, key=key), 200)["outputs"]["y"]
    assert out["data"][:3] == [3.0, 3.0, 3.0], out["data"][:3]
