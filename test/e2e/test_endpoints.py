"""Every endpoint's successes and refusals, over plain HTTP against real processes.

Each refusal is checked for its status, for the {"error": "..."} body shape, and for a message
that names what was wrong. After every test the main server must still answer
/api/versions. A request the server leaves unanswered fails its test after a few seconds
(e2e_util.PROMPT_S) instead of waiting for the server's own 5-minute timeout.
"""

from __future__ import annotations

import base64
import json
import math
import re
import signal
import struct
import subprocess
from urllib.parse import quote

import pytest

from e2e_util import PROMPT_S, STORIES_DIR, Api, WORK_S, Process, binary, expect, free_port, read_safetensors_index

SOURCE = "hf:local/stories260K"
NORM = "model.norm.weight"


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def api(server):
    """Plain HTTP to the main server; a refusal must come back within PROMPT_S."""
    return Api(server.port, timeout=PROMPT_S)


@pytest.fixture(scope="module")
def alice(server):
    """(token, key) of an approved account."""
    return server.account("alice")


@pytest.fixture(scope="module")
def bob(server):
    """(token, key) of a second, unrelated account."""
    return server.account("bob")


class _KeyPool:
    """Hands out fresh keys, moving to a new account before one reaches its key limit."""

    def __init__(self, server):
        self.server, self.accounts, self.token, self.made = server, 0, None, 0

    def next(self):
        if self.token is None or self.made >= 90:
            self.accounts += 1
            self.token, _ = self.server.account(f"pool{self.accounts}")
            self.made = 1
        self.made += 1
        return self.token, self.server.new_key(self.token, "per-test")


@pytest.fixture(scope="module")
def _key_pool(server):
    return _KeyPool(server)


@pytest.fixture
def fresh(_key_pool):
    """(login token, key) with a key no other test has used, so per-key limits start at zero."""
    return _key_pool.next()


@pytest.fixture
def key(fresh):
    return fresh[1]


@pytest.fixture(autouse=True)
def _server_still_up(server):
    yield
    server.assert_up()


def load(api, key, body=None, **kw):
    r = api.post("/api/v3/models", body if body is not None else {"source": SOURCE, "include": [NORM]}, key=key,
                 timeout=WORK_S, **kw)
    return r


def load_ok(api, key, body=None):
    return expect(load(api, key, body), 200)


def session(api, key, body=None):
    r = api.post("/api/v3/sessions", body if body is not None else {}, key=key)
    return expect(r, 200)["session"]["sessionId"]


def run(api, key, graph, timeout=10.0, **top):
    return api.post("/api/v3/graph", {"graph": graph, **top}, key=key, timeout=timeout)


def compile_(api, key, graph, label="t"):
    return api.post("/api/v3/graphs", {"label": label, "graph": graph}, key=key, timeout=WORK_S)


def scale_graph(values=(1.0, 2.0), factor=2.0):
    return {"inputs": [{"name": "x", "shape": [len(values)], "data": list(values)}],
            "steps": [{"op": "scale", "in": ["x"], "out": "y", "params": {"factor": factor}}], "outputs": ["y"]}


def alloc_graph(sid, name="kc", shape=(4, 2)):
    return {"session": sid, "inputs": [], "steps": [{"op": "zeros", "in": [], "out": "z", "params": {"shape": list(shape)}}],
            "retain": {name: "z"}}


def read_session_tensor(api, key, sid, name):
    r = run(api, key, {"session": sid, "inputs": [{"name": "t", "session": name}],
                       "steps": [{"op": "scale", "in": ["t"], "out": "o", "params": {"factor": 1}}], "outputs": ["o"]})
    return expect(r, 200)["outputs"]["o"]


def mb_up(n):
    return math.ceil(n / 1e6)


# --------------------------------------------------------------------------- discovery


def test_versions_needs_no_key_and_carries_limits(api):
    v = expect(api.get("/api/versions"), 200)
    assert v["current"] == "v3"
    by = {x["version"]: x for x in v["versions"]}
    assert set(by) >= {"v1", "v2", "v3"} and by["v1"].get("aliasOf") == "v2"
    lim = v["limits"]
    assert lim["widenFactor"] == {"f32": 1, "bf16": 1, "f16": 1}
    assert lim["byteUnits"] == "resident"


def test_ops_and_llms_txt_need_no_key(api):
    ops = expect(api.get("/api/ops"), 200)
    names = {o["op"] for o in ops["ops"]}
    assert len(names) == 37 and {"attention", "cache_write", "zeros", "moe"} <= names
    r = api.get("/llms.txt")
    assert r.status == 200 and r.headers.get("Content-Type", r.headers.get("content-type", "")).startswith("text/plain")
    assert r.text.strip()


def test_status_reports_the_pool(api, key):
    st = expect(api.get("/api/v3/status", key=key), 200)
    assert st["workers"] == 1 and st["backends"]["cpu"] == 1
    assert 0 < st["freeBytes"] <= st["totalBytes"]
    assert 0 < st["device"]["maxTensorBytes"] <= st["freeBytes"]


def test_unknown_endpoint_is_404_and_wrong_method_is_refused(api, key):
    expect(api.get("/api/v3/nothing", key=key), 404, "/api/v3/nothing")
    expect(api.get("/api/v9/status", key=key), 404)
    # a known path with another method: 400 naming the method and the ones it takes (decisions.md)
    expect(api.call("PUT", "/api/v3/models", {}, key=key), 400, "PUT", "/api/v3/models", "it takes POST, GET")


# --------------------------------------------------------------------------- keys and accounts

KEYED = [
    ("GET", "/api/v3/status"),
    ("GET", "/api/v3/models/inspect?source=hf:local/stories260K"),
    ("POST", "/api/v3/models"),
    ("GET", "/api/v3/models"),
    ("DELETE", "/api/v3/models/m_x"),
    ("POST", "/api/v3/sessions"),
    ("GET", "/api/v3/sessions/s_x"),
    ("DELETE", "/api/v3/sessions/s_x"),
    ("POST", "/api/v3/sessions/s_x/checkpoint"),
    ("POST", "/api/v3/sessions/s_x/restore"),
    ("POST", "/api/v3/graph"),
    ("POST", "/api/v3/graphs"),
    ("GET", "/api/v3/graphs"),
    ("DELETE", "/api/v3/graphs/gt_x"),
    ("POST", "/api/v3/generate"),
    ("GET", "/api/v3/random"),
    ("POST", "/api/v2/tensors"),
    ("DELETE", "/api/v2/tensors/t_x"),
    ("POST", "/api/v2/graph"),
    ("POST", "/api/v1/graph"),
]


@pytest.mark.parametrize("how", ["missing", "empty", "invalid"])
@pytest.mark.parametrize("method,path", KEYED, ids=[f"{m} {p.split('?')[0]}" for m, p in KEYED])
def test_keyed_endpoints_refuse_without_a_valid_key(api, method, path, how):
    key = {"missing": None, "empty": "", "invalid": "mpk_" + "A" * 43}[how]
    body = {} if method == "POST" else None
    expect(api.call(method, path, body, key=key), 401)


