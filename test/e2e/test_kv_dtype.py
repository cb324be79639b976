"""KV caches held at half width through real processes: stories260K loaded with
`kvDtype: "bf16"` beside a default (f32) copy; the chat decodes on bf16 caches, its session
holds them at half the bytes, a prefill on that session gives logits within bf16's rounding
of the f32 copy's, and a checkpoint of it restores its bf16 rows exactly (CKP-01, CKP-03;
SES-01/02 listing, OP-ATTN-19 cache rows hidden by posOffset). The op catalogue keeps zeros'
parameters (VER-19, OP-ZEROS-01), and a bad kvDtype is refused naming the field."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from e2e_util import expect

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "chat" / "stories260K_greedy.json").read_text())
STORIES = "hf:local/stories260K"
CONTEXT = 512  # min(max_position_embeddings, 4096): the chat's cache rows


@pytest.fixture(scope="module")
def key(server):
    return server.account("halfcache")[1]


@pytest.fixture(scope="module")
def models(server, key):
    """modelId by kvDtype: the same checkpoint loaded twice."""
    out = {}
    for kv in ("bf16", "f32"):
        body = {"source": STORIES} if kv == "f32" else {"source": STORIES, "kvDtype": kv}
        loaded = expect(server.api.post("/api/v3/models", body, key=key, timeout=120), 200)
        assert loaded["kvDtype"] == kv
        out[kv] = loaded["modelId"]
    return out


def chat(server, key, model_id, speculative=False, max_tokens=8):
    case = GOLDEN["cases"][0]
    body = {"model": model_id, "messages": [{"role": "user", "content": case["prompt"]}], "maxTokens": max_tokens,
            "temperature": 0, "speculative": speculative, "stream": False}
    return expect(server.api.post("/api/v3/chat", body, key=key, timeout=120), 200)


def logits(server, key, model_id, session, ids, pos):
    """The logits of a prefill of `ids` from `pos` through the session's caches (the model's
    own graph, run as a client's inline graph)."""
    g = expect(server.api.post(f"/api/v3/models/{model_id}/graph", {"ids": ids, "pos": pos, "cacheRows": CONTEXT},
                               key=key), 200)["graph"]
    out = expect(server.api.post("/api/v3/graph", {"graph": g, "session": session}, key=key), 200)["outputs"]["logits"]
    return np.array(out["data"], dtype=np.float64).reshape(out["shape"])


def test_a_bad_kv_dtype_is_refused_naming_the_field(server, key):
    expect(server.api.post("/api/v3/models", {"source": STORIES, "kvDtype": "int3"}, key=key), 400, "kvDtype", "int3")
    expect(server.api.post("/api/v3/models", {"source": STORIES, "kvDtype": 16}, key=key), 400, "kvDtype")


def test_the_model_list_shows_the_kv_dtype(server, key, models):
    listed = {m["modelId"]: m for m in expect(server.api.get("/api/v3/models", key=key), 200)["models"]}
    assert listed[models["bf16"]]["kvDtype"] == "bf16" and listed[models["f32"]]["kvDtype"] == "f32"


def test_a_client_graph_cannot_name_zeros_dtype(server, key):
    """The op catalogue stays the spec's: dtype is the server's own parameter."""
    g = {"inputs": [], "steps": [{"op": "zeros", "in": [], "out": "z", "params": {"shape": [2, 2], "dtype": "bf16"}}],
         "outputs": ["z"]}
    expect(server.api.post("/api/v3/graph", {"graph": g}, key=key), 400, "unknown parameter dtype")
    ops = expect(server.api.get("/api/ops"), 200)
    zeros = [o for o in ops["ops"] if o["op"] == "zeros"][0]
    assert set(zeros["params"]) == {"shape"}


def test_chat_decodes_on_half_caches_close_to_f32(server, key, models):
    sessions = {}
    for kv, mid in models.items():
        done = chat(server, key, mid)
        assert done["kvDtype"] == kv and done["finishReason"] in ("stop", "length"), done
        sessions[kv] = done["sessionId"]
        info = expect(server.api.get(f"/api/v3/sessions/{sessions[kv]}", key=key), 200)
        k0 = [t for t in info["tensors"] if t["name"] == "k0"][0]
        assert k0["dtype"] == kv and k0["shape"][0] == CONTEXT
        assert k0["bytes"] == CONTEXT * k0["shape"][1] * (2 if kv == "bf16" else 4)
        hist = [t for t in info["tensors"] if t["name"] == "hist"][0]
        assert hist["dtype"] == "f32"  # only the KV caches are halved
    ids = GOLDEN["cases"][0]["prompt_ids"] + GOLDEN["cases"][0]["new_ids"][:6]
    half = logits(server, key, models["bf16"], sessions["bf16"], ids, 0)
    full = logits(server, key, models["f32"], sessions["f32"], ids, 0)
    diff = np.abs(half - full).max()
    # bf16 keeps 8 significant bits: stories260K's logits (up to about 20) move by about 0.1
    assert 0 < diff < 0.25, diff
    assert (half.argmax(axis=-1) == full.argmax(axis=-1)).mean() >= 0.9


def test_speculative_decoding_on_half_caches_gives_plain_decodings_tokens(server, key, models):
    """SPC: verify passes read and write bf16 caches exactly as plain steps do."""
    plain = chat(server, key, models["bf16"], speculative=False, max_tokens=40)
    spec = chat(server, key, models["bf16"], speculative=True, max_tokens=40)
    assert spec["text"] == plain["text"] and spec["speculation"] is not None


def test_checkpoint_and_restore_keep_half_caches(server, key, models):
    mid = models["bf16"]
    sid = chat(server, key, mid)["sessionId"]
    before = expect(server.api.get(f"/api/v3/sessions/{sid}", key=key), 200)
    ck = expect(server.api.post(f"/api/v3/sessions/{sid}/checkpoint", key=key), 200)
    assert ck["bytes"] == before["bytes"]
    ids = GOLDEN["cases"][0]["prompt_ids"]
    pos = len(ids) - 1
    # a decode at `pos` reads the rows before it, as the checkpoint holds them
    a = logits(server, key, mid, sid, [ids[-1]], pos)
    logits(server, key, mid, sid, [7, 8, 9, 10][:pos], 0)  # overwrite those rows
    b = logits(server, key, mid, sid, [ids[-1]], pos)
    assert not np.array_equal(a, b)
    restored = expect(server.api.post(f"/api/v3/sessions/{sid}/restore", key=key), 200)
    assert restored["bytes"] == before["bytes"]
    after = expect(server.api.get(f"/api/v3/sessions/{sid}", key=key), 200)
    assert {t["name"]: t["dtype"] for t in after["tensors"]} == {t["name"]: t["dtype"] for t in before["tensors"]}
    c = logits(server, key, mid, sid, [ids[-1]], pos)
    assert np.array_equal(a, c)
