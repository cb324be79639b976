#!/usr/bin/env python3
"""Decode benchmark for mpakt: tokens/s and per-token overhead of every decode path, each
beside the memory-bandwidth roofline measured in the same run.

Models: stories260K (f32, ../shared/models/stories260K) and a SmolLM2-135M-shaped Llama with
random bf16 weights that this script writes into a temporary hub folder. Both are served by a
real `mpakt host`, loaded through a real `mpakt serve --dev` and decoded over HTTP on loopback.

Paths measured (greedy, from the same prefilled session, `--tokens` new tokens each):
  per-call        one POST /api/v3/graph per token (compiled decode step), keep-alive connection
  gen-server      POST /api/v3/generate, workerLoop false (the server calls the worker per token)
  gen-worker      POST /api/v3/generate, workerLoop true (the worker runs the loop)
  gen-worker-sse  the same, streamed; its token events carry the worker's per-step time
  spec-*          speculative generate (worker loop) with verify graphs over 5 and 3 positions,
                  `always` false and true, on two contexts: `seen` = prompt + the plain greedy
                  continuation + prompt (the continuation is in the context: copy-like text) and
                  `self` = the prompt only (drafts can come only from the model's own output);
                  spec-seen-alwaysT-v5only passes the verify-5 graph alone

Definitions (also written into the JSON):
  compute/token   the worker loop's own per-token time, measured by the server (1 /
                  done.tokensPerSecond of the gen-worker run): executor + the loop's per-step
                  messaging, no HTTP
  step/token      mean of the gen-worker-sse token events' `ms` (the worker's time around one
                  compiled run; printed with 0.1 ms resolution by the server)
  overhead/token  client wall time per token of the path - compute/token (for spec-* rows a
                  negative value is time saved against plain one-token steps)
  cpu/token       CPU time per token of the serve process (all threads, /proc schedstat) plus
                  this client process; cpu overhead = that - the gen-worker path's. CPU time
                  does not count time spent waiting for a core, so it is less sensitive to
                  other jobs than wall time (but not immune: they share caches and memory)
  rq wait         share of the busiest serve thread's time spent waiting on the run queue:
                  how much the machine's other load delayed the measurement
  bandwidth       best single-thread read bandwidth over 1 GiB (numpy f32 sum and int64-view
                  sum, best of 3; the full probes also a 2-array f32 dot), with OMP/OPENBLAS/MKL
                  threads = 1 and the probe's thread count recorded; probed before, before each
                  repeat, and after; the roofline uses the best probe
  bytes/token     every resident weight once (a tied embedding counts once as the output head
                  plus one row for the input) + KV rows read: 2 x layers x rows x kvHeads x
                  headDim x 4 bytes (f32 caches), rows = mean (pos + 1) over the decode
  roofline        bandwidth / bytes/token; fraction = tokens/s / roofline (spec-* rows are
                  compared with the same one-token roofline)

Usage: .venv/bin/python bench/decode_bench.py --out results.json [--tokens 128] [--quick]
Only the Python standard library and numpy.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
STORIES_DIR = REPO.parent / "shared" / "models" / "stories260K"

SMOL_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
    "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
    "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
    "attention_bias": False, "mlp_bias": False,
}

# performance.md (the peer, measured on this machine class; not run here).
# Conversations decoding at once in the batched paths (their steps share passes).
BATCHES = (4, 8)

LLAMA_CPP = {
    "smol": {"dtype": "bf16", "tps_1thread": 107, "tps_2threads": 138, "roofline_2threads": 285,
             "fraction_2threads": 0.48, "bw_1thread_GBs": 40, "bw_2threads_GBs": 77},
}

_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A child process logging to a file, started and awaited by its ready line."""

    def __init__(self, name, argv, log_path):
        self.name, self.argv, self.log_path = name, [str(a) for a in argv], Path(log_path)
        self.p = None
        self._log = None

    def start(self, ready, timeout=60.0):
        self._log = open(self.log_path, "wb")
        self.p = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        rx, deadline = re.compile(ready), time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = rx.search(self.output())
            if m:
                return m
            if self.p.poll() is not None:
                break
            time.sleep(0.02)
        out = self.output()
        self.stop()
        raise RuntimeError(f"{self.name} did not start: {' '.join(self.argv)}\n{out[-3000:]}")

    def output(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, grace=5.0):
        if self.p is not None and self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(timeout=10)
        if self._log:
            self._log.close()
            self._log = None


