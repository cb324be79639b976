"""clients/mpakt_grid.py against a real server: accounts and keys, loading, a whole-model decode
built with the client's Graph and decoder_layer, compiled and inline runs, outputs by .ref,
base64, random numbers, the v2 calls, one kept-alive connection, and the graph builder's JSON.
"""

from __future__ import annotations

import http.server
import json
import math
import socketserver
import threading

import pytest

from e2e_util import import_client

mg = import_client()
Graph, bind, GridError = mg.Graph, mg.bind, mg.GridError

CACHE_ROWS = 64


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def carol(server):
    """(token, key) of an approved account used only by this module."""
    return server.account("carol")


@pytest.fixture(scope="module")
def gpu(server, carol):
    g = mg.VirtualGPU(server.base_url, key=carol[1])
    yield g
    g.close()


@pytest.fixture(scope="module")
def model(gpu):
    m = gpu.load_model("hf:local/stories260K")
    yield m
    try:
        m.delete()
    except GridError:
        pass


def layer_weights(g, model, l):
    """The nine weights decoder_layer wants for layer l of a Llama checkpoint."""
    p = f"model.layers.{l}."
    names = {"input_layernorm": "input_layernorm", "q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj",
             "v_proj": "self_attn.v_proj", "o_proj": "self_attn.o_proj",
             "post_attention_layernorm": "post_attention_layernorm", "gate_proj": "mlp.gate_proj",
             "up_proj": "mlp.up_proj", "down_proj": "mlp.down_proj"}
    return {k: g.weight(model, p + n + ".weight") for k, n in names.items()}


def dims(cfg):
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg["hidden_size"] // heads
    return heads, kv_heads, head_dim, kv_heads * head_dim


def build_model_graph(model, cfg, ids, pos, rows=CACHE_ROWS):
    """The whole model over `ids` (a bound input or data) at position `pos` (a number or a
    bind), reading and writing the session caches k0..k4/v0..v4; ends in argmax. Returns the
    token, the logits and the written caches by session name."""
    heads, kv_heads, head_dim, width = dims(cfg)
    g = ids.graph
    embed = g.weight(model, "model.embed_tokens.weight")
    h = g.embedding(ids, embed)
    caches = {}
    for l in range(cfg["num_hidden_layers"]):
        h, caches[f"k{l}"], caches[f"v{l}"] = g.decoder_layer(h, layer_weights(g, model, l), heads=heads, head_dim=head_dim, kv_heads=kv_heads,
                                  pos_offset=pos, kcache=g.session_tensor(f"k{l}", [rows, width]),
                                  vcache=g.session_tensor(f"v{l}", [rows, width]), eps=cfg["rms_norm_eps"],
                                  rope_base=cfg["rope_theta"])
    hn = g.rmsnorm(h, g.weight(model, "model.norm.weight"), eps=cfg["rms_norm_eps"])
    logits = g.matmul(hn, embed)  # a weight on the right: trans_b defaults to True
    return g.argmax(logits), logits, caches


def allocate_caches(session, cfg, rows=CACHE_ROWS):
    _, _, _, width = dims(cfg)
    g = Graph()
    retain = {}
    for l in range(cfg["num_hidden_layers"]):
        retain[f"k{l}"] = g.zeros([rows, width])
        retain[f"v{l}"] = g.zeros([rows, width])
    return session.run(g, retain=retain)


# --------------------------------------------------------------------------- accounts


def test_account_sign_up_approval_keys_and_revocation(server):
    acct = mg.Account(server.base_url)
    made = acct.sign_up("dave", "a long password")
    assert made["status"] == "pending"
    with pytest.raises(GridError) as e:
        acct.login("dave", "a long password")
    assert e.value.status == 403 and e.value.message == "account not approved"
    server.approve("dave")
    token = acct.login("dave", "a long password")
    assert token and acct.token == token
    k1 = acct.create_key("script")
    k2 = acct.create_key("other")
    assert k1["key"] != k2["key"] and k1["label"] == "script"
    listed = {k["keyId"]: k for k in acct.list_keys()}
    assert {k1["keyId"], k2["keyId"]} <= set(listed)
    assert all("key" not in k for k in listed.values()), "a key's secret is shown once, at creation"

    gpu = mg.VirtualGPU(server.base_url, key=k1["key"])
    assert gpu.status()["workers"] >= 1
    acct.delete_key(k1["keyId"])
    with pytest.raises(GridError) as e:
        gpu.status()
    assert e.value.status == 401
    assert k1["keyId"] not in {k["keyId"] for k in acct.list_keys() if k.get("state") == "active"}
    assert mg.VirtualGPU(server.base_url, key=k2["key"]).random(count=1)

    with pytest.raises(GridError) as e:
        mg.Account(server.base_url).create_key("no login")
    assert e.value.status == 401