def test_revoked_key_is_refused_and_the_others_still_work(server, api, alice):
    token = alice[0]
    made = expect(api.post("/api/keys", {"label": "to revoke"}, token=token), 201)
    other = server.new_key(token, "keeps working")
    expect(api.get("/api/v3/status", key=made["key"]), 200)
    expect(api.delete("/api/keys/" + made["keyId"], token=token), 200)
    expect(api.get("/api/v3/status", key=made["key"]), 401)
    expect(api.get("/api/v3/random", key=made["key"]), 401)
    expect(api.get("/api/v3/status", key=other), 200)
    listed = {k["keyId"]: k for k in expect(api.get("/api/keys", token=token), 200)["keys"]}
    assert made["keyId"] not in listed or listed[made["keyId"]]["state"] == "revoked"


def test_one_key_serves_v1_v2_and_v3(api, key):
    expect(api.get("/api/v3/status", key=key), 200)
    t = expect(api.post("/api/v2/tensors", {"shape": [1], "data": [3]}, key=key), 200)["tensorId"]
    r = api.post("/api/v1/graph", {"graph": {"inputs": [{"name": "a", "tensorId": t}],
                                             "steps": [{"op": "relu", "in": ["a"], "out": "b"}], "outputs": ["b"]}},
                 key=key)
    assert expect(r, 200)["outputs"]["b"]["data"] == [3]
    expect(api.delete("/api/v1/tensors/" + t, key=key), 200)


def test_pending_account_cannot_log_in_until_approved(server, api):
    expect(api.post("/api/accounts", {"username": "pending-pat", "password": "a long password"}), 201)
    expect(api.post("/api/accounts/login", {"username": "pending-pat", "password": "a long password"}), 403,
           "account not approved")
    expect(api.post("/api/keys", {"label": "x"}, token="not-a-token"), 401)
    server.approve("pending-pat")
    expect(api.post("/api/accounts/login", {"username": "pending-pat", "password": "a long password"}), 200)


@pytest.mark.parametrize("body,status,fragment", [
    ({"username": "alice", "password": "a long password"}, 409, "alice"),
    ({"username": "x", "password": "a long password"}, 400, "username"),
    ({"username": "has space", "password": "a long password"}, 400, "username"),
    ({"username": "shorty", "password": "short"}, 400, "password"),
    ({"username": "nopass"}, 400, "password"),
    ({"password": "a long password"}, 400, "username"),
    ({"username": 5, "password": "a long password"}, 400, "username"),
], ids=["taken", "too-short-name", "bad-char", "short-password", "no-password", "no-username", "name-not-string"])
def test_sign_up_refusals(api, alice, body, status, fragment):
    expect(api.post("/api/accounts", body), status, fragment)


def test_login_refusals(api, alice):
    expect(api.post("/api/accounts/login", {"username": "alice", "password": "wrong password"}), 401)
    expect(api.post("/api/accounts/login", {"username": "nobody-here", "password": "a long password"}), 401)
    expect(api.post("/api/accounts/login", {"username": "alice"}), 400, "password")


def test_key_management_needs_a_login_token(api, alice, bob):
    expect(api.post("/api/keys", {"label": "x"}), 401, "Bearer")
    expect(api.get("/api/keys"), 401)
    expect(api.get("/api/keys", token="x" * 43), 401)
    expect(api.post("/api/keys", {"label": "x"}, key=alice[1]), 401, "Bearer")
    expect(api.delete("/api/keys/k_000000000000000000000000", token=alice[0]), 404)
    bobs = expect(api.get("/api/keys", token=bob[0]), 200)["keys"][0]["keyId"]
    expect(api.delete("/api/keys/" + bobs, token=alice[0]), 404)
    expect(api.get("/api/v3/status", key=bob[1]), 200)
    expect(api.post("/api/keys", {"label": 7}, token=alice[0]), 400, "label")


def test_admin_route_needs_an_operators_key(api, key):
    expect(api.post("/api/admin/accounts/nobody/approve", {}, key=key), 403)
    expect(api.post("/api/admin/accounts/nobody/approve", {}), 401)


# --------------------------------------------------------------------------- malformed requests

JSON_POSTS = ["/api/v3/models", "/api/v3/sessions", "/api/v3/graph", "/api/v3/graphs", "/api/v2/tensors",
              "/api/v2/graph", "/api/v1/graph"]


@pytest.mark.parametrize("path", JSON_POSTS)
@pytest.mark.parametrize("raw", ['{"source": ', "not json at all", '{"a": 1} trailing'], ids=["cut", "text", "trailing"])
def test_malformed_json_is_400(api, key, path, raw):
    expect(api.post(path, raw=raw, key=key), 400, "JSON")


@pytest.mark.parametrize("path", ["/api/accounts", "/api/accounts/login"])
def test_malformed_json_is_400_for_accounts(api, path):
    expect(api.post(path, raw="{nope"), 400, "JSON")


def test_malformed_json_is_400_for_keys(api, alice):
    expect(api.post("/api/keys", raw="{nope", token=alice[0]), 400, "JSON")


@pytest.mark.parametrize("path", JSON_POSTS)
@pytest.mark.parametrize("raw", ["[]", "3", '"text"', "null"])
def test_body_must_be_an_object(api, key, path, raw):
    expect(api.post(path, raw=raw, key=key), 400, "object")


WRONG_TYPES = [
    ("/api/v3/models", {"source": 5}, "source"),
    ("/api/v3/models", {"source": SOURCE, "include": NORM}, "include"),
    ("/api/v3/models", {"source": SOURCE, "include": [5]}, "include"),
    ("/api/v3/models", {"source": SOURCE, "names": "x"}, "names"),
    ("/api/v3/models", {"source": SOURCE, "exclude": {}}, "exclude"),
    ("/api/v3/models", {"source": SOURCE, "quantize": 8}, "quantize"),
    ("/api/v3/models", {"source": SOURCE, "quantize": "q3"}, "q3"),
    ("/api/v3/models", {}, "source"),
    ("/api/v3/models", {"source": SOURCE, "colour": "red"}, "colour"),
    ("/api/v3/sessions", {"modelId": 5}, "modelId"),
    ("/api/v3/sessions", {"label": ["x"]}, "label"),
    ("/api/v3/sessions", {"colour": "red"}, "colour"),
    ("/api/v3/graphs", {"label": 3, "graph": {"inputs": [], "steps": []}}, "label"),
    ("/api/v3/graphs", {"label": "x"}, "graph"),
    ("/api/v3/graphs", {"graph": {"inputs": [], "steps": []}, "colour": 1}, "colour"),
    ("/api/v3/graph", {"graph": {"inputs": [], "steps": []}, "encoding": "hex"}, "encoding"),
    ("/api/v3/graph", {"graph": {"inputs": [], "steps": []}, "colour": 1}, "colour"),
    ("/api/v3/graph", {"graph": {"inputs": {}, "steps": []}}, "inputs"),
    ("/api/v3/graph", {"graph": {"inputs": []}}, "steps"),
    ("/api/v3/graph", {"graph": {"inputs": [], "steps": [], "colour": 1}}, "colour"),
    ("/api/v3/graph", {"graph": {"inputs": [], "steps": [{"op": "relu", "in": "x", "out": "y"}]}}, "in"),
    ("/api/v3/graph", {"graph": {"inputs": [], "steps": [{"op": "zeros", "in": [], "out": "y", "colour": 1}]}}, "colour"),
    ("/api/v3/graph", {"graph": {"inputs": [], "steps": [], "outputs": "y"}}, "outputs"),
    ("/api/v3/graph", {"graph": {"inputs": [], "steps": [], "retain": ["y"]}}, "retain"),
    ("/api/v3/graph", {"graph": {"inputs": [{"name": "x", "shape": "2", "data": [1, 2]}], "steps": []}}, "shape"),
    ("/api/v2/tensors", {"shape": [2], "data": [1]}, "2"),
    ("/api/v2/tensors", {"shape": [2], "data": "xx"}, "data"),
    ("/api/v2/tensors", {"shape": [2], "dataB64": "!!!"}, "dataB64"),
    ("/api/v2/tensors", {"shape": [2], "data": [1, 2], "colour": 1}, "colour"),
]


