"""Hostile requests against a real `mpakt serve`: each gets a 4xx naming what was wrong, the
error body is always strict UTF-8 JSON, and the server stays up (the module's autouse fixture
checks /api/versions after every test).

Covers the router's unknown paths and methods (EP-01 … EP-23), JSON nesting depth on every
endpoint that reads a body, integers written as doubles, and text that is not UTF-8 in what
errors echo (ERR-12 style messages naming the field).
"""

from __future__ import annotations

import json
import struct

import pytest

from e2e_util import PROMPT_S, Api, expect

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


def test_a_million_levels_of_nesting_are_refused_everywhere(api, creds):
    for path, auth in deep_targets(creds):
        r = api.call("POST", path, raw=DEEP, timeout=30, **auth)
        strict_error(r, 400, "deeper than 256")
        # nested inside an ordinary field, as a real client's body would be
        inner = b'{"graph": {"inputs": ' + DEEP + b"}}"
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