def test_discovery(gpu):
    v = gpu.versions()
    assert v["current"] == "v3" and "limits" in v
    st = gpu.wait_for_workers(1, timeout=10)
    assert st["workers"] >= 1
    with pytest.raises(TimeoutError):
        gpu.wait_for_workers(st["workers"] + 1, timeout=0.3, interval=0.1)
    ops = gpu.ops()
    assert {o["op"] for o in ops["ops"]} >= {"matmul", "rope", "attention", "argmax"}


# --------------------------------------------------------------------------- models


def test_inspect_and_load(gpu, model, stories_index):
    info = gpu.inspect("hf:local/stories260K")
    assert info["count"] == 47 and info["totalBytes"] == stories_index["data_bytes"] and info["sharded"] is False
    assert model.id.startswith("m_")
    assert model.bytes_transferred == stories_index["data_bytes"]
    assert model.stored_on_coordinator == 0
    assert model.quantize == "none" and model.resident_bytes == stories_index["data_bytes"]
    assert sorted(model.names) == sorted(stories_index["header"])
    assert model.tensor_id("model.norm.weight").startswith("t_")
    assert model.id in {m["modelId"] for m in gpu.models()["models"]}

    part = gpu.load_model("hf:local/stories260K", include=["model.layers.0.*"], exclude=["*.mlp.*"],
                          names=["model.norm.weight"])
    try:
        assert sorted(part.names) == sorted(
            [n for n in stories_index["header"] if n.startswith("model.layers.0.") and ".mlp." not in n]
            + ["model.norm.weight"])
    finally:
        part.delete()
    assert part.id not in {m["modelId"] for m in gpu.models()["models"]}

    with pytest.raises(GridError) as e:
        gpu.load_model("hf:local/stories260K", names=["no.such.tensor"])
    assert e.value.status == 400 and "no.such.tensor" in e.value.message


# --------------------------------------------------------------------------- decoding


def test_compiled_decode_with_decoder_layer_matches_golden(gpu, model, stories_config, stories_golden):
    g = Graph()
    ids = g.bound_input("ids", [1], "ids")
    tok, _, _ = build_model_graph(model, stories_config, ids, bind("pos"))
    decode = gpu.compile(g, outputs=[tok], label="decode")
    assert decode.id.startswith("gt_")
    assert sorted(decode.bindings) == ["ids", "pos"]
    assert decode.steps == len(g.steps)
    assert decode.per_call_bytes < decode.body_bytes
    assert decode.saved_per_call == decode.body_bytes - decode.per_call_bytes
    assert decode.id in {x["graphId"] for x in gpu.graphs()}

    prompt, greedy = stories_golden["prompt_ids"], stories_golden["greedy_ids"]
    with gpu.session(model, label="story") as s:
        assert s.id.startswith("s_") and s.label == "story"
        allocate_caches(s, stories_config)
        seq = list(prompt)
        for pos in range(len(greedy) - 1):
            out = s.run(decode, bind={"ids": [seq[pos]], "pos": pos})
            t = int(out[tok.ref][0])
            assert int(out[tok][0]) == t
            if pos + 1 >= len(seq):
                seq.append(t)
        assert seq == greedy
        info = s.info()
        assert sorted(t["name"] for t in info["tensors"]) == sorted(
            f"{kv}{l}" for l in range(stories_config["num_hidden_layers"]) for kv in "kv")
        assert info["steps"] == len(greedy)  # one allocation and len(greedy) - 1 decode calls
        sid = s.id
    with pytest.raises(GridError) as e:  # leaving the with block closed it
        mg.Session(gpu, {"sessionId": sid}).info()
    assert e.value.status == 404
    decode.delete()
    assert decode.id not in {x["graphId"] for x in gpu.graphs()}


