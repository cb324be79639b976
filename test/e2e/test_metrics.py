"""GET /metrics, x-request-id and the JSON log through real processes: the exposition is read by
the `prometheus_client` parser (names, types, labels, values), a real Prometheus server
(Debian's `prometheus`) scrapes a running grid with an operator's key and answers a PromQL
query with the tokens the grid generated, and each request's id comes back in its header and
in the server's log lines for it (docs/operators.md, "Metrics and logs")."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from e2e_util import STORIES_DIR, Process, binary, expect, start_with_free_port

prometheus_parser = pytest.importorskip("prometheus_client.parser")

CACHE_ROWS = 64


def graph_cli(*args):
    out = subprocess.run([str(binary()), "graph", str(STORIES_DIR / "config.json"), *args], capture_output=True,
                         text=True, timeout=30, check=True)
    return json.loads(out.stdout)


def families(text):
    return {f.name: f for f in prometheus_parser.text_string_to_metric_families(text)}


def sample_sum(fams, family, sample_name=None, **labels):
    """The sum of a family's samples (named `sample_name`, default the family's own) whose
    labels include `labels`."""
    f = fams[family]
    name = sample_name or (family + "_total" if f.type == "counter" else family)
    return sum(s.value for s in f.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


@pytest.fixture(scope="module")
def grid(start_server, stories_golden):
    """A server logging JSON, an operator and a user; stories260K loaded by the user, one
    greedy decode template, and tokens generated on both generate paths."""
    server = start_server("--log-format", "json")
    api = server.api
    _, op_key = server.account("metrics-operator")
    r = server.admin("grant-admin", "metrics-operator")
    assert r.returncode == 0, r.stdout + r.stderr
    _, key = server.account("metrics-user")
    load = api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=key, headers={"x-request-id": "load-req-1"})
    model = expect(load, 200)["modelId"]
    greedy = graph_cli("--model-id", model, "--compiled", "--tokens", "1", "--cache", str(CACHE_ROWS), "--argmax")
    graph = expect(api.post("/api/v3/graphs", {"label": "greedy", "graph": greedy}, key=key), 200)["graphId"]
    sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
    expect(api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", str(CACHE_ROWS)), session=sid)}, key=key), 200)
    prompt = stories_golden["prompt_ids"]
    for pos, tok in enumerate(prompt[:-1]):
        expect(api.post("/api/v3/graph", {"graphId": graph, "session": sid, "bind": {"ids": [tok], "pos": pos}}, key=key), 200)
    generated = {}
    start = len(prompt) - 1
    for path, worker_loop, n in (("worker_loop", True, 7), ("per_call", False, 5)):
        body = {"graphId": graph, "sessionId": sid, "ids": [prompt[-1]], "startPos": start, "maxNewTokens": n,
                "stream": False, "workerLoop": worker_loop}
        generated[path] = len(expect(api.post("/api/v3/generate", body, key=key), 200)["tokens"])
    return {"server": server, "api": api, "op_key": op_key, "key": key, "model": model, "generated": generated,
            "load_reply": load}


def test_metrics_needs_an_operators_key_in_either_header(grid):
    api = grid["api"]
    expect(api.get("/metrics"), 401, "operator")
    expect(api.get("/metrics", key=grid["key"]), 403, "operator")
    expect(api.get("/metrics", token=grid["key"]), 403, "operator")
    for kw in ({"key": grid["op_key"]}, {"token": grid["op_key"]}):
        r = api.get("/metrics", **kw)
        assert r.status == 200, r
        assert r.headers.get("Content-Type", "").startswith("text/plain; version=0.0.4"), r.headers
    expect(api.post("/metrics", key=grid["op_key"]), 400, "GET")


def test_exposition_parses_with_the_reference_parser(grid):
    api = grid["api"]
    text = api.get("/metrics", key=grid["op_key"]).body.decode("utf-8")
    fams = families(text)
    for name, kind in {"mpakt_http_requests": "counter", "mpakt_http_request_duration_seconds": "histogram",
                       "mpakt_tokens_generated": "counter", "mpakt_prompt_tokens": "counter",
                       "mpakt_speculative_drafts_proposed": "counter", "mpakt_speculative_drafts_accepted": "counter",
                       "mpakt_batched_pass_sessions": "histogram", "mpakt_graph_steps": "counter",
                       "mpakt_graph_step_seconds": "counter", "mpakt_load_bytes": "counter",
                       "mpakt_load_duration_seconds": "histogram", "mpakt_workers_lost": "counter",
                       "mpakt_recoveries": "counter", "mpakt_calls_replayed": "counter", "mpakt_errors": "counter",
                       "mpakt_volunteer_joins_refused": "counter", "mpakt_sessions": "gauge",
                       "mpakt_compiled_graphs": "gauge", "mpakt_models": "gauge", "mpakt_workers": "gauge",
                       "mpakt_worker_offered_bytes": "gauge", "mpakt_worker_resident_bytes": "gauge"}.items():
        assert name in fams, f"{name} missing from /metrics"
        assert fams[name].type == kind, (name, fams[name].type)
    gen = grid["generated"]
    assert sample_sum(fams, "mpakt_tokens_generated", path="worker_loop") == gen["worker_loop"]
    assert sample_sum(fams, "mpakt_tokens_generated", path="per_call") == gen["per_call"]
    # routes by template, never by raw path; codes as strings
    assert sample_sum(fams, "mpakt_http_requests", method="POST", route="/api/v3/generate", code="200") == 2
    assert sample_sum(fams, "mpakt_http_requests", route="/metrics", code="401") >= 1
    assert not any("s_" in s.labels.get("route", "") for s in fams["mpakt_http_requests"].samples)
    count = sample_sum(fams, "mpakt_http_request_duration_seconds", "mpakt_http_request_duration_seconds_count",
                       method="POST", route="/api/v3/graph")
    assert count >= 2
    buckets = [s for s in fams["mpakt_http_request_duration_seconds"].samples
               if s.name.endswith("_bucket") and s.labels.get("route") == "/api/v3/graph"]
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == count
    assert sample_sum(fams, "mpakt_errors", code="unauthorized") >= 1
    assert sample_sum(fams, "mpakt_errors", code="forbidden") >= 1
    # what the grid holds, asked of the coordinator at the scrape
    assert sample_sum(fams, "mpakt_models") == 1
    assert sample_sum(fams, "mpakt_sessions") == 1
    assert sample_sum(fams, "mpakt_compiled_graphs") == 1
    assert sample_sum(fams, "mpakt_workers", backend="cpu") == 1
    offered = [s for s in fams["mpakt_worker_offered_bytes"].samples if s.labels["worker"] == "w_local0"]
    resident = [s for s in fams["mpakt_worker_resident_bytes"].samples if s.labels["worker"] == "w_local0"]
    assert offered and offered[0].value == 8 * 2 ** 30
    assert resident and 0 < resident[0].value < offered[0].value
    # the embedded worker's steps, by op; the load's bytes and time
    assert sample_sum(fams, "mpakt_graph_steps", op="matmul") > 0
    assert sample_sum(fams, "mpakt_graph_step_seconds", op="matmul") > 0
    assert sample_sum(fams, "mpakt_load_bytes") > 0
    assert sample_sum(fams, "mpakt_load_duration_seconds", "mpakt_load_duration_seconds_count", outcome="ok") == 1
    # the worker loop ran its passes alone (one generation at a time)
    assert sample_sum(fams, "mpakt_batched_pass_sessions", "mpakt_batched_pass_sessions_count") >= gen["worker_loop"] - 1


def test_request_id_is_returned_and_logged_as_json(grid):
    api, server = grid["api"], grid["server"]
    assert grid["load_reply"].headers.get("x-request-id") == "load-req-1"
    r = api.get("/api/versions")
    rid = r.headers.get("x-request-id")
    assert rid and rid.startswith("r_"), r.headers
    bad = api.get("/api/versions", headers={"x-request-id": "no spaces allowed"}).headers.get("x-request-id")
    assert bad.startswith("r_")
    deadline = time.monotonic() + 5
    while True:
        lines = [json.loads(l) for l in server.process.output().splitlines() if l.startswith("{")]
        mine = [l for l in lines if l.get("request_id") == rid]
        if mine or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(mine) == 1, mine
    assert mine[0]["component"] == "http" and mine[0]["route"] == "/api/versions" and mine[0]["status"] == "200"
    assert float(mine[0]["duration_ms"]) >= 0
    # the load's id reached the coordinator's lines for it; keys are named by id, never shown
    load_lines = [l for l in lines if l.get("request_id") == "load-req-1"]
    assert {l["component"] for l in load_lines} >= {"http", "coordinator"}, load_lines
    assert all(l["key_id"].startswith("k_") for l in load_lines if l["component"] == "http")
    assert grid["key"] not in server.process.output()
    # the banner stays plain text on stdout
    assert "mpakt serve: listening on http://" in server.process.output()


def test_metrics_open_serves_without_a_key(start_server):
    server = start_server("--metrics-open")
    r = server.api.get("/metrics")
    assert r.status == 200, r
    assert "mpakt_tokens_generated_total" in families(r.body.decode()) or "mpakt_tokens_generated" in families(r.body.decode())


def test_a_real_prometheus_scrapes_the_grid(grid, tmp_path):
    exe = shutil.which("prometheus")
    if exe is None:
        pytest.skip("no prometheus binary (Debian's prometheus package; tools/install.sh installs it)")
    server = grid["server"]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: mpakt\n"
        "    metrics_path: /metrics\n"
        "    authorization:\n"
        f"      credentials: {grid['op_key']}\n"
        "    static_configs:\n"
        f"      - targets: ['127.0.0.1:{server.port}']\n")

    def make(port):
        return Process("prometheus", [exe, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                      f"--web.listen-address=127.0.0.1:{port}"], tmp_path / f"prometheus-{port}.log")

    proc, port = start_with_free_port(make, r"Server is ready to receive web requests", timeout=60)
    try:
        expected = sum(grid["generated"].values())
        query = urllib.parse.urlencode({"query": "sum(mpakt_tokens_generated_total)"})
        deadline, last = time.monotonic() + 30, None
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{query}", timeout=5) as resp:
                last = json.loads(resp.read())
            result = last["data"]["result"]
            if last["status"] == "success" and result and float(result[0]["value"][1]) == expected:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"Prometheus never saw {expected} tokens: {last}\n{proc.output()[-3000:]}")
        # the scrape itself is healthy: up == 1 for the grid's target
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?query=up", timeout=5) as resp:
            up = json.loads(resp.read())["data"]["result"]
        assert up and up[0]["value"][1] == "1", up
    finally:
        proc.kill()