def sched(pid):
    """{tid: (thread name, ns on a CPU, ns waiting on a run queue)} for every thread of pid
    (/proc/PID/task/TID/schedstat: nanosecond counters, unlike the 10 ms ticks of stat)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            run, wait = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[:2]
            out[tid] = (name, int(run), int(wait))
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass
    return out


def sched_delta(a, b):
    """[(cpu s, run-queue wait s, "name/tid")] of the threads between two sched() readings,
    busiest first."""
    rows = []
    for tid, (name, run, wait) in b.items():
        _, run0, wait0 = a.get(tid, (name, 0, 0))
        rows.append(((run - run0) / 1e9, (wait - wait0) / 1e9, f"{name}/{tid}"))
    return sorted(rows, reverse=True)


# --------------------------------------------------------------------------- HTTP


class Api:
    """JSON over one keep-alive connection (reopened if the server closes it)."""

    def __init__(self, port, timeout=900.0):
        self.port, self.timeout = port, timeout
        self.conn = None
        self.key = None

    def _connect(self):
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)

    def request(self, method, path, body=None, token=None, stream=False):
        h = {"Accept": "application/json"}
        if self.key and token is None:
            h["x-api-key"] = self.key
        if token:
            h["Authorization"] = "Bearer " + token
        payload = None
        if body is not None:
            payload = json.dumps(body, separators=(",", ":")).encode()
            h["Content-Type"] = "application/json"
        for attempt in (0, 1):
            if self.conn is None:
                self._connect()
            try:
                self.conn.request(method, path, body=payload, headers=h)
                resp = self.conn.getresponse()
                if stream:
                    return resp
                data = resp.read()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                    http.client.CannotSendRequest):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path} -> {resp.status}: {data[:500]!r}")
        if resp.getheader("Connection", "").lower() == "close":
            self.conn.close()
            self.conn = None
        return json.loads(data) if data else None

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def delete(self, path):
        return self.request("DELETE", path)

    def close(self):
        if self.conn:
            self.conn.close()
            self.conn = None


# --------------------------------------------------------------------------- checkpoints


def to_bf16(x: np.ndarray) -> np.ndarray:
    """f32 -> bf16 bits, round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def llama_tensors(cfg):
    """[(name, shape)] in HF Llama naming (no lm_head when tied)."""
    h, L, inter, v = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", [v, h])]
    for i in range(L):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", [h]), (p + "self_attn.q_proj.weight", [q, h]),
                (p + "self_attn.k_proj.weight", [kv, h]), (p + "self_attn.v_proj.weight", [kv, h]),
                (p + "self_attn.o_proj.weight", [h, q]), (p + "post_attention_layernorm.weight", [h]),
                (p + "mlp.gate_proj.weight", [inter, h]), (p + "mlp.up_proj.weight", [inter, h]),
                (p + "mlp.down_proj.weight", [h, inter])]
    out.append(("model.norm.weight", [h]))
    if not cfg.get("tie_word_embeddings"):
        out.append(("lm_head.weight", [v, h]))
    return out


def write_random_bf16_llama(path: Path, cfg, seed=0, std=0.02):
    """Streams a bf16 safetensors file: matrices normal*std, norm weights 1."""
    rng = np.random.default_rng(seed)
    tensors = llama_tensors(cfg)
    header, off = {}, 0
    for name, shape in tensors:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for name, shape in tensors:
            if len(shape) == 1:
                a = np.ones(shape, dtype=np.float32)
            else:
                a = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
            f.write(to_bf16(a).tobytes())
    return off


