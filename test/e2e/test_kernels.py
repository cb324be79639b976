"""CPU kernel levels through the real server: a worker reports the level, the CPU and its
kernel threads in /api/v3/status, and a worker held to the portable level (MPAKT_CPU_LEVEL)
decodes the same golden tokens as the best level this machine has (issue: kernels chosen at
run time; GEN-01, STA-*)."""
from __future__ import annotations

import json
import subprocess

from e2e_util import STORIES_DIR, binary, expect

LEVELS = ("scalar", "avx2", "avx512", "avx512_vnni", "avx512_bf16", "amx")
CACHE_ROWS = 64


def graph_cli(*args):
    out = subprocess.run([str(binary()), "graph", str(STORIES_DIR / "config.json"), *args], capture_output=True,
                         text=True, timeout=30, check=True)
    return json.loads(out.stdout)


def pool_entry(server, key):
    status = expect(server.api.get("/api/v3/status", key=key), 200)
    assert status["pool"], status
    return status["pool"][0]


def greedy_tokens(server, key, golden):
    """stories260K loaded, the prompt but its last token prefilled, then generate."""
    api = server.api
    model = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=key), 200)["modelId"]
    step = graph_cli("--model-id", model, "--compiled", "--tokens", "1", "--cache", str(CACHE_ROWS), "--argmax")
    gid = expect(api.post("/api/v3/graphs", {"graph": step}, key=key), 200)["graphId"]
    sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
    expect(api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", str(CACHE_ROWS)), session=sid)}, key=key),
           200)
    prompt = golden["prompt_ids"]
    prefill = graph_cli("--model-id", model, "--ids", ",".join(map(str, prompt[:-1])), "--cache", str(CACHE_ROWS),
                        "--argmax", "--last")
    expect(api.post("/api/v3/graph", {"graph": dict(prefill, session=sid)}, key=key), 200)
    n = len(golden["greedy_ids"]) - len(prompt)
    done = expect(api.post("/api/v3/generate", {"graphId": gid, "sessionId": sid, "ids": [prompt[-1]],
                                                "startPos": len(prompt) - 1, "maxNewTokens": n, "stream": False},
                           key=key), 200)
    return done["tokens"]


def test_status_reports_each_workers_kernel_level_cpu_and_threads(server):
    _, key = server.account("kernels")
    w = pool_entry(server, key)
    level = w["kernels"].split(" ")[0]
    assert level in LEVELS, w["kernels"]
    assert "(" in w["kernels"] and w["kernels"].endswith(")"), w["kernels"]  # the features behind it
    assert isinstance(w["cpu"], str)
    assert isinstance(w["threads"], int) and w["threads"] >= 1


def test_a_worker_held_to_the_portable_level_decodes_the_golden_tokens(start_server, monkeypatch, stories_golden):
    monkeypatch.setenv("MPAKT_CPU_LEVEL", "scalar")
    portable = start_server("--dev", "--threads", "2")
    monkeypatch.delenv("MPAKT_CPU_LEVEL")
    best = start_server("--dev", "--threads", "2")
    tokens = {}
    for name, srv in (("portable", portable), ("best", best)):
        _, key = srv.account(f"kernels-{name}")
        w = pool_entry(srv, key)
        assert w["threads"] == 2, w
        if name == "portable":
            assert w["kernels"].startswith("scalar "), w["kernels"]
        tokens[name] = greedy_tokens(srv, key, stories_golden)
    want = stories_golden["greedy_ids"][len(stories_golden["prompt_ids"]):]
    assert tokens["portable"] == want
    assert tokens["best"] == want


def test_a_plain_call_may_take_the_many_row_kernels_and_several_sessions_keep_each_rows_bits(server):
    """A plain graph call promises no row the bits it gets alone, so its products of 16 to 32
    rows may take the many-row kernels (a short prompt's prefill; runtime/row_bits.hpp); a
    graph listing several sessions keeps every row's bits alone (SES-20): each of its rows is
    exactly what a one-row call gives. Where this CPU's level has a many-row kernel for q4 from
    16 rows (AMX, VNNI or AVX2 lanes) the plain call's rows are its bits (int8 activations),
    within the quantisation's reach of the one-row values; elsewhere the same bits."""
    import base64
    import random
    import struct

    _, key = server.account("rowbits")
    api = server.api
    model = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K", "quantize": "q4"}, key=key, timeout=60),
                   200)["modelId"]
    sessions = [expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
                for _ in range(2)]
    rng = random.Random(7)
    rows, k = 24, 64
    x = [[rng.uniform(-1, 1) for _ in range(k)] for _ in range(rows)]

    def product(xs, **extra):
        graph = {"inputs": [{"name": "x", "shape": [len(xs), k], "data": [v for row in xs for v in row]},
                            {"name": "w", "model": model, "weight": "model.layers.0.mlp.gate_proj.weight"}],
                 "steps": [{"op": "matmul", "in": ["x", "w"], "out": "y", "params": {"transB": True}}],
                 "outputs": ["y"], **extra}
        out = expect(api.post("/api/v3/graph", {"graph": graph, "encoding": "base64"}, key=key), 200)["outputs"]["y"]
        raw = base64.b64decode(out["dataB64"])
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))

    alone = [v for row in x for v in product([row])]
    several = product(x, sessions=sessions)
    assert several == alone  # bit for bit: SES-20
    plain = product(x)
    level = pool_entry(server, key)["kernels"].split(" ")[0]
    if level in ("amx", "avx512_bf16", "avx512_vnni", "avx2"):
        assert plain != alone, f"{level}: the plain call's rows kept their bits alone"
        scale = max(abs(v) for v in alone)
        assert max(abs(a - b) for a, b in zip(plain, alone)) <= 0.02 * scale
    else:
        assert plain == alone
