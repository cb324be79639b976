"""A model larger than any one worker, spread over several (issue: cluster — placement and
scheduling; checklist LOAD-*, SES-*, DUR-*). Real `mpakt worker --join` processes on
loopback, each offering 480 KiB: stories260K (1.04 MB) fits on none of them, so the load
places it layer by layer over three, and every graph runs as stages where the weights are.
Greedy tokens equal transformers' (the shared golden), prefill logits equal its logits, a
checkpointed session survives the SIGKILL of a worker holding part of the model (its share is
fetched again onto a spare worker), an unsaved one says to prefill again, and an error in a
step names that step as the client numbered it."""
from __future__ import annotations

import base64
import json
import random
import signal
import threading
import time

import numpy as np
import pytest

from e2e_util import STORIES_DIR, expect, kill_window
from test_cluster import Cluster, graph_cli, start_cluster

GOLDEN = json.loads((STORIES_DIR / "goldens" / "stories260K_once_upon.json").read_text())
GOLDEN_LOGITS = np.load(STORIES_DIR / "goldens" / "stories260K_once_upon_logits_f64.npy")
SMALL = "480K"  # 491,520 bytes: the embeddings and one layer, or two layers, and room for a few sessions


class Spread(Cluster):
    spares = 0

    def spare(self):
        Spread.spares += 1
        return self.join(f"w_spare{Spread.spares}", SMALL)

    def holders(self, model):
        """The workers holding the model, in placement order (waits for any re-placement)."""
        deadline = time.monotonic() + 20
        while True:
            listed = [m for m in expect(self.server.api.get("/api/v3/models", key=self.key), 200)["models"]
                      if m["modelId"] == model]
            names = [p["workerId"] for p in listed[0]["placement"]] if listed else []
            if len(names) == 3 and all(n in self.workers for n in names):
                return names
            assert time.monotonic() < deadline, f"placement never settled: {listed}"
            time.sleep(0.1)


@pytest.fixture
def spread(start_server, tmp_path_factory):
    """Three small workers holding stories260K in three parts, fresh for each test (the
    kill tests change the placement and add spares)."""
    c = start_cluster(start_server, tmp_path_factory, "spread", Spread)
    server = c.server
    for name in ("w_1", "w_2", "w_3"):
        c.join(name, SMALL)
    loaded = expect(server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=c.key, timeout=60), 200)
    c.loaded = loaded
    c.model = loaded["modelId"]
    c.step = expect(server.api.post("/api/v3/graphs", {"graph": graph_cli("--model-id", c.model, "--compiled", "--tokens",
                                                                          "1", "--cache", "64", "--argmax")},
                                    key=c.key), 200)["graphId"]
    yield c
    c.stop_all()
    server.process.terminate()