def test_inline_prefill_then_decode_layer_by_layer(gpu, model, stories_config, stories_golden):
    """The spec's first Python example: an inline graph per call, caches retained under their
    own names (a no-op), here with the whole prompt prefilled in one call."""
    prompt, greedy = stories_golden["prompt_ids"], stories_golden["greedy_ids"]
    with gpu.session(model) as s:
        allocate_caches(s, stories_config)
        g = Graph()
        ids = g.input("ids", [len(prompt)], prompt)
        tok, _, _ = build_model_graph(model, stories_config, ids, 0)
        out = s.run(g, outputs=[tok], encoding=None)
        assert out[tok].shape == [len(prompt)]
        seq = list(prompt) + [int(out[tok][-1])]
        for pos in range(len(prompt), len(prompt) + 6):
            g = Graph()
            ids = g.input("ids", [1], [seq[pos]])
            tok, _, caches = build_model_graph(model, stories_config, ids, pos)
            out = s.run(g, outputs=[tok], retain=caches)  # the caches' own names: changes nothing
            seq.append(int(out[tok][0]))
        assert seq == greedy[: len(seq)]


def test_logits_json_and_base64_agree(gpu, model, stories_config):
    with gpu.session(model) as s:
        allocate_caches(s, stories_config)
        g = Graph()
        ids = g.input("ids", [1], [1])
        tok, logits, _ = build_model_graph(model, stories_config, ids, 0)
        b64 = s.run(g, outputs=[logits, tok], encoding="base64")
    with gpu.session(model) as s:
        allocate_caches(s, stories_config)
        js = s.run(g, outputs=[logits, tok], encoding=None)
    assert b64[logits].shape == js[logits].shape == [1, stories_config["vocab_size"]]
    assert all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6) for a, b in zip(b64[logits], js[logits]))
    best = max(range(len(js[logits])), key=lambda i: js[logits][i])
    assert int(js[tok][0]) == best


# --------------------------------------------------------------------------- small graphs


def test_run_outputs_by_ref_inputs_in_every_form(gpu):
    g = Graph()
    a = g.input("a", [2, 2], [[1, 2], [3, 4]])
    b = g.input("b", [2, 2], mg.encode_f32([1, 0, 0, 1]))
    c = g.input("c", [2], bytes.fromhex("0000803f00000040"))  # 1.0, 2.0 as little-endian f32
    m = g.matmul(a, b)  # not a weight: trans_b stays the server's default
    y = g.add(m, c)
    z = g.scale(y, factor=0.5)
    out = gpu.run(g, outputs=[m, z])
    assert set(out) == {m.ref, z.ref}
    assert out[m] == [1, 2, 3, 4] and out[m].shape == [2, 2]
    assert out[z.ref] == [1.0, 2.0, 2.0, 3.0]
    assert out[z].rows() == [[1.0, 2.0], [2.0, 3.0]]
    assert "steps" not in out and out.steps == 3
    assert gpu.run(g).keys() == set(), "outputs may be omitted"


def test_compiled_small_graph_with_binds(gpu):
    g = Graph()
    x = g.bound_input("x", [3], "xs")
    y = g.scale(x, factor=bind("f", mul=2, add=1))
    z = g.add(y, g.input("one", [1], [1]))
    cg = gpu.compile(g, outputs=[z], label="affine")
    assert sorted(cg.bindings) == ["f", "xs"]
    out = gpu.run(cg, bind={"xs": [1, 2, 3], "f": 3})
    assert out[z] == [8, 15, 22]
    with pytest.raises(GridError) as e:
        gpu.run(cg, bind={"xs": [1, 2, 3]})
    assert e.value.status == 400 and "f" in e.value.message
    with pytest.raises(ValueError):
        gpu.run(cg, outputs=[z], bind={"xs": [1, 2, 3], "f": 1})
    cg.delete()


def test_multi_session_graph(gpu):
    with gpu.session() as a, gpu.session() as b:
        for s in (a, b):
            g = Graph()
            s.run(g, retain={"kc": g.zeros([3, 2])})
        g = Graph()
        ka = g.session_tensor("kc", [3, 2], of=0)
        kb = g.session_tensor("kc", [3, 2], of=1)
        wa = g.cache_write(ka, g.input("xa", [1, 2], [1, 2]), offset=0)
        wb = g.cache_write(kb, g.input("xb", [1, 2], [5, 6]), offset=2)
        out = a.run(g, outputs=[wa, wb], sessions=[a, b])
        assert out[wa] == [1, 2, 0, 0, 0, 0] and out[wb] == [0, 0, 0, 0, 5, 6]
        for s, want in ((a, [1, 2, 0, 0, 0, 0]), (b, [0, 0, 0, 0, 5, 6])):
            g = Graph()
            k = g.session_tensor("kc")
            assert s.run(g, outputs=[g.scale(k, factor=1)]).popitem()[1] == want