def safetensors_header(path: Path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h


def weight_bytes_per_token(header, cfg):
    """Bytes of weights one decode step reads: every tensor once, but the input embedding is
    one row (and, tied, the whole table once more as the output head)."""
    total, emb = 0, None
    for name, e in header.items():
        nbytes = e["data_offsets"][1] - e["data_offsets"][0]
        if name == "model.embed_tokens.weight":
            emb = (nbytes, e["shape"])
        else:
            total += nbytes
    row = emb[0] // emb[1][0]
    total += row
    if cfg.get("tie_word_embeddings"):
        total += emb[0]
    return total


def kv_bytes_per_token(cfg, mean_rows):
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return 2 * cfg["num_hidden_layers"] * mean_rows * cfg["num_key_value_heads"] * hd * 4


# --------------------------------------------------------------------------- bandwidth

_BW_CODE = r"""
import json, os, sys, time, numpy as np
quick = len(sys.argv) > 1
a = np.ones(1 << 28, dtype=np.float32)          # 1 GiB
b = None if quick else np.ones(1 << 28, dtype=np.float32)  # for the dot product (reads 2 GiB)
a.sum(); a.view(np.int64).sum()                  # fault the pages in
res = {}
methods = [("sum_f32", a.nbytes, lambda: a.sum()), ("sum_i64_view", a.nbytes, lambda: a.view(np.int64).sum())]
if not quick:
    methods.append(("dot_f32_2arrays", 2 * a.nbytes, lambda: np.dot(a, b)))
for name, nbytes, f in methods:
    best = 0.0
    for _ in range(3):
        t = time.perf_counter(); f(); dt = time.perf_counter() - t
        best = max(best, nbytes / dt)
    res[name] = best
res["threads"] = len(os.listdir("/proc/self/task"))
print(json.dumps(res))
"""


def measure_bandwidth(quick=False):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _BW_CODE] + (["quick"] if quick else []), capture_output=True,
                         text=True, env=env, timeout=600, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    methods = {k: v for k, v in r.items() if k != "threads"}
    return {"best_Bps": max(methods.values()), "methods_Bps": methods, "threads": r["threads"]}


# --------------------------------------------------------------------------- one model


def bench_account(api):
    """Signs up the benchmark's account on a --dev server and gives `api` a key."""
    api.post("/api/accounts", {"username": "bench", "password": "a long password"})
    token = api.post("/api/accounts/login", {"username": "bench", "password": "a long password"})["token"]
    api.key = api.post("/api/keys", {"label": "bench"}, token=token)["key"]


def graph_cli(binary, config, *args):
    out = subprocess.run([str(binary), "graph", str(config), *args], capture_output=True, text=True, timeout=120,
                         check=True)
    return json.loads(out.stdout)


def sse_events(resp):
    """(event, data) of a text/event-stream response as each arrives, up to `done` or `error`."""
    event = None
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.decode().rstrip("\r\n")
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            yield event, json.loads(line[6:])
            if event in ("done", "error"):
                return


def read_sse(resp):
    """Every (event, data) of a text/event-stream response."""
    events = list(sse_events(resp))
    resp.read()
    return events


