"""A small Python client for the mPAKT Grid AI API (v3, with v2 and account calls).

It needs nothing outside the standard library. The pieces:

* ``Account`` - sign up, log in and manage API keys.
* ``VirtualGPU`` - everything that needs an API key: status, models, sessions, compiled
  graphs, random numbers and the v2 tensor calls.
* ``Graph`` - builds the JSON of a v3 graph step by step; every method that adds a step
  returns a handle whose ``.ref`` is the name of the value it produces.
* ``bind`` - a placeholder for a number supplied per call to a compiled graph.

Example::

    acct = Account("http://127.0.0.1:8080")
    acct.login("alice", "a long password")
    gpu = VirtualGPU("http://127.0.0.1:8080", key=acct.create_key("script")["key"])
    model = gpu.load_model("hf:local/stories260K")
    with gpu.session(model) as s:
        g = Graph()
        x = g.input("x", [1, 2], [1.0, 2.0])
        y = g.scale(x, factor=3)
        print(s.run(g, outputs=[y])[y.ref])     # [3.0, 6.0]

Every connection-level object (an ``Account``, a ``VirtualGPU``) keeps one HTTP keep-alive
connection and sends all its calls over it, opening a new one only when the server has closed
the old one. Objects are not safe to share between threads; give each thread its own.

Errors the server reports raise ``GridError`` with the HTTP status and the server's message.
"""

from __future__ import annotations

import base64
import http.client
import json
import struct
import time
import urllib.parse

__all__ = [
    "Account",
    "Bind",
    "CompiledGraph",
    "Generation",
    "Graph",
    "GridError",
    "Model",
    "Output",
    "Results",
    "Session",
    "Tensor",
    "UploadedTensor",
    "VirtualGPU",
    "bind",
    "decode_f32",
    "encode_f32",
]

DEFAULT_TIMEOUT = 330.0  # a graph may run for 5 minutes on the server; allow a little more


# --------------------------------------------------------------------------- errors and data


class GridError(Exception):
    """The server refused or failed a call.

    ``status`` is the HTTP status (400, 401, 403, 404, 409, 413, 429, 503, 504, ...) and
    ``message`` the text of the server's ``{"error": ...}`` body.
    """

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def encode_f32(values):
    """Packs numbers as little-endian float32 and returns the base64 text the API accepts."""
    flat = _flatten(values)
    return base64.b64encode(struct.pack(f"<{len(flat)}f", *flat)).decode("ascii")


def decode_f32(text):
    """The inverse of ``encode_f32``: base64 text of little-endian float32 -> list of floats."""
    raw = base64.b64decode(text)
    if len(raw) % 4:
        raise ValueError(f"base64 f32 data has {len(raw)} bytes, not a multiple of 4")
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def _flatten(values):
    """Nested lists, tuples, numbers or anything with ``tolist()`` (numpy) -> a flat list of floats."""
    if hasattr(values, "tolist"):
        values = values.tolist()
    if isinstance(values, (int, float)):
        return [float(values)]
    out = []
    stack = [iter(values)]
    while stack:
        try:
            v = next(stack[-1])
        except StopIteration:
            stack.pop()
            continue
        if hasattr(v, "tolist") and not isinstance(v, (int, float)):
            v = v.tolist()
        if isinstance(v, (list, tuple)):
            stack.append(iter(v))
        else:
            out.append(float(v))
    return out


def _camel(name):
    """snake_case -> camelCase (``kv_heads`` -> ``kvHeads``, ``top_k_group`` -> ``topKGroup``)."""
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _id_of(x):
    """An id string from an object with ``.id`` or from the string itself."""
    return x if isinstance(x, str) else x.id


# --------------------------------------------------------------------------- transport


class _Connection:
    """One keep-alive HTTP(S) connection to a base URL, reopened once if the server closed it."""

    def __init__(self, base_url, headers=None, timeout=DEFAULT_TIMEOUT):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"base URL must be http:// or https://, not {base_url!r}")
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port
        self.prefix = u.path.rstrip("/")
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.conn = None
        self.active_stream = None  # a Generation still reading its response
        self.connections_opened = 0

    def _open(self):
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        self.conn = cls(self.host, self.port, timeout=self.timeout)
        self.connections_opened += 1
        return self.conn

    def close(self):
        if self.active_stream is not None:
            self.active_stream._abandon()
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def send(self, method, path, body=None, headers=None):
        """Sends one request and returns the http.client response (body not yet read)."""
        if self.active_stream is not None:
            self.active_stream._drain()  # the connection is still carrying a token stream
        h = dict(self.headers)
        if body is not None:
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        payload = None if body is None else (body if isinstance(body, bytes) else body.encode("utf-8"))
        for attempt in (0, 1):
            fresh = self.conn is None
            conn = self._open() if fresh else self.conn
            try:
                conn.request(method, self.prefix + path, body=payload, headers=h)
                return conn.getresponse()
            except (ConnectionError, http.client.BadStatusLine, http.client.ImproperConnectionState):
                # RemoteDisconnected, a reset or a broken pipe: the server closed a connection
                # we thought was open. Retry once on a new one; a fresh one failing is real.
                conn.close()
                self.conn = None
                if fresh or attempt:
                    raise
        raise AssertionError("unreachable")

    def finish(self, resp):
        """Reads a whole response and forgets the connection if the server will close it."""
        data = resp.read()
        if resp.will_close:
            self.conn.close()
            self.conn = None
        return data

    def call(self, method, path, body=None, headers=None):
        """One JSON call: encodes ``body``, decodes the reply, raises GridError on an error status."""
        text = None if body is None else json.dumps(body, separators=(",", ":"))
        resp = self.send(method, path, text, headers)
        data = self.finish(resp)
        return _decode_reply(resp.status, data)


