"""Cluster benchmark: loading over the volunteer link, and decoding on a volunteer.

Starts `mpakt host` with the SmolLM2-135M-shaped random bf16 checkpoint (269 MB, as in
decode_bench.py), then two coordinators: one with its embedded worker, one with none and a
volunteer (`mpakt worker --join`) on loopback. Reports

  * load throughput (MB/s of published bytes, host -> coordinator -> worker) for the embedded
    worker and for the volunteer, beside the loopback TCP bandwidth measured in the same run
    (one socket, 1 GiB, Python), so the cost of the extra hop shows as a ratio;
  * decode tokens/s of the worker loop (`/api/v3/generate`, greedy, 64 tokens) on the
    embedded worker and on the volunteer (every token crosses the volunteer link as a message);
  * the same model split across two volunteers that each offer 60% of it (the load spreads it
    layer by layer): load throughput, and decode tokens/s, which then runs the ordinary loop
    through the coordinator (each token: every stage on its worker, the activations relayed).
    For the cost of the split alone, the one-volunteer decode is also measured with that same
    ordinary loop (`workerLoop: false`).

Usage: .venv/bin/python bench/cluster_bench.py --out /tmp/cluster.json [--tokens 64]
"""
from __future__ import annotations

import argparse
import json
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import decode_bench as db  # noqa: E402  (the model writer, process and HTTP helpers)


