"""A newcomer's first session with the API, with nothing but an HTTP library: sign up, get
approved by the operator (the real `mpakt admin approve`), log in, make a key, look at a model,
load it, open a session, allocate its KV caches in the network, compile the decode step of the
whole model and decode greedily one round trip per token. The tokens must be the reference
implementation's greedy tokens exactly.
"""

from __future__ import annotations

from urllib.parse import quote

from e2e_util import WORK_S, Api, expect

USER, PASSWORD = "newcomer", "a long password"
CACHE_ROWS = 64


def decode_graph(model_id, cfg, rows):
    """The decode step of a Llama model as a compiled-graph template, written out by hand:
    token id and position bound per call, KV caches read from the session, argmax at the end."""
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg["hidden_size"] // heads
    eps, base = cfg["rms_norm_eps"], cfg["rope_theta"]
    pos = {"$bind": "pos"}
    inputs = [{"name": "ids", "shape": [1], "bind": "ids"},
              {"name": "embed", "model": model_id, "weight": "model.embed_tokens.weight"},
              {"name": "norm", "model": model_id, "weight": "model.norm.weight"}]
    steps = [{"op": "embedding", "in": ["ids", "embed"], "out": "h0"}]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        for short, name in [("ln1", "input_layernorm"), ("wq", "self_attn.q_proj"), ("wk", "self_attn.k_proj"),
                            ("wv", "self_attn.v_proj"), ("wo", "self_attn.o_proj"),
                            ("ln2", "post_attention_layernorm"), ("wg", "mlp.gate_proj"), ("wu", "mlp.up_proj"),
                            ("wd", "mlp.down_proj")]:
            inputs.append({"name": f"{short}{l}", "model": model_id, "weight": p + name + ".weight"})
        inputs.append({"name": f"kc{l}", "session": f"k{l}", "shape": [rows, kv_heads * head_dim]})
        inputs.append({"name": f"vc{l}", "session": f"v{l}", "shape": [rows, kv_heads * head_dim]})
        h, t = f"h{l}", True
        steps += [
            {"op": "rmsnorm", "in": [h, f"ln1{l}"], "out": f"a{l}", "params": {"eps": eps}},
            {"op": "matmul", "in": [f"a{l}", f"wq{l}"], "out": f"q{l}", "params": {"transB": t}},
            {"op": "matmul", "in": [f"a{l}", f"wk{l}"], "out": f"k{l}", "params": {"transB": t}},
            {"op": "matmul", "in": [f"a{l}", f"wv{l}"], "out": f"v{l}", "params": {"transB": t}},
            {"op": "rope", "in": [f"q{l}"], "out": f"qr{l}", "params": {"headDim": head_dim, "base": base, "offset": pos}},
            {"op": "rope", "in": [f"k{l}"], "out": f"kr{l}", "params": {"headDim": head_dim, "base": base, "offset": pos}},
            {"op": "cache_write", "in": [f"kc{l}", f"kr{l}"], "out": f"kw{l}", "params": {"offset": pos}},
            {"op": "cache_write", "in": [f"vc{l}", f"v{l}"], "out": f"vw{l}", "params": {"offset": pos}},
            {"op": "attention", "in": [f"qr{l}", f"kw{l}", f"vw{l}"], "out": f"att{l}",
             "params": {"heads": heads, "headDim": head_dim, "kvHeads": kv_heads, "causal": True, "posOffset": pos}},
            {"op": "matmul", "in": [f"att{l}", f"wo{l}"], "out": f"o{l}", "params": {"transB": t}},
            {"op": "add", "in": [h, f"o{l}"], "out": f"r{l}"},
            {"op": "rmsnorm", "in": [f"r{l}", f"ln2{l}"], "out": f"m{l}", "params": {"eps": eps}},
            {"op": "matmul", "in": [f"m{l}", f"wg{l}"], "out": f"g{l}", "params": {"transB": t}},
            {"op": "matmul", "in": [f"m{l}", f"wu{l}"], "out": f"u{l}", "params": {"transB": t}},
            {"op": "swiglu", "in": [f"g{l}", f"u{l}"], "out": f"sw{l}"},
            {"op": "matmul", "in": [f"sw{l}", f"wd{l}"], "out": f"d{l}", "params": {"transB": t}},
            {"op": "add", "in": [f"r{l}", f"d{l}"], "out": f"h{l + 1}"},
        ]
    last = f"h{cfg['num_hidden_layers']}"
    steps += [{"op": "rmsnorm", "in": [last, "norm"], "out": "hn", "params": {"eps": eps}},
              # tied embeddings: the output head is the embedding table
              {"op": "matmul", "in": ["hn", "embed"], "out": "logits", "params": {"transB": True}},
              {"op": "argmax", "in": ["logits"], "out": "tok"}]
    return {"inputs": inputs, "steps": steps, "outputs": ["tok"]}