def _decode_reply(status, data):
    try:
        doc = json.loads(data.decode("utf-8")) if data else None
    except ValueError:
        doc = None
    if status >= 400:
        if isinstance(doc, dict) and isinstance(doc.get("error"), str):
            raise GridError(status, doc["error"])
        raise GridError(status, data.decode("utf-8", "replace").strip() or http.client.responses.get(status, ""))
    if doc is None and data:
        raise GridError(status, "the server's reply is not JSON: " + data[:200].decode("utf-8", "replace"))
    return doc


# --------------------------------------------------------------------------- accounts


class Account:
    """Sign-up, log-in and API keys for one account.

    ``login`` keeps the session token it gets back; the key calls use it.
    """

    def __init__(self, base_url, timeout=60.0):
        self.base_url = base_url
        self._http = _Connection(base_url, {"Accept": "application/json"}, timeout)
        self.token = None
        self.username = None

    def sign_up(self, username, password):
        """Creates the account. Unless the server runs in dev mode it starts out pending and an
        operator must approve it before ``login`` succeeds. Returns ``{username, status, ...}``."""
        return self._http.call("POST", "/api/accounts", {"username": username, "password": password})

    def login(self, username, password):
        """Logs in and returns the token used for key management (403 while not approved)."""
        reply = self._http.call("POST", "/api/accounts/login", {"username": username, "password": password})
        self.token = reply["token"]
        self.username = username
        return self.token

    def _auth(self):
        if not self.token:
            raise GridError(401, "log in first: key management needs the token from Account.login")
        return {"Authorization": "Bearer " + self.token}

    def create_key(self, label=""):
        """Creates an API key. The returned dict holds it under ``"key"``; the server shows the
        key only this once. Also: ``keyId``, ``label``, ``createdAt``."""
        return self._http.call("POST", "/api/keys", {"label": label}, self._auth())

    def list_keys(self):
        """The account's keys (ids, labels, dates, state), without their secret values."""
        return self._http.call("GET", "/api/keys", None, self._auth())["keys"]

    def delete_key(self, key_id):
        """Revokes a key by its ``keyId``; calls made with it fail with 401 afterwards."""
        return self._http.call("DELETE", "/api/keys/" + urllib.parse.quote(key_id, safe=""), None, self._auth())

    def close(self):
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --------------------------------------------------------------------------- results


class Output(list):
    """One output of a run: a flat list of floats (row-major) with its ``shape``."""

    def __init__(self, values, shape):
        super().__init__(values)
        self.shape = list(shape)

    def rows(self):
        """The values as a list of rows (the last dimension), for 2-D and wider outputs."""
        width = self.shape[-1] if self.shape else 1
        return [list(self[i : i + width]) for i in range(0, len(self), width)] if width else []

    def __repr__(self):
        return f"Output(shape={self.shape}, {list.__repr__(self)})"


class Results(dict):
    """The outputs of a run, by value name. Index with a name or with a handle (its ``.ref``)."""

    def __init__(self, outputs, steps=None):
        super().__init__(outputs)
        self.steps = steps

    def __getitem__(self, key):
        return super().__getitem__(key.ref if isinstance(key, Tensor) else key)

    def __contains__(self, key):
        return super().__contains__(key.ref if isinstance(key, Tensor) else key)

    def get(self, key, default=None):
        return super().get(key.ref if isinstance(key, Tensor) else key, default)


def _results(reply):
    outs = {}
    for name, o in (reply.get("outputs") or {}).items():
        if "dataB64" in o:
            data = decode_f32(o["dataB64"])
        else:  # JSON has no infinities: the server writes non-finite values as null
            data = [float("nan") if v is None else float(v) for v in o.get("data", [])]
        outs[name] = Output(data, o.get("shape", [len(data)]))
    return Results(outs, reply.get("steps"))


# --------------------------------------------------------------------------- the grid


class Model:
    """A model loaded into the network. Weights never pass through this process."""

    def __init__(self, gpu, reply):
        self._gpu = gpu
        self.raw = reply
        self.id = reply["modelId"]
        self.source = reply.get("source")
        self.tensors = reply.get("tensors", [])  # [{"name", "tensorId"}]
        self.bytes_transferred = reply.get("bytesTransferred", 0)
        self.throughput_mbs = reply.get("throughputMBs")
        self.stored_on_coordinator = reply.get("storedOnCoordinator")
        self.quantize = reply.get("quantize")
        self.resident_bytes = reply.get("residentBytes")

    @property
    def names(self):
        """The names of the loaded tensors, as in the checkpoint."""
        return [t["name"] for t in self.tensors]

    def tensor_id(self, name):
        """The load response's tensorId for a weight name (usable as a ``{name, tensorId}`` input)."""
        for t in self.tensors:
            if t["name"] == name:
                return t["tensorId"]
        raise KeyError(name)

    def graph(self, ids=None, tokens=None, cache_rows=None, compiled=False, pos=None, output="logits",
              repetition_penalty=None):
        """A pass of this model as a v3 graph, built by the server from the model's config.json
        for its architecture (the builder chat uses): prefill ``ids`` inline, or with
        ``compiled=True`` a template over ``tokens`` bound ids and a bound ``pos`` (a decode
        step, or a verify pass). ``cache_rows`` reads and writes the session's caches;
        ``output`` is "logits", "argmax" or "sample". A model whose config the builder cannot
        map raises GridError naming the field."""
        body = {"compiled": bool(compiled), "output": output}
        for k, v in dict(ids=ids, tokens=tokens, cache_rows=cache_rows, pos=pos,
                         repetition_penalty=repetition_penalty).items():
            if v is not None:
                body[_camel(k)] = [int(i) for i in v] if k == "ids" else v
        return self._gpu._http.call("POST", f"/api/v3/models/{self.id}/graph", body)["graph"]

    def cache_graph(self, rows, history=False):
        """The graph allocating a session's caches (and token history) for ``rows`` positions."""
        body = {"allocate": True, "cacheRows": rows, "history": bool(history)}
        return self._gpu._http.call("POST", f"/api/v3/models/{self.id}/graph", body)["graph"]

    def delete(self):
        """Releases the model everywhere."""
        return self._gpu._http.call("DELETE", "/api/v3/models/" + self.id)

    def __str__(self):
        return self.id

    def __repr__(self):
        return f"Model({self.id!r}, {len(self.tensors)} tensors, {self.bytes_transferred} bytes)"