@pytest.mark.parametrize("path,body,fragment", WRONG_TYPES, ids=[f"{p}:{f}" for p, _, f in WRONG_TYPES])
def test_wrong_types_and_unknown_fields_are_400(api, key, path, body, fragment):
    expect(api.post(path, body, key=key), 400, fragment)


# --------------------------------------------------------------------------- models


def test_inspect_needs_a_source(api, key):
    expect(api.get("/api/v3/models/inspect", key=key), 400, "source")


@pytest.mark.parametrize("source,fragment", [
    ("hf:local/nothere", "local/nothere"),
    ("not a source", "not a source"),
])
def test_unknown_source_is_400_naming_it(api, key, source, fragment):
    expect(api.get("/api/v3/models/inspect?source=" + quote(source, safe=""), key=key, timeout=WORK_S), 400, fragment)
    expect(load(api, key, {"source": source}), 400, fragment)


def test_inspect_and_load_a_sharded_checkpoint(api, key, stories_index):
    info = expect(api.get("/api/v3/models/inspect?source=hf:local/sharded", key=key, timeout=WORK_S), 200)
    assert info["sharded"] is True
    assert sorted(info["shards"]) == ["part-a.safetensors", "part-b.safetensors"]
    assert info["count"] == 47 and info["totalBytes"] == stories_index["data_bytes"]
    m = load_ok(api, key, {"source": "hf:local/sharded"})
    assert m["bytesTransferred"] == stories_index["data_bytes"] and len(m["tensors"]) == 47
    names = sorted(stories_index["header"])
    first, last = names[0], names[-1]  # one from each shard
    g = {"inputs": [{"name": "a", "model": m["modelId"], "weight": first},
                    {"name": "b", "model": m["modelId"], "weight": last}],
         "steps": [{"op": "reduce_sum", "in": ["a"], "out": "sa"}, {"op": "reduce_sum", "in": ["b"], "out": "sb"}],
         "outputs": ["sa", "sb"]}
    out = expect(run(api, key, g), 200)["outputs"]
    header, data, _ = read_safetensors_index(STORIES_DIR / "model.safetensors")
    for n, o in ((first, "sa"), (last, "sb")):
        a, b = header[n]["data_offsets"]
        want = sum(struct.unpack(f"<{(b - a) // 4}f", data[a:b]))
        assert math.isclose(out[o]["data"][0], want, rel_tol=1e-4, abs_tol=1e-3)
    expect(api.delete("/api/v3/models/" + m["modelId"], key=key), 200)


def test_load_from_an_https_or_http_url(api, key, host_url):
    url = host_url + "/local/stories260K/resolve/main/model.safetensors"
    m = load_ok(api, key, {"source": url, "names": [NORM]})
    assert [t["name"] for t in m["tensors"]] == [NORM] and m["bytesTransferred"] == 256


def test_load_selection_refusals(api, key):
    expect(load(api, key, {"source": SOURCE, "names": ["no.such.weight"]}), 400, "no.such.weight")
    expect(load(api, key, {"source": SOURCE, "include": ["nothing.*"]}), 400, "nothing.*")
    expect(load(api, key, {"source": SOURCE, "include": [NORM], "exclude": ["model.*"]}), 400)
    expect(load(api, key, {"source": ""}), 400, "source")


def test_quantize_on_load(api, key, stories_index):
    q8 = load_ok(api, key, {"source": SOURCE, "quantize": "q8"})
    assert q8["quantize"] == "q8"
    assert q8["bytesTransferred"] == stories_index["data_bytes"], "the published bytes travel either way"
    assert q8["residentBytes"] < q8["bytesTransferred"]
    auto = load_ok(api, key, {"source": SOURCE, "quantize": "auto", "include": ["model.layers.0.*"]})
    assert auto["quantize"] == "none", "auto picks the least aggressive form that fits"
    none = load_ok(api, key, {"source": SOURCE, "quantize": "none", "include": [NORM]})
    assert none["quantize"] == "none" and none["residentBytes"] == 256


def test_models_list_and_delete(api, fresh, server):
    token, key = fresh
    m = load_ok(api, key)
    listed = expect(api.get("/api/v3/models", key=key), 200)
    assert m["modelId"] in {x["modelId"] for x in listed["models"]}
    assert listed["capacity"]["workers"] == 1
    sibling = server.new_key(token, "same account")
    assert m["modelId"] in {x["modelId"] for x in expect(api.get("/api/v3/models", key=sibling), 200)["models"]}, \
        "every key of an account sees what the account holds"
    expect(api.delete("/api/v3/models/" + m["modelId"], key=key), 200)
    assert m["modelId"] not in {x["modelId"] for x in expect(api.get("/api/v3/models", key=key), 200)["models"]}
    expect(api.delete("/api/v3/models/" + m["modelId"], key=key), 404, m["modelId"])
    expect(api.delete("/api/v3/models/m_000000000000000000000000", key=key), 404)


@pytest.mark.parametrize("name,offending", [("int8", "layer.weight"), ("fp8", "layer.weight"),
                                            ("gptq", "layer.qweight")])
def test_quantised_checkpoint_is_refused_naming_tensors(api, key, name, offending):
    expect(load(api, key, {"source": f"hf:local/{name}"}), 400, offending, "quantised")


def test_host_without_range_support_is_400_naming_the_url(start_server, no_range_host_url):
    srv = start_server(hf_endpoint=no_range_host_url)
    _, key = srv.account("rangeless")
    url = no_range_host_url + "/local/stories260K/resolve/main/model.safetensors"
    expect(srv.api.post("/api/v3/models", {"source": SOURCE}, key=key, timeout=WORK_S), 400, url, "Range")
    expect(srv.api.get("/api/v3/models/inspect?source=" + SOURCE, key=key, timeout=WORK_S), 400, url)
    expect(srv.api.post("/api/v3/models", {"source": url}, key=key, timeout=WORK_S), 400, url)
    srv.assert_up()


