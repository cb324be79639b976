"""Loads with several range requests in flight and pieces pipelined to the worker
(actors/loader/fetch.hpp, actors/coordinator/load_job.cpp), through real processes:

  * every tensor arrives byte for byte — tensors sharing a range request, one cut into
    16 MB pieces, an empty one, mixed dtypes — read back through graphs;
  * a host that fails part-way through a load (after earlier tensors reached the worker),
    as published or quantized on load, leaves nothing behind: the load fails naming the
    tensor, the worker's free memory is what it was, and once the host recovers the same
    model loads whole onto the same worker.
(That q8/q4 bytes built on the fly equal the reference's is checked below the API:
test/backends/quantize_test.cpp and test/runtime/tensor_builder_test.cpp.)"""
from __future__ import annotations

import base64
import http.server
import re
import struct
import threading

import pytest

from e2e_util import expect, write_safetensors

WORK_S = 120
BIG_ROWS, COLS = 4200, 1024  # f32: 17,203,200 bytes, two pieces


def _pattern(n, seed):
    return bytes(((i * 37 + seed * 11 + i // 251) & 0x7F) for i in range(n))


def _f32_rows(rows, cols, seed):
    row = struct.pack(f"<{cols}f", *[((i * 7 + seed) % 61 - 30) / 64.0 for i in range(cols)])
    return row * rows


@pytest.fixture(scope="module")
def mixed_model(hub_dir):
    d = hub_dir / "local" / "mixed"
    d.mkdir(exist_ok=True)
    tensors = {
        "a.weight": ("BF16", [64, 96], _pattern(64 * 96 * 2, 1)),
        "b.weight": ("F32", [33, 64], _f32_rows(33, 64, 2)),
        "empty.weight": ("F32", [0, 64], b""),
        "c.weight": ("BF16", [256, 1024], _pattern(256 * 1024 * 2, 3)),
        "big.weight": ("F32", [BIG_ROWS, COLS], _f32_rows(BIG_ROWS, COLS, 4)),
        "d.norm": ("F32", [1024], _f32_rows(1, 1024, 5)),
    }
    write_safetensors(d / "model.safetensors", tensors)
    return "hf:local/mixed", tensors


def read_back(api, key, model, name, rows):
    """Rows of a weight as the worker holds it, widened to f32: all of them for small tensors,
    else the first 4 and the last."""
    ranges = [(0, rows)] if rows <= 64 else [(0, 4), (rows - 1, 1)]
    g = {"inputs": [{"name": "w", "model": model, "weight": name}],
         "steps": [{"op": "slice", "in": ["w"], "out": f"r{i}", "params": {"start": a, "length": n}}
                   for i, (a, n) in enumerate(ranges)],
         "outputs": [f"r{i}" for i in range(len(ranges))]}
    out = expect(api.post("/api/v3/graph", {"graph": g, "encoding": "base64"}, key=key, timeout=WORK_S), 200)["outputs"]
    got = []
    for i, (a, n) in enumerate(ranges):
        raw = base64.b64decode(out[f"r{i}"]["dataB64"])
        got.append((a, n, list(struct.unpack(f"<{len(raw) // 4}f", raw))))
    return got


def widen(dtype, raw):
    if dtype == "F32":
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    return [struct.unpack("<f", b"\0\0" + raw[2 * i:2 * i + 2])[0] for i in range(len(raw) // 2)]


@pytest.mark.parametrize("fetch", ["off", "on"])
def test_every_tensor_arrives_whole(start_server, mixed_model, fetch):
    """Relayed through the coordinator, and read by the worker itself (kept-as-published
    tensors straight into place, converted ones through buffers)."""
    source, tensors = mixed_model
    server = start_server("--worker-memory", "1G", "--dev", "--worker-fetch", fetch)
    _, key = server.account("pipeline")
    api = server.api
    r = expect(api.post("/api/v3/models", {"source": source}, key=key, timeout=WORK_S), 200)
    published = sum(len(raw) for _, _, raw in tensors.values())
    assert r["bytesTransferred"] == published
    assert r["residentBytes"] == published
    assert [t["name"] for t in r["tensors"]] == list(tensors)
    # a few pieces at most, never the model; none when the worker reads them itself
    if fetch == "off":
        assert 0 < r["coordinatorPeakBytes"] <= 4 * 16_000_000
    else:
        assert r["coordinatorPeakBytes"] == 0
    model = r["modelId"]
    for name, (dtype, shape, raw) in tensors.items():
        if not shape[0]:
            continue
        rows = shape[0]
        row_bytes = len(raw) // rows
        for a, n, vals in read_back(api, key, model, name, rows):
            assert vals == widen(dtype, raw[a * row_bytes:(a + n) * row_bytes]), (name, a, n)
    server.assert_up()


def test_an_embedded_worker_quantizes_the_ranges_it_reads_as_the_relay_would(start_server, mixed_model):
    """Quantized on load, an embedded worker reads every tensor from the host itself — those it
    converts too (no byte passes through the coordinator) — and holds the same q8 values as a
    worker whose pieces are relayed (`--worker-fetch off`): the converting builder sees the
    bytes cut where ranges end instead of where pieces do."""
    source, tensors = mixed_model
    published = sum(len(raw) for _, _, raw in tensors.values())
    held = {}
    for fetch in ("on", "off"):
        server = start_server("--worker-memory", "1G", "--dev", "--worker-fetch", fetch)
        _, key = server.account("pipeline-q8")
        api = server.api
        r = expect(api.post("/api/v3/models", {"source": source, "quantize": "q8"}, key=key, timeout=WORK_S), 200)
        assert r["quantize"] == "q8"
        assert r["bytesTransferred"] == published
        assert r["residentBytes"] < published  # (matrices held as q8)
        if fetch == "on":
            assert r["coordinatorPeakBytes"] == 0
        else:
            assert 0 < r["coordinatorPeakBytes"] <= 4 * 16_000_000
        # a tensor kept as published arrived byte for byte
        g = {"inputs": [{"name": "w", "model": r["modelId"], "weight": "d.norm"}], "steps": [], "outputs": ["w"]}
        out = expect(api.post("/api/v3/graph", {"graph": g, "encoding": "base64"}, key=key), 200)["outputs"]["w"]
        assert base64.b64decode(out["dataB64"]) == tensors["d.norm"][2]
        held[fetch] = {name: read_back(api, key, r["modelId"], name, shape[0])
                       for name, (_, shape, _) in tensors.items() if shape[0] and len(shape) == 2}
        server.assert_up()
    # (the bf16 patterns hold NaNs, which compare unequal to themselves: compared as text)
    assert repr(held["on"]) == repr(held["off"])
    # (and quantized: the big f32 matrix's values are not all as published)
    big = held["on"]["big.weight"][0][2]
    assert big != widen("F32", tensors["big.weight"][2][:len(big) * 4])


class _FailingHost(http.server.BaseHTTPRequestHandler):
    """Serves one checkpoint with Range; ranges reaching past `fail_from` answer 500."""
    path_re = re.compile(r"^/local/mixed/resolve/main/(.+)$")
    files: dict = {}
    fail_from = 0

    def log_message(self, *args):
        pass

    def do_GET(self):
        m = self.path_re.match(self.path)
        data = self.files.get(m.group(1)) if m else None
        if data is None:
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        rng = self.headers.get("range")
        first, last = 0, len(data) - 1
        if rng:
            a, b = rng.split("=")[1].split("-")
            first, last = int(a), min(int(b), len(data) - 1)
        if rng and last >= self.fail_from and first > 0:
            self.send_response(500)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        body = data[first:last + 1]
        self.send_response(206 if rng else 200)
        if rng:
            self.send_header("content-range", f"bytes {first}-{last}/{len(data)}")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def failing_host(mixed_model, hub_dir):
    path = hub_dir / "local" / "mixed" / "model.safetensors"
    data = path.read_bytes()
    (hlen,) = struct.unpack("<Q", data[:8])
    import json
    header = json.loads(data[8:8 + hlen])
    # fail from the last tensor's bytes on: everything before it reaches the worker first
    start = 8 + hlen + header["d.norm"]["data_offsets"][0]
    handler = type("Failing", (_FailingHost,), {"files": {"model.safetensors": data}, "fail_from": start})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()


@pytest.mark.parametrize("quantize", ["none", "q8"])
def test_a_host_failing_mid_load_leaves_nothing_behind(start_server, failing_host, mixed_model, quantize):
    source, tensors = mixed_model
    url, handler = failing_host
    server = start_server("--worker-memory", "1G", "--dev", hf_endpoint=url)
    _, key = server.account("midload")
    api = server.api
    free_before = expect(api.get("/api/v3/status", key=key), 200)["pool"][0]["freeBytes"]
    r = api.post("/api/v3/models", {"source": source, "quantize": quantize}, key=key, timeout=WORK_S)
    assert r.status in (502, 503), r
    assert "d.norm" in r.error, r.error
    assert expect(api.get("/api/v3/models", key=key), 200)["models"] == []
    assert expect(api.get("/api/v3/status", key=key), 200)["pool"][0]["freeBytes"] == free_before
    # The host recovers: the same model loads whole onto the same worker (nothing of the
    # failed load is left in the way) and holds what a quiet load holds.
    handler.fail_from = 1 << 62
    ok = expect(api.post("/api/v3/models", {"source": source, "quantize": quantize}, key=key, timeout=WORK_S), 200)
    assert ok["bytesTransferred"] == sum(len(raw) for _, _, raw in tensors.values())
    assert expect(api.get("/api/v3/status", key=key), 200)["pool"][0]["freeBytes"] == free_before - ok["residentBytes"]
    server.assert_up()