class CompiledGraph:
    """A graph template compiled on the server; run it with ``Session.run(compiled, bind=...)``."""

    def __init__(self, gpu, reply, outputs=None):
        self._gpu = gpu
        self.raw = reply
        self.id = reply["graphId"]
        self.label = reply.get("label")
        self.steps = reply.get("steps")
        self.bindings = reply.get("bindings", [])
        self.body_bytes = reply.get("bodyBytes")
        self.per_call_bytes = reply.get("perCallBytes")
        self.saved_per_call = reply.get("savedPerCall")
        self.outputs = outputs or []

    def delete(self):
        return self._gpu._http.call("DELETE", "/api/v3/graphs/" + self.id)

    def __str__(self):
        return self.id

    def __repr__(self):
        return f"CompiledGraph({self.id!r}, steps={self.steps}, bindings={self.bindings})"


class UploadedTensor:
    """A tensor uploaded with the v2 tensor endpoint; ``Graph.tensor(t)`` reads it."""

    def __init__(self, gpu, reply):
        self._gpu = gpu
        self.raw = reply
        self.id = reply["tensorId"]
        self.shape = reply.get("shape")
        self.bytes = reply.get("bytes")

    def delete(self):
        return self._gpu._http.call("DELETE", "/api/v2/tensors/" + self.id)

    def __str__(self):
        return self.id


def _graph_body(graph, outputs, retain):
    """The graph object of a request from a Graph, a dict or JSON text."""
    if isinstance(graph, Graph):
        return graph.to_json(outputs=outputs, retain=retain)
    if isinstance(graph, str):
        graph = json.loads(graph)
    if not isinstance(graph, dict):
        raise TypeError("graph must be a Graph, a dict or JSON text")
    g = dict(graph.get("graph", graph))
    if outputs is not None:
        g["outputs"] = [o.ref if isinstance(o, Tensor) else o for o in outputs]
    if retain is not None:
        g["retain"] = {k: (v.ref if isinstance(v, Tensor) else v) for k, v in retain.items()}
    return g


def _bind_values(bind):
    """Per-call bindings: numbers stay numbers, anything array-like becomes a flat list."""
    out = {}
    for k, v in (bind or {}).items():
        out[k] = v if isinstance(v, (int, float)) and not isinstance(v, bool) else _flatten(v)
    return out


class Session:
    """A named tensor namespace pinned to one worker (where the KV cache lives).

    Use it as a context manager so it is closed, and what it holds freed, on exit.
    """

    def __init__(self, gpu, reply):
        self._gpu = gpu
        s = reply.get("session", reply)
        self.raw = s
        self.id = s["sessionId"]
        self.model_id = s.get("modelId")
        self.label = s.get("label")
        self.closed = False

    def run(self, graph, outputs=None, retain=None, encoding="base64", bind=None, sessions=None):
        """Runs a graph in this session and returns its ``Results``.

        ``graph`` is a ``Graph`` (``outputs`` and ``retain`` as for ``Graph.to_json``), a dict
        holding a graph's JSON, or a ``CompiledGraph`` (then ``bind`` maps each binding name to
        a number or a list, and the template's outputs come back). ``sessions`` lists further
        sessions on the same worker for a multi-session graph; this one is the primary and is
        added first when missing. ``encoding="base64"`` (the default) moves outputs as base64
        f32, decoded here; ``None`` asks for JSON numbers.
        """
        return self._gpu._run(graph, outputs, retain, encoding, bind, self, sessions)

    def info(self):
        """``{sessionId, tensors: [{name, shape, dtype, bytes}], bytes, steps, ...}``."""
        return self._gpu._http.call("GET", "/api/v3/sessions/" + self.id)

    def checkpoint(self):
        """Copies the session's tensors to the coordinator so a lost worker is survivable."""
        return self._gpu._http.call("POST", f"/api/v3/sessions/{self.id}/checkpoint", {})

    def restore(self):
        """Puts a checkpointed session back on a worker."""
        return self._gpu._http.call("POST", f"/api/v3/sessions/{self.id}/restore", {})

    def generate(self, compiled, ids, max_new_tokens=None, start_pos=None, stop_ids=None, temperature=None,
                 top_k=None, top_p=None, seed=None, speculative=None, worker_loop=None, stream=True, **extra):
        """Decodes on the server with a compiled graph that binds ``ids`` and ``pos``.

        Returns a ``Generation``: iterate it for token ids as they arrive; afterwards its
        ``result`` holds the final summary (``tokens``, ``stopped``, ``nextPos``, ...). Further
        keyword arguments are sent as camelCase fields. Raises NotImplementedError when the
        server does not offer generation yet.
        """
        body = {"graphId": _id_of(compiled), "sessionId": self.id, "ids": [int(i) for i in _flatten(ids)]}
        if speculative is not None:
            # Verify graphs may be given as CompiledGraph objects or ids.
            speculative = dict(speculative)
            if "graph_ids" in speculative:
                speculative["graphIds"] = speculative.pop("graph_ids")
            speculative["graphIds"] = [_id_of(g) for g in speculative.get("graphIds", [])]
        fields = dict(max_new_tokens=max_new_tokens, start_pos=start_pos, stop_ids=stop_ids, temperature=temperature,
                      top_k=top_k, top_p=top_p, seed=seed, speculative=speculative, worker_loop=worker_loop, **extra)
        for k, v in fields.items():
            if v is not None:
                body[_camel(k)] = v
        if not stream:
            body["stream"] = False
        try:
            return Generation(self._gpu._http, body, stream)
        except GridError as e:
            if e.status in (501, 503) and "not available" in e.message:
                raise NotImplementedError("server-side generate arrives later: " + e.message) from e
            raise

    def close(self):
        """Closes the session on the server (once; later calls do nothing)."""
        if self.closed:
            return None
        self.closed = True
        return self._gpu._http.call("DELETE", "/api/v3/sessions/" + self.id)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.close()
        except (GridError, OSError):
            if exc_type is None:
                raise

    def __str__(self):
        return self.id

    def __repr__(self):
        return f"Session({self.id!r})"