def test_random(gpu):
    nums = gpu.random(min=1, max=6, count=200)
    assert len(nums) == 200 and set(nums) <= set(range(1, 7)) and len(set(nums)) > 1
    (seed,) = gpu.random()
    assert 84 <= seed <= 2147483646
    with pytest.raises(GridError) as e:
        gpu.random(min=5, max=1)
    assert e.value.status == 400


def test_v2_upload_and_graph(gpu):
    t = gpu.upload_tensor([2, 2], [1, 2, 3, 4])
    u = gpu.upload_tensor([2], [10, 20], base64_data=False)
    assert t.id.startswith("t_") and t.shape == [2, 2]
    g = Graph()
    a = g.tensor(t)
    y = g.add(g.matmul(a, g.input("i", [2, 2], [0, 1, 1, 0])), g.tensor(u))
    assert gpu.run_v2(g, outputs=[y])[y] == [12, 21, 14, 23]
    assert gpu.run(g, outputs=[y])[y] == [12, 21, 14, 23], "v2 tensors are valid v3 inputs"
    t.delete()
    gpu.delete_tensor(u)
    with pytest.raises(GridError) as e:
        t.delete()
    assert e.value.status == 404


@pytest.mark.parametrize("stream", [True, False], ids=["events", "one-body"])
def test_generate_matches_golden_or_says_not_yet(gpu, model, stories_config, stories_golden, stream):
    """Prefill prompt[:-1], then generate from the last prompt token (decisions.md's first way)."""
    g = Graph()
    ids = g.bound_input("ids", [1], "ids")
    tok, _, _ = build_model_graph(model, stories_config, ids, bind("pos"))
    decode = gpu.compile(g, outputs=[tok])
    prompt, greedy = stories_golden["prompt_ids"], stories_golden["greedy_ids"]
    try:
        with gpu.session(model) as s:
            allocate_caches(s, stories_config)
            prefill = Graph()
            pids = prefill.input("ids", [len(prompt) - 1], prompt[:-1])
            ptok, _, _ = build_model_graph(model, stories_config, pids, 0)
            s.run(prefill, outputs=[ptok])
            opened = gpu._http.connections_opened
            try:
                gen = s.generate(decode, [prompt[-1]], max_new_tokens=len(greedy) - len(prompt),
                                 start_pos=len(prompt) - 1, stream=stream)
            except NotImplementedError as e:
                assert "later" in str(e)
                return
            first = next(gen)
            assert gpu.status()["workers"] >= 1, "a call in the middle of a stream shares the connection"
            assert [first] + list(gen) == greedy[len(prompt):]
            assert gen.tokens == greedy[len(prompt):]
            assert gen.result["stopped"] == "max tokens" and gen.result["nextPos"] == len(greedy) - 1
            assert gpu._http.connections_opened == opened
    finally:
        decode.delete()


def test_speculative_generate_through_the_client(gpu, model, stories_config, stories_golden):
    """Verify graphs built with the client's Graph (ids bound over 3 positions), given to
    generate as CompiledGraph objects: the same tokens as plain greedy decoding."""
    g = Graph()
    tok, _, _ = build_model_graph(model, stories_config, g.bound_input("ids", [1], "ids"), bind("pos"))
    decode = gpu.compile(g, outputs=[tok])
    v = Graph()
    vtok, _, _ = build_model_graph(model, stories_config, v.bound_input("ids", [3], "ids"), bind("pos"))
    verify = gpu.compile(v, outputs=[vtok])
    prompt, greedy = stories_golden["prompt_ids"], stories_golden["greedy_ids"]
    try:
        with gpu.session(model) as s:
            allocate_caches(s, stories_config)
            prefill = Graph()
            ptok, _, _ = build_model_graph(model, stories_config, prefill.input("ids", [len(prompt) - 1], prompt[:-1]), 0)
            s.run(prefill, outputs=[ptok])
            gen = s.generate(decode, [prompt[-1]], max_new_tokens=len(greedy) - len(prompt), start_pos=len(prompt) - 1,
                             speculative={"graph_ids": [verify], "context": greedy + prompt, "always": True})
            assert list(gen) == greedy[len(prompt):]
            spec = gen.result["speculation"]
            assert spec["verifies"] > 0 and spec["accepted"] > 0
    finally:
        decode.delete()
        verify.delete()


