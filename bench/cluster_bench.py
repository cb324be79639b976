"""Cluster benchmark: loading over the volunteer link, and decoding on a volunteer.

Starts `mpakt host` with the SmolLM2-135M-shaped random bf16 checkpoint (269 MB, as in
decode_bench.py), then coordinators: one with its embedded worker, others with none and a
volunteer (`mpakt worker --join`) on loopback. Reports

  * load throughput (MB/s of published bytes over the client's wall time, host -> coordinator
    -> worker) for the embedded worker and for the volunteer, as published (bf16) and quantized
    on load (q8), the embedded worker reading the host itself (`embedded`, the default) and
    relayed by the coordinator (`emb-relay`, `--worker-fetch off`), the volunteer reading the
    host itself (`vol-fetch`, `--host-fetch any`),
    relayed over its data connection and with `--data-port off` (`vol-link`: the bytes inside
    the cluster link's messages), and spot-checked (the default for volunteers: the rows above
    turn the checks off): reading the host beside its verifier (`chk-fetch`) and relayed
    through the checked worker (`chk-relay`, the host refused to it),
    `--load-repeats` times each (median), each repeat beside the loopback TCP
    bandwidth measured just before it (one socket, 1 GiB, Python), so the volunteer's share of
    the link is a ratio taken within one repeat — and, for the spot-checked cells, whose bytes
    travel twice (to the volunteer and to its verifier), also beside two sockets running at
    once; and the CPU seconds each process (host,
    coordinator, volunteer) spent per GB loaded (/proc/PID/stat), which says what limits a
    load on a machine whose cores are busy;
  * what a volunteer's load does to another volunteer's streamed tokens (gaps between them,
    the wait for a chat's first token, tokens/s), with the loading volunteer's weights on its data connection and with
    `--data-port off`;
  * decode tokens/s of the worker loop (`/api/v3/generate`, greedy, 64 tokens) on the
    embedded worker and on the volunteer (every token crosses the volunteer link as a message),
    the volunteer with spot-checks off, at the default fraction of windows (`windows`) and with
    every window followed by the verifier (`windows-all`, which shares these cores), each also
    with the loop through the coordinator (a graph call per token, each a pass);
  * the same model split across two volunteers that each offer 60% of it (the load spreads it
    layer by layer): load throughput, and decode tokens/s, which then runs the ordinary loop
    through the coordinator (each token: every stage on its worker, the activations relayed).
    For the cost of the split alone, the one-volunteer decode is also measured with that same
    ordinary loop (`workerLoop: false`).

Usage: .venv/bin/python bench/cluster_bench.py --out /tmp/cluster.json [--tokens 64]
       [--load-repeats 3] [--load-only | --decode-only] [--wheres vol-fetch,chk-fetch]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
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

# Spot-checks of volunteers off (docs/operators.md, "Running a public grid"): this benchmark
# measures the link and the volunteers, not the coordinator re-running their passes.
NO_CHECKS = ["--verify-fraction", "0", "--verify-first", "0"]


def dev_token(serve_log):
    """What a volunteer of `mpakt serve --dev --cluster-port` needs, as its banner printed it:
    the certificate fingerprint to pin and the join token."""
    m = re.search(r"--coordinator-fingerprint ([0-9a-f]{64}) --token (mpv_\S+)", Path(serve_log).read_text(errors="replace"))
    if not m:
        raise RuntimeError(f"no volunteer token in {serve_log}")
    return ["--coordinator-fingerprint", m.group(1), "--token", m.group(2)]

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


def loopback_pair_bandwidth():
    """Bytes/s each of two loopback TCP connections moves when both run at once (their bytes
    over the time until both ended, halved): the yardstick for a load that moves every byte
    twice on this machine — a spot-checked volunteer beside its verifier, whose two copies
    share the cores as these two streams do."""
    rates = [0.0, 0.0]

    def one(i):
        rates[i] = loopback_bandwidth(total=1 << 29)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return (2 << 29) / (time.perf_counter() - t0) / 2


def cpu_seconds(pid):
    """CPU seconds (user + system) of every thread pid has run, those that have ended too
    (a load's fetch threads do): /proc/PID/stat, in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine():
    """The CPU model (lscpu) and core count, for the record."""
    model = "?"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count()}