class Generation:
    """The tokens of one ``POST /api/v3/generate``, read from its event stream as they come."""

    PATH = "/api/v3/generate"
    ITEM = "token"  # the event carrying one item

    def __init__(self, http_, body, stream):
        self._http = http_
        self.result = None
        self.tokens = []
        self._buffer = []
        self._resp = None
        resp = http_.send("POST", self.PATH, json.dumps(body, separators=(",", ":")),
                          {"Accept": "text/event-stream" if stream else "application/json"})
        ctype = (resp.getheader("Content-Type") or "").lower()
        if resp.status >= 400 or not ctype.startswith("text/event-stream"):
            reply = _decode_reply(resp.status, http_.finish(resp))  # raises on errors
            self._finish(reply)
            self._buffer = self._items_of(reply)
            return
        self._resp = resp
        http_.active_stream = self

    def _finish(self, done):
        self.result = done
        if done.get("ok") is False or done.get("stopped") == "error":
            raise GridError(500, done.get("error", "generation failed"))

    @staticmethod
    def _items_of(reply):
        return list(reply.get("tokens", []))

    @staticmethod
    def _item(doc):
        return int(doc["token"])

    def _events(self):
        """Yields (event, data) pairs from the server-sent event stream until it ends."""
        event, data = "message", []
        while True:
            line = self._resp.readline()
            if not line:
                return
            line = line.decode("utf-8").rstrip("\r\n")
            if not line:
                if data:
                    yield event, "\n".join(data)
                event, data = "message", []
            elif line.startswith(":"):
                continue
            else:
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "event":
                    event = value
                elif field == "data":
                    data.append(value)

    def _next_token(self):
        if self._buffer:
            return self._buffer.pop(0)
        if self._resp is None:
            raise StopIteration
        for event, data in self._events():
            doc = json.loads(data)
            if event == self.ITEM:
                return self._item(doc)
            if event == "done":
                self._close_stream()
                self._finish(doc)
                raise StopIteration
            if event == "error":
                self._close_stream()
                raise GridError(500, doc.get("error", data))
        self._close_stream()
        raise StopIteration

    def _close_stream(self):
        if self._resp is not None:
            self._http.finish(self._resp)
            self._resp = None
        if self._http.active_stream is self:
            self._http.active_stream = None

    def _drain(self):
        """Reads the rest of the stream into the buffer so the connection is free again."""
        if self._http.active_stream is self:
            self._http.active_stream = None
        rest = []
        try:
            while self._resp is not None:
                rest.append(self._next_token())
        except StopIteration:
            pass
        self._buffer.extend(rest)

    def _abandon(self):
        self._resp = None
        if self._http.active_stream is self:
            self._http.active_stream = None

    def __iter__(self):
        return self

    def __next__(self):
        tok = self._next_token()
        self.tokens.append(tok)
        return tok


class ChatReply(Generation):
    """The text of one ``POST /api/v3/chat``: iterate it for text pieces as they stream (never
    half a character); afterwards ``result`` holds the summary (``text``, ``finishReason``,
    ``usage``, ``timing``, ``speculation``, ``quantize``) and ``text`` the whole reply."""

    PATH = "/api/v3/chat"
    ITEM = "delta"

    @staticmethod
    def _items_of(reply):
        return [reply["text"]] if reply.get("text") else []

    @staticmethod
    def _item(doc):
        return doc["text"]

    @property
    def text(self):
        return "".join(self.tokens)