# --------------------------------------------------------------------------- transport


def test_one_connection_for_many_calls(gpu):
    before = gpu._http.connections_opened
    for _ in range(5):
        gpu.status()
        gpu.random(count=1)
    assert gpu._http.connections_opened == before
    local = gpu._http.conn.sock.getsockname()
    gpu.versions()
    assert gpu._http.conn.sock.getsockname() == local


class _ClosingHandler(http.server.BaseHTTPRequestHandler):
    """Answers as HTTP/1.1 with keep-alive implied, then closes the connection anyway, which
    is what a server's idle timeout looks like to a client."""

    protocol_version = "HTTP/1.1"
    seen = []

    def do_GET(self):
        body = json.dumps({"numbers": [len(self.seen)]}).encode()
        self.seen.append(self.client_address[1])
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *args):
        pass


def test_reconnects_once_when_the_server_closed_the_connection():
    _ClosingHandler.seen = []
    with socketserver.TCPServer(("127.0.0.1", 0), _ClosingHandler) as srv:
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            gpu = mg.VirtualGPU(f"http://127.0.0.1:{srv.server_address[1]}", key="k")
            assert gpu.random() == [0]
            assert gpu.random() == [1]
            assert gpu.random() == [2]
            assert len(set(_ClosingHandler.seen)) == 3
        finally:
            srv.shutdown()


def test_errors_carry_status_and_message(gpu, server):
    with pytest.raises(GridError) as e:
        mg.VirtualGPU(server.base_url, key="mpk_not-a-key").status()
    assert e.value.status == 401 and e.value.message == "invalid API key"
    with pytest.raises(GridError) as e:
        mg.Model(gpu, {"modelId": "m_missing"}).delete()
    assert e.value.status == 404 and "m_missing" in e.value.message
    server.assert_up()


# --------------------------------------------------------------------------- graph builder (no server)


def test_graph_json_params_are_camel_case_and_binds_serialise():
    g = Graph()
    x = g.input("x", [4, 8], [0.0] * 32)
    w = g.weight("m_1", "w")
    q = g.matmul(x, w)
    r = g.rope(q, head_dim=4, offset=bind("pos"), rotary_dim=2)
    a = g.attention(r, r, r, heads=2, head_dim=4, kv_heads=1, pos_offset=bind("pos", add=1), v_head_dim=4)
    s = g.sample(a, temperature=0.8, top_k=40, top_p=0.9, seed=7, step=bind("step", mul=2))
    j = g.to_json(outputs=[s], retain={"keep": a})
    steps = {st["op"]: st for st in j["steps"]}
    assert steps["matmul"]["params"] == {"transB": True}
    assert steps["rope"]["params"] == {"headDim": 4, "offset": {"$bind": "pos"}, "rotaryDim": 2}
    assert steps["attention"]["params"] == {"heads": 2, "headDim": 4, "kvHeads": 1,
                                            "posOffset": {"$bind": "pos", "add": 1}, "vHeadDim": 4}
    assert steps["sample"]["params"] == {"temperature": 0.8, "topK": 40, "topP": 0.9, "seed": 7,
                                         "step": {"$bind": "step", "mul": 2}}
    assert j["outputs"] == [s.ref] and j["retain"] == {"keep": a.ref}
    assert j["inputs"][1] == {"name": w.ref, "model": "m_1", "weight": "w"}
    assert g.weight("m_1", "w") is w, "the same weight twice is one input"
    assert g.matmul(x, x).graph is g and "params" not in g.steps[-1], "trans_b is only defaulted for weights"
    assert g.matmul(x, w, trans_b=False).graph is g and g.steps[-1]["params"] == {"transB": False}
    json.dumps(j)


