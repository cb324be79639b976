"""The OpenAI-compatible API (/v1) driven by the real `openai` package against a running server
with stories260K from `mpakt host`: greedy completions equal the committed golden continuation
(a numpy float64 forward, tokenized and detokenized with Hugging Face `tokenizers`), streamed and
not; `stop` cuts exactly and is never emitted; `logprobs` equal the log-softmax of the logits
POST /api/v3/graph returns for the same positions; presence/frequency penalties follow OpenAI's
formula over the reply's tokens; the model list; errors in OpenAI's shape."""
from __future__ import annotations

import json

import numpy as np
import pytest
from openai import AuthenticationError, BadRequestError, NotFoundError, OpenAI
from tokenizers import Tokenizer

from e2e_util import STORIES_DIR, expect

STORIES = "hf:local/stories260K"
GOLDEN = json.loads((STORIES_DIR / "goldens" / "stories260K_once_upon.json").read_text())
PROMPT_IDS = GOLDEN["prompt_ids"]
GREEDY = GOLDEN["greedy_ids"][len(PROMPT_IDS):]
TOK = Tokenizer.from_file(str(STORIES_DIR / "tokenizer.json"))
PROMPT = TOK.decode(PROMPT_IDS, skip_special_tokens=True)
# A completion is what follows the prompt: the whole text less the prompt's.
FULL = TOK.decode(PROMPT_IDS + GREEDY, skip_special_tokens=True)
CONTINUATION = FULL[len(PROMPT):]


@pytest.fixture(scope="module")
def key(server):
    return server.account("openai-user")[1]


@pytest.fixture(scope="module")
def client(server, key):
    return OpenAI(base_url=server.base_url + "/v1", api_key=key, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model_id(client):
    # The first request names the source: it loads the model, as chat does.
    r = client.completions.create(model=STORIES, prompt=PROMPT, max_tokens=1, temperature=0)
    assert r.choices[0].text == CONTINUATION[:len(r.choices[0].text)] and r.choices[0].text
    ids = [m.id for m in client.models.list().data]
    assert len(ids) == 1 and ids[0].startswith("m_"), ids
    return ids[0]


def test_the_prompt_tokenizes_as_the_golden(model_id):
    assert TOK.encode(PROMPT).ids == PROMPT_IDS


def test_models_list_and_retrieve(client, model_id):
    models = client.models.list().data
    assert [(m.id, m.object, m.owned_by) for m in models] == [(model_id, "model", "mpakt")]
    assert client.models.retrieve(model_id).id == model_id
    with pytest.raises(NotFoundError) as e:
        client.models.retrieve("m_nope")
    assert e.value.body["type"] == "not_found_error" and e.value.body["param"] == "model"


def test_greedy_completion_equals_the_golden(client, model_id):
    for prompt in (PROMPT, PROMPT_IDS):
        r = client.completions.create(model=model_id, prompt=prompt, max_tokens=len(GREEDY), temperature=0)
        c = r.choices[0]
        assert c.text == CONTINUATION and PROMPT + c.text == FULL
        assert c.finish_reason == "length" and c.index == 0 and r.object == "text_completion" and r.model == model_id
        assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (5, len(GREEDY), 5 + len(GREEDY))
        assert r.id.startswith("cmpl-")
    # echo: the prompt, then the same continuation
    r = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=len(GREEDY), temperature=0, echo=True)
    assert r.choices[0].text == FULL