CAPACITY = re.compile(r"^model needs (\d+) MB but only (\d+) MB is free across (\d+) worker\(s\) — "
                      r"load fewer layers or wait for more volunteers$")


def test_capacity_refusal_has_the_specs_wording(start_server, stories_index):
    srv = start_server("--worker-memory", "100K")
    _, key = srv.account("tiny")
    free = expect(srv.api.get("/api/v3/status", key=key), 200)["freeBytes"]
    r = srv.api.post("/api/v3/models", {"source": SOURCE}, key=key, timeout=WORK_S)
    expect(r, 503)
    m = CAPACITY.match(r.error)
    assert m, f"capacity refusal {r.error!r} does not have the spec's shape"
    assert int(m.group(1)) == mb_up(stories_index["data_bytes"]), "MB are 10^6 bytes, rounded up"
    assert int(m.group(2)) in (math.floor(free / 1e6), mb_up(free)) and int(m.group(3)) == 1
    assert expect(srv.api.get("/api/v3/models", key=key), 200)["models"] == [], "nothing was loaded"
    small = srv.api.post("/api/v3/models", {"source": SOURCE, "include": [NORM]}, key=key, timeout=WORK_S)
    expect(small, 200)
    srv.assert_up()


def test_tensor_larger_than_any_worker_is_refused_before_transfer(start_server):
    srv = start_server("--workers", "2", "--worker-memory", "100K")
    _, key = srv.account("split")
    st = expect(srv.api.get("/api/v3/status", key=key), 200)
    assert st["workers"] == 2
    r = srv.api.post("/api/v3/models", {"source": SOURCE, "names": ["model.embed_tokens.weight"]}, key=key,
                     timeout=WORK_S)
    expect(r, 503, "model.embed_tokens.weight")
    assert re.match(r"^tensor model\.embed_tokens\.weight needs 1 MB but the largest worker has 0 MB free$", r.error), r
    srv.assert_up()


def test_fifth_model_of_a_key_is_429(api, fresh, server):
    token, key = fresh
    ids = [load_ok(api, key)["modelId"] for _ in range(4)]
    expect(load(api, key), 429, "4")
    other = server.new_key(token, "limit is per key")
    load_ok(api, other)
    expect(api.delete("/api/v3/models/" + ids[0], key=key), 200)
    load_ok(api, key)


# --------------------------------------------------------------------------- sessions


def test_session_lifecycle(api, key):
    m = load_ok(api, key)
    sid = session(api, key, {"modelId": m["modelId"], "label": "chat"})
    info = expect(api.get("/api/v3/sessions/" + sid, key=key), 200)
    assert info["sessionId"] == sid and info["tensors"] == [] and info["bytes"] == 0 and info["steps"] == 0
    assert info.get("modelId") == m["modelId"] and info.get("label") == "chat"
    bare = session(api, key)
    assert bare != sid and bare.startswith("s_")
    expect(api.post("/api/v3/sessions", raw="", key=key), 200)  # an empty body is an empty request
    expect(api.delete("/api/v3/sessions/" + sid, key=key), 200)
    expect(api.get("/api/v3/sessions/" + sid, key=key), 404, sid)
    expect(api.delete("/api/v3/sessions/" + sid, key=key), 404, sid)


def test_graph_in_a_closed_session_is_404(api, key):
    sid = session(api, key)
    expect(api.delete("/api/v3/sessions/" + sid, key=key), 200)
    expect(run(api, key, {"session": sid, "inputs": [], "steps": []}, timeout=PROMPT_S), 404, sid)


def test_session_on_an_unknown_model_is_404(api, key):
    expect(api.post("/api/v3/sessions", {"modelId": "m_000000000000000000000000"}, key=key), 404,
           "m_000000000000000000000000")


def test_seventeenth_session_of_a_key_is_429(api, key):
    ids = [session(api, key) for _ in range(16)]
    expect(api.post("/api/v3/sessions", {}, key=key), 429, "16")
    expect(api.delete("/api/v3/sessions/" + ids[0], key=key), 200)
    session(api, key)


def test_retain_semantics(api, key):
    sid = session(api, key)
    # zeros + retain, no outputs: nothing comes back, the tensor stays.
    assert expect(run(api, key, alloc_graph(sid, "kc", (4, 2))), 200)["outputs"] == {}
    info = expect(api.get("/api/v3/sessions/" + sid, key=key), 200)
    assert info["tensors"] == [{"name": "kc", "shape": [4, 2], "dtype": "f32", "bytes": 32}] and info["bytes"] == 32
    # a value both output and retained is returned and kept
    g = scale_graph((1, 2), 3)
    g.update(session=sid, retain={"kept": "y"})
    assert expect(run(api, key, g), 200)["outputs"]["y"]["data"] == [3, 6]
    assert read_session_tensor(api, key, sid, "kept")["data"] == [3, 6]
    # retained, not listed in outputs: kept and not returned
    g = scale_graph((1, 2), 5)
    del g["outputs"]
    g.update(session=sid, retain={"quiet": "y"})
    assert expect(run(api, key, g), 200)["outputs"] == {}
    assert read_session_tensor(api, key, sid, "quiet")["data"] == [5, 10]
    # retaining under an existing name replaces the tensor
    g = scale_graph((1, 2, 3), 1)
    g.update(session=sid, retain={"kept": "y"})
    expect(run(api, key, g), 200)
    assert read_session_tensor(api, key, sid, "kept") == {"shape": [3], "data": [1, 2, 3]}
    # cache_write changes the session tensor in place; retaining its result under the
    # tensor's own name is allowed and changes nothing
    cw = {"session": sid, "inputs": [{"name": "c", "session": "kc"}, {"name": "row", "shape": [1, 2], "data": [7, 8]}],
          "steps": [{"op": "cache_write", "in": ["c", "row"], "out": "c2", "params": {"offset": 1}}]}
    expect(run(api, key, cw), 200)
    assert read_session_tensor(api, key, sid, "kc")["data"] == [0, 0, 7, 8, 0, 0, 0, 0]
    cw["inputs"][1]["data"] = [9, 9]
    cw["steps"][0]["params"]["offset"] = 3
    cw["retain"] = {"kc": "c2"}
    expect(run(api, key, cw), 200)
    assert read_session_tensor(api, key, sid, "kc")["data"] == [0, 0, 7, 8, 0, 0, 9, 9]
    info = expect(api.get("/api/v3/sessions/" + sid, key=key), 200)
    assert sorted(t["name"] for t in info["tensors"]) == ["kc", "kept", "quiet"]
    assert info["steps"] == 11, "steps counts the session's calls"
    # refusals
    expect(run(api, key, {**scale_graph(), "retain": {"x": "y"}}), 400, "session")
    expect(run(api, key, {**scale_graph(), "session": sid, "retain": {"x": "nope"}}), 400, "nope")
    expect(run(api, key, {"session": sid, "inputs": [{"name": "t", "session": "missing"}], "steps": []}), 404, "missing")
    expect(api.delete("/api/v3/sessions/" + sid, key=key), 200)


