"""POST /api/v3/chat through real processes (checklist CHAT-*): stories260K from `mpakt host`,
loaded by the chat call itself and reused after; greedy replies equal transformers' generate
with the same repetition penalty (test/fixtures/chat, tools/goldens/gen_chat_golden.py), with
and without speculative decoding, streamed and not; conversations at the same time share
passes and keep their replies; a client that disconnects stops decoding; bad requests get
clear errors."""
from __future__ import annotations

import http.client
import json
import threading
import time
from pathlib import Path

import pytest

from e2e_util import expect, import_client

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "chat" / "stories260K_greedy.json").read_text())
STORIES = "hf:local/stories260K"


@pytest.fixture(scope="module")
def key(server):
    return server.account("chatter")[1]


def read_sse(resp):
    """Yields (event, data) until the stream ends."""
    event = None
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.decode("utf-8").rstrip("\r\n")
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            yield event, json.loads(line[6:])
            if event in ("done", "error"):
                return


def open_chat(server, key, body):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    conn.request("POST", "/api/v3/chat", json.dumps(body), {"x-api-key": key})
    return conn, conn.getresponse()


def chat_events(server, key, body):
    conn, resp = open_chat(server, key, body)
    assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/event-stream"), resp.read()
    events = list(read_sse(resp))
    conn.close()
    return events


def user(text):
    return [{"role": "user", "content": text}]


def test_greedy_replies_equal_transformers(server):
    """CHAT-01: the reply of a base model to its prompt is transformers' greedy continuation
    with repetition penalty 1.1 (the default), token for token; deltas add up to the text.
    A key of its own: its first chat loads the model, whatever ran before."""
    key = server.account("greedy")[1]
    for i, case in enumerate(GOLDEN["cases"]):
        for speculative in (True, False):
            body = {"model": STORIES, "messages": user(case["prompt"]), "maxTokens": GOLDEN["max_new_tokens"],
                    "temperature": 0, "speculative": speculative}
            events = chat_events(server, key, body)
            kinds = [e for e, _ in events]
            assert kinds[-1] == "done", events[-3:]
            if i == 0 and speculative:
                assert kinds[0] == "status" and events[0][1]["phase"] == "loading"  # the first chat loads the model
            model = [d for e, d in events if e == "model"][0]
            assert model["format"] == "plain" and model["promptTokens"] == len(case["prompt_ids"])
            assert model["loaded"] is (i == 0 and speculative)
            done = events[-1][1]
            text = "".join(d["text"] for e, d in events if e == "delta")
            assert text == done["text"] == case["text"], (speculative, text, case["text"])
            assert done["ok"] is True and done["finishReason"] == case["finish"]
            usage = done["usage"]
            assert (usage["promptTokens"], usage["completionTokens"]) == (len(case["prompt_ids"]), len(case["new_ids"]))
            # The same prompt a second time (speculative off) reuses the first run's session from
            # the prefix cache: every prompt row but the last is cached, and the reply is the same.
            if speculative:
                assert 0 <= usage["cachedTokens"] < len(case["prompt_ids"]) and (i > 0 or usage["cachedTokens"] == 0)
            else:
                assert usage["cachedTokens"] == len(case["prompt_ids"]) - 1
            assert done["timing"]["tokensPerSecond"] > 0 and done["quantize"] == "none"
            if speculative:
                s = done["speculation"]
                assert s["accepted"] <= s["drafted"] and 0 <= s["acceptance"] <= 1
            else:
                assert done["speculation"] is None
    # the model was loaded once and reused
    models = expect(server.api.get("/api/v3/models", key=key), 200)["models"]
    assert [m["source"] for m in models] == [STORIES]


def test_stream_false_returns_the_done_body(server, key):
    case = GOLDEN["cases"][1]
    body = {"model": STORIES, "messages": user(case["prompt"]), "maxTokens": GOLDEN["max_new_tokens"],
            "temperature": 0, "stream": False}
    r = expect(server.api.post("/api/v3/chat", body, key=key, timeout=60), 200)
    assert r["text"] == case["text"] and r["finishReason"] == case["finish"]
    # by modelId too
    model_id = r["modelId"]
    r2 = expect(server.api.post("/api/v3/chat", {**body, "model": model_id}, key=key, timeout=60), 200)
    assert r2["text"] == case["text"] and r2["modelId"] == model_id


def test_seeded_sampling_repeats_and_settings_take_effect(server, key):
    body = {"model": STORIES, "messages": user("Once upon a time"), "maxTokens": 40, "temperature": 0.9, "seed": 3,
            "stream": False}
    a = expect(server.api.post("/api/v3/chat", body, key=key, timeout=60), 200)["text"]
    b = expect(server.api.post("/api/v3/chat", body, key=key, timeout=60), 200)["text"]
    c = expect(server.api.post("/api/v3/chat", {**body, "seed": 4}, key=key, timeout=60), 200)["text"]
    d = expect(server.api.post("/api/v3/chat", {**body, "speculative": False}, key=key, timeout=60), 200)["text"]
    assert a == b == d and a != c