def test_newcomer_walk(server, stories_config, stories_golden, stories_index):
    api = Api(server.port)
    cfg = stories_config

    # 1. What is here? No key needed.
    versions = expect(api.get("/api/versions"), 200)
    assert versions["current"] == "v3"

    # 2. Sign up: the account starts out pending, so logging in is refused.
    signup = expect(api.post("/api/accounts", {"username": USER, "password": PASSWORD}), 201)
    assert signup["username"] == USER and signup["status"] == "pending"
    expect(api.post("/api/accounts/login", {"username": USER, "password": PASSWORD}), 403, "account not approved")

    # 3. The operator approves it with the CLI, against the server's live data directory.
    server.approve(USER)

    # 4. Log in and make a key.
    token = expect(api.post("/api/accounts/login", {"username": USER, "password": PASSWORD}), 200)["token"]
    made = expect(api.post("/api/keys", {"label": "first script"}, token=token), 201)
    key = made["key"]
    assert key and made["keyId"] and made["label"] == "first script" and made["createdAt"]

    # 5. Is there a worker?
    status = expect(api.get("/api/v3/status", key=key), 200)
    assert status["workers"] >= 1

    # 6. Look before loading: the index only.
    source = "hf:local/stories260K"
    header = stories_index["header"]
    inspected = expect(api.get("/api/v3/models/inspect?source=" + quote(source, safe=""), key=key, timeout=WORK_S), 200)
    assert inspected["count"] == len(header) == 47
    assert inspected["totalBytes"] == stories_index["data_bytes"]
    assert inspected["dtypes"] == {"f32": len(header)}
    assert inspected["sharded"] is False
    assert {t["name"]: (t["shape"], t["dtype"], t["bytes"]) for t in inspected["tensors"]} == {
        n: (e["shape"], "f32", e["data_offsets"][1] - e["data_offsets"][0]) for n, e in header.items()}

    # 7. Load it: streamed from the host to the worker, nothing kept on the coordinator.
    loaded = api.post("/api/v3/models", {"source": source}, key=key, timeout=WORK_S)
    model = expect(loaded, 200)
    model_id = model["modelId"]
    assert model_id.startswith("m_")
    assert sorted(t["name"] for t in model["tensors"]) == sorted(header)
    ids = [t["tensorId"] for t in model["tensors"]]
    assert all(i.startswith("t_") for i in ids) and len(set(ids)) == len(ids)
    assert model["bytesTransferred"] == stories_index["data_bytes"]
    assert model["storedOnCoordinator"] == 0
    assert model["quantize"] == "none" and model["residentBytes"] == stories_index["data_bytes"]

    # 8. A session next to the model.
    opened = api.post("/api/v3/sessions", {"modelId": model_id, "label": "story"}, key=key)
    sid = expect(opened, 200)["session"]["sessionId"]
    assert sid.startswith("s_")

    # 9. KV caches allocated in the network: zeros, kept in the session with retain.
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    width = kv_heads * cfg["hidden_size"] // heads
    layers = cfg["num_hidden_layers"]
    alloc = {"session": sid, "inputs": [],
             "steps": [{"op": "zeros", "in": [], "out": f"{kv}{l}", "params": {"shape": [CACHE_ROWS, width]}}
                       for l in range(layers) for kv in "kv"],
             "retain": {f"{kv}{l}": f"{kv}{l}" for l in range(layers) for kv in "kv"}}
    ran = expect(api.post("/api/v3/graph", {"graph": alloc}, key=key, timeout=WORK_S), 200)
    assert ran["outputs"] == {}, "retained values are kept, not returned"

    # 10. Compile the whole decode step once.
    template = decode_graph(model_id, cfg, CACHE_ROWS)
    compiled = expect(api.post("/api/v3/graphs", {"label": "decode", "graph": template}, key=key, timeout=WORK_S), 200)
    graph_id = compiled["graphId"]
    assert graph_id.startswith("gt_")
    assert sorted(compiled["bindings"]) == ["ids", "pos"]
    assert compiled["steps"] == len(template["steps"])
    assert compiled["savedPerCall"] == compiled["bodyBytes"] - compiled["perCallBytes"]
    assert compiled["perCallBytes"] < compiled["bodyBytes"]

    # 11. Decode: one round trip per token. The prompt is fed token by token; after it,
    # each call feeds the token the previous call chose.
    prompt, greedy = stories_golden["prompt_ids"], stories_golden["greedy_ids"]
    seq = list(prompt)
    calls = 0
    for pos in range(len(greedy) - 1):
        r = api.post("/api/v3/graph", {"graphId": graph_id, "session": sid, "bind": {"ids": [seq[pos]], "pos": pos}},
                     key=key, timeout=WORK_S)
        calls += 1
        out = expect(r, 200)["outputs"]
        assert list(out) == ["tok"] and out["tok"]["shape"] == [1]
        token = int(out["tok"]["data"][0])
        if pos + 1 >= len(seq):  # past the prompt: the model's choice is the next input
            seq.append(token)
    assert seq == greedy, f"greedy decode diverged:\n got      {seq}\n expected {greedy}"
    assert len(seq) - len(prompt) >= 28

    # 12. The session holds the ten caches, updated in place, and counts its calls.
    info = expect(api.get(f"/api/v3/sessions/{sid}", key=key), 200)
    assert info["sessionId"] == sid
    tensors = {t["name"]: t for t in info["tensors"]}
    assert sorted(tensors) == sorted(f"{kv}{l}" for l in range(layers) for kv in "kv")
    for t in tensors.values():
        assert t["shape"] == [CACHE_ROWS, width] and t["dtype"] == "f32" and t["bytes"] == CACHE_ROWS * width * 4
    assert info["bytes"] == 2 * layers * CACHE_ROWS * width * 4
    assert info["steps"] == 1 + calls, f"steps should count the session's calls (1 allocation + {calls} decode steps)"

    # 13. Tidy up.
    expect(api.delete(f"/api/v3/sessions/{sid}", key=key), 200)
    expect(api.get(f"/api/v3/sessions/{sid}", key=key), 404, sid)
    expect(api.delete(f"/api/v3/graphs/{graph_id}", key=key), 200)
    expect(api.delete(f"/api/v3/models/{model_id}", key=key), 200)
    server.assert_up()