def test_graph_inputs_and_names():
    g = Graph()
    g.input("a", [2], [1, 2])
    with pytest.raises(ValueError):
        g.input("a", [2], [1, 2])
    b = g.bound_input("ids", [3], "tokens")
    s = g.session_tensor("kcache", [4, 2], of=1)
    t = g.tensor("t_9")
    z = g.zeros([2, 2], out="zz")
    j = g.to_json()
    assert j["inputs"][1] == {"name": "ids", "shape": [3], "bind": "tokens"}
    assert j["inputs"][2] == {"name": s.ref, "session": "kcache", "shape": [4, 2], "of": 1}
    assert j["inputs"][3] == {"name": t.ref, "tensorId": "t_9"}
    assert j["steps"] == [{"op": "zeros", "in": [], "out": "zz", "params": {"shape": [2, 2]}}]
    assert z.ref == "zz" and b.ref == "ids"
    assert "outputs" not in j and "retain" not in j
    other = Graph()
    with pytest.raises(ValueError):
        other.relu(z)


def test_decoder_layer_steps():
    g = Graph()
    x = g.input("x", [1, 8], [0.0] * 8)
    w = {k: g.weight("m", k) for k in Graph.LAYER_WEIGHT_KEYS}
    kc, vc = g.session_tensor("k", [16, 4]), g.session_tensor("v", [16, 4])
    y, k2, v2 = g.decoder_layer(x, w, heads=2, head_dim=4, kv_heads=1, pos_offset=bind("pos"), kcache=kc,
                                vcache=vc, eps=1e-5, rope_base=500000.0)
    ops = [s["op"] for s in g.steps]
    assert ops == ["rmsnorm", "matmul", "matmul", "matmul", "rope", "rope", "cache_write", "cache_write",
                   "attention", "matmul", "add", "rmsnorm", "matmul", "matmul", "swiglu", "matmul", "add"]
    by_out = {s["out"]: s for s in g.steps}
    assert by_out[k2.ref]["in"][0] == kc.ref and by_out[v2.ref]["in"][0] == vc.ref
    att = next(s for s in g.steps if s["op"] == "attention")
    assert att["in"][1:] == [k2.ref, v2.ref]
    assert att["params"] == {"heads": 2, "headDim": 4, "kvHeads": 1, "causal": True, "posOffset": {"$bind": "pos"}}
    assert all(s["params"] == {"transB": True} for s in g.steps if s["op"] == "matmul")
    assert next(s for s in g.steps if s["op"] == "rope")["params"]["base"] == 500000.0
    assert g.steps[-1]["out"] == y.ref
    with pytest.raises(KeyError):
        g.decoder_layer(x, {"q_proj": w["q_proj"]}, heads=2, head_dim=4)


# --------------------------------------------------------------------------- every op method


def _close(got, want, tol=1e-4):
    assert len(got) == len(want), (got, want)
    assert all(math.isclose(a, b, rel_tol=tol, abs_tol=tol) for a, b in zip(got, want)), (got, want)