class VirtualGPU:
    """The grid as one device, reached with an API key."""

    def __init__(self, base_url, key=None, timeout=DEFAULT_TIMEOUT):
        self.base_url = base_url
        headers = {"Accept": "application/json", "User-Agent": "mpakt_grid.py"}
        if key:
            headers["x-api-key"] = key
        self._http = _Connection(base_url, headers, timeout)

    # ---- discovery
    def versions(self):
        """``GET /api/versions``: the API versions and the ``limits`` block (no key needed)."""
        return self._http.call("GET", "/api/versions")

    def ops(self):
        """``GET /api/ops``: the operation catalogue."""
        return self._http.call("GET", "/api/ops")

    def status(self):
        """``GET /api/v3/status``: workers, backends, features and free bytes."""
        return self._http.call("GET", "/api/v3/status")

    def wait_for_workers(self, n=1, timeout=60.0, interval=0.5):
        """Polls the status until at least ``n`` workers are connected; returns that status.
        Raises TimeoutError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            st = self.status()
            if st.get("workers", 0) >= n:
                return st
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{st.get('workers', 0)} worker(s) connected after {timeout:g} s; wanted {n}")
            time.sleep(interval)

    # ---- models
    def inspect(self, source):
        """The tensor index of a checkpoint (names, shapes, dtypes, bytes); loads nothing."""
        return self._http.call("GET", "/api/v3/models/inspect?source=" + urllib.parse.quote(source, safe=""))

    def load_model(self, source, include=None, exclude=None, names=None, quantize=None):
        """Streams a checkpoint (or the selected part of it) from its host into the network.

        ``include`` and ``exclude`` are glob patterns, ``names`` exact tensor names;
        ``quantize`` is "none", "q8", "q4" or "auto". Returns a ``Model``.
        """
        body = {"source": source}
        for k, v in (("include", include), ("exclude", exclude), ("names", names)):
            if v is not None:
                body[k] = [v] if isinstance(v, str) else list(v)
        if quantize is not None:
            body["quantize"] = quantize
        return Model(self, self._http.call("POST", "/api/v3/models", body))

    def models(self):
        """``{"models": [...], "capacity": {...}}``: this account's models and the pool's room."""
        return self._http.call("GET", "/api/v3/models")

    # ---- sessions
    def chat(self, model, messages, max_tokens=None, temperature=None, top_k=None, top_p=None, seed=None,
             repetition_penalty=None, speculative=None, stream=True):
        """Chats with a model: ``model`` is a Model, a modelId, or a source to load (reused when
        already loaded); ``messages`` a list of {"role", "content"} dicts (or (role, content)
        pairs). Returns a ``ChatReply`` to iterate for text as it streams."""
        msgs = [m if isinstance(m, dict) else {"role": m[0], "content": m[1]} for m in messages]
        body = {"model": _id_of(model), "messages": msgs}
        fields = dict(max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                      repetition_penalty=repetition_penalty, speculative=speculative)
        for k, v in fields.items():
            if v is not None:
                body[_camel(k)] = v
        if not stream:
            body["stream"] = False
        return ChatReply(self._http, body, stream)

    def session(self, model=None, label=None):
        """Opens a session (on the worker holding ``model``, when given). Use with ``with``."""
        body = {}
        if model is not None:
            body["modelId"] = _id_of(model)
        if label is not None:
            body["label"] = label
        return Session(self, self._http.call("POST", "/api/v3/sessions", body))

    # ---- graphs
    def compile(self, graph, outputs=None, retain=None, label=None):
        """Compiles a graph template (bound inputs and ``bind()`` parameters left open)."""
        g = _graph_body(graph, outputs, retain)
        body = {"graph": g}
        if label is not None:
            body["label"] = label
        return CompiledGraph(self, self._http.call("POST", "/api/v3/graphs", body), g.get("outputs"))

    def graphs(self):
        """This account's compiled graphs: ``[{graphId, label, steps, bindings, ...}]``."""
        return self._http.call("GET", "/api/v3/graphs")["graphs"]

    def run(self, graph, outputs=None, retain=None, encoding="base64", bind=None, session=None, sessions=None):
        """Runs a graph with no session (or with ``session``); see ``Session.run``."""
        return self._run(graph, outputs, retain, encoding, bind, session, sessions)

    def _run(self, graph, outputs, retain, encoding, bind, session, sessions):
        if isinstance(graph, CompiledGraph) or (isinstance(graph, str) and graph.startswith("gt_")):
            if outputs is not None or retain is not None:
                raise ValueError("a compiled graph's outputs and retain are fixed when it is compiled")
            body = {"graphId": _id_of(graph), "bind": _bind_values(bind)}
            if session is not None:
                body["session"] = _id_of(session)
        else:
            if bind:
                raise ValueError("bind is for compiled graphs; compile the graph first")
            g = _graph_body(graph, outputs, retain)
            if session is not None:
                g["session"] = _id_of(session)
            body = {"graph": g}
        if sessions:
            ids = [_id_of(s) for s in sessions]
            if session is not None and _id_of(session) not in ids:
                ids.insert(0, _id_of(session))
            body["sessions"] = ids
        if encoding:
            body["encoding"] = encoding
        return _results(self._http.call("POST", "/api/v3/graph", body))

    # ---- the rest
    def random(self, min=None, max=None, count=None):
        """True random integers from the server, ``min`` and ``max`` inclusive."""
        q = {k: v for k, v in (("min", min), ("max", max), ("count", count)) if v is not None}
        path = "/api/v3/random" + ("?" + urllib.parse.urlencode(q) if q else "")
        return self._http.call("GET", path)["numbers"]

    def upload_tensor(self, shape, data, base64_data=True):
        """v2: uploads a tensor (against the key's v2 quota); returns an ``UploadedTensor``."""
        body = {"shape": list(shape)}
        if isinstance(data, str):
            body["dataB64"] = data
        elif base64_data:
            body["dataB64"] = encode_f32(data)
        else:
            body["data"] = _flatten(data)
        return UploadedTensor(self, self._http.call("POST", "/api/v2/tensors", body))

    def delete_tensor(self, tensor):
        return self._http.call("DELETE", "/api/v2/tensors/" + _id_of(tensor))

    def run_v2(self, graph, outputs=None):
        """v2: runs a graph of v2 ops over data and uploaded tensors; returns ``Results``."""
        return _results(self._http.call("POST", "/api/v2/graph", {"graph": _graph_body(graph, outputs, None)}))

    def close(self):
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --------------------------------------------------------------------------- graphs


