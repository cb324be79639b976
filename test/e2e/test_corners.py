"""Corners of lost workers and loads (issue: hardening, checklist DUR-*, CKP-*, VER-20, CHAT-*),
with real processes on loopback: a lost model that only fits spread is recorded whole when
placed again (graphs run, DELETE frees every part); a checkpointed session opened without a
model is restored too; a session whose calls since its checkpoint cannot be replayed goes back
to its checkpoint and its next call says which step; a v2 tensor lost with its worker says to
upload it again; chat never reuses a partial copy of a source."""
from __future__ import annotations

import json
import time

import pytest

from e2e_util import STORIES_DIR, expect
from test_cluster import Cluster, graph_cli, start_cluster

GOLDEN = json.loads((STORIES_DIR / "goldens" / "stories260K_once_upon.json").read_text())
STORIES = "hf:local/stories260K"


def new_cluster(start_server, tmp_path_factory, name):
    return start_cluster(start_server, tmp_path_factory, name, Cluster)


def placement(c, model):
    listed = [m for m in expect(c.server.api.get("/api/v3/models", key=c.key), 200)["models"] if m["modelId"] == model]
    return [p["workerId"] for p in listed[0]["placement"]] if listed else []


def wait_placed(c, model, n, timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        names = placement(c, model)
        if len(names) == n and all(w in c.workers for w in names):
            return names
        assert time.monotonic() < deadline, f"placement never settled: {names}"
        time.sleep(0.1)


def greedy_decode(c, model):
    """A fresh session on the model: caches, the prompt, and greedy steps give the golden ids."""
    api, key = c.server.api, c.key
    sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
    expect(api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", "64"), session=sid)}, key=key), 200)
    step = expect(api.post("/api/v3/graphs", {"graph": graph_cli("--model-id", model, "--compiled", "--tokens", "1",
                                                                 "--cache", "64", "--argmax")}, key=key), 200)["graphId"]
    prompt, golden = GOLDEN["prompt_ids"], GOLDEN["greedy_ids"]

    def feed(tok, pos):
        r = api.post("/api/v3/graph", {"graphId": step, "session": sid, "bind": {"ids": [tok], "pos": pos}}, key=key,
                     timeout=60)
        return int(expect(r, 200)["outputs"]["tok"]["data"][0])

    for pos, t in enumerate(prompt):
        tok = feed(t, pos)
    out = list(prompt) + [tok]
    while len(out) < len(golden):
        out.append(feed(out[-1], len(out) - 1))
    assert out == golden
    expect(api.delete(f"/api/v3/sessions/{sid}", key=key), 200)


def test_a_lost_model_placed_again_spread_is_recorded_whole(start_server, tmp_path_factory):
    """DUR: stories260K (1.04 MB) sits whole on w_big; when w_big is killed only two 700 KiB
    volunteers are left, so it is placed again spread over both. Every part is recorded:
    graphs decode the golden tokens through the stages, and DELETE frees both shares."""
    c = new_cluster(start_server, tmp_path_factory, "respread")
    try:
        c.join("w_big", "2M")
        model = expect(c.server.api.post("/api/v3/models", {"source": STORIES}, key=c.key, timeout=60), 200)["modelId"]
        assert placement(c, model) == ["w_big"]
        c.join("w_a", "700K")
        c.join("w_b", "700K")
        before = {w["workerId"]: w["freeBytes"] for w in c.status(c.key)["pool"]}
        c.kill("w_big")
        assert sorted(wait_placed(c, model, 2)) == ["w_a", "w_b"]
        greedy_decode(c, model)
        held = {w["workerId"]: w["freeBytes"] for w in c.status(c.key)["pool"]}
        assert held["w_a"] < before["w_a"] and held["w_b"] < before["w_b"], (before, held)
        expect(c.server.api.delete(f"/api/v3/models/{model}", key=c.key), 200)
        c.wait_for(lambda s: all(w["freeBytes"] == before[w["workerId"]] for w in s["pool"]),
                   "both shares freed by DELETE")
        c.server.assert_up()
    finally:
        c.stop_all()


def run(c, body, status=200):
    return expect(c.server.api.post("/api/v3/graph", body, key=c.key, timeout=60), status)


def alloc_acc(sid, rows=1000):
    """A session tensor acc [rows, 25] of zeros (100 KB at 1000 rows)."""
    return {"graph": {"session": sid, "inputs": [], "steps": [{"op": "zeros", "out": "z", "params": {"shape": [rows, 25]}}],
                      "outputs": [], "retain": {"acc": "z"}}}


def write_row(sid, offset, value, rows=1000):
    return {"graph": {"session": sid,
                      "inputs": [{"name": "acc", "session": "acc", "shape": [rows, 25]},
                                 {"name": "v", "shape": [1, 25], "data": [float(value)] * 25}],
                      "steps": [{"op": "cache_write", "in": ["acc", "v"], "out": "w", "params": {"offset": offset}}],
                      "outputs": []}}


def read_rows(sid, rows=1000):
    return {"graph": {"session": sid, "inputs": [{"name": "acc", "session": "acc", "shape": [rows, 25]}],
                      "steps": [{"op": "slice", "in": ["acc"], "out": "head", "params": {"start": 0, "length": 4, "axis": 0}}],
                      "outputs": ["head"]}}


def firsts(reply):
    data = reply["outputs"]["head"]["data"]
    return [data[r * 25] for r in range(4)]


def holder_of(c, before):
    was = {w["workerId"]: w["freeBytes"] for w in before["pool"]}
    dropped = [w["workerId"] for w in c.status(c.key)["pool"] if w["freeBytes"] < was.get(w["workerId"], 0)]
    assert len(dropped) == 1, dropped
    return dropped[0]


def test_a_checkpointed_session_opened_without_a_model_is_restored(start_server, tmp_path_factory):
    """CKP/DUR: a session opened with no modelId, checkpointed, then written: when its
    volunteer is killed it is restored on the other one and the write replayed."""
    c = new_cluster(start_server, tmp_path_factory, "modelless")
    try:
        c.join("w_1", "64M")
        c.join("w_2", "64M")
        before = c.status(c.key)
        sid = expect(c.server.api.post("/api/v3/sessions", {}, key=c.key), 200)["session"]["sessionId"]
        run(c, alloc_acc(sid))
        victim = holder_of(c, before)
        run(c, write_row(sid, 1, 7))
        expect(c.server.api.post(f"/api/v3/sessions/{sid}/checkpoint", {}, key=c.key), 200)
        run(c, write_row(sid, 2, 9))  # journaled: replayed after the restore
        c.kill(victim)
        assert firsts(run(c, read_rows(sid))) == [0, 7, 9, 0]
        info = expect(c.server.api.get(f"/api/v3/sessions/{sid}", key=c.key), 200)
        assert info["steps"] == 4
        c.server.assert_up()
    finally:
        c.stop_all()


def test_a_session_whose_calls_cannot_be_replayed_goes_back_to_its_checkpoint(start_server, tmp_path_factory):
    """decisions.md (Durability): a multi-session graph since the checkpoint (or a journaled
    call that fails when replayed: its compiled graph was deleted) cannot be replayed; the
    session is restored to its checkpoint and its next call fails once with 409 saying which
    step it is at; the calls after that see the checkpoint's tensors."""
    c = new_cluster(start_server, tmp_path_factory, "unreplayable")
    api, key = c.server.api, c.key
    try:
        c.join("w_1", "64M")
        model = expect(api.post("/api/v3/models", {"source": STORIES}, key=key, timeout=60), 200)["modelId"]
        c.join("w_2", "64M")
        victim = placement(c, model)[0]
        sessions = [expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
                    for _ in range(3)]
        a, b, g = sessions
        for sid in sessions:
            run(c, alloc_acc(sid, 8))
            run(c, write_row(sid, 0, 5, 8))
            assert expect(api.post(f"/api/v3/sessions/{sid}/checkpoint", {}, key=key), 200)["step"] == 2
            run(c, write_row(sid, 1, 6, 8))
        # a: a multi-session graph since its checkpoint
        run(c, {"graph": {"session": a, "sessions": [a, b],
                          "inputs": [{"name": "x", "session": "acc", "of": 0, "shape": [8, 25]},
                                     {"name": "y", "session": "acc", "of": 1, "shape": [8, 25]}],
                          "steps": [{"op": "add", "in": ["x", "y"], "out": "s"}], "outputs": []}})
        # g: a compiled call since its checkpoint, then the template deleted
        tpl = expect(api.post("/api/v3/graphs", {"graph": {
            "inputs": [{"name": "acc", "session": "acc", "shape": [8, 25]}, {"name": "v", "shape": [1, 25], "bind": "v"}],
            "steps": [{"op": "cache_write", "in": ["acc", "v"], "out": "w", "params": {"offset": 2}}],
            "outputs": []}}, key=key), 200)["graphId"]
        run(c, {"graphId": tpl, "session": g, "bind": {"v": [3.0] * 25}})
        expect(api.delete(f"/api/v3/graphs/{tpl}", key=key), 200)
        c.kill(victim)
        for sid, why in ((a, "multi-session"), (g, "failed when replayed")):
            r = api.post("/api/v3/graph", read_rows(sid, 8), key=key, timeout=60)
            expect(r, 409, sid, "restored from its checkpoint", "step 2", why)
            assert firsts(run(c, read_rows(sid, 8))) == [5, 0, 0, 0]
            assert expect(api.get(f"/api/v3/sessions/{sid}", key=key), 200)["steps"] == 3
        # b was replayable (the multi-session graph ran on a, its primary): nothing lost
        assert firsts(run(c, read_rows(b, 8))) == [5, 6, 0, 0]
        c.server.assert_up()
    finally:
        c.stop_all()


def test_a_v2_tensor_lost_with_its_worker_says_to_upload_it_again(start_server, tmp_path_factory):
    """VER-20: v2 uploads are not kept on the coordinator; one whose worker left is gone."""
    c = new_cluster(start_server, tmp_path_factory, "v2lost")
    api, key = c.server.api, c.key
    try:
        c.join("w_1", "64M")
        tid = expect(api.post("/api/v2/tensors", {"shape": [2], "data": [1, 2]}, key=key), 200)["tensorId"]
        c.join("w_2", "64M")
        c.kill("w_1")
        c.wait_for(lambda s: [w["workerId"] for w in s["pool"]] == ["w_2"], "w_1 gone")
        g = {"graph": {"inputs": [{"name": "t", "tensorId": tid}], "steps": [{"op": "scale", "in": ["t"], "out": "y",
                                                                           "params": {"factor": 2}}], "outputs": ["y"]}}
        r = api.post("/api/v2/graph", g, key=key, timeout=60)
        expect(r, 503, tid, "upload it again")
        assert "load it again" not in r.error.replace("upload it again", "")  # the message models get
        # a new upload works at once
        tid2 = expect(api.post("/api/v2/tensors", {"shape": [2], "data": [1, 2]}, key=key), 200)["tensorId"]
        g["graph"]["inputs"][0]["tensorId"] = tid2
        assert expect(api.post("/api/v2/graph", g, key=key), 200)["outputs"]["y"]["data"] == [2, 4]
    finally:
        c.stop_all()


def test_chat_loads_the_whole_model_rather_than_reuse_a_partial_copy(server):
    """CHAT: an account holding only a few layers of a source (a load with include) chatting
    with that source gets the whole model loaded, not a failure on a missing weight."""
    from test_chat import user
    api = server.api
    key = server.account("partial-chat")[1]
    part = expect(api.post("/api/v3/models", {"source": STORIES, "include": ["model.layers.0.*"]}, key=key,
                           timeout=60), 200)
    r = expect(api.post("/api/v3/chat", {"model": STORIES, "messages": user("Once upon a time"), "maxTokens": 8,
                                         "temperature": 0, "stream": False}, key=key, timeout=120), 200)
    assert r["finishReason"] in ("stop", "length") and r["text"], r
    models = expect(api.get("/api/v3/models", key=key), 200)["models"]
    assert sorted(m["whole"] for m in models) == [False, True]
    whole = [m for m in models if m["whole"]][0]
    assert whole["modelId"] != part["modelId"] and whole["tensors"] == 47
    # the next chat reuses the whole copy rather than loading again
    expect(api.post("/api/v3/chat", {"model": STORIES, "messages": user("Once"), "maxTokens": 4, "temperature": 0,
                                     "stream": False}, key=key, timeout=120), 200)
    assert len(expect(api.get("/api/v3/models", key=key), 200)["models"]) == 2