def weights_judged(api):
    """Weights the (one) volunteer had challenged so far, answered right or left unchecked."""
    c = (api.request("GET", "/api/v3/status")["pool"][0].get("checks") or {})
    return c.get("weightsChecked", 0) + c.get("weightsUnchecked", 0)


def timed_loads(api, source, quantize, pids, checked_weights=0):
    """One load: wall MB/s, the server's own figures and each process's CPU seconds; then the
    model is deleted so the next load finds the same free memory. With `checked_weights` (a
    spot-checked volunteer), the load counts as done once that many weights were challenged on
    arrival and judged — the challenges run after the load's answer, and would otherwise spill
    into the next measurement (or find the model deleted and go unjudged)."""
    judged0 = weights_judged(api) if checked_weights else 0
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    t = time.perf_counter()
    r = api.post("/api/v3/models", {"source": source, "quantize": quantize})
    wall = time.perf_counter() - t
    checked_wall = None
    if checked_weights:
        deadline = time.perf_counter() + 120
        while (judged := weights_judged(api) - judged0) < checked_weights and time.perf_counter() < deadline:
            time.sleep(0.01)
        if judged >= checked_weights:
            checked_wall = time.perf_counter() - t
    cpu = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    api.delete(f"/api/v3/models/{r['modelId']}")
    gb = r["bytesTransferred"] / 1e9
    return {"wall_s": wall, "MBps": r["bytesTransferred"] / 1e6 / wall, "server_MBps": r["throughputMBs"],
            "checked_wall_s": checked_wall,
            "checked_MBps": r["bytesTransferred"] / 1e6 / checked_wall if checked_wall else None,
            "bytes": r["bytesTransferred"], "residentBytes": r["residentBytes"],
            "coordinatorPeakBytes": r.get("coordinatorPeakBytes"),
            "cpu_s": cpu, "cpu_s_per_GB": {k: v / gb for k, v in cpu.items()}}