class Bind:
    """A parameter filled per call of a compiled graph: the bound number times ``mul`` plus ``add``."""

    def __init__(self, name, add=0, mul=1):
        self.name = name
        self.add = add
        self.mul = mul

    def __add__(self, other):
        return Bind(self.name, self.add + other, self.mul)

    __radd__ = __add__

    def to_json(self):
        d = {"$bind": self.name}
        if self.mul != 1:
            d["mul"] = self.mul
        if self.add != 0:
            d["add"] = self.add
        return d

    def __repr__(self):
        return f"bind({self.name!r}, add={self.add}, mul={self.mul})"


def bind(name, add=0, mul=1):
    """A placeholder for a parameter given per call, e.g. ``pos_offset=bind("pos")``;
    the value used is ``bound * mul + add``."""
    return Bind(name, add, mul)


def _param(v):
    if isinstance(v, Bind):
        return v.to_json()
    if isinstance(v, (list, tuple)):
        return [_param(x) for x in v]
    if isinstance(v, dict):
        return {k: _param(x) for k, x in v.items()}
    if hasattr(v, "item") and not isinstance(v, (int, float, bool, str)):
        return v.item()  # a numpy scalar
    return v


class Tensor:
    """A value in a ``Graph``. ``ref`` is its name; results are indexed by it."""

    def __init__(self, graph, ref, kind="value", shape=None):
        self.graph = graph
        self.ref = ref
        self.kind = kind  # "value", "data", "bound", "weight", "session", "tensor"
        self.shape = shape

    def __repr__(self):
        return f"Tensor({self.ref!r}, {self.kind})"