def test_speculative_conversations_share_their_verify_passes(server, key):
    """Speculative chats decoding at the same time run their verify passes (of one verify
    graph) together too, as many as keep a pass within 32 rows, and each reply is still the
    one it gets alone (and without speculation: greedy)."""
    # stories260K repeats itself over a few hundred tokens: prompt lookup drafts often
    prompts = ["Once upon a time", "Lily and Ben went to the park", "The little dog was sad"]
    body = lambda p, spec: {"model": STORIES, "messages": user(p), "maxTokens": 300, "temperature": 0,
                            "speculative": spec, "stream": False, "cache": False}
    plain = [expect(server.api.post("/api/v3/chat", body(p, False), key=key, timeout=60), 200)["text"] for p in prompts]
    for attempt in range(4):
        results = [None] * len(prompts)

        def run(i):
            results[i] = expect(server.api.post("/api/v3/chat", body(prompts[i], True), key=key, timeout=60), 200)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [r["text"] for r in results] == plain
        assert all(r["speculation"]["verifies"] > 0 for r in results), [r["speculation"] for r in results]
        if sum(r["speculation"]["sharedVerifies"] > 0 for r in results) >= 2:
            break
    else:
        pytest.fail(f"overlapping speculative chats never shared a verify pass: {[r['speculation'] for r in results]}")


def test_conversations_at_the_same_time_share_passes(server, key):
    """CHAT-02: chats decoding at the same time run in multi-session passes, and each reply
    is the one it gets alone."""
    prompts = ["Once upon a time", "The little dog", "Tom had a red ball"]
    body = lambda p: {"model": STORIES, "messages": user(p), "maxTokens": 400, "temperature": 0,
                      "speculative": False, "stream": False}
    alone = [expect(server.api.post("/api/v3/chat", body(p), key=key, timeout=60), 200) for p in prompts]
    assert all(r["batched"] == 0 for r in alone)
    for attempt in range(4):
        results = [None] * len(prompts)

        def run(i):
            results[i] = expect(server.api.post("/api/v3/chat", body(prompts[i]), key=key, timeout=60), 200)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r, a in zip(results, alone):
            assert r["text"] == a["text"]
        if sum(r["batched"] > 0 for r in results) >= 2:
            break
    else:
        pytest.fail(f"overlapping chats never shared passes: {[r['batched'] for r in results]}")


def test_disconnect_stops_decoding(server, key, slow_model):
    """A client that goes away mid-reply stops the decode loop at once."""
    api = server.api
    body = {"model": "hf:local/slow", "messages": user("Once upon a time"), "maxTokens": 1500, "temperature": 0.8}
    conn, resp = open_chat(server, key, body)
    assert resp.status == 200
    events = read_sse(resp)
    deltas = 0
    for event, data in events:
        assert event != "error", data
        deltas += event == "delta"
        if deltas == 3:
            break
    assert expect(api.get("/api/v3/status", key=key), 200)["generations"] == 1
    conn.sock.close()
    conn.close()
    deadline = time.time() + 10
    while expect(api.get("/api/v3/status", key=key), 200)["generations"] != 0:
        assert time.time() < deadline, "the chat still decodes after its client left"
        time.sleep(0.05)
    server.assert_up()


def test_bad_requests_get_clear_errors(server, key):
    api = server.api
    ok = {"model": STORIES, "messages": user("hi")}
    expect(api.post("/api/v3/chat", ok), 401)
    expect(api.post("/api/v3/chat", ok, key="k_bogus"), 401)
    expect(api.post("/api/v3/chat", raw="{nope", key=key), 400, "JSON")
    expect(api.post("/api/v3/chat", {"messages": user("hi")}, key=key), 400, "model")
    expect(api.post("/api/v3/chat", {"model": STORIES}, key=key), 400, "messages")
    expect(api.post("/api/v3/chat", {**ok, "messages": []}, key=key), 400, "messages")
    expect(api.post("/api/v3/chat", {**ok, "messages": [{"role": "robot", "content": "x"}]}, key=key), 400,
           "messages[0].role")
    expect(api.post("/api/v3/chat", {**ok, "messages": [{"role": "user"}]}, key=key), 400, "messages[0].content")
    expect(api.post("/api/v3/chat", {**ok, "maxTokens": 5000}, key=key), 400, "maxTokens")
    expect(api.post("/api/v3/chat", {**ok, "temperature": -1}, key=key), 400, "temperature")
    expect(api.post("/api/v3/chat", {**ok, "topP": 0}, key=key), 400, "topP")
    expect(api.post("/api/v3/chat", {**ok, "repetitionPenalty": 0.5}, key=key), 400, "repetitionPenalty")
    expect(api.post("/api/v3/chat", {**ok, "speculative": "yes"}, key=key), 400, "speculative")
    expect(api.post("/api/v3/chat", {**ok, "colour": "red"}, key=key), 400, "colour")
    expect(api.post("/api/v3/chat", {**ok, "model": "m_nope", "stream": False}, key=key), 404, "m_nope")
    # a checkpoint without config.json cannot be chatted with; the error says why
    r = api.post("/api/v3/chat", {**ok, "model": "hf:local/sharded", "stream": False}, key=key, timeout=60)
    expect(r, 400, "config.json")
    # a prompt longer than the model's context
    long = {**ok, "messages": user("Once upon a time " * 300), "stream": False}
    expect(api.post("/api/v3/chat", long, key=key, timeout=60), 400, "context")
    server.assert_up()