def test_streamed_completion_adds_up_with_usage_last(client, model_id):
    chunks = list(client.completions.create(model=model_id, prompt=PROMPT, max_tokens=len(GREEDY), temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == CONTINUATION
    with_choices = [c for c in chunks if c.choices]
    assert [c.choices[0].finish_reason for c in with_choices][-1] == "length"
    assert all(c.choices[0].finish_reason is None for c in with_choices[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(GREEDY)
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_completion_streamed_and_not(client, model_id):
    # stories260K has no chat template: the conversation is its one message's text (with BOS),
    # and the reply is the greedy continuation decoded on its own (no leading space).
    msgs = [{"role": "user", "content": PROMPT}]
    r = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=len(GREEDY), temperature=0)
    m = r.choices[0]
    assert m.message.role == "assistant" and m.message.content == TOK.decode(GREEDY, skip_special_tokens=True)
    assert m.finish_reason == "length" and r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.usage.prompt_tokens == 5 and r.usage.completion_tokens == len(GREEDY)
    chunks = list(client.chat.completions.create(model=model_id, messages=msgs, max_tokens=len(GREEDY), temperature=0,
                                                 stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == m.message.content
    assert chunks[-1].choices[0].finish_reason == "length" and chunks[-1].object == "chat.completion.chunk"
    # tools go to the chat template (stories260K's plain format shows none: the same reply)
    tools = [{"type": "function", "function": {"name": "lookup", "description": "look a word up",
                                               "parameters": {"type": "object", "properties": {}}}}]
    t = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=len(GREEDY), temperature=0, tools=tools)
    assert t.choices[0].message.content == m.message.content
    # the whole context as the limit when max_tokens is not given: the reply runs to an end
    r = client.chat.completions.create(model=model_id, messages=msgs, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens > len(GREEDY)


def test_stop_cuts_exactly_and_is_never_emitted(client, model_id):
    words = CONTINUATION.split(" ")
    stop = " " + words[4]  # a word boundary a few tokens in
    cut = CONTINUATION.index(stop)
    for stream in (False, True):
        kw = dict(model=model_id, prompt=PROMPT, max_tokens=len(GREEDY), temperature=0, stop=[stop, "zzz-never"])
        if stream:
            chunks = list(client.completions.create(stream=True, **kw))
            text = "".join(c.choices[0].text for c in chunks)
            reason = chunks[-1].choices[0].finish_reason
        else:
            c = client.completions.create(**kw).choices[0]
            text, reason = c.text, c.finish_reason
        assert text == CONTINUATION[:cut] and reason == "stop", (stream, text)
    # a stop string that ends inside a token, and the earliest of several wins
    inner = CONTINUATION[cut + 2:cut + 4]
    c = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=len(GREEDY), temperature=0,
                                  stop=[inner, CONTINUATION[3:5]]).choices[0]
    first = min(CONTINUATION.index(inner), CONTINUATION.index(CONTINUATION[3:5]))
    assert c.text == CONTINUATION[:first] and c.finish_reason == "stop"


def graph_logprobs(server, key, model_id, ids):
    """log-softmax of the logits POST /api/v3/graph returns for every position of `ids`."""
    g = expect(server.api.post(f"/api/v3/models/{model_id}/graph", {"ids": ids, "pos": 0}, key=key), 200)["graph"]
    out = expect(server.api.post("/api/v3/graph", {"graph": g}, key=key), 200)["outputs"]["logits"]
    x = np.array(out["data"], dtype=np.float64).reshape(out["shape"][-2], out["shape"][-1])
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def test_logprobs_equal_the_graphs_logits(server, key, client, model_id):
    n = 8
    ref = graph_logprobs(server, key, model_id, PROMPT_IDS + GREEDY[:n - 1])
    c = client.completions.create(model=model_id, prompt=PROMPT_IDS, max_tokens=n, temperature=0, logprobs=5).choices[0]
    lp = c.logprobs
    assert len(lp.tokens) == n and "".join(lp.tokens) == c.text == CONTINUATION[:len(c.text)]
    for j in range(n):
        row = ref[len(PROMPT_IDS) - 1 + j]
        assert abs(lp.token_logprobs[j] - row[GREEDY[j]]) < 1e-4, (j, lp.token_logprobs[j], row[GREEDY[j]])
        best = sorted(row, reverse=True)[:5]
        ours = sorted(lp.top_logprobs[j].values(), reverse=True)
        assert len(ours) <= 5 and all(abs(a - b) < 1e-4 for a, b in zip(ours, best))
        assert abs(max(ours) - lp.token_logprobs[j]) < 1e-6  # greedy: the token is the likeliest
    assert lp.text_offset[0] == 0 and lp.text_offset[1] == len(lp.tokens[0])
    # chat's shape: a list of tokens with their bytes and alternatives
    r = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": PROMPT}], max_tokens=n,
                                       temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == n
    for j, t in enumerate(content):
        row = ref[len(PROMPT_IDS) - 1 + j]
        assert abs(t.logprob - row[GREEDY[j]]) < 1e-4 and bytes(t.bytes).decode() == t.token
        assert len(t.top_logprobs) == 3 and t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob
        assert abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6
    # streamed: the same log-probabilities, token by token
    chunks = list(client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": PROMPT}],
                                                 max_tokens=n, temperature=0, logprobs=True, stream=True))
    streamed = [t.logprob for c in chunks if c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert np.allclose(streamed, [t.logprob for t in content], atol=1e-6)


def test_penalties_follow_openais_formula_over_the_reply(server, key, client, model_id):
    """mu[j] - c[j] * frequency - (c[j] > 0) * presence, c counting the reply's tokens only (the
    prompt's do not count): replayed greedily in numpy on the logits /api/v3/graph returns."""
    freq, pres, n = 2.0, 1.0, 48
    ids = list(PROMPT_IDS)
    for _ in range(n):
        row = graph_logprobs(server, key, model_id, ids)[-1]  # (log-softmax keeps the argmax)
        counts = np.bincount(np.array(ids[len(PROMPT_IDS):], dtype=np.int64), minlength=len(row))[:len(row)]
        ids.append(int(np.argmax(row - counts * freq - (counts > 0) * pres)))
    want = TOK.decode(ids, skip_special_tokens=True)[len(PROMPT):]
    c = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=n, temperature=0, frequency_penalty=freq,
                                  presence_penalty=pres).choices[0]
    plain = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=n, temperature=0).choices[0].text
    assert c.text == want and want != plain


def test_errors_take_openais_shape(server, key, client, model_id):
    api = server.api
    with pytest.raises(AuthenticationError) as e:
        OpenAI(base_url=server.base_url + "/v1", api_key="mpk_wrong", max_retries=0).models.list()
    assert e.value.status_code == 401 and e.value.body["type"] == "authentication_error"
    cases = [
        (dict(n=2), "n"),
        (dict(stop=["a", "b", "c", "d", "e"]), "stop"),
        (dict(temperature=3), "temperature"),
        (dict(logprobs=21), "logprobs"),
        (dict(suffix="x"), "suffix"),
    ]
    for extra, param in cases:
        with pytest.raises(BadRequestError) as e:
            client.completions.create(model=model_id, prompt=PROMPT, **extra)
        assert e.value.body["param"] == param and e.value.body["type"] == "invalid_request_error", (extra, e.value.body)
    with pytest.raises(BadRequestError) as e:
        client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "x"}], top_logprobs=2)
    assert e.value.body["param"] == "top_logprobs"
    with pytest.raises(BadRequestError) as e:
        client.chat.completions.create(model=model_id, messages=[{"role": "tool", "content": "x"}])
    assert e.value.body["param"] == "messages[0].role"
    with pytest.raises(NotFoundError) as e:
        client.completions.create(model="m_nope", prompt=PROMPT)
    assert "m_nope" in e.value.body["message"]
    # raw requests: no key, malformed JSON, an unknown field, an unknown path, a wrong method
    for method, path, body, headers, status in [
        ("POST", "/v1/completions", {"model": model_id, "prompt": "x"}, {}, 401),
        ("POST", "/v1/completions", None, {"Authorization": "Bearer " + key}, 400),
        ("POST", "/v1/chat/completions", {"model": model_id, "messages": [], "colour": 1}, {"Authorization": "Bearer " + key}, 400),
        ("GET", "/v1/nothing", None, {"Authorization": "Bearer " + key}, 404),
        ("DELETE", "/v1/models", None, {"Authorization": "Bearer " + key}, 400),
    ]:
        raw = "{not json" if body is None and method == "POST" else None
        r = api.call(method, path, body, raw=raw, headers=headers)
        assert r.status == status, (path, r.status, r.text)
        err = json.loads(r.text)["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"], err
    # the server is still there
    assert client.completions.create(model=model_id, prompt=PROMPT, max_tokens=2, temperature=0).choices[0].text