class Graph:
    """Builds a v3 graph. Inputs come from ``input``, ``bound_input``, ``weight``,
    ``session_tensor`` and ``tensor``; each op method appends a step and returns its output
    handle. Parameters are written in snake_case and sent in the API's camelCase; any of them
    may be a ``bind(...)`` placeholder in a graph meant for ``VirtualGPU.compile``. Each op
    method also takes ``out=`` to name its value (a fresh name is made otherwise).
    """

    def __init__(self):
        self.inputs = []
        self.steps = []
        self._names = set()
        self._weights = {}
        self._counter = 0

    # ---- naming
    def _fresh(self, stem):
        while True:
            self._counter += 1
            name = f"{stem}{self._counter}"
            if name not in self._names:
                return name

    def _claim(self, name):
        if name in self._names:
            raise ValueError(f"the graph already has a value named {name!r}")
        self._names.add(name)
        return name

    def _ref(self, x):
        if isinstance(x, Tensor):
            if x.graph is not self:
                raise ValueError(f"{x.ref!r} belongs to another Graph")
            return x.ref
        if isinstance(x, str):
            return x
        raise TypeError(f"expected a tensor handle, got {type(x).__name__}")

    # ---- inputs
    def input(self, name, shape, data):
        """Data sent with the call: ``data`` is a list (nested lists and numpy arrays are
        flattened), ``bytes`` of little-endian f32, or a base64 string of them."""
        entry = {"name": self._claim(name), "shape": list(shape)}
        if isinstance(data, str):
            entry["dataB64"] = data
        elif isinstance(data, (bytes, bytearray, memoryview)):
            entry["dataB64"] = base64.b64encode(bytes(data)).decode("ascii")
        else:
            entry["data"] = _flatten(data)
        self.inputs.append(entry)
        return Tensor(self, name, "data", list(shape))

    def bound_input(self, name, shape, bind_name=None):
        """A hole in a compiled graph: fixed ``shape``, contents given per call as ``bind_name``."""
        self.inputs.append({"name": self._claim(name), "shape": list(shape), "bind": bind_name or name})
        return Tensor(self, name, "bound", list(shape))

    def weight(self, model, name, as_name=None):
        """A weight of a loaded model by its name in the checkpoint. Nothing is uploaded.
        Asking twice for the same weight gives the same handle."""
        mid = _id_of(model)
        if (mid, name) in self._weights and as_name is None:
            return self._weights[(mid, name)]
        ref = self._claim(as_name or self._fresh("w"))
        self.inputs.append({"name": ref, "model": mid, "weight": name})
        t = Tensor(self, ref, "weight")
        self._weights.setdefault((mid, name), t)
        return t

    def session_tensor(self, name, shape=None, of=None, as_name=None):
        """A tensor held by the session under ``name``. Give its ``shape`` in graphs to be
        compiled; ``of`` picks a session of a multi-session run by its index in ``sessions``."""
        ref = self._claim(as_name or self._fresh("s_" + "".join(c if c.isalnum() else "_" for c in name) + "_"))
        entry = {"name": ref, "session": name}
        if shape is not None:
            entry["shape"] = list(shape)
        if of is not None:
            entry["of"] = int(of)
        self.inputs.append(entry)
        return Tensor(self, ref, "session", list(shape) if shape is not None else None)

    def tensor(self, tensor_id, as_name=None, weight=False):
        """A tensor by id: a v2 upload, or a tensorId from a load response (pass
        ``weight=True`` for those so ``matmul`` treats it as a stored [out, in] weight)."""
        ref = self._claim(as_name or self._fresh("t"))
        self.inputs.append({"name": ref, "tensorId": _id_of(tensor_id)})
        return Tensor(self, ref, "weight" if weight else "tensor")

    # ---- steps
    def op(self, op, *inputs, out=None, **params):
        """Appends any op by name: ``g.op("rope", q, head_dim=64)``. The typed methods below
        call this."""
        ref = self._claim(out) if out is not None else self._claim(self._fresh(op.replace("_", "") + "_"))
        step = {"op": op, "in": [self._ref(x) for x in inputs], "out": ref}
        ps = {_camel(k): _param(v) for k, v in params.items() if v is not None}
        if ps:
            step["params"] = ps
        self.steps.append(step)
        return Tensor(self, ref)

    def zeros(self, shape, out=None):
        """A zero-filled tensor made on the worker (a cache costs no upload)."""
        return self.op("zeros", out=out, shape=list(shape))

    def matmul(self, a, b, trans_b=None, out=None):
        """a @ b. ``trans_b`` reads b as [out, in]; it defaults to True when b is a model
        weight (checkpoints store weights that way) and to the server's default otherwise."""
        if trans_b is None and isinstance(b, Tensor) and b.kind == "weight":
            trans_b = True
        return self.op("matmul", a, b, out=out, trans_b=trans_b)

    def linear(self, x, w, bias, trans_b=None, out=None):
        """x @ w + bias in one step; ``trans_b`` defaults as for ``matmul``."""
        if trans_b is None and isinstance(w, Tensor) and w.kind == "weight":
            trans_b = True
        return self.op("linear", x, w, bias, out=out, trans_b=trans_b)

    def rmsnorm(self, x, gamma, eps=None, weight_offset=None, group_size=None, out=None):
        return self.op("rmsnorm", x, gamma, out=out, eps=eps, weight_offset=weight_offset, group_size=group_size)

    def layernorm(self, x, gamma, beta, eps=None, out=None):
        return self.op("layernorm", x, gamma, beta, out=out, eps=eps)

    def rope(self, x, head_dim, offset=None, base=None, rotary_dim=None, interleaved=None, scaling=None,
             inv_freq=None, attention_factor=None, out=None):
        """Rotary embedding of flat [T, heads*head_dim] rows; ``offset`` is row 0's position."""
        return self.op("rope", x, out=out, head_dim=head_dim, offset=offset, base=base, rotary_dim=rotary_dim,
                       interleaved=interleaved, scaling=scaling, inv_freq=inv_freq, attention_factor=attention_factor)

    def attention(self, q, k, v, heads, head_dim, kv_heads=None, bias=None, v_head_dim=None, causal=None,
                  pos_offset=None, scale=None, softcap=None, window=None, alibi=None, alibi_max=None,
                  alibi_slopes=None, out=None):
        """Grouped-query attention over flat q [T, heads*head_dim], k and v; ``bias`` is the
        optional fourth input added to the scores."""
        ins = [q, k, v] + ([bias] if bias is not None else [])
        return self.op("attention", *ins, out=out, heads=heads, head_dim=head_dim, kv_heads=kv_heads,
                       v_head_dim=v_head_dim, causal=causal, pos_offset=pos_offset, scale=scale, softcap=softcap,
                       window=window, alibi=alibi, alibi_max=alibi_max, alibi_slopes=alibi_slopes)

    def swiglu(self, gate, up, out=None):
        return self.op("swiglu", gate, up, out=out)

    def geglu(self, gate, up, out=None):
        return self.op("geglu", gate, up, out=out)

    def moe(self, x, logits, experts, top_k, selection_bias=None, scoring=None, normalize=None, scale=None,
            n_group=None, top_k_group=None, group_top_k=None, layout=None, activation=None, out=None):
        """Mixture of experts. ``experts`` is the flat list of expert weights in the order the
        layout wants (separate: gate_0, up_0, down_0, gate_1, ...); ``selection_bias`` is a
        tensor handle for DeepSeek-V3's correction bias (it sets ``selectionBias``)."""
        ins = [x, logits] + ([selection_bias] if selection_bias is not None else []) + list(experts)
        return self.op("moe", *ins, out=out, top_k=top_k, scoring=scoring, normalize=normalize, scale=scale,
                       n_group=n_group, top_k_group=top_k_group, group_top_k=group_top_k,
                       selection_bias=True if selection_bias is not None else None, layout=layout,
                       activation=activation)

    def embedding(self, ids, table, out=None):
        return self.op("embedding", ids, table, out=out)

    def short_conv(self, x, w_in, w_conv, w_out, state, out=None):
        return self.op("short_conv", x, w_in, w_conv, w_out, state, out=out)

    def conv1d(self, x, weight, state, out=None):
        return self.op("conv1d", x, weight, state, out=out)

    def argmax(self, a, out=None):
        return self.op("argmax", a, out=out)

    def reduce_max(self, a, out=None):
        return self.op("reduce_max", a, out=out)

    def sample(self, logits, history=None, temperature=None, top_k=None, top_p=None, seed=None, step=None,
               repetition_penalty=None, presence_penalty=None, penalty_window=None, penalty_end=None, out=None):
        ins = [logits] + ([history] if history is not None else [])
        return self.op("sample", *ins, out=out, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                       step=step, repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
                       penalty_window=penalty_window, penalty_end=penalty_end)

    def cache_write(self, cache, values, offset, out=None):
        """Writes ``values`` into ``cache`` at row ``offset`` in place; returns the cache."""
        return self.op("cache_write", cache, values, out=out, offset=offset)

    def concat(self, a, b, axis=None, out=None):
        return self.op("concat", a, b, out=out, axis=axis)

    def slice(self, a, start, length, axis=None, out=None):
        return self.op("slice", a, out=out, start=start, length=length, axis=axis)

    def reshape(self, a, shape, out=None):
        return self.op("reshape", a, out=out, shape=list(shape))

    def add(self, a, b, out=None):
        return self.op("add", a, b, out=out)

    def sub(self, a, b, out=None):
        return self.op("sub", a, b, out=out)

    def mul(self, a, b, out=None):
        return self.op("mul", a, b, out=out)

    def scale(self, a, factor, out=None):
        return self.op("scale", a, out=out, factor=factor)

    def relu(self, a, out=None):
        return self.op("relu", a, out=out)

    def silu(self, a, out=None):
        return self.op("silu", a, out=out)

    def tanh(self, a, out=None):
        return self.op("tanh", a, out=out)

    def sigmoid(self, a, out=None):
        return self.op("sigmoid", a, out=out)

    def gelu(self, a, out=None):
        return self.op("gelu", a, out=out)

    def gelu_exact(self, a, out=None):
        return self.op("gelu_exact", a, out=out)

    def gelu_quick(self, a, out=None):
        return self.op("gelu_quick", a, out=out)

    def softcap(self, a, cap, out=None):
        return self.op("softcap", a, out=out, cap=cap)

    def softmax(self, a, out=None):
        return self.op("softmax", a, out=out)

    def transpose(self, a, out=None):
        return self.op("transpose", a, out=out)

    def causal_mask(self, a, out=None):
        return self.op("causal_mask", a, out=out)

    def reduce_sum(self, a, out=None):
        return self.op("reduce_sum", a, out=out)

    def reduce_mean(self, a, out=None):
        return self.op("reduce_mean", a, out=out)

    # ---- composites
    LAYER_WEIGHT_KEYS = ("input_layernorm", "q_proj", "k_proj", "v_proj", "o_proj",
                         "post_attention_layernorm", "gate_proj", "up_proj", "down_proj")

    def decoder_layer(self, x, w, heads, head_dim, kv_heads=None, pos_offset=0, kcache=None, vcache=None,
                      eps=None, rope_base=None):
        """One Llama-style decoder layer on x [T, hidden]; returns ``(y, kcache, vcache)``.

        ``w`` maps these keys to weight handles (as stored, [out, in]):
        ``input_layernorm``, ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``,
        ``post_attention_layernorm``, ``gate_proj``, ``up_proj``, ``down_proj``.

        The steps: rmsnorm; q, k and v projections; rope on q and k at ``pos_offset``;
        with caches, the new k and v rows are written into ``kcache``/``vcache`` at
        ``pos_offset`` (in place) and attention reads the caches, otherwise it reads this
        call's k and v; the output projection; the residual; rmsnorm; gate and up
        projections; swiglu; the down projection; the residual. ``pos_offset`` may be a
        ``bind("pos")``. Without caches the returned pair is this call's (roped) k and v.
        """
        missing = [k for k in self.LAYER_WEIGHT_KEYS if k not in w]
        if missing:
            raise KeyError("decoder_layer needs weights " + ", ".join(missing))
        if (kcache is None) != (vcache is None):
            raise ValueError("give both kcache and vcache, or neither")
        h = self.rmsnorm(x, w["input_layernorm"], eps=eps)
        q = self.matmul(h, w["q_proj"])
        k = self.matmul(h, w["k_proj"])
        v = self.matmul(h, w["v_proj"])
        q = self.rope(q, head_dim=head_dim, offset=pos_offset, base=rope_base)
        k = self.rope(k, head_dim=head_dim, offset=pos_offset, base=rope_base)
        if kcache is not None:
            k = self.cache_write(kcache, k, offset=pos_offset)
            v = self.cache_write(vcache, v, offset=pos_offset)
        a = self.attention(q, k, v, heads=heads, head_dim=head_dim, kv_heads=kv_heads, causal=True,
                           pos_offset=pos_offset)
        r = self.add(x, self.matmul(a, w["o_proj"]))
        m = self.rmsnorm(r, w["post_attention_layernorm"], eps=eps)
        f = self.swiglu(self.matmul(m, w["gate_proj"]), self.matmul(m, w["up_proj"]))
        y = self.add(r, self.matmul(f, w["down_proj"]))
        return y, k, v

    # ---- output
    def to_json(self, outputs=None, retain=None):
        """The graph object: ``{"inputs", "steps", "outputs"?, "retain"?}``. ``outputs`` is a
        list of handles or names; ``retain`` maps session names to handles or names."""
        g = {"inputs": [dict(i) for i in self.inputs], "steps": [dict(s) for s in self.steps]}
        if outputs is not None:
            g["outputs"] = [self._ref(o) for o in outputs]
        if retain is not None:
            g["retain"] = {k: self._ref(v) for k, v in retain.items()}
        return g

    def __len__(self):
        return len(self.steps)