def test_session_given_at_the_top_level(api, key):
    sid = session(api, key)
    expect(api.post("/api/v3/graph", {"session": sid, "graph": alloc_graph(None, "top") | {"session": sid}},
                    key=key), 200)
    g = alloc_graph(sid, "top2")
    del g["session"]
    expect(api.post("/api/v3/graph", {"session": sid, "graph": g}, key=key), 200)
    names = sorted(t["name"] for t in expect(api.get("/api/v3/sessions/" + sid, key=key), 200)["tensors"])
    assert names == ["top", "top2"]


def test_graph_session_and_top_level_session_must_agree(api, key):
    a, b = session(api, key), session(api, key)
    expect(api.post("/api/v3/graph", {"session": a, "graph": {"session": b, "inputs": [], "steps": []}}, key=key), 400)


def two_sessions_with_caches(api, key):
    a, b = session(api, key), session(api, key)
    for s in (a, b):
        expect(run(api, key, alloc_graph(s, "kc", (3, 2))), 200)
    return a, b


def test_multi_session_graph_updates_each_sessions_cache(api, key):
    a, b = two_sessions_with_caches(api, key)
    g = {"session": a, "sessions": [a, b],
         "inputs": [{"name": "ka", "session": "kc", "of": 0}, {"name": "kb", "session": "kc", "of": 1},
                    {"name": "kp", "session": "kc"},
                    {"name": "xa", "shape": [1, 2], "data": [1, 2]}, {"name": "xb", "shape": [1, 2], "data": [3, 4]}],
         "steps": [{"op": "cache_write", "in": ["ka", "xa"], "out": "wa", "params": {"offset": 0}},
                   {"op": "cache_write", "in": ["kb", "xb"], "out": "wb", "params": {"offset": 2}},
                   {"op": "scale", "in": ["kp"], "out": "p", "params": {"factor": 1}}],
         "outputs": ["wa", "wb", "p"]}
    out = expect(run(api, key, g), 200)["outputs"]
    assert out["wa"]["data"] == [1, 2, 0, 0, 0, 0]
    assert out["wb"]["data"] == [0, 0, 0, 0, 3, 4]
    assert out["p"]["data"] == [1, 2, 0, 0, 0, 0], "an input without of reads the primary session"
    assert read_session_tensor(api, key, a, "kc")["data"] == [1, 2, 0, 0, 0, 0]
    assert read_session_tensor(api, key, b, "kc")["data"] == [0, 0, 0, 0, 3, 4]
    g2 = {"session": a, "sessions": [a, b], "inputs": [{"name": "k", "session": "kc", "of": 2}], "steps": []}
    expect(run(api, key, g2), 400, "of")


def test_multi_session_graph_must_list_the_primary(api, key):
    a, b = two_sessions_with_caches(api, key)
    expect(run(api, key, {"session": a, "sessions": [b], "inputs": [], "steps": []}, timeout=PROMPT_S), 400, a)


def test_multi_session_graph_lists_at_most_64(api, key):
    a = session(api, key)
    expect(run(api, key, {"session": a, "sessions": [a] * 65, "inputs": [], "steps": []}, timeout=PROMPT_S), 400, "64")


def test_sessions_on_different_workers_cannot_share_a_graph(start_server):
    """With two workers, two models land on different ones, and so do sessions opened on them;
    a graph joining them is refused (409) instead of being computed somewhere wrong."""
    srv = start_server("--workers", "2")
    _, key = srv.account("two-workers")
    api = srv.api
    m1, m2 = load_ok(api, key), load_ok(api, key)
    a = session(api, key, {"modelId": m1["modelId"]})
    b = session(api, key, {"modelId": m2["modelId"]})
    for s in (a, b):
        expect(run(api, key, alloc_graph(s, "kc", (3, 2))), 200)
    g = {"session": a, "sessions": [a, b], "inputs": [{"name": "k", "session": "kc", "of": 1}], "steps": [],
         "outputs": ["k"]}
    r1 = run(api, key, g, timeout=PROMPT_S)
    g = {"session": b, "inputs": [{"name": "w", "model": m1["modelId"], "weight": NORM}], "steps": [], "outputs": ["w"]}
    r2 = run(api, key, g, timeout=PROMPT_S)
    if r1.status == 200 and r2.status == 200:
        pytest.skip("both models were placed on one worker")
    expect(r1, 409, "worker")
    expect(r2, 409, "worker")
    srv.assert_up()


# --------------------------------------------------------------------------- inline graphs


def test_inline_graph_json_and_base64(api, key):
    out = expect(run(api, key, scale_graph((1.5, -2.0, 3.25), 2)), 200)
    assert out["outputs"]["y"] == {"shape": [3], "data": [3.0, -4.0, 6.5]}
    assert out["steps"] == 1
    b = expect(api.post("/api/v3/graph", {"graph": scale_graph((1.5, -2.0, 3.25), 2), "encoding": "base64"}, key=key),
               200)["outputs"]["y"]
    assert b["shape"] == [3] and "data" not in b
    assert list(struct.unpack("<3f", base64.b64decode(b["dataB64"]))) == [3.0, -4.0, 6.5]
    g = scale_graph()
    g["inputs"][0] = {"name": "x", "shape": [2], "dataB64": base64.b64encode(struct.pack("<2f", 1, 2)).decode()}
    assert expect(run(api, key, g), 200)["outputs"]["y"]["data"] == [2, 4]
    del g["outputs"]
    assert expect(run(api, key, g), 200)["outputs"] == {}, "outputs are optional"


@pytest.mark.parametrize("step,fragments", [
    ({"op": "nope", "in": ["x"], "out": "y"}, ["step 0", "nope"]),
    ({"op": "scale", "in": ["x"], "out": "y", "params": {"factor": 2, "bogus": 1}}, ["step 0", "bogus"]),
    ({"op": "scale", "in": ["ghost"], "out": "y", "params": {"factor": 2}}, ["step 0", "ghost"]),
    ({"op": "scale", "in": ["x"], "out": "y"}, ["step 0", "factor"]),
    ({"op": "matmul", "in": ["x", "x"], "out": "y"}, ["step 0", "matmul"]),
    ({"op": "add", "in": ["x"], "out": "y"}, ["step 0", "add"]),
], ids=["unknown-op", "unknown-param", "unknown-value", "missing-param", "bad-shapes", "too-few-inputs"])
def test_graph_errors_name_the_step(api, key, step, fragments):
    g = {"inputs": [{"name": "x", "shape": [2, 3], "data": [1] * 6}], "steps": [step], "outputs": ["y"]}
    expect(run(api, key, g), 400, *fragments)


def test_output_must_be_a_value_of_the_graph(api, key):
    expect(run(api, key, {**scale_graph(), "outputs": ["zz"]}), 400, "zz")


def test_input_data_must_match_its_shape(api, key):
    expect(run(api, key, {"inputs": [{"name": "x", "shape": [3], "data": [1, 2]}], "steps": []}, timeout=PROMPT_S), 400, "x")