# ---- the prefix cache across turns


def test_a_later_turn_prefills_only_its_new_tokens(server):
    """Turn 2 extends turn 1's prompt and reply: its session is reused and only the new tokens
    are prefilled (cached_tokens = the rows the cached session held that the new prompt shares,
    less its last token, which the decode loop feeds), with the same greedy reply as an
    account with nothing cached."""
    warm = OpenAI(base_url=server.base_url + "/v1", api_key=server.account("prefix-warm")[1], max_retries=0)
    cold_key = server.account("prefix-cold")[1]
    cold = OpenAI(base_url=server.base_url + "/v1", api_key=cold_key, max_retries=0)
    r1 = warm.completions.create(model=STORIES, prompt=PROMPT, max_tokens=10, temperature=0)
    assert r1.usage.prompt_tokens_details.cached_tokens == 0 and r1.choices[0].text == CONTINUATION[:len(r1.choices[0].text)]
    prompt2 = PROMPT + r1.choices[0].text + " One day"
    held = PROMPT_IDS + GREEDY[:9]  # the prompt, then every reply token but the last
    enc2 = TOK.encode(prompt2).ids
    common = next((i for i, (a, b) in enumerate(zip(held, enc2)) if a != b), min(len(held), len(enc2)))
    want_cached = min(common, len(enc2) - 1)
    assert want_cached >= 10
    for turn in range(2):  # (the second time, turn 2's own session is the longest prefix)
        r2 = warm.completions.create(model=STORIES, prompt=prompt2, max_tokens=12, temperature=0)
        c2 = cold.completions.create(model=STORIES, prompt=prompt2 + " " * turn, max_tokens=12, temperature=0)
        if turn == 0:
            assert r2.usage.prompt_tokens_details.cached_tokens == want_cached
            assert c2.usage.prompt_tokens_details.cached_tokens == 0
            assert r2.choices[0].text == c2.choices[0].text
        else:
            assert r2.usage.prompt_tokens_details.cached_tokens == len(enc2) - 1
    # /api/v3/chat reports it too: a second turn that repeats the first one's conversation
    msgs = [{"role": "user", "content": "Once upon a time there was a cat"}]
    first = expect(server.api.post("/api/v3/chat", {"model": STORIES, "messages": msgs, "maxTokens": 8, "temperature": 0,
                                                    "stream": False}, key=cold_key), 200)
    msgs2 = msgs + [{"role": "assistant", "content": first["text"]}, {"role": "user", "content": "And then?"}]
    second = expect(server.api.post("/api/v3/chat", {"model": STORIES, "messages": msgs2, "maxTokens": 8, "temperature": 0,
                                                     "stream": False}, key=cold_key), 200)
    other = expect(server.api.post("/api/v3/chat", {"model": STORIES, "messages": msgs2, "maxTokens": 8, "temperature": 0,
                                                    "stream": False}, key=server.account("prefix-other")[1]), 200)
    assert second["usage"]["cachedTokens"] > 5 and other["usage"]["cachedTokens"] == 0
    assert second["text"] == other["text"]


def test_cached_sessions_give_way_at_the_session_limit(server):
    """Cached conversations count in the key's session limit; a key at its limit gets their
    sessions back for a new conversation instead of a refusal."""
    key = server.account("prefix-limit")[1]
    c = OpenAI(base_url=server.base_url + "/v1", api_key=key, max_retries=0)
    r = c.completions.create(model=STORIES, prompt=PROMPT, max_tokens=3, temperature=0)
    model = r.model if r.model.startswith("m_") else c.models.list().data[0].id
    opened = []
    while True:
        reply = server.api.post("/api/v3/sessions", {"modelId": model}, key=key)
        if reply.status != 200:
            assert reply.status == 429, reply
            break
        opened.append(json.loads(reply.text)["session"]["sessionId"])
        assert len(opened) < 64
    # a prompt without BOS shares no token with the cached conversation: it needs a new session
    r = c.completions.create(model=model, prompt=PROMPT_IDS[1:], max_tokens=3, temperature=0)
    assert r.choices[0].text and r.usage.prompt_tokens_details.cached_tokens == 0
    for sid in opened:
        server.api.delete(f"/api/v3/sessions/{sid}", key=key)
