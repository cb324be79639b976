#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (test/fuzz/corpus/<target>/) from the project's own
fixtures and a few hand-written inputs. Run it again when the fixtures change; the output is
committed. Each seed starts with the selector byte its target reads first (see the target's
header comment). Standard library only."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
import shutil
import struct

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FIXTURES = REPO / "test" / "fixtures"
STORIES = REPO.parent / "shared" / "models" / "stories260K"


def writer(target):
    out = HERE / "corpus" / target
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)

    def put(data: bytes):
        (out / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)

    return put


def compact(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def graphs():
    """One graph per op fixture case (the first three of each op)."""
    for f in sorted((FIXTURES / "ops").glob("*.json")):
        for case in json.loads(f.read_text())["cases"][:3]:
            yield case["graph"]


def main():
    # ---- graphs: inline (selector 0) and compiled (1)
    put = writer("fuzz_graph")
    for g in graphs():
        put(b"\x00" + compact(g))
    put(b"\x01" + compact({"inputs": [{"name": "ids", "shape": [1], "bind": "ids"},
                                       {"name": "e", "model": "m_t", "weight": "model.embed_tokens.weight"},
                                       {"name": "k", "session": "kcache"}],
                            "steps": [{"op": "embedding", "in": ["ids", "e"], "out": "h"},
                                      {"op": "rope", "in": ["h"], "out": "r", "params": {"headDim": 4, "offset": {"$bind": "pos"}}}],
                            "outputs": ["r"], "session": "s_1"}))

    # ---- safetensors: the fixtures' headers with a little data, and cut short
    put = writer("fuzz_safetensors")
    files = [STORIES / "model.safetensors"] + sorted((FIXTURES / "arch").glob("*/model.safetensors"))[:6]
    for f in files:
        raw = f.read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        put(raw[: 8 + n + 64])
        put(raw[: 8 + n // 2])
    small = json.dumps({"a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},
                        "b": {"dtype": "F64", "shape": [1], "data_offsets": [4, 12]},
                        "c": {"dtype": "I64", "shape": [1], "data_offsets": [12, 20]},
                        "d": {"dtype": "BOOL", "shape": [2], "data_offsets": [20, 22]},
                        "__metadata__": {"format": "pt"}}).encode()
    put(struct.pack("<Q", len(small)) + small + bytes(22))

    # ---- HTTP requests: selector = where the bytes are cut in two reads
    put = writer("fuzz_http_request")
    reqs = [
        b"GET /api/versions HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /api/v3/graph HTTP/1.1\r\nHost: x\r\nx-api-key: mpk_x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 13\r\n\r\n{\"graph\": {}}",
        b"POST /api/v3/chat HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n",
        b"DELETE /api/v3/models/m_%C0%AF HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET http://example.com/api/v3/models/inspect?source=hf:local/x&y=%41 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /api/v1/tensors/t_1 HTTP/1.0\r\n\r\n",
        b"POST /api/v3/sessions/s_1/restore HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
        b"GET //api//v3// HTTP/1.1\r\nHost: x\r\n\r\n",
        b"HEAD /llms.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ]
    for r in reqs:
        put(bytes([len(r) // 2]) + r)

    # ---- request bodies: selector = the endpoint (fuzz_api_bodies.cpp)
    put = writer("fuzz_api_bodies")
    cases = {
        0: [{"username": "alice", "password": "a long password"}, {"label": "k"}, {"n": 41.0, "m": [1e300, -0.0]}],
        1: [{"model": "hf:local/stories260K", "messages": [{"role": "user", "content": "Once upon a time"}],
             "maxTokens": 20, "temperature": 0.7, "topK": 40, "topP": 0.9, "seed": 7, "stream": False,
             "speculative": True, "repetitionPenalty": 1.1}],
        2: [{"kind": "decode", "cache": 64}, {"kind": "prefill", "tokens": 8, "cache": 64},
            {"kind": "alloc", "cache": 64}, {"kind": "verify", "tokens": 4, "cache": 64, "argmax": True}],
        3: [{"graph": g} for g in list(graphs())[:12]] + [{"graphId": "gt_1", "session": "s_1", "bind": {"pos": 3}}],
        4: [{"label": "decode", "graph": {"inputs": [{"name": "ids", "shape": [1], "bind": "ids"}],
                                          "steps": [{"op": "argmax", "in": ["ids"], "out": "tok"}], "outputs": ["tok"]}}],
        5: [{"shape": [2, 2], "data": [1, 2, 3, 4]}, {"shape": [1], "dataB64": "AACAPw=="}],
        6: [{"source": s} for s in ("hf:Org/Model", "hf:Org/Model@rev/sub/model.safetensors",
                                    "https://example.com/m/model.safetensors.index.json",
                                    "/nonexistent/mpakt-fuzz-models/m", "http://[::1]:8/x/")],
        7: [{"headDim": 64, "offset": {"$bind": "pos", "mul": 1, "add": 2}, "shape": [1, 2, 3]}],
    }
    for sel, bodies in cases.items():
        for b in bodies:
            put(bytes([sel]) + compact(b))

    # ---- tokenizer: encode texts (selector 0/3 with the tokenizer index << 2), ids (1), a tokenizer.json (2)
    put = writer("fuzz_tokenizer")
    texts = [t for t in json.loads((FIXTURES / "tokenizers" / "corpus.json").read_text())["strings"]][:12] \
        if (FIXTURES / "tokenizers" / "corpus.json").exists() else []
    texts += ["Once upon a time, there was a cat.", "caf\u00e9 \U0001F600 <s></s> [INST] 1234 \t\n  x",
              "\u00e9\u0301 \ufeff\u200b"]
    for i, t in enumerate(texts):
        put(bytes([((i % 8) << 2) | 0]) + t.encode())
    for i in range(8):
        put(bytes([(i << 2) | 1]) + bytes(range(0, 64)))
    put(b"\x02" + (FIXTURES / "tokenizers" / "mistral.tokenizer.json").read_bytes())
    put(b"\x02" + (STORIES / "tokenizer.json").read_bytes())

    # ---- chat templates: tokenizer_config.json (0), a .jinja (1), conversations (2)
    put = writer("fuzz_chat_template")
    templates = FIXTURES / "chat_templates"
    for f in sorted(templates.glob("*.json")) + sorted((templates / "hub").glob("*.json")):
        if f.name == "conversations.json":
            continue
        d = json.loads(f.read_text())
        put(b"\x00" + compact(d["tokenizer_config"]))
        tmpl = d["tokenizer_config"].get("chat_template")
        if isinstance(tmpl, str):
            put(b"\x01" + tmpl.encode())
        for case in [c for c in d.get("cases", []) if "messages" in c][:2]:
            put(b"\x02" + b"\x00".join(m["role"].encode() + b"\x01" + m["content"].encode() for m in case["messages"]))


if __name__ == "__main__":
    main()