def test_graph_request_needs_a_graph_or_a_graph_id(api, key):
    expect(api.post("/api/v3/graph", {}, key=key), 400, "graph")


def test_bound_inputs_belong_to_compiled_graphs(api, key):
    expect(run(api, key, {"inputs": [{"name": "x", "shape": [2], "bind": "x"}], "steps": []}, timeout=PROMPT_S), 400, "bind")


def test_bind_params_belong_to_compiled_graphs(api, key):
    g = scale_graph()
    g["steps"][0]["params"]["factor"] = {"$bind": "f"}
    expect(run(api, key, g, timeout=PROMPT_S), 400, "$bind")


def test_graph_naming_an_unknown_session_is_404(api, key):
    expect(run(api, key, {"session": "s_000000000000000000000000", "inputs": [], "steps": []}, timeout=PROMPT_S), 404,
           "s_000000000000000000000000")


def test_graph_naming_an_unknown_model_is_404(api, key):
    g = {"inputs": [{"name": "w", "model": "m_000000000000000000000000", "weight": NORM}], "steps": [], "outputs": ["w"]}
    expect(run(api, key, g, timeout=PROMPT_S), 404, "m_000000000000000000000000")


def test_graph_naming_an_unknown_weight_is_404(api, key):
    m = load_ok(api, key)
    g = {"inputs": [{"name": "w", "model": m["modelId"], "weight": "no.such"}], "steps": [], "outputs": ["w"]}
    expect(run(api, key, g), 404, "no.such")


def test_load_tensor_ids_alias_model_weights(api, key):
    m = load_ok(api, key)
    tid = m["tensors"][0]["tensorId"]
    by_id = {"inputs": [{"name": "w", "tensorId": tid}], "steps": [{"op": "reduce_sum", "in": ["w"], "out": "s"}],
             "outputs": ["s"]}
    by_name = {"inputs": [{"name": "w", "model": m["modelId"], "weight": NORM}],
               "steps": [{"op": "reduce_sum", "in": ["w"], "out": "s"}], "outputs": ["s"]}
    assert expect(run(api, key, by_id), 200)["outputs"] == expect(run(api, key, by_name), 200)["outputs"]


def test_matmul_against_a_stored_weight_hints_transB(api, key):
    m = load_ok(api, key, {"source": SOURCE, "names": ["model.layers.0.mlp.gate_proj.weight"]})  # [172, 64]
    g = {"inputs": [{"name": "x", "shape": [1, 64], "data": [0.1] * 64},
                    {"name": "w", "model": m["modelId"], "weight": "model.layers.0.mlp.gate_proj.weight"}],
         "steps": [{"op": "matmul", "in": ["x", "w"], "out": "y"}], "outputs": ["y"]}
    expect(run(api, key, g), 400, "step 0", "transB")
    g["steps"][0]["params"] = {"transB": True}
    assert expect(run(api, key, g), 200)["outputs"]["y"]["shape"] == [1, 172]


# --------------------------------------------------------------------------- v2


def test_v2_tensors_upload_use_and_delete(api, key, bob):
    t = expect(api.post("/api/v2/tensors", {"shape": [2, 2], "data": [1, 2, 3, 4]}, key=key), 200)
    assert t["tensorId"].startswith("t_") and t["shape"] == [2, 2] and t["bytes"] == 16
    b64 = base64.b64encode(struct.pack("<2f", 10, 20)).decode()
    u = expect(api.post("/api/v2/tensors", {"shape": [2], "dataB64": b64}, key=key), 200)
    g = {"inputs": [{"name": "a", "tensorId": t["tensorId"]}, {"name": "b", "tensorId": u["tensorId"]}],
         "steps": [{"op": "add", "in": ["a", "b"], "out": "c"}], "outputs": ["c"]}
    assert expect(api.post("/api/v2/graph", {"graph": g}, key=key), 200)["outputs"]["c"]["data"] == [11, 22, 13, 24]
    expect(api.delete("/api/v2/tensors/" + t["tensorId"], key=bob[1]), 404, t["tensorId"])
    expect(api.delete("/api/v2/tensors/" + t["tensorId"], key=key), 200)
    expect(api.delete("/api/v2/tensors/" + t["tensorId"], key=key), 404, t["tensorId"])


def test_v2_graph_runs_v2_ops(api, key):
    g = {"inputs": [{"name": "x", "shape": [2], "data": [-1, 2]}],
         "steps": [{"op": "relu", "in": ["x"], "out": "y"}, {"op": "silu", "in": ["y"], "out": "z"}], "outputs": ["z"]}
    out = expect(api.post("/api/v2/graph", {"graph": g}, key=key), 200)["outputs"]["z"]["data"]
    assert out[0] == 0 and math.isclose(out[1], 2 / (1 + math.exp(-2)), rel_tol=1e-5)


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_v2_graph_refuses_v3_ops(api, key, version):
    g = {"inputs": [{"name": "x", "shape": [2], "data": [1, 2]}], "steps": [{"op": "tanh", "in": ["x"], "out": "y"}],
         "outputs": ["y"]}
    expect(api.post(f"/api/{version}/graph", {"graph": g}, key=key), 400, "tanh")


def test_v2_graph_refuses_model_inputs(api, key):
    m = load_ok(api, key)
    g = {"inputs": [{"name": "w", "model": m["modelId"], "weight": NORM}], "steps": [], "outputs": ["w"]}
    expect(api.post("/api/v2/graph", {"graph": g}, key=key), 400, "v3")


# --------------------------------------------------------------------------- compiled graphs


def small_template():
    return {"inputs": [{"name": "x", "shape": [2], "bind": "x"}, {"name": "kc", "session": "kc", "shape": [4, 2]}],
            "steps": [{"op": "scale", "in": ["x"], "out": "y", "params": {"factor": {"$bind": "f", "mul": 2, "add": 1}}},
                      {"op": "reshape", "in": ["y"], "out": "row", "params": {"shape": [1, 2]}},
                      {"op": "cache_write", "in": ["kc", "row"], "out": "k2", "params": {"offset": {"$bind": "pos"}}}],
            "outputs": ["y"]}


