"""Claims the docs make that had no test of their own (issue: hardening), each checked with
real processes: the durable budget's 413 (CKP-06); an explicit checkpoint and restore on a
single-worker session (CKP-01…05); the v2 upload quota's 413 (VER-20, LIM-14); a volunteer that
goes silent (SIGSTOP, socket still open) declared dead after the heartbeat window; the model
host killed mid-transfer leaving nothing half-loaded (LOAD); `quantize: "auto"` and
`--default-quantize` choosing q8 and q4 (QNT); volunteers exiting with status 3 when the
coordinator goes away; chat ending with `stop` at a template's end-of-turn token and with
`length` when maxTokens is cut to the context (CHAT); the production PBKDF2 iteration count
(Z-01)."""
from __future__ import annotations

import base64
import json
import shutil
import signal
import sqlite3
import struct
import subprocess
import threading
import time

import numpy as np
import pytest

from e2e_util import STORIES_DIR, Process, binary, cluster_port, expect, start_with_free_port, write_safetensors
from test_cluster import Cluster

STORIES = "hf:local/stories260K"
STORIES_BYTES = 1040128  # resident f32


def zeros_session(api, key, rows, model=None):
    """A session holding acc = zeros [rows, 25] (100 bytes a row)."""
    body = {"modelId": model} if model else {}
    sid = expect(api.post("/api/v3/sessions", body, key=key), 200)["session"]["sessionId"]
    expect(api.post("/api/v3/graph", {"graph": {"session": sid, "inputs": [],
                                                "steps": [{"op": "zeros", "out": "z", "params": {"shape": [rows, 25]}}],
                                                "outputs": [], "retain": {"acc": "z"}}}, key=key), 200)
    return sid


def write_row(api, key, sid, rows, offset, value):
    return expect(api.post("/api/v3/graph", {"graph": {
        "session": sid, "inputs": [{"name": "acc", "session": "acc", "shape": [rows, 25]},
                                   {"name": "v", "shape": [1, 25], "data": [float(value)] * 25}],
        "steps": [{"op": "cache_write", "in": ["acc", "v"], "out": "w", "params": {"offset": offset}}],
        "outputs": []}}, key=key), 200)


def first_column(api, key, sid, rows):
    r = expect(api.post("/api/v3/graph", {"graph": {
        "session": sid, "inputs": [{"name": "acc", "session": "acc", "shape": [rows, 25]}],
        "steps": [{"op": "scale", "in": ["acc"], "out": "y", "params": {"factor": 1}}], "outputs": ["y"]}}, key=key), 200)
    data = r["outputs"]["y"]["data"]
    return [data[i * 25] for i in range(rows)]


def test_a_checkpoint_over_the_durable_budget_is_413_naming_both_numbers(start_server):
    """CKP-06: the budget is checked against the session's bytes before anything is copied."""
    server = start_server("--dev", "--durable-budget", "150000")
    api = server.api
    key = server.account("budget")[1]
    small = zeros_session(api, key, 1000)  # 100,000 bytes: fits
    expect(api.post(f"/api/v3/sessions/{small}/checkpoint", {}, key=key), 200)
    big = zeros_session(api, key, 600)  # 60,000 more than the 50,000 left
    r = api.post(f"/api/v3/sessions/{big}/checkpoint", {}, key=key)
    expect(r, 413, big, "needs 60000 bytes", "only 50000 bytes", "durable budget")
    # a new checkpoint of the same session replaces its old one within the budget
    expect(api.post(f"/api/v3/sessions/{small}/checkpoint", {}, key=key), 200)
    # and after deleting the first, the second fits
    expect(api.delete(f"/api/v3/sessions/{small}", key=key), 200)
    expect(api.post(f"/api/v3/sessions/{big}/checkpoint", {}, key=key), 200)
    server.assert_up()


def test_explicit_checkpoint_and_restore_on_a_single_worker_session(server):
    """CKP-01…05: checkpoint answers {sessionId, tensors, bytes, step}; restore puts the
    tensors and the step count back, whatever was written since, as often as asked."""
    api = server.api
    key = server.account("ckpt-single")[1]
    sid = zeros_session(api, key, 4)
    write_row(api, key, sid, 4, 0, 3)
    ck = expect(api.post(f"/api/v3/sessions/{sid}/checkpoint", {}, key=key), 200)
    assert ck == {"sessionId": sid, "tensors": 1, "bytes": 400, "step": 2}
    write_row(api, key, sid, 4, 1, 8)
    write_row(api, key, sid, 4, 0, 9)
    assert first_column(api, key, sid, 4) == [9, 8, 0, 0]
    for _ in range(2):
        r = expect(api.post(f"/api/v3/sessions/{sid}/restore", {}, key=key), 200)
        assert r == {"sessionId": sid, "tensors": 1, "bytes": 400, "step": 2}
        assert expect(api.get(f"/api/v3/sessions/{sid}", key=key), 200)["steps"] == 2
        assert first_column(api, key, sid, 4) == [3, 0, 0, 0]
    other = zeros_session(api, key, 4)
    expect(api.post(f"/api/v3/sessions/{other}/restore", {}, key=key), 409, "no checkpoint")