class ModelBench:
    def __init__(self, name, api, binary, config_path, source, prompt, n, serve_pid, quantize="none"):
        self.name, self.api, self.binary = name, api, binary
        self.quantize = quantize
        self.config_path, self.source, self.prompt, self.n = config_path, source, prompt, n
        self.cfg = json.loads(Path(config_path).read_text())
        self.serve_pid = serve_pid
        self.start = len(prompt) - 1
        self.rows = ((len(prompt) + n + 16 + 63) // 64) * 64
        self.bw_probes = []  # a quick bandwidth probe before each repeat

    def setup(self):
        api = self.api
        t = time.perf_counter()
        body = {"source": self.source}
        if self.quantize != "none":
            body["quantize"] = self.quantize
        r = api.post("/api/v3/models", body)
        self.load = {"wall_s": time.perf_counter() - t, **{k: r.get(k) for k in (
            "bytesTransferred", "residentBytes", "throughputMBs", "elapsedMs", "quantize")}}
        self.model = r["modelId"]
        log(f"  loaded {self.source}: {self.load}")
        c = str(self.rows)
        mk = lambda tokens, kind="--argmax": graph_cli(self.binary, self.config_path, "--model-id", self.model,
                                                       "--compiled", "--tokens", str(tokens), "--cache", c, kind)
        self.graphs = {}
        for label, tokens in (("decode", 1), ("verify5", 5), ("verify3", 3)):
            self.graphs[label] = api.post("/api/v3/graphs", {"label": f"{self.name}-{label}", "graph": mk(tokens)})[
                "graphId"]
        alloc = graph_cli(self.binary, self.config_path, "--alloc-cache", c)
        self.session = api.post("/api/v3/sessions", {"modelId": self.model})["session"]["sessionId"]
        api.post("/api/v3/graph", {"graph": dict(alloc, session=self.session)})
        # Prefill prompt[:-1] one compiled step at a time; every measurement then feeds
        # prompt[-1] at startPos and overwrites the rows after it (causal attention never
        # reads rows past the current position).
        t = time.perf_counter()
        for pos, tok in enumerate(self.prompt[:-1]):
            self.step(tok, pos)
        self.prefill_s = time.perf_counter() - t
        # More sessions with the same prompt, for conversations decoding at the same time.
        self.extra_sessions = []
        for _ in range(max(BATCHES) - 1):
            sid = api.post("/api/v3/sessions", {"modelId": self.model})["session"]["sessionId"]
            api.post("/api/v3/graph", {"graph": dict(alloc, session=sid)})
            for pos, tok in enumerate(self.prompt[:-1]):
                api.post("/api/v3/graph", {"graphId": self.graphs["decode"], "session": sid,
                                           "bind": {"ids": [tok], "pos": pos}})
            self.extra_sessions.append(sid)

    def step(self, tok, pos):
        """One compiled decode step over HTTP: the token it chose."""
        r = self.api.post("/api/v3/graph", {"graphId": self.graphs["decode"], "session": self.session,
                                            "bind": {"ids": [tok], "pos": pos}})
        return int(r["outputs"]["tok"]["data"][0])

    # ---- paths

    def timed(self, fn):
        """Runs fn() -> result dict; adds wall time, the serve process's per-thread CPU and
        run-queue wait (schedstat) and this client process's CPU time."""
        s0, c0 = sched(self.serve_pid), time.process_time()
        t = time.perf_counter()
        res = fn()
        wall = time.perf_counter() - t
        c1, s1 = time.process_time(), sched(self.serve_pid)
        threads = sched_delta(s0, s1)
        res.update({"wall_s": wall, "client_cpu_s": c1 - c0, "serve_cpu_s": sum(r[0] for r in threads),
                    "serve_threads": [list(r) for r in threads[:3]]})
        return res

    def per_call(self, n):
        def loop():
            tok, out = self.prompt[-1], []
            for i in range(n):
                tok = self.step(tok, self.start + i)
                out.append(tok)
            return {"tokens": out, "roundTrips": n}
        return self.timed(loop)

    def generate(self, n, worker_loop, speculative=None, stream=False):
        body = {"graphId": self.graphs["decode"], "sessionId": self.session, "ids": [self.prompt[-1]],
                "startPos": self.start, "maxNewTokens": n, "stream": stream, "workerLoop": worker_loop}
        if speculative:
            body["speculative"] = speculative
        def call():
            step_ms = None
            if stream:
                events = read_sse(self.api.post("/api/v3/generate", body, stream=True))
                done = [d for e, d in events if e == "done"][0]
                step_ms = [d["ms"] for e, d in events if e == "token"]
            else:
                done = self.api.post("/api/v3/generate", body)
            if not done.get("ok"):
                raise RuntimeError(f"generate failed: {done}")
            res = {"tokens": done["tokens"], "elapsedMs": done["elapsedMs"],
                   "serverTokensPerSecond": done["tokensPerSecond"], "roundTrips": done["roundTrips"]}
            if step_ms is not None:
                res["step_ms"] = step_ms
            if "speculation" in done:
                res["speculation"] = done["speculation"]
            return res
        return self.timed(call)

    def concurrent(self, n, count):
        """`count` generations at once, one per session and HTTP connection: plain decode
        steps of the same template share passes on the worker (batching). tokens/s is the
        total over all conversations."""
        sessions = [self.session] + self.extra_sessions[:count - 1]

        def call():
            done = [None] * count

            def one(i):
                api = Api(self.api.port)
                api.key = self.api.key
                done[i] = api.post("/api/v3/generate", {
                    "graphId": self.graphs["decode"], "sessionId": sessions[i], "ids": [self.prompt[-1]],
                    "startPos": self.start, "maxNewTokens": n, "stream": False})
            threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if not all(d and d.get("ok") for d in done):
                raise RuntimeError(f"a concurrent generation failed: {done}")
            same = all(d["tokens"] == done[0]["tokens"] for d in done)
            return {"tokens": done[0]["tokens"] if same else None, "roundTrips": 1, "tokens_total": count * n,
                    "batched_share": sum(d["batched"] for d in done) / (count * n)}
        return self.timed(call)

    def pass_costs(self, plain, calls):
        """Median HTTP round-trip time of one compiled call of the decode graph and of each
        verify graph (fed at startPos, rewriting the same cache rows): what a verify pass
        costs next to a one-token step."""
        feeds = {"decode": 1, "verify3": 3, "verify5": 5}
        times = {g: [] for g in feeds}
        for _ in range(calls):  # round robin, so load drift hits the three alike
            for g, k in feeds.items():
                ids = ([self.prompt[-1]] + plain)[:k]
                t = time.perf_counter()
                self.api.post("/api/v3/graph", {"graphId": self.graphs[g], "session": self.session,
                                                "bind": {"ids": ids, "pos": self.start}})
                times[g].append(time.perf_counter() - t)
        out = {g: statistics.median(v) * 1e3 for g, v in times.items()}
        return {"calls": calls, "ms_per_call": out, "ratio_to_decode": {g: v / out["decode"] for g, v in out.items()}}

    def spec_body(self, context, always, graphs=("verify5", "verify3")):
        return {"graphIds": [self.graphs[g] for g in graphs], "context": context, "always": always}

    def run(self, repeats):
        n = self.n
        # warm-up: plans, pages, the adaptive speculator's first passes
        self.per_call(min(4, n))
        self.generate(min(8, n), True)
        self.generate(min(8, n), False)
        plain = self.generate(n, True)["tokens"]
        contexts = {"seen": self.prompt + plain + self.prompt, "self": list(self.prompt)}
        self.generate(min(8, n), True, self.spec_body(contexts["seen"], True))

        paths = [("per-call", lambda: self.per_call(n)),
                 ("gen-server", lambda: self.generate(n, False)),
                 ("gen-worker", lambda: self.generate(n, True)),
                 ("gen-worker-sse", lambda: self.generate(n, True, stream=True))]
        for ctx in ("seen", "self"):
            for always in (False, True):
                paths.append((f"spec-{ctx}-always{'T' if always else 'F'}",
                              lambda c=ctx, a=always: self.generate(n, True, self.spec_body(contexts[c], a))))
        for b in BATCHES:
            paths.append((f"batched-x{b}", lambda b=b: self.concurrent(n, b)))
        # The verify-5 graph alone: what the 4-draft pass gives when the chooser cannot pick 3.
        paths.append(("spec-seen-alwaysT-v5only",
                      lambda: self.generate(n, True, self.spec_body(contexts["seen"], True, ("verify5",)))))
        runs = {p: [] for p, _ in paths}
        for rep in range(repeats):
            self.bw_probes.append(measure_bandwidth(quick=True))
            for p, f in paths:
                r = f()
                r["tokens_match_plain"] = r.pop("tokens") == plain
                runs[p].append(r)
                log(f"  [{self.name} rep {rep + 1}/{repeats}] {p:22s} {n / r['wall_s']:9.1f} tok/s")
        costs = self.pass_costs(plain, 4 if repeats == 1 else 12)
        log(f"  [{self.name}] pass cost over HTTP, ms: {costs['ms_per_call']}")
        return plain, runs, costs

    def teardown(self):
        for path in ([f"/api/v3/sessions/{s}" for s in [self.session] + self.extra_sessions] + [f"/api/v3/graphs/{g}" for g in self.graphs.values()] +
                     [f"/api/v3/models/{self.model}"]):
            try:
                self.api.delete(path)
            except Exception as e:  # noqa: BLE001 - best effort, the server is stopped anyway
                log(f"  cleanup {path}: {e}")


def summarize(mb: ModelBench, runs, bw_Bps, header):
    n = mb.n
    med = statistics.median
    mean_rows = mb.start + (n - 1) / 2 + 1
    wbytes = weight_bytes_per_token(header, mb.cfg)
    if mb.quantize != "none":
        # quantized on load: the published bytes a step reads, scaled by the load's resident/published
        published = sum(e["data_offsets"][1] - e["data_offsets"][0] for e in header.values())
        wbytes = wbytes * mb.load["residentBytes"] / published
    kvbytes = kv_bytes_per_token(mb.cfg, mean_rows)
    bpt = wbytes + kvbytes
    roof = bw_Bps / bpt
    # done.tokensPerSecond is tokens / the server's exact elapsed time (elapsedMs is rounded to 1 ms)
    compute_ms = med(1e3 / r["serverTokensPerSecond"] for r in runs["gen-worker"])
    step_ms = med(sum(r["step_ms"]) / n for r in runs["gen-worker-sse"])
    cpu_ms = lambda r: (r["serve_cpu_s"] + r["client_cpu_s"]) / r.get("tokens_total", n) * 1e3
    worker_cpu_ms = med(cpu_ms(r) for r in runs["gen-worker"])
    # the busiest serve thread of the worker-loop runs is the one that computes
    compute_thread_cpu_ms = med(r["serve_threads"][0][0] / n * 1e3 for r in runs["gen-worker"])
    rows = []
    for p, rs in runs.items():
        total = rs[0].get("tokens_total", n)  # every conversation's tokens for concurrent runs
        wall = med(r["wall_s"] for r in rs)
        ms = wall / total * 1e3
        top = [r["serve_threads"][0] for r in rs]
        row = {"path": p, "tokens": total, "repeats": len(rs), "median_wall_s": wall, "tokens_per_s": total / wall,
               "ms_per_token": ms, "overhead_ms_per_token": ms - compute_ms,
               "cpu_ms_per_token": med(cpu_ms(r) for r in rs),
               "cpu_overhead_ms_per_token": med(cpu_ms(r) for r in rs) - worker_cpu_ms,
               "client_cpu_ms_per_token": med(r["client_cpu_s"] / n * 1e3 for r in rs),
               "busiest_serve_thread": top[0][2].split("/")[0],
               "busiest_thread_runqueue_wait_share": med(t[1] / (t[0] + t[1]) if t[0] + t[1] else 0.0 for t in top),
               "roofline_tokens_per_s": roof, "fraction_of_roofline": (total / wall) / roof,
               "server_tokens_per_s_median": med(r["serverTokensPerSecond"] for r in rs) if "serverTokensPerSecond" in rs[0] else None,
               "roundTrips": rs[0]["roundTrips"],
               "tokens_match_plain": all(r["tokens_match_plain"] for r in rs),
               "all_wall_s": [r["wall_s"] for r in rs],
               "serve_threads_per_repeat": [r["serve_threads"] for r in rs]}
        if "batched_share" in rs[0]:
            row["batched_share"] = med(r["batched_share"] for r in rs)
        if "speculation" in rs[0]:
            s = [r["speculation"] for r in rs]
            row["speculation"] = s[len(s) // 2]
            row["speculation_per_repeat"] = s
            row["acceptance"] = med(x["accepted"] / x["drafted"] if x["drafted"] else 0.0 for x in s)
            row["tokens_per_pass"] = med(n / max(1, x["verifies"] + x["plain"]) for x in s)
        rows.append(row)
    return {"model": mb.name, "source": mb.source, "quantize": mb.quantize, "config": mb.cfg, "prompt": mb.prompt, "start_pos": mb.start,
            "cache_rows": mb.rows, "load": mb.load, "prefill_s": mb.prefill_s,
            "weight_bytes_per_token": wbytes, "kv_bytes_per_token": kvbytes, "mean_kv_rows": mean_rows,
            "bytes_per_token": bpt, "bandwidth_Bps": bw_Bps, "roofline_tokens_per_s": roof,
            "compute_ms_per_token": compute_ms, "worker_step_ms_per_token": step_ms,
            "compute_tokens_per_s": 1e3 / compute_ms, "compute_fraction_of_roofline": (1e3 / compute_ms) / roof,
            "compute_thread_cpu_ms_per_token": compute_thread_cpu_ms,
            "compute_thread_cpu_fraction_of_roofline": (1e3 / compute_thread_cpu_ms) / roof,
            "bandwidth_probes_Bps": [b["best_Bps"] for b in mb.bw_probes],
            "paths": rows, "llama_cpp_published": LLAMA_CPP.get(mb.name)}


# --------------------------------------------------------------------------- main


def print_table(results):
    bw = results["bandwidth"]
    print(f"\nmpakt decode benchmark  {results['date']}  {results['cpu_model']} x{os.cpu_count()}  "
          f"loadavg start {results['loadavg_start'][0]:.2f} end {results['loadavg_end'][0]:.2f}")
    print(f"read bandwidth, 1 thread, best of all probes: {bw['best_Bps'] / 1e9:.1f} GB/s "
          f"(probes {', '.join(f'{x / 1e9:.1f}' for x in bw['probes_Bps'])}; numpy f32 sum alone "
          f"{bw['before']['methods_Bps']['sum_f32'] / 1e9:.1f})")
    for m in results["models"]:
        q = f", quantized to {m['quantize']} on load" if m.get("quantize", "none") != "none" else ""
        print(f"\n== {m['model']} ({m['source']}{q}), {results['tokens']} tokens from pos "
              f"{m['start_pos']}, median of {results['repeats']}")
        print(f"   bytes/token {m['weight_bytes_per_token'] / 1e6:.2f} MB weights + {m['kv_bytes_per_token'] / 1e6:.2f} MB KV "
              f"-> roofline {m['roofline_tokens_per_s']:.0f} tok/s")
        print(f"   worker-loop compute {m['compute_ms_per_token']:.3f} ms/token (SSE step {m['worker_step_ms_per_token']:.3f}; "
              f"compute thread CPU {m['compute_thread_cpu_ms_per_token']:.3f}) = {m['compute_fraction_of_roofline']:.3f} of "
              f"roofline ({m['compute_thread_cpu_fraction_of_roofline']:.3f} by CPU time)")
        pc = m["pass_cost_http"]
        print("   one compiled call over HTTP (median ms): " +
              ", ".join(f"{g} {v:.3f} ({pc['ratio_to_decode'][g]:.2f}x)" for g, v in pc["ms_per_call"].items()))
        lc = m.get("llama_cpp_published")
        if lc:
            print(f"   llama.cpp (performance.md, not run here): {lc['tps_1thread']} tok/s on 1 thread, {lc['tps_2threads']} on 2; "
                  f"{lc['fraction_2threads']} of its 2-thread roofline")
        print(f"   {'path':24s} {'tok/s':>9s} {'ms/tok':>8s} {'ovh ms':>8s} {'cpu ms':>8s} {'cpu ovh':>8s} {'rq wait':>7s} "
              f"{'frac':>6s} {'trips':>5s} {'accept':>6s} {'tok/pass':>8s} {'same':>5s}")
        for r in m["paths"]:
            acc = f"{r['acceptance']:.2f}" if "acceptance" in r else "-"
            tpp = f"{r['tokens_per_pass']:.2f}" if "tokens_per_pass" in r else "-"
            print(f"   {r['path']:24s} {r['tokens_per_s']:9.1f} {r['ms_per_token']:8.3f} {r['overhead_ms_per_token']:8.3f} "
                  f"{r['cpu_ms_per_token']:8.3f} {r['cpu_overhead_ms_per_token']:8.3f} "
                  f"{r['busiest_thread_runqueue_wait_share']:7.2f} {r['fraction_of_roofline']:6.3f} {r['roundTrips']:5d} "
                  f"{acc:>6s} {tpp:>8s} {str(r['tokens_match_plain']):>5s}")
    print("\n   ovh ms = ms/tok - worker-loop compute ms/tok; cpu ms = serve + client CPU per token; cpu ovh = that minus "
          "gen-worker's;\n   rq wait = share of the busiest serve thread's time spent waiting for a CPU (load); "
          "frac = tok/s / roofline (spec rows: vs the one-token roofline;\n   batched rows: every conversation's tokens, "
          "so a pass that reads the weights once for all of them can exceed the one-conversation roofline)")


def main():
    ap = argparse.ArgumentParser(description="Decode tokens/s of every mpakt decode path beside the memory-bandwidth "
                                             "roofline measured in the same run.")
    ap.add_argument("--out", required=True, help="where to write the JSON results")
    ap.add_argument("--tokens", type=int, default=None, help="new tokens per measurement (default 128; 32 with --quick)")
    ap.add_argument("--quick", action="store_true", help="one repeat and fewer tokens: a smoke run")
    ap.add_argument("--repeats", type=int, default=None, help="repeats per path (default 3; 1 with --quick)")
    ap.add_argument("--models", default="stories,smol", help="comma list of stories, smol")
    ap.add_argument("--quantize", default="none", choices=("none", "q8", "q4"),
                    help="load the SmolLM2-shaped model quantized on load (its roofline from the resident bytes)")
    ap.add_argument("--binary", default=os.environ.get("MPAKT_BINARY") or str(REPO / "build" / "mpakt"),
                    help="the mpakt binary (default $MPAKT_BINARY or build/mpakt)")
    args = ap.parse_args()
    n = args.tokens or (32 if args.quick else 128)
    repeats = args.repeats or (1 if args.quick else 3)
    binary = Path(args.binary).resolve()
    if not binary.is_file():
        sys.exit(f"no mpakt binary at {binary}")

    # SIGTERM/SIGINT unwind through the finally below, so children and temp dirs go too.
    def _term(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _term)
    tmp = Path(tempfile.mkdtemp(prefix="mpakt-decode-bench-"))
    procs = []
    try:
        results = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                   "machine": f"{platform.machine()} {os.cpu_count()} cpus",
                   "cpu_model": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
                   "loadavg_start": os.getloadavg(), "binary": str(binary), "tokens": n, "repeats": repeats,
                   "definitions": __doc__.split("Definitions (also written into the JSON):")[1].split("Usage:")[0].strip()}
        log("bandwidth (before)…")
        bw_before = measure_bandwidth()

        hub = tmp / "hub"
        models = []
        wanted = args.models.split(",")
        if "stories" in wanted:
            d = hub / "local" / "stories260K"
            d.mkdir(parents=True)
            for f in ("config.json", "model.safetensors"):
                shutil.copy(STORIES_DIR / f, d / f)
            golden = json.loads((STORIES_DIR / "goldens" / "stories260K_once_upon.json").read_text())
            models.append(("stories", d, "hf:local/stories260K", golden["prompt_ids"]))
        if "smol" in wanted:
            d = hub / "local" / "smol2-135m-shaped-random"
            d.mkdir(parents=True)
            (d / "config.json").write_text(json.dumps(SMOL_CONFIG, indent=1))
            t = time.perf_counter()
            size = write_random_bf16_llama(d / "model.safetensors", SMOL_CONFIG)
            log(f"wrote random bf16 SmolLM2-135M-shaped checkpoint: {size / 1e6:.1f} MB in {time.perf_counter() - t:.1f} s")
            prompt = [int(x) for x in np.random.default_rng(1).integers(3, SMOL_CONFIG["vocab_size"], 8)]
            models.append(("smol", d, "hf:local/smol2-135m-shaped-random", prompt))

        host = Proc("mpakt host", [binary, "host", hub, "--port", "0"], tmp / "host.log")
        procs.append(host)
        host_url = host.start(r"mpakt host: serving .* at (http://\S+)").group(1)
        serve = None
        for _ in range(3):
            port = free_port()
            data = tmp / f"serve-{port}"
            data.mkdir()
            serve = Proc("mpakt serve", [binary, "serve", "--port", port, "--data-dir", data, "--dev",
                                         "--hf-endpoint", host_url, "--worker-memory", "8G"], data / "serve.log")
            try:
                serve.start(r"mpakt serve: listening on http://")
                break
            except RuntimeError as e:
                if "already in use" not in str(e):
                    raise
        procs.append(serve)
        api = Api(port)
        bench_account(api)

        out_models = []
        for name, d, source, prompt in models:
            log(f"== {name}")
            mb = ModelBench(name, api, binary, d / "config.json", source, prompt, n, serve.p.pid,
                            args.quantize if name == "smol" else "none")
            mb.setup()
            plain, runs, costs = mb.run(repeats)
            mb.teardown()
            out_models.append((mb, runs, safetensors_header(d / "model.safetensors"), plain, costs))
        api.close()

        log("bandwidth (after)…")
        bw_after = measure_bandwidth()
        probes = [bw_before] + [b for mb, *_ in out_models for b in mb.bw_probes] + [bw_after]
        if any(b["threads"] != 1 for b in probes):
            log("warning: a bandwidth probe ran more than one thread")
        best = max(b["best_Bps"] for b in probes)
        results["bandwidth"] = {"best_Bps": best, "before": bw_before, "after": bw_after,
                                "probes_Bps": [b["best_Bps"] for b in probes],
                                "probe_threads": [b["threads"] for b in probes],
                                "note": "single thread (OMP/OPENBLAS/MKL_NUM_THREADS=1; each probe's task count is "
                                        "recorded); probes before, before each repeat of each model, after; the "
                                        "roofline uses the best"}
        results["loadavg_end"] = os.getloadavg()
        results["models"] = []
        for mb, runs, header, plain, costs in out_models:
            s = summarize(mb, runs, best, header)
            s["plain_tokens_head"] = plain[:16]
            s["pass_cost_http"] = costs
            results["models"].append(s)
        Path(args.out).write_text(json.dumps(results, indent=1))
        print_table(results)
        print(f"\nJSON: {args.out}")
    finally:
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