def new_session(c):
    api, key = c.server.api, c.key
    sid = expect(api.post("/api/v3/sessions", {"modelId": c.model}, key=key), 200)["session"]["sessionId"]
    expect(api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", "64"), session=sid)}, key=key), 200)
    return sid


def feed(c, sid, tok, pos):
    r = c.server.api.post("/api/v3/graph", {"graphId": c.step, "session": sid, "bind": {"ids": [tok], "pos": pos}},
                          key=c.key, timeout=60)
    return int(expect(r, 200)["outputs"]["tok"]["data"][0])


def assert_a_new_session_decodes(c):
    """A new session fed the prompt predicts the golden next token."""
    prompt = GOLDEN["prompt_ids"]
    fresh = new_session(c)
    tok = None
    for pos, t in enumerate(prompt):
        tok = feed(c, fresh, t, pos)
    assert tok == GOLDEN["greedy_ids"][len(prompt)]


def test_the_load_spreads_the_model_layer_by_layer_and_shows_where(spread):
    loaded = spread.loaded
    placement = loaded["placement"]
    assert sorted(p["workerId"] for p in placement) == ["w_1", "w_2", "w_3"]
    assert sum(p["residentBytes"] for p in placement) == loaded["residentBytes"] == 1040128
    assert sum(p["tensors"] for p in placement) == len(loaded["tensors"]) == 47
    # in model order: the embeddings and layer 0 first, then two layers each, a layer never split
    assert placement[0]["layers"] == ["model.embed_tokens.weight", "model.layers.0"]
    assert placement[1]["layers"] == ["model.layers.1", "model.layers.2"]
    assert placement[2]["layers"] == ["model.layers.3", "model.layers.4", "model.norm.weight"]
    for p in placement:
        assert p["residentBytes"] <= 491520
    # the model list and every holder's entry in the status pool say the same
    listed = [m for m in expect(spread.server.api.get("/api/v3/models", key=spread.key), 200)["models"]
              if m["modelId"] == spread.model][0]
    assert [p["workerId"] for p in listed["placement"]] == [p["workerId"] for p in placement]
    for w in spread.status(spread.key)["pool"]:
        assert spread.model in w["models"], w


def test_prefill_logits_equal_transformers(spread):
    """An inline graph over the whole prompt runs as stages on three workers."""
    api, key = spread.server.api, spread.key
    sid = new_session(spread)
    ids = GOLDEN["greedy_ids"][:len(GOLDEN_LOGITS)]  # teacher-forced over the golden text
    g = graph_cli("--model-id", spread.model, "--ids", ",".join(map(str, ids)), "--cache", "64")
    r = expect(api.post("/api/v3/graph", {"graph": dict(g, session=sid), "encoding": "base64"}, key=key, timeout=60), 200)
    out = r["outputs"]["logits"]
    logits = np.frombuffer(base64.b64decode(out["dataB64"]), dtype="<f4").reshape(out["shape"])
    assert logits.shape == GOLDEN_LOGITS.shape
    err = np.abs(logits - GOLDEN_LOGITS).max()
    assert err < 1e-4, err
    # the session's caches now live on the workers whose layers write them, in one namespace
    info = expect(api.get(f"/api/v3/sessions/{sid}", key=key), 200)
    assert sorted(t["name"] for t in info["tensors"]) == sorted([f"{kv}{l}" for kv in "kv" for l in range(5)])
    expect(api.delete(f"/api/v3/sessions/{sid}", key=key), 200)


def test_compiled_decode_and_generation_give_the_golden_tokens(spread):
    api, key = spread.server.api, spread.key
    sid = new_session(spread)
    prompt = GOLDEN["prompt_ids"]
    for pos, tok in enumerate(prompt[:-1]):
        feed(spread, sid, tok, pos)
    n = len(GOLDEN["greedy_ids"]) - len(prompt)
    r = expect(api.post("/api/v3/generate", {"graphId": spread.step, "sessionId": sid, "ids": [prompt[-1]],
                                             "startPos": len(prompt) - 1, "maxNewTokens": n, "stream": False},
                        key=key, timeout=120), 200)
    assert prompt + r["tokens"] == GOLDEN["greedy_ids"]
    assert r["workerLoop"] is False  # no one worker holds what the graph reads
    expect(api.delete(f"/api/v3/sessions/{sid}", key=key), 200)


def test_checkpoint_and_restore_gather_and_deal_out_the_parts(spread):
    """CKP on a spread model: a checkpoint gathers the session's tensors from its three workers
    (and the zeros still waiting to be created), a restore puts each back on the worker its
    layer is on; decoding after the restore goes on from the checkpoint exactly."""
    api, key = spread.server.api, spread.key
    prompt, golden = GOLDEN["prompt_ids"], GOLDEN["greedy_ids"]
    sid = new_session(spread)
    info = expect(api.get(f"/api/v3/sessions/{sid}", key=key), 200)
    assert len(info["tensors"]) == 10 and info["bytes"] == 10 * 64 * 32 * 4  # listed before any worker holds them
    for pos in range(len(prompt) - 1):
        feed(spread, sid, prompt[pos], pos)
    ck = expect(api.post(f"/api/v3/sessions/{sid}/checkpoint", {}, key=key), 200)
    assert ck["bytes"] == 10 * 64 * 32 * 4
    for pos in range(len(prompt) - 1, len(prompt) + 6):  # wander off: other tokens into the caches
        feed(spread, sid, 7, pos)
    expect(api.post(f"/api/v3/sessions/{sid}/restore", {}, key=key), 200)
    tok, out = prompt[-1], []
    for i in range(8):
        tok = feed(spread, sid, tok, len(prompt) - 1 + i)
        out.append(tok)
    assert prompt + out == golden[:len(prompt) + 8]
    expect(api.delete(f"/api/v3/sessions/{sid}", key=key), 200)
    # checkpointed before any pass (its caches not created anywhere yet): restored the same way
    fresh = new_session(spread)
    expect(api.post(f"/api/v3/sessions/{fresh}/checkpoint", {}, key=key), 200)
    feed(spread, fresh, 7, 0)
    expect(api.post(f"/api/v3/sessions/{fresh}/restore", {}, key=key), 200)
    assert len(expect(api.get(f"/api/v3/sessions/{fresh}", key=key), 200)["tensors"]) == 10
    tok = None
    for pos, t in enumerate(prompt):
        tok = feed(spread, fresh, t, pos)
    assert tok == golden[len(prompt)]
    expect(api.delete(f"/api/v3/sessions/{fresh}", key=key), 200)


def test_an_error_in_a_stage_names_the_step_as_the_client_numbered_it(spread):
    api, key = spread.server.api, spread.key
    sid = new_session(spread)
    g = graph_cli("--model-id", spread.model, "--ids", "1,2", "--cache", "64")
    # break a step that runs on the third worker (layer 4's MLP): its index is the graph's own
    bad = next(i for i, s in enumerate(g["steps"]) if s["op"] == "swiglu" and i > len(g["steps"]) * 3 // 4)
    g["steps"][bad]["in"] = g["steps"][bad]["in"][:1]
    r = api.post("/api/v3/graph", {"graph": dict(g, session=sid)}, key=key, timeout=60)
    body = expect(r, 400)
    assert f"step {bad} (swiglu)" in body["error"], body
    expect(api.delete(f"/api/v3/sessions/{sid}", key=key), 200)
    spread.server.assert_up()


def kill_trials(spread, seed, decode):
    """Five trials: a checkpointed session prefilled with the golden prompt, then `decode(sid)`
    (the golden continuation's tokens) while a worker holding part of the model is SIGKILLed at
    a random moment within how long an undisturbed decode takes (timed first); each must give
    the undisturbed tokens, and the model be whole on three workers again. Returns how many
    kills landed inside decode."""
    api, key = spread.server.api, spread.key
    prompt, golden = GOLDEN["prompt_ids"], GOLDEN["greedy_ids"]

    def prefilled():
        sid = new_session(spread)
        for pos in range(len(prompt) - 1):
            feed(spread, sid, prompt[pos], pos)
        return sid

    window = kill_window(api, key, prefilled, decode, golden[len(prompt):])
    rng = random.Random(seed)
    during = 0
    for trial in range(5):
        spread.spare()  # somewhere for the lost share to go
        sid = prefilled()
        expect(api.post(f"/api/v3/sessions/{sid}/checkpoint", {}, key=key), 200)
        victim = spread.holders(spread.model)[rng.randrange(3)]
        delay = rng.uniform(0, window)
        killed_at = []
        killer = threading.Timer(delay, lambda: (spread.kill(victim), killed_at.append(time.monotonic())))
        killer.start()
        out = decode(sid)
        ended = time.monotonic()
        killer.join()
        during += killed_at[0] < ended
        assert prompt + out == golden, f"trial {trial}: killed {victim} after {delay * 1000:.0f} ms"
        after = spread.holders(spread.model)
        assert victim not in after and len(set(after)) == 3
        expect(api.delete(f"/api/v3/sessions/{sid}", key=key), 200)
    spread.server.assert_up()
    return during


@pytest.mark.timeout(400)  # five kills and recoveries
def test_a_checkpointed_session_survives_killing_a_part_of_the_model(spread):
    """SIGKILLs at random moments of a per-call decode loop, each of a worker holding part of
    the model: its share is fetched again onto a spare worker, the session is restored from its
    checkpoint and the calls since are replayed; the tokens are the undisturbed ones."""
    prompt, golden = GOLDEN["prompt_ids"], GOLDEN["greedy_ids"]

    def decode(sid):
        out, tok = [], prompt[-1]
        for i in range(len(golden) - len(prompt)):
            tok = feed(spread, sid, tok, len(prompt) - 1 + i)
            out.append(tok)
        return out

    during = kill_trials(spread, 11, decode)
    assert during >= 3, f"only {during} of 5 kills landed inside the decode loop"


@pytest.mark.timeout(400)  # five kills and recoveries
def test_a_generation_goes_on_when_a_part_of_the_model_is_killed(spread):
    """Server-side generation on a spread model runs its loop through the coordinator; when a
    worker holding part of the model is killed mid-generation, the pass is sent again once the
    part is back and the session restored: the tokens are the undisturbed ones, with no error."""
    api, key = spread.server.api, spread.key
    prompt, golden = GOLDEN["prompt_ids"], GOLDEN["greedy_ids"]

    def decode(sid):
        r = expect(api.post("/api/v3/generate", {"graphId": spread.step, "sessionId": sid, "ids": [prompt[-1]],
                                                 "startPos": len(prompt) - 1, "maxNewTokens": len(golden) - len(prompt),
                                                 "stream": False}, key=key, timeout=120), 200)
        assert r["ok"], r
        return r["tokens"]

    during = kill_trials(spread, 5, decode)
    assert during >= 3, f"only {during} of 5 kills landed inside the generation"


def test_an_unsaved_session_on_a_lost_part_says_to_prefill_again(spread):
    api, key = spread.server.api, spread.key
    spread.spare()
    sid = new_session(spread)
    prompt = GOLDEN["prompt_ids"]
    for pos, tok in enumerate(prompt):
        feed(spread, sid, tok, pos)
    # the worker holding the last layers (and so those layers' caches) goes away
    victim = spread.holders(spread.model)[2]
    spread.kill(victim)
    r = api.post("/api/v3/graph", {"graphId": spread.step, "session": sid, "bind": {"ids": [1], "pos": len(prompt)}},
                 key=key, timeout=60)
    expect(r, 503, sid, "prefill")
    # the model itself is whole again: a new session decodes the golden tokens
    assert_a_new_session_decodes(spread)
    spread.server.assert_up()


def test_a_call_stopped_after_its_first_stage_leaves_the_session_marked_partly_written(start_server, tmp_path_factory):
    """--graph-timeout-ms on a spread model: a call whose second stage does not finish in time
    (its worker stopped with SIGSTOP, then let go before the link's heartbeat gives up on it)
    answers 504 after the first stage wrote its layers' caches; the session says from then on
    that its caches are partly written (decisions.md, "What a stopped run leaves"), and a new
    session decodes as it should."""
    c = start_cluster(start_server, tmp_path_factory, "partly", Spread, options=("--graph-timeout-ms", "400"))
    api, key = c.server.api, c.key
    try:
        for name in ("w_1", "w_2", "w_3"):
            c.join(name, SMALL)
        c.model = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=key, timeout=60), 200)["modelId"]
        c.step = expect(api.post("/api/v3/graphs", {"graph": graph_cli("--model-id", c.model, "--compiled", "--tokens", "1",
                                                                       "--cache", "64", "--argmax")}, key=key),
                        200)["graphId"]
        prompt = GOLDEN["prompt_ids"]
        sid = new_session(c)
        feed(c, sid, prompt[0], 0)
        second = c.holders(c.model)[1]  # (the first stage runs on holders[0])
        proc = c.workers[second].proc
        proc.send_signal(signal.SIGSTOP)
        try:
            r = api.post("/api/v3/graph", {"graphId": c.step, "session": sid, "bind": {"ids": [prompt[1]], "pos": 1}},
                         key=key, timeout=30)
        finally:
            proc.send_signal(signal.SIGCONT)
        expect(r, 504, "--graph-timeout-ms")
        assert len(c.status(key)["pool"]) == 3  # (let go in time: not taken for lost)
        r = api.post("/api/v3/graph", {"graphId": c.step, "session": sid, "bind": {"ids": [prompt[1]], "pos": 1}},
                     key=key, timeout=30)
        expect(r, 409, sid, "partly written", "prefill it again")
        assert_a_new_session_decodes(c)
        c.server.assert_up()
    finally:
        c.stop_all()
        c.server.process.terminate()