def test_every_op_method_is_accepted_by_the_server(gpu):
    """Each Graph op method, run once on the server: the names and parameters the client
    writes are the ones the server takes, and the simple ones compute what they should."""
    g = Graph()
    a = g.input("a", [2, 3], [1, -2, 3, -4, 5, -6])
    b = g.input("b", [2, 3], [0.5, 0.5, 0.5, 2, 2, 2])
    sq = g.input("sq", [3, 3], [1, 2, 3, 4, 5, 6, 7, 8, 9])
    row = g.input("row", [3], [1, 1, 1])
    w = g.input("w", [4, 3], [1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1])  # [out, in]
    bias = g.input("bias", [4], [0, 0, 0, 10])
    gamma, beta = g.input("gamma", [3], [1, 1, 1]), g.input("beta", [3], [0, 0, 0])
    ids = g.input("ids", [2], [2, 0])
    x4 = g.input("x4", [2, 4], [0.1 * i for i in range(8)])
    ops = {
        "add": g.add(a, b), "sub": g.sub(a, b), "mul": g.mul(a, row), "scale": g.scale(a, factor=2),
        "relu": g.relu(a), "silu": g.silu(a), "tanh": g.tanh(a), "sigmoid": g.sigmoid(a), "gelu": g.gelu(a),
        "gelu_exact": g.gelu_exact(a), "gelu_quick": g.gelu_quick(a), "softcap": g.softcap(a, cap=2),
        "softmax": g.softmax(a), "transpose": g.transpose(a), "causal_mask": g.causal_mask(sq),
        "reduce_sum": g.reduce_sum(a), "reduce_mean": g.reduce_mean(a), "reduce_max": g.reduce_max(a),
        "argmax": g.argmax(a), "sample": g.sample(a, temperature=0, seed=3),
        "matmul": g.matmul(a, sq), "linear": g.linear(a, w, bias, trans_b=True),
        "layernorm": g.layernorm(a, gamma, beta, eps=1e-5), "rmsnorm": g.rmsnorm(a, gamma, eps=1e-6),
        "swiglu": g.swiglu(a, b), "geglu": g.geglu(a, b), "embedding": g.embedding(ids, sq),
        "concat": g.concat(a, b, axis=-1), "slice": g.slice(sq, start=1, length=2),
        "reshape": g.reshape(a, [3, 2]), "zeros": g.zeros([2, 2]),
        "cache_write": g.cache_write(g.zeros([3, 3]), g.slice(sq, start=0, length=1), offset=2),
        "rope": g.rope(x4, head_dim=4, offset=1, base=10000.0),
        "attention": g.attention(x4, x4, x4, heads=1, head_dim=4, kv_heads=1, causal=True),
        "conv1d": g.conv1d(x4, g.input("cw", [4, 1, 3], [1.0] * 12), g.input("cst", [2, 4], [0.0] * 8)),
        "short_conv": g.short_conv(x4, g.input("win", [12, 4], [0.1] * 48), g.input("wc", [4, 1, 3], [1.0] * 12),
                                   g.input("wout", [4, 4], [0.1] * 16), g.input("sst", [2, 4], [0.0] * 8)),
        "moe": g.moe(x4, g.input("lg", [2, 2], [1, 0, 0, 1]),
                     [g.input(f"e{e}{p}", shp, [0.1] * (shp[0] * shp[1]))
                      for e in range(2) for p, shp in (("g", [3, 4]), ("u", [3, 4]), ("d", [4, 3]))],
                     top_k=1, normalize=True),
    }
    assert {s["op"] for s in g.steps} == {o["op"] for o in gpu.ops()["ops"]}, "one method per op of /api/ops"
    out = gpu.run(g, outputs=list(ops.values()))
    r = {name: out[h] for name, h in ops.items()}
    av, bv = [1, -2, 3, -4, 5, -6], [0.5, 0.5, 0.5, 2, 2, 2]
    _close(r["add"], [p + q for p, q in zip(av, bv)])
    _close(r["sub"], [p - q for p, q in zip(av, bv)])
    _close(r["mul"], av)
    _close(r["scale"], [2 * v for v in av])
    _close(r["relu"], [max(v, 0) for v in av])
    _close(r["sigmoid"], [1 / (1 + math.exp(-v)) for v in av])
    _close(r["softcap"], [2 * math.tanh(v / 2) for v in av])
    _close(r["gelu_exact"], [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in av])
    _close(r["gelu_quick"], [v / (1 + math.exp(-1.702 * v)) for v in av])
    assert r["transpose"].shape == [3, 2] and list(r["transpose"]) == [1, -4, -2, 5, 3, -6]
    assert r["causal_mask"][0] == 1 and all(math.isnan(v) or v == float("-inf") for v in r["causal_mask"][1:3])
    _close(r["reduce_sum"], [-3])
    _close(r["reduce_mean"], [-0.5])
    assert list(r["reduce_max"]) == [3, 5] and list(r["argmax"]) == [2, 1] and list(r["sample"]) == [2, 1]
    _close(r["matmul"], [1 - 8 + 21, 2 - 10 + 24, 3 - 12 + 27, -4 + 20 - 42, -8 + 25 - 48, -12 + 30 - 54])
    _close(r["linear"], [1, -2, 3, 12, -4, 5, -6, 5])
    _close(r["embedding"], [7, 8, 9, 1, 2, 3])
    assert r["concat"].shape == [2, 6] and r["slice"].shape == [2, 3] and list(r["slice"]) == [4, 5, 6, 7, 8, 9]
    assert r["reshape"].shape == [3, 2] and list(r["zeros"]) == [0, 0, 0, 0]
    assert list(r["cache_write"]) == [0, 0, 0, 0, 0, 0, 1, 2, 3]
    for name in ("rope", "attention", "conv1d", "short_conv", "moe"):
        assert r[name].shape == [2, 4], (name, r[name].shape)
    assert abs(sum(r["layernorm"][:3])) < 1e-4 and abs(sum(v * v for v in r["layernorm"][:3]) / 3 - 1) < 1e-3
    rms = math.sqrt(sum(v * v for v in av[:3]) / 3)
    _close(r["rmsnorm"][:3], [v / rms for v in av[:3]], 1e-3)
