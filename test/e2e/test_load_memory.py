"""A load through the real path (mpakt host -> coordinator -> worker) of a tensor far larger
than a 16 MB piece: the coordinator holds a few pieces of weights at a time — fetched ahead,
or on their way to the worker — never the tensor (LOAD-19). Both ways a worker gets its
bytes: relayed by the coordinator (`--worker-fetch off`), and read by the embedded worker from
the model host itself, straight into the tensor (the default; the coordinator holds none).

Measured two ways: the load response's coordinatorPeakBytes (the most weight bytes held at
once: at most 4 pieces relayed, none fetched), and the serve process's peak resident memory,
which must grow by the tensor the embedded worker keeps plus a few pieces — not by copies of
the whole tensor."""
from __future__ import annotations

import struct

import pytest

from e2e_util import expect, write_safetensors

ROWS, COLS = 31250, 1024  # one f32 tensor of 128,000,000 bytes = 8 pieces; rows a multiple of 32 wide


def peak_rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc")


@pytest.fixture(scope="module")
def big_model(hub_dir):
    d = hub_dir / "local" / "big"
    d.mkdir(exist_ok=True)
    row = struct.pack(f"<{COLS}f", *[(i % 97) / 97.0 for i in range(COLS)])
    write_safetensors(d / "model.safetensors", {"big.weight": ("F32", [ROWS, COLS], row * ROWS),
                                                 "norm.weight": ("F32", [COLS], row)})
    return "hf:local/big"


@pytest.mark.parametrize("fetch", ["off", "on"])
def test_coordinator_memory_stays_bounded_by_a_few_pieces(start_server, big_model, fetch):
    server = start_server("--worker-memory", "1G", "--worker-fetch", fetch)
    _, key = server.account("bulk")
    api = server.api
    pid = server.process.proc.pid
    before = peak_rss_bytes(pid)
    r = expect(api.post("/api/v3/models", {"source": big_model}, key=key, timeout=120), 200)
    after = peak_rss_bytes(pid)
    tensor_bytes = ROWS * COLS * 4
    assert r["bytesTransferred"] == tensor_bytes + COLS * 4
    assert r["storedOnCoordinator"] == 0
    if fetch == "off":
        assert 0 < r["coordinatorPeakBytes"] <= 4 * 16_000_000
    else:
        assert r["coordinatorPeakBytes"] == 0  # (the worker read every byte itself)
    assert r["residentBytes"] == tensor_bytes + COLS * 4
    growth = after - before
    print(f"serve peak RSS grew {growth / 1e6:.0f} MB loading a {tensor_bytes / 1e6:.0f} MB tensor; coordinator peak {r['coordinatorPeakBytes'] / 1e6:.0f} MB")
    # The worker keeps the tensor; the coordinator adds at most a few pieces in flight.
    assert growth < tensor_bytes + 5 * 16_000_000, f"peak memory grew by {growth / 1e6:.0f} MB"
    # the weight arrived intact: read one row back through a graph
    model = r["modelId"]
    g = {"inputs": [{"name": "w", "model": model, "weight": "big.weight"}],
         "steps": [{"op": "slice", "in": ["w"], "out": "row", "params": {"start": ROWS - 1, "length": 1}}],
         "outputs": ["row"]}
    out = expect(api.post("/api/v3/graph", {"graph": g}, key=key), 200)["outputs"]["row"]
    assert out["shape"] == [1, COLS]
    assert out["data"][:3] == pytest.approx([0.0, 1 / 97, 2 / 97], rel=1e-6)
    # quantized on load: the same bytes travel, a q8 copy stays
    r8 = expect(api.post("/api/v3/models", {"source": big_model, "quantize": "q8"}, key=key, timeout=120), 200)
    assert r8["quantize"] == "q8" and r8["bytesTransferred"] == r["bytesTransferred"]
    assert r8["residentBytes"] == ROWS * COLS // 32 * 34 + COLS * 4
    server.assert_up()