def loopback_bandwidth(total=1 << 30, chunk=1 << 20):
    """Bytes/s through one loopback TCP connection (send and receive in this process)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    received = [0]

    def sink():
        conn, _ = srv.accept()
        while received[0] < total:
            data = conn.recv(chunk)
            if not data:
                break
            received[0] += len(data)
        conn.close()

    t = threading.Thread(target=sink)
    t.start()
    c = socket.create_connection(("127.0.0.1", port))
    buf = b"\0" * chunk
    t0 = time.perf_counter()
    sent = 0
    while sent < total:
        c.sendall(buf)
        sent += chunk
    c.close()
    t.join()
    srv.close()
    return received[0] / (time.perf_counter() - t0)


def measure(api, binary, config_path, source, n, ordinary_too=False):
    """Load (timed) then a generation of n tokens (timed by the server): the worker loop where
    the model allows it, and with `ordinary_too` also the loop through the coordinator."""
    t = time.perf_counter()
    r = api.post("/api/v3/models", {"source": source})
    load_wall = time.perf_counter() - t
    model = r["modelId"]
    rows = 128
    graph = db.graph_cli(binary, config_path, "--model-id", model, "--compiled", "--tokens", "1", "--cache", str(rows),
                         "--argmax")
    gid = api.post("/api/v3/graphs", {"graph": graph})["graphId"]
    sid = api.post("/api/v3/sessions", {"modelId": model})["session"]["sessionId"]
    api.post("/api/v3/graph", {"graph": dict(db.graph_cli(binary, config_path, "--alloc-cache", str(rows)), session=sid)})
    api.post("/api/v3/generate", {"graphId": gid, "sessionId": sid, "ids": [5], "startPos": 0, "maxNewTokens": 4,
                                  "stream": False})  # warm-up
    done = api.post("/api/v3/generate", {"graphId": gid, "sessionId": sid, "ids": [5], "startPos": 0, "maxNewTokens": n,
                                         "stream": False})
    out = {"load": {k: r.get(k) for k in ("bytesTransferred", "throughputMBs", "elapsedMs", "placement")},
           "load_wall_s": load_wall, "decode_tokens_per_s": done["tokensPerSecond"], "worker_loop": done["workerLoop"],
           "tokens": done["tokens"][:8]}
    if ordinary_too:
        plain = api.post("/api/v3/generate", {"graphId": gid, "sessionId": sid, "ids": [5], "startPos": 0,
                                              "maxNewTokens": n, "stream": False, "workerLoop": False})
        out["ordinary_decode_tokens_per_s"] = plain["tokensPerSecond"]
        assert plain["tokens"] == done["tokens"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--binary", default=str(HERE.parent / "build" / "mpakt"))
    args = ap.parse_args()
    procs = []
    tmp = Path(tempfile.mkdtemp(prefix="mpakt-cluster-bench-"))
    try:
        d = tmp / "hub" / "local" / "smol"
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(db.SMOL_CONFIG))
        db.write_random_bf16_llama(d / "model.safetensors", db.SMOL_CONFIG)
        host = db.Proc("mpakt host", [args.binary, "host", tmp / "hub", "--port", "0"], tmp / "host.log")
        procs.append(host)
        host_url = host.start(r"mpakt host: serving .* at (http://\S+)").group(1)
        loopback = loopback_bandwidth()
        db.log(f"loopback TCP, one connection: {loopback / 1e6:.0f} MB/s")
        results = {"loopback_Bps": loopback, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        model_bytes = (d / "model.safetensors").stat().st_size
        for label, extra in (("embedded", []), ("volunteer", ["--workers", "0"]), ("split", ["--workers", "0"])):
            port, cport = db.free_port(), db.free_port()
            data = tmp / f"serve-{label}"
            data.mkdir()
            flags = ["--cluster-port", str(cport)] if label != "embedded" else []
            serve = db.Proc(f"serve {label}", [args.binary, "serve", "--port", port, "--data-dir", data, "--dev",
                                               "--hf-endpoint", host_url, *extra, *flags], data / "serve.log")
            procs.append(serve)
            serve.start(r"mpakt serve: listening on http://")
            volunteers = {"embedded": [], "volunteer": [("w_bench", "2G")],
                          "split": [("w_left", str(model_bytes * 6 // 10)), ("w_right", str(model_bytes * 6 // 10))]}[label]
            for name, memory in volunteers:
                w = db.Proc(name, [args.binary, "worker", "--join", f"127.0.0.1:{cport}", "--id", name,
                                   "--memory", memory], data / f"{name}.log")
                procs.append(w)
                w.start(r"mpakt worker: \S+ joined")
            api = db.Api(port)
            db.bench_account(api)
            while api.request("GET", "/api/v3/status")["workers"] < max(1, len(volunteers)):
                time.sleep(0.05)
            r = measure(api, args.binary, d / "config.json", "hf:local/smol", args.tokens, ordinary_too=label != "embedded")
            r["load_MBps_wall"] = r["load"]["bytesTransferred"] / 1e6 / r["load_wall_s"]
            r["load_fraction_of_loopback"] = r["load_MBps_wall"] * 1e6 / loopback
            results[label] = r
            db.log(f"{label}: load {r['load_MBps_wall']:.0f} MB/s ({r['load_fraction_of_loopback']:.3f} of loopback), "
                   f"decode {r['decode_tokens_per_s']:.1f} tok/s (worker loop: {r['worker_loop']})"
                   + (f", ordinary loop {r['ordinary_decode_tokens_per_s']:.1f} tok/s" if "ordinary_decode_tokens_per_s" in r else ""))
            api.close()
            serve.stop()
        same = results["embedded"]["tokens"] == results["volunteer"]["tokens"] == results["split"]["tokens"]
        results["same_tokens"] = same
        results["volunteer_decode_ratio"] = (results["volunteer"]["decode_tokens_per_s"] /
                                             results["embedded"]["decode_tokens_per_s"])
        # split over two against one volunteer: as served (worker loop there), and loop for loop
        results["split_decode_ratio"] = (results["split"]["decode_tokens_per_s"] /
                                         results["volunteer"]["decode_tokens_per_s"])
        results["split_decode_ratio_same_loop"] = (results["split"]["decode_tokens_per_s"] /
                                                   results["volunteer"]["ordinary_decode_tokens_per_s"])
        Path(args.out).write_text(json.dumps(results, indent=1))
        print(json.dumps({k: v for k, v in results.items() if k != "date"}, indent=1))
    finally:
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
