#!/usr/bin/env python3
"""Soak benchmark for mpakt: many SSE generations at once for a long time, watching the
coordinator's memory and open file descriptors. A leak shows as a line that keeps rising;
a healthy server's RSS and descriptors level off once every conversation has started, and
its descriptors return to where they were when the clients stop.

It starts a real `mpakt host` (stories260K in hub layout) and `mpakt serve --dev` on loopback,
signs up one account and key per client (a key holds at most 16 sessions), and runs
`--clients` threads that each stream POST /api/v3/chat (SSE, sampled, a new seed and prompt
length each time) back to back until `--duration` is over. Every `--every` seconds it samples
the serve process: RSS (VmRSS), open descriptors (/proc/PID/fd), threads, and the tokens and
conversations finished so far.

"Flat at the end": the mean RSS and descriptors of the last fifth of the samples against the
fifth before it (the first fifth is warm-up: models loading, caches allocated); the verdict
is flat when RSS grew less than 5% and 8 MiB between the two and descriptors by at most the
client count (connections in flight). After the clients stop, descriptors must be back
within 8 of the count before the soak.

Usage: .venv/bin/python bench/soak_bench.py --out /tmp/soak.json [--duration 600] [--clients 64]
Only the Python standard library. How to read it: bench/README.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
from pathlib import Path
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test" / "e2e"))
from e2e_util import STORIES_DIR, Api, Process, expect, start_with_free_port, stop_all  # noqa: E402

PROMPTS = ["Once upon a time", "The little dog", "Lily wanted to play with her ball", "One day, a bird", "Tom"]


def proc_sample(pid):
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {"rssKiB": int(fields["VmRSS"].split()[0]), "threads": int(fields["Threads"].strip()),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


class Client(threading.Thread):
    """Streams chats back to back on one key until `stop` is set."""

    def __init__(self, i, port, key, max_tokens, stop):
        super().__init__(daemon=True)
        self.i, self.port, self.key, self.max_tokens, self.stop = i, port, key, max_tokens, stop
        self.chats = self.tokens = self.errors = 0
        self.last_error = None

    def one(self, rng):
        body = {"model": "hf:local/stories260K", "messages": [{"role": "user", "content": rng.choice(PROMPTS)}],
                "maxTokens": rng.randint(self.max_tokens // 2, self.max_tokens), "temperature": 0.8,
                "seed": rng.randrange(1 << 30), "stream": True}
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        try:
            conn.request("POST", "/api/v3/chat", json.dumps(body), {"x-api-key": self.key})
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"{resp.status} {resp.read()[:200]!r}")
            event = None
            while True:
                line = resp.readline()
                if not line:
                    raise RuntimeError("the stream ended without a done event")
                line = line.decode().rstrip("\r\n")
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event in ("done", "error"):
                    data = json.loads(line[6:])
                    if event == "error" or not data.get("ok", False):
                        raise RuntimeError(f"{event}: {data}")
                    self.tokens += data.get("usage", {}).get("completionTokens", 0)
                    self.chats += 1
                    return
        finally:
            conn.close()

    def run(self):
        rng = random.Random(self.i)
        while not self.stop.is_set():
            try:
                self.one(rng)
            except Exception as e:  # counted and reported; a soak goes on
                self.errors += 1
                self.last_error = str(e)[:300]
                time.sleep(0.5)


def mean(xs):
    return statistics.fmean(xs) if xs else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="where to write the JSON results")
    ap.add_argument("--duration", type=float, default=600, help="seconds of load (default 600)")
    ap.add_argument("--clients", type=int, default=64, help="concurrent SSE generations (default 64)")
    ap.add_argument("--max-tokens", type=int, default=96, help="longest reply asked for (default 96)")
    ap.add_argument("--every", type=float, default=5, help="seconds between samples (default 5)")
    ap.add_argument("--binary", default=os.environ.get("MPAKT_BINARY") or str(REPO / "build" / "mpakt"))
    args = ap.parse_args()
    os.environ["MPAKT_BINARY"] = args.binary

    work = Path(tempfile.mkdtemp(prefix="mpakt-soak-"))
    procs = []
    try:
        hub = work / "hub" / "local" / "stories260K"
        hub.mkdir(parents=True)
        for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
            shutil.copy(STORIES_DIR / f, hub / f)
        host, host_port = start_with_free_port(
            lambda p: Process("mpakt host", [args.binary, "host", work / "hub", "--port", p], work / "host.log"),
            r"mpakt host: serving")
        procs.append(host)
        serve, port = start_with_free_port(
            lambda p: Process("mpakt serve", [args.binary, "serve", "--dev", "--port", p, "--data-dir", work / "data",
                                              "--hf-endpoint", f"http://127.0.0.1:{host_port}"], work / "serve.log"),
            r"mpakt serve: listening on http://")
        procs.append(serve)
        pid = serve.proc.pid
        api = Api(port, timeout=60)
        keys = []
        for i in range(args.clients):
            r = api.post("/api/accounts", {"username": f"soak{i}", "password": "a long password"})
            expect(r, 201)
            token = expect(api.post("/api/accounts/login", {"username": f"soak{i}", "password": "a long password"}),
                           200)["token"]
            keys.append(expect(api.post("/api/keys", {"label": "soak"}, token=token), 201)["key"])
        before = proc_sample(pid)
        print(f"soak: {args.clients} clients for {args.duration:g} s; serve before: {before}", flush=True)

        stop = threading.Event()
        clients = [Client(i, port, k, args.max_tokens, stop) for i, k in enumerate(keys)]
        t0 = time.monotonic()
        for c in clients:
            c.start()
        samples = []
        while (elapsed := time.monotonic() - t0) < args.duration:
            time.sleep(min(args.every, max(0.0, args.duration - elapsed)))
            s = proc_sample(pid)
            s.update(t=round(time.monotonic() - t0, 1), chats=sum(c.chats for c in clients),
                     tokens=sum(c.tokens for c in clients), errors=sum(c.errors for c in clients))
            samples.append(s)
            print(f"  t={s['t']:7.1f}s rss={s['rssKiB'] / 1024:8.1f} MiB fds={s['fds']:4d} threads={s['threads']:3d} "
                  f"chats={s['chats']:6d} tokens={s['tokens']:8d} errors={s['errors']}", flush=True)
        stop.set()
        for c in clients:
            c.join(timeout=120)
        time.sleep(2)  # connections closing
        after = proc_sample(pid)
        alive = serve.alive()

        n = len(samples)
        fifth = max(1, n // 5)
        early, late = samples[n - 2 * fifth : n - fifth], samples[n - fifth :]
        rss_early, rss_late = mean([s["rssKiB"] for s in early]), mean([s["rssKiB"] for s in late])
        fd_early, fd_late = mean([s["fds"] for s in early]), mean([s["fds"] for s in late])
        rss_growth = rss_late - rss_early
        flat_rss = rss_growth < 0.05 * rss_early and rss_growth < 8 * 1024
        flat_fds = fd_late - fd_early <= args.clients
        fds_back = after["fds"] <= before["fds"] + 8
        elapsed = samples[-1]["t"] if samples else 0
        result = {
            "clients": args.clients, "durationS": args.duration, "maxTokens": args.max_tokens,
            "before": before, "after": after, "serveAlive": alive,
            "chats": samples[-1]["chats"] if samples else 0, "tokens": samples[-1]["tokens"] if samples else 0,
            "errors": samples[-1]["errors"] if samples else 0,
            "lastErrors": sorted({c.last_error for c in clients if c.last_error})[:5],
            "tokensPerSecond": round(samples[-1]["tokens"] / elapsed, 1) if elapsed else 0,
            "rssMiB": {"before": round(before["rssKiB"] / 1024, 1), "early": round(rss_early / 1024, 1),
                       "late": round(rss_late / 1024, 1), "max": round(max(s["rssKiB"] for s in samples) / 1024, 1),
                       "after": round(after["rssKiB"] / 1024, 1)},
            "fds": {"before": before["fds"], "early": round(fd_early, 1), "late": round(fd_late, 1),
                    "max": max(s["fds"] for s in samples), "after": after["fds"]},
            "flat": {"rss": flat_rss, "fds": flat_fds, "fdsBackAfter": fds_back},
            "samples": samples,
        }
        Path(args.out).write_text(json.dumps(result, indent=1))
        print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
        ok = alive and flat_rss and flat_fds and fds_back and result["chats"] > 0
        print("soak: " + ("flat" if ok else "NOT flat (or the server died, or nothing finished)"))
        return 0 if ok else 1
    finally:
        stop_all(procs)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