def test_compile_list_run_and_delete(api, key, bob):
    c = expect(compile_(api, key, small_template(), "small"), 200)
    assert c["graphId"].startswith("gt_") and c["steps"] == 3 and sorted(c["bindings"]) == ["f", "pos", "x"]
    assert c["savedPerCall"] == c["bodyBytes"] - c["perCallBytes"]
    listed = {g["graphId"]: g for g in expect(api.get("/api/v3/graphs", key=key), 200)["graphs"]}
    assert sorted(listed[c["graphId"]]["bindings"]) == ["f", "pos", "x"] and listed[c["graphId"]]["label"] == "small"
    assert c["graphId"] not in {g["graphId"] for g in expect(api.get("/api/v3/graphs", key=bob[1]), 200)["graphs"]}
    sid = session(api, key)
    expect(run(api, key, alloc_graph(sid)), 200)
    call = {"graphId": c["graphId"], "session": sid, "bind": {"x": [1, 2], "f": 3, "pos": 2}}
    assert expect(api.post("/api/v3/graph", call, key=key), 200)["outputs"]["y"]["data"] == [7, 14]
    assert read_session_tensor(api, key, sid, "kc")["data"] == [0, 0, 0, 0, 7, 14, 0, 0]
    b = expect(api.post("/api/v3/graph", {**call, "encoding": "base64"}, key=key), 200)["outputs"]["y"]
    assert list(struct.unpack("<2f", base64.b64decode(b["dataB64"]))) == [7, 14]
    # a bound input may also be given as base64 f32, exactly as dataB64
    packed = base64.b64encode(struct.pack("<2f", 1, 2)).decode()
    assert expect(api.post("/api/v3/graph", {**call, "bind": {**call["bind"], "x": packed}}, key=key),
                  200)["outputs"]["y"]["data"] == [7, 14]
    expect(api.delete("/api/v3/graphs/" + c["graphId"], key=bob[1]), 404)
    expect(api.delete("/api/v3/graphs/" + c["graphId"], key=key), 200)
    expect(api.delete("/api/v3/graphs/" + c["graphId"], key=key), 404, c["graphId"])


@pytest.mark.parametrize("bind,status,fragment", [
    ({"x": [1, 2], "f": 3}, 400, "pos"),
    ({"x": [1, 2], "f": 3, "pos": 0, "extra": 1}, 400, "extra"),
    ({"x": [1, 2, 3], "f": 3, "pos": 0}, 400, "x"),
    ({"x": 5, "f": 3, "pos": 0}, 400, "x"),
    ({"x": [1, 2], "f": [3], "pos": 0}, 400, "f"),
    ({"x": [1, "a"], "f": 3, "pos": 0}, 400, "x"),
    ({"x": [1, 2], "f": 3, "pos": 4}, 400, "cache_write"),
    ({"x": "not base64!", "f": 3, "pos": 0}, 400, "bind.x"),
    ({"x": base64.b64encode(struct.pack("<3f", 1, 2, 3)).decode(), "f": 3, "pos": 0}, 400, "x"),
], ids=["missing", "undeclared", "wrong-length", "number-for-input", "array-for-param", "not-numbers", "past-cache",
        "bad-base64", "base64-wrong-length"])
def test_compiled_binding_refusals(api, key, bind, status, fragment):
    c = expect(compile_(api, key, small_template()), 200)
    sid = session(api, key)
    expect(run(api, key, alloc_graph(sid)), 200)
    expect(api.post("/api/v3/graph", {"graphId": c["graphId"], "session": sid, "bind": bind}, key=key), status, fragment)


def test_compiled_session_tensor_shape_is_checked_per_call(api, key):
    c = expect(compile_(api, key, small_template()), 200)
    sid = session(api, key)
    expect(run(api, key, alloc_graph(sid, "kc", (8, 2))), 200)
    call = {"graphId": c["graphId"], "session": sid, "bind": {"x": [1, 2], "f": 1, "pos": 0}}
    expect(api.post("/api/v3/graph", call, key=key), 400, "kc")
    del call["session"]
    expect(api.post("/api/v3/graph", call, key=key), 400, "session")


def test_compiled_bind_must_be_an_object(api, key):
    c = expect(compile_(api, key, small_template()), 200)
    expect(api.post("/api/v3/graph", {"graphId": c["graphId"], "bind": [1, 2]}, key=key), 400, "bind")


def test_graph_and_graph_id_together_are_refused(api, key):
    c = expect(compile_(api, key, small_template()), 200)
    expect(api.post("/api/v3/graph", {"graphId": c["graphId"], "graph": scale_graph()}, key=key), 400, "graphId")


def test_unknown_compiled_graph_is_404(api, key):
    expect(api.post("/api/v3/graph", {"graphId": "gt_000000000000000000000000", "bind": {}}, key=key), 404,
           "gt_000000000000000000000000")


def test_compiled_graph_whose_model_was_deleted_is_404(api, key):
    m = load_ok(api, key)
    t = {"inputs": [{"name": "w", "model": m["modelId"], "weight": NORM}],
         "steps": [{"op": "reduce_sum", "in": ["w"], "out": "s"}], "outputs": ["s"]}
    c = expect(compile_(api, key, t), 200)
    expect(api.post("/api/v3/graph", {"graphId": c["graphId"]}, key=key), 200)
    expect(api.delete("/api/v3/models/" + m["modelId"], key=key), 200)
    expect(api.post("/api/v3/graph", {"graphId": c["graphId"]}, key=key), 404, m["modelId"])


@pytest.mark.parametrize("template,fragment", [
    ({"session": "s_x", "inputs": [], "steps": []}, "session"),
    ({"inputs": [{"name": "kc", "session": "kc"}], "steps": [], "outputs": ["kc"]}, "shape"),
    ({"inputs": [{"name": "x", "shape": [2], "bind": "x"}], "steps": [{"op": "nope", "in": ["x"], "out": "y"}]}, "nope"),
    ({"inputs": [{"name": "x", "shape": [2], "bind": "x"}], "steps": [{"op": "matmul", "in": ["x", "x"], "out": "y"}]},
     "step 0"),
], ids=["session-in-template", "session-input-without-shape", "unknown-op", "shape-error"])
def test_compile_refusals(api, key, template, fragment):
    expect(compile_(api, key, template), 400, fragment)


def test_thirty_third_compiled_graph_of_a_key_is_429(api, key):
    ids = [expect(compile_(api, key, scale_graph()), 200)["graphId"] for _ in range(32)]
    expect(compile_(api, key, scale_graph()), 429, "32")
    expect(api.delete("/api/v3/graphs/" + ids[0], key=key), 200)
    expect(compile_(api, key, scale_graph()), 200)


# --------------------------------------------------------------------------- other accounts


def test_other_accounts_resources_are_404_and_unlisted(api, alice, bob):
    akey, bkey = alice[1], bob[1]
    m = load_ok(api, akey)
    sid = session(api, akey, {"modelId": m["modelId"]})
    c = expect(compile_(api, akey, scale_graph()), 200)["graphId"]
    assert m["modelId"] not in {x["modelId"] for x in expect(api.get("/api/v3/models", key=bkey), 200)["models"]}
    for method, path, ident in [("DELETE", "/api/v3/models/" + m["modelId"], m["modelId"]),
                                ("GET", "/api/v3/sessions/" + sid, sid),
                                ("DELETE", "/api/v3/sessions/" + sid, sid),
                                ("DELETE", "/api/v3/graphs/" + c, c)]:
        theirs = api.call(method, path, key=bkey)
        expect(theirs, 404, ident)
        unknown = api.call(method, path.replace(ident, ident[:2] + "0" * (len(ident) - 2)), key=bkey)
        assert theirs.error.replace(ident, "ID") == unknown.error.replace(ident[:2] + "0" * (len(ident) - 2), "ID"), \
            "another account's id must look exactly like an unknown one"
    # all still there for their owner
    expect(api.get("/api/v3/sessions/" + sid, key=akey), 200)
    expect(api.post("/api/v3/graph", {"graphId": c}, key=akey), 200)
    for path in ("/api/v3/models/" + m["modelId"], "/api/v3/sessions/" + sid, "/api/v3/graphs/" + c):
        expect(api.delete(path, key=akey), 200)