def test_chat_with_a_model_spread_over_two_workers_equals_transformers(start_server, tmp_path_factory):
    """Two volunteers of 1000 KiB: stories260K (1,040,128 bytes) fits on neither, so it is split
    evenly over both, leaving each room for its layers' 512-row caches — which are created on
    the worker whose layers read them, never all on the first. Chat replies, speculative or not,
    equal transformers' greedy continuation (test/fixtures/chat)."""
    from test_chat import GOLDEN as CHAT, chat_events, user
    c = start_cluster(start_server, tmp_path_factory, "spread-chat", Spread)
    server = c.server
    try:
        c.join("w_left", "1000K")
        c.join("w_right", "1000K")
        loaded = expect(server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=c.key, timeout=60), 200)
        shares = [p["residentBytes"] for p in loaded["placement"]]
        assert len(shares) == 2 and max(shares) < 600_000, shares  # even: not 858 KB and 182 KB
        for case in CHAT["cases"]:
            for speculative in (True, False):
                events = chat_events(server, c.key, {"model": loaded["modelId"], "messages": user(case["prompt"]),
                                                     "maxTokens": CHAT["max_new_tokens"], "temperature": 0,
                                                     "speculative": speculative})
                assert events[-1][0] == "done", events[-3:]
                assert events[-1][1]["text"] == case["text"], (speculative, events[-1][1])
        # w_right goes; w_left has no room for its share (nor does anyone): a clear 503, no hang
        c.kill("w_right")
        c.wait_for(lambda s: s["workers"] == 1, "w_right to leave")
        sid = expect(server.api.post("/api/v3/sessions", {"modelId": loaded["modelId"]}, key=c.key), 200)["session"]["sessionId"]
        expect(server.api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", "64"), session=sid)}, key=c.key), 200)
        g = graph_cli("--model-id", loaded["modelId"], "--ids", "1,2", "--cache", "64")
        r = server.api.post("/api/v3/graph", {"graph": dict(g, session=sid)}, key=c.key, timeout=60)
        expect(r, 503, "w_right", "load the model again")
        server.assert_up()
    finally:
        c.stop_all()