def test_long_conversations_are_refused_by_their_bytes_before_tokenizing(server, key):
    """A conversation too long for the context is refused by its size in bytes before it is
    rendered or tokenized (tokenizing 15 MB took the coordinator's thread seconds), and a
    body no conversation needs is not parsed at all."""
    api = server.api
    expect(api.post("/api/v3/chat", {"model": STORIES, "messages": user("hi"), "maxTokens": 1, "stream": False},
                    key=key, timeout=60), 200)  # the model is loaded and its chat side built
    big = {"model": STORIES, "messages": user("Once upon a time " * 900_000), "stream": False}  # 15.3 MB
    # the refusal names the byte bound: it was decided by size, before any tokenizing (how
    # long that takes is a benchmark's business, not a test's)
    expect(api.post("/api/v3/chat", big, key=key, timeout=60), 400, "bytes", "context of 512 tokens")
    huge = {"model": STORIES, "messages": user("x" * (17 << 20))}
    expect(api.post("/api/v3/chat", huge, key=key, timeout=60), 413, str(16 << 20))
    server.assert_up()


def test_python_client_chat(server, key):
    """clients/mpakt_grid.py: VirtualGPU.chat streams text pieces and keeps the summary."""
    mg = import_client()
    gpu = mg.VirtualGPU(server.base_url, key=key)
    case = GOLDEN["cases"][2]
    reply = gpu.chat(STORIES, [("user", case["prompt"])], max_tokens=GOLDEN["max_new_tokens"], temperature=0)
    pieces = list(reply)
    assert len(pieces) > 1 and "".join(pieces) == reply.text == case["text"]
    assert reply.result["finishReason"] == case["finish"] and reply.result["usage"]["completionTokens"] == len(case["new_ids"])
    whole = gpu.chat(STORIES, [{"role": "user", "content": case["prompt"]}], max_tokens=GOLDEN["max_new_tokens"],
                     temperature=0, speculative=False, stream=False)
    assert list(whole) == [case["text"]] and whole.result["speculation"] is None
    with pytest.raises(mg.GridError) as e:
        gpu.chat(STORIES, [("robot", "hi")])
    assert e.value.status == 400 and "role" in e.value.message


def test_chat_graphs_are_compiled_once_per_model_and_recompiled_when_deleted(server, key):
    """Chat compiles its decode and verify graphs once per account and model; the penalty is
    a per-call setting (a different one changes the reply, not the graphs). Graphs the user
    deletes are compiled again on the next chat."""
    api = server.api
    body = {"model": STORIES, "messages": user("Once upon a time"), "maxTokens": 60, "temperature": 0, "stream": False}
    replies = {p: expect(api.post("/api/v3/chat", {**body, "repetitionPenalty": p}, key=key, timeout=60), 200)
               for p in (1.0, 1.1, 1.7)}
    texts = {p: r["text"] for p, r in replies.items()}
    assert texts[1.1] == GOLDEN["cases"][0]["text"]
    assert len(set(texts.values())) == 3  # the penalty took effect each time
    model = replies[1.1]["modelId"]
    chat_graphs = [g for g in expect(api.get("/api/v3/graphs", key=key), 200)["graphs"] if g["label"].endswith(model)]
    assert sorted(g["label"] for g in chat_graphs) == [f"chat decode {model}", f"chat verify 3 {model}",
                                                      f"chat verify 5 {model}"]
    for g in chat_graphs:
        expect(api.delete(f"/api/v3/graphs/{g['graphId']}", key=key), 200)
    again = expect(api.post("/api/v3/chat", body, key=key, timeout=60), 200)
    assert again["text"] == GOLDEN["cases"][0]["text"]


def test_key_is_checked_before_the_body(server):
    expect(server.api.post("/api/v3/chat", raw="{nope"), 401)
    expect(server.api.post("/api/v3/chat", raw="{nope", key="k_bogus"), 401)
