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