def test_the_v2_upload_quota_is_413(start_server):
    """VER-20 / LIM-14: uploads count against the key's quota; past it 413 says what is left."""
    server = start_server("--dev", "--v2-quota", "1000")
    api = server.api
    key = server.account("quota")[1]
    versions = expect(api.get("/api/versions"), 200)
    assert versions["limits"]["v2QuotaBytes"] == 1000
    t1 = expect(api.post("/api/v2/tensors", {"shape": [160], "data": [1.0] * 160}, key=key), 200)["tensorId"]
    data = base64.b64encode(struct.pack("<100f", *([2.0] * 100))).decode()
    expect(api.post("/api/v2/tensors", {"shape": [100], "dataB64": data}, key=key), 413,
           "400 bytes", "v2 upload quota", "360 of 1000 bytes left")
    # another key has its own quota; deleting frees this one's
    other = server.account("quota2")[1]
    expect(api.post("/api/v2/tensors", {"shape": [100], "dataB64": data}, key=other), 200)
    expect(api.delete(f"/api/v2/tensors/{t1}", key=key), 200)
    expect(api.post("/api/v2/tensors", {"shape": [100], "dataB64": data}, key=key), 200)
    # Uploads in flight count too: of eight sent at once by a fresh key, each of 400 of its 1000
    # bytes, exactly two fit (each alone would pass the check).
    third = server.account("quota3")[1]
    replies = [None] * 8

    def upload(i):
        replies[i] = api.post("/api/v2/tensors", {"shape": [100], "dataB64": data}, key=third, timeout=30)

    threads = [threading.Thread(target=upload, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.status for r in replies) == [200] * 2 + [413] * 6, [r.status for r in replies]
    server.assert_up()


def cluster_server(start_server, tmp_path_factory, name, *flags):
    cport = cluster_port()
    server = start_server("--dev", "--workers", "0", "--cluster-port", str(cport), *flags)
    c = Cluster(server, cport, tmp_path_factory.mktemp(name))
    c.key = server.account(name)[1]
    return c


def test_a_silent_volunteer_is_declared_dead_after_the_heartbeat_window(start_server, tmp_path_factory):
    """A volunteer stopped with SIGSTOP keeps its socket open but sends no heartbeats: the
    middleman declares it dead after about five seconds, not at once and not never; its model
    is then placed on the volunteer left."""
    c = cluster_server(start_server, tmp_path_factory, "silent")
    try:
        c.join("w_quiet", "64M")
        model = expect(c.server.api.post("/api/v3/models", {"source": STORIES}, key=c.key, timeout=60), 200)["modelId"]
        c.join("w_spare", "64M")
        proc = c.workers["w_quiet"].proc
        proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            # (a status call waits for the silent worker's answer until it is declared dead)
            c.wait_for(lambda s: [w["workerId"] for w in s["pool"]] == ["w_spare"], "w_quiet declared dead", timeout=20)
            took = time.monotonic() - t0
            assert 3.5 <= took <= 12, f"declared dead after {took:.1f} s, not after the 5 s window"
            deadline = time.monotonic() + 20
            while True:
                m = [m for m in expect(c.server.api.get("/api/v3/models", key=c.key), 200)["models"] if m["modelId"] == model][0]
                if [p["workerId"] for p in m["placement"]] == ["w_spare"]:
                    break
                assert time.monotonic() < deadline, m
                time.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGCONT)
        c.server.assert_up()
    finally:
        c.stop_all()