@pytest.fixture(scope="module")
def alices_things(api, alice):
    akey = alice[1]
    m = load_ok(api, akey)
    sid = session(api, akey, {"modelId": m["modelId"]})
    expect(run(api, akey, alloc_graph(sid)), 200)
    c = expect(compile_(api, akey, scale_graph()), 200)["graphId"]
    return {"model": m["modelId"], "tensorId": m["tensors"][0]["tensorId"], "session": sid, "graph": c}


OTHER_ACCOUNT_USES = {
    "run-their-compiled-graph": lambda t: ("/api/v3/graph", {"graphId": t["graph"]}, "graph"),
    "run-in-their-session": lambda t: ("/api/v3/graph", {"graph": {"session": t["session"], "inputs": [], "steps": []}},
                                       "session"),
    "read-their-weight": lambda t: ("/api/v3/graph", {"graph": {"inputs": [{"name": "w", "model": t["model"],
                                                                            "weight": NORM}], "steps": [],
                                                                "outputs": ["w"]}}, "model"),
    "read-their-tensor-id": lambda t: ("/api/v3/graph", {"graph": {"inputs": [{"name": "w", "tensorId": t["tensorId"]}],
                                                                   "steps": [], "outputs": ["w"]}}, "tensorId"),
    "open-session-on-their-model": lambda t: ("/api/v3/sessions", {"modelId": t["model"]}, "model"),
}


@pytest.mark.parametrize("use", list(OTHER_ACCOUNT_USES))
def test_using_another_accounts_ids_is_404(api, bob, alices_things, use):
    path, body, what = OTHER_ACCOUNT_USES[use](alices_things)
    ident = alices_things["tensorId" if what == "tensorId" else what]
    expect(api.post(path, body, key=bob[1]), 404, ident)


# --------------------------------------------------------------------------- random


def test_random_defaults_and_bounds(api, key):
    (n,) = expect(api.get("/api/v3/random", key=key), 200)["numbers"]
    assert 84 <= n <= 2147483646 and isinstance(n, int)
    nums = expect(api.get("/api/v3/random?min=1&max=3&count=3000", key=key), 200)["numbers"]
    assert len(nums) == 3000 and set(nums) == {1, 2, 3}, "min and max are inclusive"
    assert len(expect(api.get("/api/v3/random?count=10000", key=key), 200)["numbers"]) == 10000
    assert expect(api.get("/api/v3/random?min=-5&max=-5&count=4", key=key), 200)["numbers"] == [-5] * 4
    many = expect(api.get("/api/v3/random?count=50", key=key), 200)["numbers"]
    assert len(set(many)) > 45 and all(84 <= x <= 2147483646 for x in many)


@pytest.mark.parametrize("query,fragment", [
    ("count=10001", "10000"), ("count=0", "count"), ("count=-1", "count"), ("min=5&max=1", "min"),
    ("min=x", "min"), ("max=1.5", "max"), ("count=", "count"),
])
def test_random_refusals(api, key, query, fragment):
    expect(api.get("/api/v3/random?" + query, key=key), 400, fragment)


# --------------------------------------------------------------------------- generate, checkpoint, restore


@pytest.mark.parametrize("path,status,fragments", [
    ("/api/v3/generate", 400, ["graphId"]),
    ("/api/v3/sessions/SID/checkpoint", 200, []),  # an empty session: nothing to copy, still a checkpoint
    ("/api/v3/sessions/SID/restore", 409, ["SID", "no checkpoint", "/checkpoint first"]),
], ids=["generate", "checkpoint", "restore"])
def test_generate_checkpoint_and_restore_need_a_key_and_answer_an_empty_call(api, key, path, status, fragments):
    """The routes need a key, and on a fresh session with an empty body: generate names the
    missing graphId, a checkpoint copies nothing, a restore without a checkpoint is a conflict.
    The rest of their behaviour is tested where it is built."""
    sid = session(api, key)
    path = path.replace("SID", sid)
    expect(api.post(path, {}), 401)
    body = expect(api.post(path, {}, key=key, timeout=WORK_S), status, *[f.replace("SID", sid) for f in fragments])
    if status == 200:
        assert body == {"sessionId": sid, "tensors": 0, "bytes": 0, "step": 0}, body


# --------------------------------------------------------------------------- server limits


def test_oversized_body_is_413(start_server):
    srv = start_server("--body-limit", "1M")
    _, key = srv.account("big")
    big = json.dumps({"graph": scale_graph([0.5] * 300_000)})
    assert len(big) > 1 << 20
    expect(srv.api.post("/api/v3/graph", raw=big, key=key, timeout=WORK_S), 413)
    expect(srv.api.post("/api/v2/tensors", raw=json.dumps({"shape": [300_000], "data": [0.5] * 300_000}), key=key,
                        timeout=WORK_S), 413)
    fits = json.dumps({"graph": scale_graph([0.5] * 100_000)})
    assert len(fits) < 1 << 20
    out = expect(srv.api.post("/api/v3/graph", raw=fits, key=key, timeout=WORK_S), 200)
    assert out["outputs"]["y"]["shape"] == [100_000]
    srv.assert_up()


def heavy_graph(n=192, depth=24):
    steps, prev = [], "x"
    for i in range(depth):
        steps.append({"op": "matmul", "in": [prev, "x"], "out": f"m{i}"})
        steps.append({"op": "scale", "in": [f"m{i}"], "out": f"y{i}", "params": {"factor": 1.0 / n}})
        prev = f"y{i}"
    return {"inputs": [{"name": "x", "shape": [n, n], "data": [0.5] * (n * n)}], "steps": steps, "outputs": [prev]}


def test_graph_past_the_timeout_is_504(start_server):
    srv = start_server("--graph-timeout-ms", "1")
    _, key = srv.account("slow")
    r = srv.api.post("/api/v3/graph", {"graph": heavy_graph()}, key=key, timeout=WORK_S)
    expect(r, 504)
    srv.assert_up()


# --------------------------------------------------------------------------- process


def test_serve_exits_cleanly_on_sigterm(tmp_path, host_url):
    port = free_port()
    p = Process("mpakt serve (SIGTERM test)", [binary(), "serve", "--port", port, "--data-dir", tmp_path / "data",
                                                "--hf-endpoint", host_url], tmp_path / "serve.log")
    p.start(r"mpakt serve: listening on http://")
    try:
        p.proc.send_signal(signal.SIGTERM)
        try:
            rc = p.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pytest.fail("mpakt serve did not exit within 5 s of SIGTERM; its output:\n" + p.output())
        assert rc == 0, p.output()
        assert "stopping" in p.output()
    finally:
        p.kill()