def tensor_count(path):
    """Tensors in a safetensors file (its header's entries)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return sum(1 for k in json.loads(f.read(n)) if k != "__metadata__")


def load_section(args, tmp, host_url, host_pid, model_bytes, weights):
    """Loads of the whole model into an embedded worker and into one volunteer, bf16 and q8,
    `--load-repeats` rounds; each round measures loopback first, then every cell once."""
    # "embedded" reads its weights from the host itself (the default), "emb-relay" gets them
    # through the coordinator (`--worker-fetch off`); "vol-fetch" reads them from the host
    # itself (`--host-fetch any`: the host is on loopback); "volunteer" gets them relayed over its data connection (a volunteer's default
    # reads public hosts only, so here it is refused and relayed); "vol-link" is the relay with
    # `--data-port off`, its weights inside the cluster link's messages; "chk-fetch" and
    # "chk-relay" are spot-checked volunteers (the default), reading the host beside their
    # verifier, and refused it (relayed, each weight hashed on its way)
    wheres = ("embedded", "emb-relay", "vol-fetch", "volunteer", "vol-link", "chk-fetch", "chk-relay")
    if args.wheres:
        wheres = tuple(w for w in wheres if w in args.wheres.split(","))
    cells = [(where, q) for where in wheres for q in ("none", "q8")]
    servers = {}
    first = {}  # where -> MB/s of its first load (bf16), before the rounds
    procs = []
    try:
        for where in wheres:
            port, cport = db.free_port(), db.free_port()
            data = tmp / f"load-{where}"
            data.mkdir()
            # (spot-checks off but for chk-*: their verifier converts a second copy of every
            # weight in the coordinator, measured there alone)
            embedded = where in ("embedded", "emb-relay")
            checked = where.startswith("chk-")
            extra = (["--workers", "0", "--cluster-port", str(cport), "--data-port", "0", *([] if checked else NO_CHECKS)]
                     if not embedded else [])
            if where == "emb-relay":
                extra = ["--worker-fetch", "off"]
            if where == "vol-link":
                extra[extra.index("--data-port") + 1] = "off"
            serve = db.Proc(f"serve {where}", [args.binary, "serve", "--port", port, "--data-dir", data, "--dev",
                                               "--hf-endpoint", host_url, *extra], data / "serve.log")
            procs.append(serve)
            serve.start(r"mpakt serve: listening on http://")
            pids = {"host": host_pid, "coordinator": serve.p.pid}
            if not embedded:
                w = db.Proc("w_load", [args.binary, "worker", "--join", f"127.0.0.1:{cport}", "--id", "w_load",
                                       "--memory", "2G", *dev_token(data / "serve.log"),
                                       *(["--host-fetch", "any"] if where in ("vol-fetch", "chk-fetch") else [])],
                             data / "worker.log")
                procs.append(w)
                w.start(r"mpakt worker: \S+ joined")
                pids["volunteer"] = w.p.pid
            api = db.Api(port)
            db.bench_account(api)
            while api.request("GET", "/api/v3/status")["workers"] < 1:
                time.sleep(0.05)
            # a first load (not counted in the rounds) warms the host's page cache and both
            # processes' allocators — a worker keeps a deleted model's pages for the next load
            # (runtime/tensor.cpp), so the rounds are reloads; the first is reported apart: a
            # fresh worker's pages cleared by the kernel (the host's page cache warm or not)
            t = time.perf_counter()
            r = api.post("/api/v3/models", {"source": "hf:local/smol"})
            first[where] = r["bytesTransferred"] / 1e6 / (time.perf_counter() - t)
            api.delete(f"/api/v3/models/{r['modelId']}")
            servers[where] = (api, pids)
        rounds = []
        for k in range(args.load_repeats):
            rnd = {"loadavg_before": os.getloadavg()[0], "loopback_Bps": loopback_bandwidth()}
            if any(w.startswith("chk-") for w in wheres):
                rnd["loopback_pair_Bps"] = loopback_pair_bandwidth()
            for where, q in cells:
                api, pids = servers[where]
                rnd[f"{where}/{q}"] = timed_loads(api, "hf:local/smol", q, pids,
                                                  weights if where.startswith("chk-") else 0)
            rnd["loadavg_after"] = os.getloadavg()[0]
            rounds.append(rnd)
            db.log(f"load round {k + 1}: loopback {rnd['loopback_Bps'] / 1e6:.0f} MB/s"
                   + (f" (two at once {rnd['loopback_pair_Bps'] / 1e6:.0f} each)" if "loopback_pair_Bps" in rnd else "")
                   + ", "
                   + ", ".join(f"{c} {rnd[c]['MBps']:.0f} MB/s" for c in (f"{w}/{q}" for w, q in cells))
                   + f"; load average {rnd['loadavg_before']:.1f} -> {rnd['loadavg_after']:.1f}")
    finally:
        for api, _ in servers.values():
            api.close()
        for p in reversed(procs):
            p.stop()
    med = statistics.median
    summary = {"loopback_MBps": med(r["loopback_Bps"] for r in rounds) / 1e6, "first_load_MBps": first,
               **({"loopback_pair_MBps": med(r["loopback_pair_Bps"] for r in rounds) / 1e6}
                  if "loopback_pair_Bps" in rounds[0] else {}),
               "loadavg": [min(r["loadavg_before"] for r in rounds), max(r["loadavg_after"] for r in rounds)]}
    for where, q in cells:
        c = f"{where}/{q}"
        summary[c] = {
            "MBps": med(r[c]["MBps"] for r in rounds),
            "MBps_all": [round(r[c]["MBps"], 1) for r in rounds],
            "fraction_of_loopback": med(r[c]["MBps"] * 1e6 / r["loopback_Bps"] for r in rounds),
            "cpu_s_per_GB": {name: med(r[c]["cpu_s_per_GB"][name] for r in rounds) for name in rounds[0][c]["cpu_s"]},
            "coordinatorPeakBytes": max(r[c]["coordinatorPeakBytes"] or 0 for r in rounds),
            "residentBytes": rounds[0][c]["residentBytes"],
        }
        checked = [r[c]["checked_MBps"] for r in rounds if r[c]["checked_MBps"]]
        if checked:  # (until every weight's arrival check was judged)
            summary[c]["checked_MBps"] = med(checked)
            summary[c]["checked_MBps_all"] = [round(x, 1) for x in checked]
            summary[c]["checked_fraction_of_loopback"] = med(
                r[c]["checked_MBps"] * 1e6 / r["loopback_Bps"] for r in rounds if r[c]["checked_MBps"])
        if where.startswith("chk-"):  # (two copies of every byte: beside two streams at once)
            summary[c]["fraction_of_loopback_pair"] = med(r[c]["MBps"] * 1e6 / r["loopback_pair_Bps"] for r in rounds)
            if checked:
                summary[c]["checked_fraction_of_loopback_pair"] = med(
                    r[c]["checked_MBps"] * 1e6 / r["loopback_pair_Bps"] for r in rounds if r[c]["checked_MBps"])
    return {"rounds": rounds, "summary": summary, "model_bytes": model_bytes}


def print_load_table(s):
    print(f"\nloads of the SmolLM2-shaped bf16 checkpoint, median of the rounds; loopback TCP "
          f"{s['loopback_MBps']:.0f} MB/s; load average {s['loadavg'][0]:.1f}-{s['loadavg'][1]:.1f}")
    if "loopback_pair_MBps" in s:
        print(f"two loopback connections at once: {s['loopback_pair_MBps']:.0f} MB/s each (the yardstick "
              f"for a spot-checked load, whose bytes travel twice: 'of two')")
    print(f"{'where':10} {'quantize':8} {'MB/s':>7} {'of loopback':>11} {'CPU s/GB: host':>15} "
          f"{'coordinator':>11} {'volunteer':>9}  all rounds")
    for c, v in s.items():
        if "/" not in c:
            continue
        where, q = c.split("/")
        cpu = v["cpu_s_per_GB"]
        print(f"{where:10} {q:8} {v['MBps']:7.0f} {v['fraction_of_loopback']:11.3f} {cpu['host']:15.2f} "
              f"{cpu['coordinator']:11.2f} {cpu.get('volunteer', float('nan')):9.2f}  {v['MBps_all']}")
        if "fraction_of_loopback_pair" in v:
            print(f"{'':10} {'':8} {'':7} {v['fraction_of_loopback_pair']:11.3f} of two loopback connections at once")
        if "checked_MBps" in v:
            print(f"{'':10} {'checked':8} {v['checked_MBps']:7.0f} {v['checked_fraction_of_loopback']:11.3f}"
                  f"{'':39}  {v['checked_MBps_all']}")
            if "checked_fraction_of_loopback_pair" in v:
                print(f"{'':10} {'':8} {'':7} {v['checked_fraction_of_loopback_pair']:11.3f} of two loopback connections at once")
    if any("checked_MBps" in v for v in s.values() if isinstance(v, dict)):
        print("(checked: until every weight's arrival check was judged; CPU s/GB through then)")
    if s.get("first_load_MBps"):
        print("first load into each fresh worker, bf16, before the rounds (fresh pages; not in the medians): " +
              ", ".join(f"{w} {v:.0f} MB/s" for w, v in s["first_load_MBps"].items()))


def stall_section(args, tmp, host_url, rounds=2, loads_per_round=6):
    """What a volunteer's load does to another volunteer's tokens: stories260K generates on
    volunteer B (chats of 200 tokens, streamed) while volunteer A loads the SmolLM2-shaped
    model again and again (`loads_per_round` loads); the gaps between B's streamed tokens, and
    how many came, with A's weights on its data connection (`--data-port 0`) and inside the
    cluster link's messages (`--data-port off`), interleaved. Before the loads, a few chats
    alone give the quiet gaps."""
    out = {}
    for k in range(rounds):
        for dp in ("0", "off"):
            port, cport = db.free_port(), db.free_port()
            data = tmp / f"stall-{dp}-{k}"
            data.mkdir()
            procs = []
            try:
                serve = db.Proc(f"serve stall {dp}", [args.binary, "serve", "--port", port, "--data-dir", data, "--dev",
                                                      "--hf-endpoint", host_url, "--workers", "0", "--cluster-port",
                                                      str(cport), "--data-port", dp, *NO_CHECKS], data / "serve.log")
                procs.append(serve)
                serve.start(r"mpakt serve: listening on http://")
                api = db.Api(port)
                db.bench_account(api)

                def join(name, memory):
                    w = db.Proc(name, [args.binary, "worker", "--join", f"127.0.0.1:{cport}", "--id", name, "--memory",
                                       memory, "--threads", "1", *dev_token(data / "serve.log")], data / f"{name}.log")
                    procs.append(w)
                    w.start(r"mpakt worker: \S+ joined")

                join("w_b", "1G")  # (joins first: the small model is placed on it)
                while api.request("GET", "/api/v3/status")["workers"] < 1:
                    time.sleep(0.05)
                small = api.post("/api/v3/models", {"source": "hf:local/stories260K"})["modelId"]
                join("w_a", "2G")
                while api.request("GET", "/api/v3/status")["workers"] < 2:
                    time.sleep(0.05)
                done = {"loads": 0, "stop": False}

                def loader():
                    a2 = db.Api(port)
                    a2.key = api.key
                    while not done["stop"]:
                        r = a2.post("/api/v3/models", {"source": "hf:local/smol", "quantize": "none"})
                        a2.delete(f"/api/v3/models/{r['modelId']}")
                        done["loads"] += 1
                    a2.close()

                firsts = []

                def chat_gaps():
                    t_ask = time.perf_counter()
                    resp = api.request("POST", "/api/v3/chat", {"model": small, "maxTokens": 200, "temperature": 0,
                                                               "stream": True, "messages": [
                                                                   {"role": "user", "content": "Once upon a time"}]},
                                       stream=True)
                    gaps, last = [], None
                    for ev, payload in db.sse_events(resp):
                        if ev == "error":
                            raise RuntimeError(f"the chat on the other volunteer failed: {payload}")
                        if ev != "delta":
                            continue
                        t = time.perf_counter()
                        if last is not None:
                            gaps.append(t - last)
                        else:
                            firsts.append(t - t_ask)
                        last = t
                    resp.read()
                    return gaps

                quiet = [g for _ in range(3) for g in chat_gaps()]
                quiet_first = max(firsts)
                firsts.clear()
                th = threading.Thread(target=loader)
                t0 = time.perf_counter()
                th.start()
                busy = []
                while done["loads"] < loads_per_round:
                    busy += chat_gaps()
                done["stop"] = True
                th.join()
                wall = time.perf_counter() - t0
                api.close()
            finally:
                for p in reversed(procs):
                    p.stop()
            q = sorted(busy)
            r = {"tokens": len(busy), "tokens_per_s": len(busy) / wall, "loads": done["loads"], "wall_s": wall,
                 "median_ms": statistics.median(busy) * 1e3, "p99_ms": q[min(len(q) - 1, int(0.99 * len(q)))] * 1e3,
                 "max_ms": q[-1] * 1e3, "quiet_max_ms": max(quiet) * 1e3, "chats": len(firsts),
                 "first_token_median_ms": statistics.median(firsts) * 1e3, "first_token_max_ms": max(firsts) * 1e3,
                 "quiet_first_token_max_ms": quiet_first * 1e3}
            out.setdefault(dp, []).append(r)
            db.log(f"stall round {k + 1}, --data-port {dp}: {r['tokens']} tokens during {r['loads']} loads "
                   f"({r['tokens_per_s']:.0f}/s), gaps p99 {r['p99_ms']:.1f} ms, max {r['max_ms']:.1f} ms "
                   f"(quiet max {r['quiet_max_ms']:.1f} ms); first token median {r['first_token_median_ms']:.0f} ms, "
                   f"max {r['first_token_max_ms']:.0f} ms (quiet max {r['quiet_first_token_max_ms']:.0f} ms)")
    return out


def print_stall_table(s):
    print("\nanother volunteer's streamed tokens while a volunteer loads the SmolLM2-shaped model (per round)")
    print(f"{'weights travel':16} {'tokens/s':>8} {'gap p99 ms':>10} {'gap max ms':>10} {'quiet max ms':>12} "
          f"{'1st token ms: median':>20} {'max':>6} {'quiet max':>9}")
    for dp, rs in s.items():
        how = "data connection" if dp == "0" else "cluster link"
        for r in rs:
            print(f"{how:16} {r['tokens_per_s']:8.0f} {r['p99_ms']:10.1f} {r['max_ms']:10.1f} {r['quiet_max_ms']:12.1f} "
                  f"{r['first_token_median_ms']:20.0f} {r['first_token_max_ms']:6.0f} {r['quiet_first_token_max_ms']:9.0f}")


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
    ap.add_argument("--load-repeats", type=int, default=3, help="rounds of the load measurements (median)")
    ap.add_argument("--load-only", action="store_true", help="only the load measurements (no decode, no split)")
    ap.add_argument("--decode-only", action="store_true", help="only the decode measurements (no loads, no stalls)")
    ap.add_argument("--wheres", default="", help="only these load cells' places, comma-separated (e.g. vol-fetch,chk-fetch)")
    args = ap.parse_args()
    procs = []
    tmp = Path(tempfile.mkdtemp(prefix="mpakt-cluster-bench-"))
    try:
        d = tmp / "hub" / "local" / "smol"
        d.mkdir(parents=True)
        stories = tmp / "hub" / "local" / "stories260K"
        stories.mkdir()
        for f in db.STORIES_DIR.iterdir():  # (the tokenizer too: the stall section chats)
            if f.is_file():
                shutil.copy(f, stories / f.name)
        (d / "config.json").write_text(json.dumps(db.SMOL_CONFIG))
        db.write_random_bf16_llama(d / "model.safetensors", db.SMOL_CONFIG)
        host = db.Proc("mpakt host", [args.binary, "host", tmp / "hub", "--port", "0"], tmp / "host.log")
        procs.append(host)
        host_url = host.start(r"mpakt host: serving .* at (http://\S+)").group(1)
        loopback = loopback_bandwidth()
        db.log(f"loopback TCP, one connection: {loopback / 1e6:.0f} MB/s")
        results = {"loopback_Bps": loopback, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine()}
        model_bytes = (d / "model.safetensors").stat().st_size
        if not args.decode_only:
            results["loads"] = load_section(args, tmp, host_url, host.p.pid, model_bytes,
                                            tensor_count(d / "model.safetensors"))
            results["stall"] = stall_section(args, tmp, host_url)
        if args.load_only:
            Path(args.out).write_text(json.dumps(results, indent=1))
            print_load_table(results["loads"]["summary"])
            print_stall_table(results["stall"])
            return
        # (spot-checks on for the windows cells: the default fraction, every window; none of the
        # measured passes among the first ones, which are checked as they run)
        checks = {"windows": ["--verify-first", "0"], "windows-all": ["--verify-first", "0", "--verify-fraction", "1"]}
        for label, extra in (("embedded", []), ("volunteer", ["--workers", "0"]), ("windows", ["--workers", "0"]),
                             ("windows-all", ["--workers", "0"]), ("split", ["--workers", "0"])):
            port, cport = db.free_port(), db.free_port()
            data = tmp / f"serve-{label}"
            data.mkdir()
            flags = ["--cluster-port", str(cport), *checks.get(label, NO_CHECKS)] if label != "embedded" else []
            serve = db.Proc(f"serve {label}", [args.binary, "serve", "--port", port, "--data-dir", data, "--dev",
                                               "--hf-endpoint", host_url, *extra, *flags], data / "serve.log")
            procs.append(serve)
            serve.start(r"mpakt serve: listening on http://")
            volunteers = {"embedded": [], "volunteer": [("w_bench", "2G")], "windows": [("w_bench", "2G")],
                          "windows-all": [("w_bench", "2G")],
                          "split": [("w_left", str(model_bytes * 6 // 10)), ("w_right", str(model_bytes * 6 // 10))]}[label]
            for name, memory in volunteers:
                w = db.Proc(name, [args.binary, "worker", "--join", f"127.0.0.1:{cport}", "--id", name,
                                   "--memory", memory, *dev_token(data / "serve.log")], data / f"{name}.log")
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
        same = all(results[k]["tokens"] == results["embedded"]["tokens"]
                   for k in ("volunteer", "windows", "windows-all", "split"))
        results["same_tokens"] = same
        # what spot-checks in windows cost a volunteer's decode, against the same with checks off
        for k in ("windows", "windows-all"):
            results[f"{k}_decode_ratio"] = results[k]["decode_tokens_per_s"] / results["volunteer"]["decode_tokens_per_s"]
            results[f"{k}_ordinary_decode_ratio"] = (results[k]["ordinary_decode_tokens_per_s"] /
                                                     results["volunteer"]["ordinary_decode_tokens_per_s"])
        results["volunteer_decode_ratio"] = (results["volunteer"]["decode_tokens_per_s"] /
                                             results["embedded"]["decode_tokens_per_s"])
        # split over two against one volunteer: as served (worker loop there), and loop for loop
        results["split_decode_ratio"] = (results["split"]["decode_tokens_per_s"] /
                                         results["volunteer"]["decode_tokens_per_s"])
        results["split_decode_ratio_same_loop"] = (results["split"]["decode_tokens_per_s"] /
                                                   results["volunteer"]["ordinary_decode_tokens_per_s"])
        Path(args.out).write_text(json.dumps(results, indent=1))
        print(json.dumps({k: v for k, v in results.items() if k not in ("date", "loads", "stall")}, indent=1))
        if not args.decode_only:
            print_load_table(results["loads"]["summary"])
            print_stall_table(results["stall"])
    finally:
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