def test_a_model_host_killed_mid_transfer_leaves_nothing_half_loaded(start_server, hub_dir, slow_model, tmp_path_factory):
    """LOAD: the host serving a 77 MB checkpoint is SIGKILLed once the load has reserved its
    room (the transfer under way): the load fails naming the host, the worker's memory is all
    free again, and no model is listed."""
    logs = tmp_path_factory.mktemp("dying-host")
    host, port = start_with_free_port(lambda p: Process("mpakt host (dying)", [binary(), "host", hub_dir, "--port", p],
                                                        logs / f"host-{p}.log"), r"mpakt host: serving")
    try:
        server = start_server("--dev", hf_endpoint=f"http://127.0.0.1:{port}")
        api = server.api
        key = server.account("halfload")[1]
        total = expect(api.get("/api/v3/status", key=key), 200)["freeBytes"]
        out = {}
        t = threading.Thread(target=lambda: out.update(r=api.post("/api/v3/models", {"source": slow_model}, key=key,
                                                                  timeout=120)))
        t.start()
        deadline = time.monotonic() + 30
        while expect(api.get("/api/v3/status", key=key), 200)["freeBytes"] == total:
            assert time.monotonic() < deadline and t.is_alive(), f"the load never reserved its room: {out}"
            time.sleep(0.005)
        host.kill()
        t.join()
        r = out["r"]
        assert r.status in (400, 502, 503) and "127.0.0.1" in r.error, r
        assert expect(api.get("/api/v3/models", key=key), 200)["models"] == []
        deadline = time.monotonic() + 10
        while expect(api.get("/api/v3/status", key=key), 200)["freeBytes"] != total:
            assert time.monotonic() < deadline, "the failed load left weights or a reservation behind"
            time.sleep(0.05)
        server.assert_up()
    finally:
        host.kill()


@pytest.fixture(scope="module")
def stories_sizes(server):
    """stories260K's resident bytes as loaded none / q8 / q4."""
    api = server.api
    key = server.account("sizes")[1]
    sizes = {}
    for q in ("none", "q8", "q4"):
        r = expect(api.post("/api/v3/models", {"source": STORIES, "quantize": q}, key=key, timeout=60), 200)
        sizes[q] = r["residentBytes"]
        expect(api.delete(f"/api/v3/models/{r['modelId']}", key=key), 200)
    assert sizes["none"] > sizes["q8"] > sizes["q4"], sizes
    return sizes


def test_quantize_auto_and_default_quantize_choose_q8_and_q4(start_server, stories_sizes):
    """QNT: `auto` takes the first of none, q8, q4 that fits; `--default-quantize` applies to
    loads that do not say, and an explicit `quantize` still wins."""
    mb = 1_000_000

    def worker_memory(between):  # a size (rounded to MB, as needs are) that holds one and not the next
        lo, hi = between
        return str((lo + hi) // 2 // 1000) + "K"

    for want, room in (("q8", (stories_sizes["q8"], stories_sizes["none"])),
                       ("q4", (stories_sizes["q4"], stories_sizes["q8"]))):
        server = start_server("--dev", "--worker-memory", worker_memory(room), "--default-quantize", "auto")
        key = server.account("auto")[1]
        assert expect(server.api.get("/api/versions"), 200)["limits"]["defaultQuantize"] == "auto"
        for body in ({"source": STORIES}, {"source": STORIES, "quantize": "auto"}):
            r = server.api.post("/api/v3/models", body, key=key, timeout=60)
            if r.status != 200:  # the needs round up to whole MB: the pool may have no room then
                pytest.fail(f"{want}: {r!r} with worker memory {worker_memory(room)} (sizes {stories_sizes}, MB {mb})")
            assert r.json["quantize"] == want and r.json["residentBytes"] == stories_sizes[want], (want, r.json)
            expect(server.api.delete(f"/api/v3/models/{r.json['modelId']}", key=key), 200)
    server = start_server("--dev", "--default-quantize", "q4")
    key = server.account("q4default")[1]
    r = expect(server.api.post("/api/v3/models", {"source": STORIES}, key=key, timeout=60), 200)
    assert r["quantize"] == "q4" and r["residentBytes"] == stories_sizes["q4"]
    r = expect(server.api.post("/api/v3/models", {"source": STORIES, "quantize": "none"}, key=key, timeout=60), 200)
    assert r["quantize"] == "none" and r["residentBytes"] == stories_sizes["none"]


def test_volunteers_exit_with_status_3_when_the_coordinator_goes_away(start_server, tmp_path_factory):
    c = cluster_server(start_server, tmp_path_factory, "orphans")
    try:
        for name in ("w_a", "w_b"):
            c.join(name, "64M")
        c.server.process.kill()  # SIGKILL: no goodbye reaches them
        for name, p in c.workers.items():
            assert p.proc.wait(timeout=20) == 3, f"{name} exited with {p.proc.returncode}:\n{p.output()[-2000:]}"
        c.workers.clear()
    finally:
        c.stop_all()


# ---- chat ending on the end-of-turn token, and at the context's end

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
          "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def write_fixed_chat_model(folder, favourite, context):
    """A one-layer Phi model whose final LayerNorm has zero weight and bias, so its logits are
    exactly lm_head.bias: it always picks `favourite`. stories260K's tokenizer with ChatML's two
    tokens added (ids 512, 513) and a ChatML template; `context` positions."""
    folder.mkdir(parents=True, exist_ok=True)
    tok = json.loads((STORIES_DIR / "tokenizer.json").read_text())
    tok["added_tokens"] = list(tok.get("added_tokens") or []) + [
        {"id": 512, "content": "<|im_start|>", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True},
        {"id": 513, "content": "<|im_end|>", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}]
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML, "eos_token": "<|im_end|>",
                                                             "bos_token": None}))
    v, h, inter = 514, 32, 64
    (folder / "config.json").write_text(json.dumps({
        "model_type": "phi", "architectures": ["PhiForCausalLM"], "vocab_size": v, "hidden_size": h,
        "intermediate_size": inter, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4,
        "max_position_embeddings": context, "layer_norm_eps": 1e-5, "partial_rotary_factor": 0.5,
        "rope_theta": 10000.0, "hidden_act": "gelu_new", "tie_word_embeddings": False}))
    rng = np.random.default_rng(1)
    shapes = {"model.embed_tokens.weight": [v, h], "lm_head.weight": [v, h], "lm_head.bias": [v],
              "model.final_layernorm.weight": [h], "model.final_layernorm.bias": [h]}
    p = "model.layers.0."
    for n in ("q_proj", "k_proj", "v_proj", "dense"):
        shapes[p + f"self_attn.{n}.weight"] = [h, h]
        shapes[p + f"self_attn.{n}.bias"] = [h]
    shapes.update({p + "mlp.fc1.weight": [inter, h], p + "mlp.fc1.bias": [inter], p + "mlp.fc2.weight": [h, inter],
                   p + "mlp.fc2.bias": [h], p + "input_layernorm.weight": [h], p + "input_layernorm.bias": [h]})
    tensors = {}
    for name, shape in shapes.items():
        a = rng.standard_normal(shape).astype(np.float32) * np.float32(0.1)
        if name.startswith("model.final_layernorm"):
            a = np.zeros(shape, np.float32)
        if name == "lm_head.bias":
            a = np.zeros(shape, np.float32)
            a[favourite] = 5.0
        tensors[name] = ("F32", shape, a.tobytes())
    write_safetensors(folder / "model.safetensors", tensors)


