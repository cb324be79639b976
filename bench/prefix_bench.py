#!/usr/bin/env python3
"""Time to first token over a 10-turn chat, with and without the prefix cache.

A SmolLM2-135M-shaped Llama with random bf16 weights (bench/decode_bench.py's checkpoint, its
vocabulary cut to the 512 ids of stories260K's tokenizer, which it uses) is served by a
real `mpakt host` and `mpakt serve --dev`. One conversation of 10 turns runs through
POST /api/v3/chat, streamed, greedy: each turn sends the whole conversation so far (the
earlier user messages and the replies the server gave) plus a new user message of about 60
tokens. The same conversation runs twice, interleaved turn by turn on the same account and
model: once with `"cache": false` (every turn prefills the whole conversation) and once with
the cache (a turn prefills only what its conversation adds to the last turn's). Time to first
token is the client's wall time from sending the request to the first `delta` event.
The two replies of every turn must be equal (checked).

    .venv/bin/python bench/prefix_bench.py --out /tmp/prefix.json [--turns 10] [--binary build/mpakt]

Prints one row per turn: prompt tokens, cached tokens, TTFT and prefill time of each, and the
ratio. Needs numpy (.venv) and ../shared/models/stories260K.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_bench import SMOL_CONFIG, Api, Proc, bench_account, free_port, log, sse_events, write_random_bf16_llama  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STORIES = ROOT.parent / "shared" / "models" / "stories260K"
WORDS = ("the little girl saw a big red ball in the park and she wanted to play with it but her mom said no "
         "so she went home and had a nap then she woke up and ran to the garden where the sun was bright").split()


def user_message(turn: int) -> str:
    """About 60 tokens of plain words, different for every turn."""
    return " ".join(WORDS[(turn * 7 + i) % len(WORDS)] for i in range(48)) + "."


def chat_turn(api: Api, model: str, messages, cache: bool, max_tokens: int):
    body = {"model": model, "messages": messages, "maxTokens": max_tokens, "temperature": 0, "cache": cache,
            "speculative": False}
    t0 = time.perf_counter()
    resp = api.request("POST", "/api/v3/chat", body, stream=True)
    if resp.status != 200:
        raise RuntimeError(f"chat -> {resp.status}: {resp.read()[:400]!r}")
    first, done = None, None
    for event, data in sse_events(resp):
        if event == "delta" and first is None:
            first = time.perf_counter() - t0
        if event == "done":
            done = data
        if event == "error":
            raise RuntimeError(f"chat error: {data}")
    resp.read()
    api.close()  # (the stream's connection is not reused)
    return first, done


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--binary", default=os.environ.get("MPAKT_BINARY", str(ROOT / "build" / "mpakt")))
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="mpakt-prefix-"))
    procs = []
    try:
        d = tmp / "hub" / "local" / "smol-chat"
        d.mkdir(parents=True)
        cfg = dict(SMOL_CONFIG, vocab_size=512)  # stories260K's tokenizer: every id decodes to text
        (d / "config.json").write_text(json.dumps(cfg, indent=1))
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(STORIES / f, d / f)
        log("writing the checkpoint …")
        write_random_bf16_llama(d / "model.safetensors", cfg)
        host = Proc("mpakt host", [args.binary, "host", tmp / "hub", "--port", "0"], tmp / "host.log")
        procs.append(host)
        host_url = host.start(r"mpakt host: serving .* at (http://\S+)").group(1)
        port = free_port()
        data = tmp / "serve"
        data.mkdir()
        serve = Proc("mpakt serve", [args.binary, "serve", "--port", port, "--data-dir", data, "--dev",
                                     "--hf-endpoint", host_url, "--worker-memory", "8G"], data / "serve.log")
        procs.append(serve)
        serve.start(r"mpakt serve: listening on http://")
        api = Api(port)
        bench_account(api)
        banner = serve.output()
        kernels = next((l.strip() for l in banner.splitlines() if "CPU kernels" in l), "")
        model = api.post("/api/v3/models", {"source": "hf:local/smol-chat"})["modelId"]
        log(f"loaded {model}")
        chat_turn(api, model, [{"role": "user", "content": "warm up"}], False, 4)  # compiles chat's graphs

        rows = []
        conversation = {True: [], False: []}
        for turn in range(1, args.turns + 1):
            row = {"turn": turn}
            for cache in (False, True):  # interleaved: the same machine state for both
                msgs = conversation[cache] + [{"role": "user", "content": user_message(turn)}]
                ttft, done = chat_turn(api, model, msgs, cache, args.max_tokens)
                conversation[cache] = msgs + [{"role": "assistant", "content": done["text"]}]
                tag = "cached" if cache else "plain"
                row[tag] = {"ttft_ms": round(ttft * 1000, 1), "prefill_ms": done["timing"]["prefillMs"],
                            "prompt_tokens": done["usage"]["promptTokens"], "cached_tokens": done["usage"]["cachedTokens"],
                            "text": done["text"]}
            row["same_reply"] = row["cached"]["text"] == row["plain"]["text"]
            row["ttft_ratio"] = round(row["plain"]["ttft_ms"] / row["cached"]["ttft_ms"], 2)
            rows.append(row)
            log(f"turn {turn:2d}: prompt {row['plain']['prompt_tokens']:5d}, cached {row['cached']['cached_tokens']:5d}; "
                f"TTFT {row['plain']['ttft_ms']:8.1f} ms without the cache, {row['cached']['ttft_ms']:8.1f} ms with it "
                f"({row['ttft_ratio']}x); same reply: {row['same_reply']}")
        result = {"machine": {"cpu": platform.processor() or platform.machine(), "kernels": kernels,
                              "cores": os.cpu_count(), "load": os.getloadavg()},
                  "model": "SmolLM2-135M shape (vocabulary 512), bf16, random weights, stories260K tokenizer",
                  "turns": rows, "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
        Path(args.out).write_text(json.dumps(result, indent=1))
        print("| turn | prompt tokens | cached | TTFT without cache (ms) | TTFT with cache (ms) | ratio | same reply |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['turn']} | {r['plain']['prompt_tokens']} | {r['cached']['cached_tokens']} | {r['plain']['ttft_ms']} "
                  f"| {r['cached']['ttft_ms']} | {r['ttft_ratio']} | {r['same_reply']} |")
        if not all(r["same_reply"] for r in rows):
            sys.exit("replies differ with and without the cache")
    finally:
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