def test_chat_stops_at_the_end_of_turn_token_and_cuts_max_tokens_to_the_context(server, hub_dir):
    """CHAT: with a ChatML model, a reply that reaches <|im_end|> ends with finishReason
    "stop" (the token is not in the text); a model that never stops, asked for 4096 tokens,
    gets what fits its context (less the rows a last verify pass may write) and "length"."""
    api = server.api
    key = server.account("chatml")[1]
    write_fixed_chat_model(hub_dir / "fixed" / "stopper", 513, 64)
    write_fixed_chat_model(hub_dir / "fixed" / "talker", 100, 64)
    msgs = [{"role": "user", "content": "Once upon a time"}]
    for speculative in (False, True):
        r = expect(api.post("/api/v3/chat", {"model": "hf:fixed/stopper", "messages": msgs, "temperature": 0,
                                             "speculative": speculative, "stream": False}, key=key, timeout=120), 200)
        assert r["finishReason"] == "stop" and r["text"] == "" and r["usage"]["completionTokens"] == 1, r
        r = expect(api.post("/api/v3/chat", {"model": "hf:fixed/talker", "messages": msgs, "temperature": 0,
                                             "maxTokens": 4096, "speculative": speculative, "stream": False},
                            key=key, timeout=120), 200)
        margin = 4 if speculative else 0
        assert r["finishReason"] == "length", r
        assert r["usage"]["completionTokens"] == 64 - r["usage"]["promptTokens"] - margin, r
        assert r["usage"]["promptTokens"] > 8  # the ChatML turn markers were rendered
    server.assert_up()


def test_the_production_pbkdf2_iteration_count(start_server):
    """Z-01 (decisions: passwords only as a salted slow hash): `mpakt serve` stores PBKDF2-SHA256
    with 200,000 iterations and a random salt per account."""
    server = start_server("--dev")
    for name in ("hash1", "hash2"):
        server.sign_up(name, password="the same password")
    db = sqlite3.connect(server.data_dir / "accounts.sqlite3")
    try:
        rows = db.execute("SELECT password_scheme, password_iterations, password_salt FROM accounts").fetchall()
    finally:
        db.close()
    assert len(rows) == 2
    assert all(r[0] == "pbkdf2-sha256" and r[1] == 200000 for r in rows), rows
    assert rows[0][2] != rows[1][2] and len(rows[0][2]) >= 16, rows
