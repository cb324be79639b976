#!/usr/bin/env python3
"""Side by side with llama.cpp: mpakt's decode and prefill tokens/s next to llama.cpp's on the
same model shapes, the same weights and the same machine, measured interleaved in one run,
beside the read bandwidth probed in that run.

The peer is built here, outside the repository, into a cache folder (default
~/.cache/mpakt-peer, or $MPAKT_PEER_CACHE, or --cache):
  1. `pip download --no-binary llama-cpp-python --no-deps llama-cpp-python`: the
     llama-cpp-python source distribution from PyPI, which vendors llama.cpp and its gguf-py
     (the newest one already in the cache is reused; --peer-version V pins one, --refresh-peer
     asks PyPI for the newest). `--no-binary` names only this package: with `:all:` pip would
     also build the sdist's build backend and its dependencies from source just to read the
     metadata (minutes, for nothing the benchmark uses); the file downloaded is the same.
  2. CMake builds only `llama-bench` and `llama-quantize` from its vendor/llama.cpp, CPU only,
     GGML_NATIVE=ON, static, -j2, into CACHE/VERSION/build-amx. A smoke run of llama-bench on
     every dtype follows; if one crashes (llama.cpp's AMX int8 path has crashed on q8_0/q4_0
     on AMX machines), the tools are rebuilt with AMX off (-mno-amx-tile -mno-amx-int8
     -mno-amx-bf16 after -march=native) into build-noamx, and the table's notes say so. The
     verdict is cached per CPU.
  3. A virtual environment CACHE/venv-VERSION gets the vendored gguf-py; bench/peer_gguf.py
     runs in it to write the GGUF files.
Nothing of the peer enters the repository.

Models (random weights, seed 0: matrices normal x 0.02, norms 1), written once into
CACHE/hub/local/NAME (bf16 safetensors + config.json; `mpakt host` serves CACHE/hub) and
converted bit for bit into GGUF (CACHE/VERSION/models): BF16, then `llama-quantize` to Q8_0
and Q4_0 (its default mixes: it may keep a few tensors at other types; `describe` in the
JSON lists them).
  smol   SmolLM2-135M shape: llama, 576 hidden, 30 layers, 9/3 heads, head_dim 64, 1536
         intermediate, vocab 49152, tied, rope theta 1e5, rms eps 1e-5
  qwen3  Qwen3-0.6B shape: qwen3, 1024 hidden, 28 layers, 16/8 heads, head_dim 128, 3072
         intermediate, vocab 151936, tied, q/k norms, rope theta 1e6, rms eps 1e-6

Cells (shape x dtype x threads x test x side), each run once per repeat; every repeat visits
them in a rotated order, mpakt and llama.cpp of one configuration back to back (which goes
first alternates), and the table shows medians. Each side's timed run follows an untimed
warm-up of its own, as llama-bench does by default (the prompt once for pp; one generated token
for tg and tgd). It matters on machines whose cores slow down when idle: on a KVM Xeon, 300 MB
read in 21 ms straight after a read and in 46-54 ms after three idle seconds, and a 128-token
prefill of the SmolLM2 shape on one thread took 124 ms called back to back, 260 ms after three
idle seconds.
  tg   decode N tokens from an empty cache (N = --tokens, 128 by default).
       llama.cpp: `llama-bench -p 0 -n N -t T -r 1` (its own warm-up first), avg_ts.
       mpakt: POST /api/v3/generate on the worker loop (greedy, compiled one-token step,
       startPos 0, N new tokens, not streamed): N / client wall time; the server's own
       tokensPerSecond is in the `srv` column.
  tgd  with --depth D: decode N tokens after a context of D tokens (a long conversation: its
       attention reads D + i cache rows at token i).
       llama.cpp: `llama-bench -p 0 -n N -d D -t T -r 1` (the context filled untimed), avg_ts.
       mpakt: a session of its own, prefilled once with D random tokens by a compiled D-token
       call, then the same generate from startPos D (every run rewrites the same rows).
  pp   prefill N tokens into an empty cache.
       llama.cpp: `llama-bench -p N -n 0 -t T -r 1`, avg_ts (logits of the last position only).
       mpakt: one call of a compiled N-token pass (`mpakt graph --compiled --tokens N --cache R
       --argmax --last`: only the last position goes through the head, so both sides do the
       same work) over HTTP (POST /api/v3/graph); N / client wall time.
  mpakt runs `mpakt serve --dev --threads T` per thread count (both up at once, models
  loaded with "quantize": none | q8 | q4), fed by one `mpakt host` on loopback.

Bandwidth and roofline: bench/read_bw.c, compiled into the cache with -O3 -march=native,
sums a 1 GiB buffer on T threads (each its own first-touched slice, 4 x 512-bit accumulators),
best of 3; probed on 1 and 2 threads before the cells, before every repeat and after. Decode
roofline (tokens/s) = best bandwidth of the cell's thread count / bytes read per token:
  mpakt      the load's residentBytes (bf16 2 B/weight; q8 8.5 bits; q4 5 bits with the
             embedding/head and value/down projections at q8; a tied table is read once, as
             the head) + the f32 KV rows read (2 x layers x kvHeads x headDim x 4 B x mean rows
             (N + 1) / 2, plus D for tgd)
  llama.cpp  llama-bench's model_size (the GGUF's tensor bytes) + its f16 KV rows likewise
`frac` = tok/s / roofline. Prefill is compute-bound: no roofline.

Usage: .venv/bin/python bench/peer_bench.py --out /tmp/peer.json [--quick] [--shapes smol,qwen3]
       [--dtypes bf16,q8,q4] [--threads 1,2] [--repeats 3] [--tokens 128] [--depth D] [--binary build/mpakt]
The repository's .venv (numpy) runs this script; the peer's tools need cmake, a C/C++ compiler
and PyPI. Disk: about 5 GB in the cache for both shapes; memory: about 7 GB while both servers
hold every model.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from decode_bench import Api, Proc, bench_account, free_port, graph_cli, to_bf16  # noqa: E402

# Bumped when the written checkpoints change, so cached files are not reused across formats.
MODEL_FORMAT = 1

SHAPES = {
    "smol": {
        "label": "SmolLM2-135M",
        "name": "smol2-135m-shaped-s0",
        "config": {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
            "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152,
            "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 100000.0,
            "hidden_act": "silu", "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2,
            "torch_dtype": "bfloat16", "attention_bias": False, "mlp_bias": False,
        },
    },
    "qwen3": {
        "label": "Qwen3-0.6B",
        "name": "qwen3-0.6b-shaped-s0",
        "config": {
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
            "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
            "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
            "hidden_act": "silu", "tie_word_embeddings": True, "bos_token_id": 151643,
            "eos_token_id": 151645, "torch_dtype": "bfloat16", "attention_bias": False,
        },
    },
}

# our name -> (mpakt "quantize", llama-quantize type / GGUF file tag)
DTYPES = {"bf16": ("none", "BF16"), "q8": ("q8", "Q8_0"), "q4": ("q4", "Q4_0")}

AMX_OFF_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
# `--isa avx2`: the peer built for AVX2 machines (no AVX-512, no AMX) and mpakt's kernels held at
# the avx2 level (MPAKT_CPU_LEVEL), so an AVX-512 machine shows both engines' portable paths —
# the code most volunteers' CPUs run — side by side. The memory system stays this machine's.
AVX2_CMAKE = ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
              "-DGGML_BMI2=ON", "-DGGML_AVX512=OFF", "-DGGML_AVX512_VNNI=OFF", "-DGGML_AVX512_BF16=OFF",
              "-DGGML_AVX_VNNI=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]
# `--isa avx_vnni`: the same with AVX-VNNI's 256-bit dot products on both sides (the peer's
# GGML_AVX_VNNI, mpakt's avx2 level taking them): Intel's Alder Lake and later cores without
# AVX-512, on a machine that has AVX-VNNI. `--isa avx2` holds both without them.
AVX_VNNI_CMAKE = [f for f in AVX2_CMAKE if f != "-DGGML_AVX_VNNI=OFF"] + ["-DGGML_AVX_VNNI=ON"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run(argv, timeout=None, env=None, cwd=None, check=True):
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} -> {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return r


def cpu_info():
    out = run(["lscpu"], check=False).stdout
    fields = dict(l.split(":", 1) for l in out.splitlines() if ":" in l)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = fields.get("Flags", "").split()
    interesting = [f for f in flags if re.match(r"(avx|amx|fma|f16c|vnni|bmi2)", f)]
    return {"model": fields.get("Model name", "?"), "cpus": fields.get("CPU(s)", str(os.cpu_count())),
            "l3": fields.get("L3 cache", "?"), "hypervisor": fields.get("Hypervisor vendor"),
            "simd_flags": interesting, "flags": flags}


# --------------------------------------------------------------------------- checkpoints


def hf_tensors(cfg):
    """[(name, shape)] in HF naming (Llama, plus q/k norms for qwen3; lm_head unless tied)."""
    h, L, inter, v = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", [v, h])]
    for i in range(L):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", [h]), (p + "self_attn.q_proj.weight", [q, h]),
                (p + "self_attn.k_proj.weight", [kv, h]), (p + "self_attn.v_proj.weight", [kv, h]),
                (p + "self_attn.o_proj.weight", [h, q])]
        if cfg["model_type"] == "qwen3":
            out += [(p + "self_attn.q_norm.weight", [hd]), (p + "self_attn.k_norm.weight", [hd])]
        out += [(p + "post_attention_layernorm.weight", [h]), (p + "mlp.gate_proj.weight", [inter, h]),
                (p + "mlp.up_proj.weight", [inter, h]), (p + "mlp.down_proj.weight", [h, inter])]
    out.append(("model.norm.weight", [h]))
    if not cfg.get("tie_word_embeddings", False):
        out.append(("lm_head.weight", [v, h]))
    return out


def numpy_bf16(seed):
    """The default `fill` of write_checkpoint: bf16 bytes of a tensor, normal*std (norms 1)."""
    rng = np.random.default_rng(seed)

    def fill(shape, std):
        a = np.ones(shape, dtype=np.float32) if len(shape) == 1 else rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
        return to_bf16(a).tobytes()
    return fill


def write_checkpoint(d: Path, cfg, seed=0, std=0.02, fill=None):
    """config.json + model.safetensors (bf16: matrices normal*std, norms 1), written under a
    temporary name and renamed, so an interrupted run leaves no half file behind. `fill(shape,
    std)` gives a tensor's bytes (default: numpy, seeded)."""
    st = d / "model.safetensors"
    if st.is_file() and (d / "config.json").is_file():
        return st
    d.mkdir(parents=True, exist_ok=True)
    fill = fill or numpy_bf16(seed)
    tensors = hf_tensors(cfg)
    header, off = {}, 0
    for name, shape in tensors:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = d / "model.safetensors.part"
    t = time.perf_counter()
    with open(tmp, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for name, shape in tensors:
            f.write(fill(shape, std))
    (d / "config.json").write_text(json.dumps(cfg, indent=1))
    tmp.rename(st)
    log(f"  wrote {st} ({off / 1e6:.0f} MB) in {time.perf_counter() - t:.0f} s")
    return st


# --------------------------------------------------------------------------- the peer


def _version_key(p: Path):
    m = re.search(r"-(\d+(?:\.\d+)*)\.tar\.gz$", p.name)
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


class Peer:
    """llama.cpp's llama-bench and llama-quantize, built from the llama-cpp-python sdist."""

    def __init__(self, cache: Path, version=None, refresh=False):
        self.cache, self.want_version, self.refresh = cache, version, refresh
        self.notes = []
        self.info = {}

    def sdist(self) -> Path:
        sd = self.cache / "sdist"
        sd.mkdir(parents=True, exist_ok=True)
        have = sorted(sd.glob("llama_cpp_python-*.tar.gz"), key=_version_key)
        if self.want_version:
            have = [p for p in have if p.name == f"llama_cpp_python-{self.want_version}.tar.gz"]
        if have and not self.refresh:
            return have[-1]
        spec = f"llama-cpp-python=={self.want_version}" if self.want_version else "llama-cpp-python"
        log(f"peer: pip download {spec} (source distribution)…")
        before = set(sd.glob("*.tar.gz"))
        run([sys.executable, "-m", "pip", "download", "--no-binary", "llama-cpp-python", "--no-deps",
             "--no-cache-dir", "-d", sd, spec], timeout=1800)
        got = sorted(set(sd.glob("llama_cpp_python-*.tar.gz")) - before, key=_version_key) or \
            sorted(sd.glob("llama_cpp_python-*.tar.gz"), key=_version_key)
        return got[-1]

    def setup(self, smoke_ggufs_fn, isa="native"):
        tgz = self.sdist()
        self.version = ".".join(map(str, _version_key(tgz)))
        self.dir = self.cache / self.version
        src_root = self.dir / tgz.name[:-len(".tar.gz")]
        self.src = src_root / "vendor" / "llama.cpp"
        if not (self.src / "CMakeLists.txt").is_file():
            log(f"peer: unpacking {tgz.name}…")
            self.dir.mkdir(parents=True, exist_ok=True)
            with tarfile.open(tgz) as tf:
                kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                tf.extractall(self.dir, **kw)
        self.venv = self.cache / f"venv-{self.version}"
        self.py = self.venv / "bin" / "python"
        if not (self.venv / ".ready").is_file():
            log("peer: virtual environment with its gguf-py…")
            shutil.rmtree(self.venv, ignore_errors=True)
            run([sys.executable, "-m", "venv", self.venv])
            run([self.py, "-m", "pip", "install", "-q", self.src / "gguf-py"], timeout=1800)
            (self.venv / ".ready").write_text("ok\n")
        self.info.update({"version": self.version, "sdist": str(tgz), "src": str(self.src),
                          "ggml_version": self._ggml_version()})
        held = {"avx512": ("noamx", "llama.cpp built native with AMX off; mpakt held at its avx512_bf16 kernel "
                                    "level (MPAKT_CPU_LEVEL=avx512_bf16): an AVX-512 machine without AMX"),
                "avx2": ("avx2", "llama.cpp built for AVX2 (GGML_NATIVE=OFF, AVX2/FMA/F16C/BMI2 on, AVX-512, "
                                 "AVX-VNNI and AMX off); mpakt held at its avx2 kernel level (MPAKT_CPU_LEVEL=avx2, "
                                 "MPAKT_AVX_VNNI=off)"),
                "avx_vnni": ("avxvnni", "llama.cpp built for AVX2 with AVX-VNNI (GGML_NATIVE=OFF, GGML_AVX_VNNI "
                                        "on, AVX-512 and AMX off); mpakt held at its avx2 kernel level "
                                        "(MPAKT_CPU_LEVEL=avx2), taking AVX-VNNI's dot products")}
        if isa in held:
            self.variant, note = held[isa]
            self.build(self.variant)
            self.notes.append(note)
            self.info.update({"variant": self.variant})
            self.bindir = self.dir / f"build-{self.variant}" / "bin"
            self.bench, self.quantize = self.bindir / "llama-bench", self.bindir / "llama-quantize"
            return
        cpu_key = hashlib.sha256(" ".join(cpu_info()["flags"]).encode()).hexdigest()[:12]
        verdict_path = self.dir / f"amx-verdict-{cpu_key}.json"
        verdict = json.loads(verdict_path.read_text()) if verdict_path.is_file() else None
        if verdict is None or verdict.get("amx_ok") is True:
            self.build("amx")
        if verdict is None:
            # Quantize with this build (quantizing runs no AMX kernels), then run every dtype.
            ggufs = smoke_ggufs_fn(self)
            failures = self.smoke(ggufs)
            verdict = {"amx_ok": not failures, "failures": failures}
            verdict_path.write_text(json.dumps(verdict, indent=1))
        if verdict["amx_ok"]:
            self.variant = "amx"
            self.notes.append("llama.cpp built native (-march=native, AMX on where the CPU has it)")
        else:
            self.build("noamx")
            self.variant = "noamx"
            what = ", ".join(f"{f['dtype']} ({f['why']})" for f in verdict["failures"])
            self.notes.append(f"llama.cpp AMX OFF: its native build crashed on {what}; rebuilt with "
                              f"{AMX_OFF_FLAGS}")
        self.info.update({"variant": self.variant, "amx_verdict": verdict})
        self.bindir = self.dir / f"build-{self.variant}" / "bin"
        self.bench, self.quantize = self.bindir / "llama-bench", self.bindir / "llama-quantize"

    def _ggml_version(self):
        try:
            txt = (self.src / "ggml" / "CMakeLists.txt").read_text()
            m = [re.search(rf"GGML_VERSION_{k}\s+(\d+)", txt) for k in ("MAJOR", "MINOR", "PATCH")]
            return ".".join(x.group(1) for x in m) if all(m) else None
        except OSError:
            return None

    def build(self, variant):
        bdir = self.dir / f"build-{variant}"
        if (bdir / "bin" / "llama-bench").is_file() and (bdir / "bin" / "llama-quantize").is_file():
            return
        log(f"peer: building llama-bench and llama-quantize ({variant}) into {bdir} (several minutes)…")
        t = time.perf_counter()
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        flags = {"amx": ["-DGGML_NATIVE=ON"], "avx2": AVX2_CMAKE, "avxvnni": AVX_VNNI_CMAKE}.get(
            variant, ["-DGGML_NATIVE=ON", f"-DCMAKE_C_FLAGS={AMX_OFF_FLAGS}", f"-DCMAKE_CXX_FLAGS={AMX_OFF_FLAGS}"])
        run(["cmake", "-S", self.src, "-B", bdir, *gen, "-DCMAKE_BUILD_TYPE=Release",
             "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
             "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_APP=OFF", "-DGGML_CCACHE=OFF",
             *flags], timeout=1800)
        run(["cmake", "--build", bdir, "-j", "2", "--target", "llama-bench", "llama-quantize"], timeout=5400)
        log(f"peer: built in {time.perf_counter() - t:.0f} s")

    def smoke(self, ggufs):
        """[{dtype, why}] for each GGUF that llama-bench cannot run (prompt and generation)."""
        failures = []
        for dtype, path in ggufs.items():
            r = run([self.dir / "build-amx" / "bin" / "llama-bench", "-m", path, "-p", "128", "-n", "8", "-r", "1",
                     "-t", "2", "-o", "json"], timeout=900, check=False)
            if r.returncode != 0:
                why = f"signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}"
                why = {"signal 11": "SIGSEGV", "signal 6": "SIGABRT", "signal 4": "SIGILL"}.get(why, why)
                failures.append({"dtype": DTYPES[dtype][1].lower(), "why": why, "stderr_tail": r.stderr[-1500:]})
                log(f"peer: smoke run of {path.name} failed: {why}")
        return failures

    def gguf_paths(self, shape):
        d = self.dir / "models"
        return {dt: d / f"{SHAPES[shape]['name']}-f{MODEL_FORMAT}-{tag}.gguf" for dt, (_, tag) in DTYPES.items()}

    def make_ggufs(self, shape, st_dir: Path, quantize_with: Path):
        """The shape's GGUF files (bf16 from our safetensors, then Q8_0 and Q4_0)."""
        paths = self.gguf_paths(shape)
        paths["bf16"].parent.mkdir(parents=True, exist_ok=True)
        if not paths["bf16"].is_file():
            t = time.perf_counter()
            part = paths["bf16"].with_suffix(".part")
            run([self.py, HERE / "peer_gguf.py", "write", st_dir / "config.json", st_dir / "model.safetensors", part],
                timeout=3600)
            part.rename(paths["bf16"])
            log(f"  wrote {paths['bf16'].name} in {time.perf_counter() - t:.0f} s")
        for dt in ("q8", "q4"):
            if not paths[dt].is_file():
                t = time.perf_counter()
                part = paths[dt].with_suffix(".part")
                run([quantize_with, paths["bf16"], part, DTYPES[dt][1], "2"], timeout=3600)
                part.rename(paths[dt])
                log(f"  quantized {paths[dt].name} in {time.perf_counter() - t:.0f} s")
        return paths

    def describe(self, path):
        return json.loads(run([self.py, HERE / "peer_gguf.py", "describe", path], timeout=600).stdout)

    def bench_cell(self, gguf, test, n, threads, depth=0):
        argv = [self.bench, "-m", gguf, "-t", str(threads), "-r", "1", "-o", "json"]
        argv += ["-p", str(n), "-n", "0"] if test == "pp" else ["-p", "0", "-n", str(n)]
        if test == "tgd":
            argv += ["-d", str(depth)]
        t = time.perf_counter()
        r = run(argv, timeout=1800)
        j = json.loads(r.stdout)[0]
        return {"tps": j["avg_ts"], "wall_s": time.perf_counter() - t, "samples_ns": j.get("samples_ns"),
                "model_size": j.get("model_size"), "model_type": j.get("model_type"),
                "type_k": j.get("type_k"), "flash_attn": j.get("flash_attn"), "n_threads": j.get("n_threads"),
                "n_batch": j.get("n_batch"), "build_commit": j.get("build_commit"), "cpu_info": j.get("cpu_info"),
                "backends": j.get("backends")}


# --------------------------------------------------------------------------- bandwidth


class Bandwidth:
    def __init__(self, cache: Path):
        src = HERE / "read_bw.c"
        h = hashlib.sha256(src.read_bytes()).hexdigest()[:12]
        self.exe = cache / f"read_bw-{h}"
        if not self.exe.is_file():
            cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
            run([cc, "-O3", "-march=native", "-pthread", src, "-o", self.exe.with_suffix(".part")])
            self.exe.with_suffix(".part").rename(self.exe)
        self.probes = []

    def probe(self, threads_list, when):
        for t in threads_list:
            r = json.loads(run([self.exe, t, 1024, 3], timeout=600).stdout)
            r["when"] = when
            self.probes.append(r)
            log(f"  read bandwidth, {t} thread(s), {when}: {r['best_Bps'] / 1e9:.1f} GB/s")

    def best(self, threads):
        v = [p["best_Bps"] for p in self.probes if p["threads"] == threads]
        return max(v) if v else None


# --------------------------------------------------------------------------- mpakt


class Serve:
    """One `mpakt serve --threads T` with one account per shape (its own key: the per-key
    limits cover the three dtypes of one shape)."""

    def __init__(self, binary, host_url, threads, tmp: Path):
        self.binary, self.threads = binary, threads
        for _ in range(3):
            self.port = free_port()
            data = tmp / f"serve-t{threads}-{self.port}"
            data.mkdir()
            self.proc = Proc(f"mpakt serve t{threads}", [binary, "serve", "--port", self.port, "--data-dir", data,
                                                         "--dev", "--hf-endpoint", host_url, "--worker-memory", "12G",
                                                         "--threads", threads], data / "serve.log")
            try:
                self.proc.start(r"mpakt serve: listening on http://")
                break
            except RuntimeError as e:
                if "already in use" not in str(e):
                    raise
        self.apis = {}
        self.models = {}

    def api(self, shape):
        if shape not in self.apis:
            a = Api(self.port)
            a.post("/api/accounts", {"username": f"bench-{shape}", "password": "a long password"})
            token = a.post("/api/accounts/login", {"username": f"bench-{shape}", "password": "a long password"})["token"]
            a.key = a.post("/api/keys", {"label": "bench"}, token=token)["key"]
            self.apis[shape] = a
        return self.apis[shape]

    def load(self, shape, dtype, config_path, n, depth=0):
        api = self.api(shape)
        t = time.perf_counter()
        r = api.post("/api/v3/models", {"source": f"hf:local/{SHAPES[shape]['name']}", "quantize": DTYPES[dtype][0]})
        load = {"wall_s": time.perf_counter() - t, **{k: r.get(k) for k in (
            "bytesTransferred", "residentBytes", "throughputMBs", "elapsedMs", "quantize")}}
        model = r["modelId"]
        rows = ((n + 1 + 63) // 64) * 64
        mk = lambda tokens, *more, cache=rows: graph_cli(self.binary, config_path, "--model-id", model, "--compiled",
                                                         "--tokens", str(tokens), "--cache", str(cache), "--argmax", *more)
        decode = api.post("/api/v3/graphs", {"label": f"{shape}-{dtype}-decode", "graph": mk(1)})["graphId"]
        # only the last row goes through the head, as in llama-bench's prompt test
        pg, head = mk(n, "--last"), "last position only"
        prefill = api.post("/api/v3/graphs", {"label": f"{shape}-{dtype}-prefill", "graph": pg})["graphId"]
        session = api.post("/api/v3/sessions", {"modelId": model})["session"]["sessionId"]
        api.post("/api/v3/graph", {"graph": dict(graph_cli(self.binary, config_path, "--alloc-cache", str(rows)),
                                                 session=session)})
        self.models[(shape, dtype)] = {"model": model, "decode": decode, "prefill": prefill, "session": session,
                                       "rows": rows, "load": load, "head": head}
        if depth:
            # a long conversation's session: its own cache, decode template and context prefill
            rows_d = ((depth + n + 1 + 63) // 64) * 64
            deep = api.post("/api/v3/sessions", {"modelId": model})["session"]["sessionId"]
            api.post("/api/v3/graph", {"graph": dict(graph_cli(self.binary, config_path, "--alloc-cache", str(rows_d)),
                                                     session=deep)})
            self.models[(shape, dtype)].update({
                "depth": depth, "depth_rows": rows_d, "depth_session": deep,
                "depth_decode": api.post("/api/v3/graphs", {"label": f"{shape}-{dtype}-decode-deep",
                                                            "graph": mk(1, cache=rows_d)})["graphId"],
                "depth_prefill": api.post("/api/v3/graphs", {"label": f"{shape}-{dtype}-context",
                                                             "graph": mk(depth, "--last", cache=rows_d)})["graphId"]})
        log(f"  [t{self.threads}] loaded {shape} {dtype}: resident {load['residentBytes'] / 1e6:.1f} MB "
            f"in {load['wall_s']:.1f} s")
        return self.models[(shape, dtype)]

    def tg(self, shape, dtype, n, first_token, deep=False):
        """N tokens generated from an empty cache, or (deep) after the long conversation's context."""
        m, api = self.models[(shape, dtype)], self.apis[shape]
        graph, session, start = ((m["depth_decode"], m["depth_session"], m["depth"]) if deep
                                 else (m["decode"], m["session"], 0))
        t = time.perf_counter()
        done = api.post("/api/v3/generate", {"graphId": graph, "sessionId": session, "ids": [first_token],
                                             "startPos": start, "maxNewTokens": n, "stream": False, "workerLoop": True})
        wall = time.perf_counter() - t
        if not done.get("ok") or len(done["tokens"]) != n:
            raise RuntimeError(f"generate from position {start}: {str(done)[:300]}")
        return {"tps": n / wall, "wall_s": wall, "server_tps": done["tokensPerSecond"],
                "workerLoop": done.get("workerLoop"), "tokens_head": done["tokens"][:8]}

    def fill_context(self, shape, dtype, ids):
        """Prefills the long conversation's session with `ids` (len = depth), once."""
        m, api = self.models[(shape, dtype)], self.apis[shape]
        api.post("/api/v3/graph", {"graphId": m["depth_prefill"], "session": m["depth_session"],
                                   "bind": {"ids": ids, "pos": 0}})

    def pp(self, shape, dtype, ids):
        m, api = self.models[(shape, dtype)], self.apis[shape]
        t = time.perf_counter()
        r = api.post("/api/v3/graph", {"graphId": m["prefill"], "session": m["session"], "bind": {"ids": ids, "pos": 0}})
        wall = time.perf_counter() - t
        toks = r["outputs"]["tok"]["data"]
        return {"tps": len(ids) / wall, "wall_s": wall, "last_token": int(toks[-1])}

    def stop(self):
        for a in self.apis.values():
            a.close()
        self.proc.stop()


# --------------------------------------------------------------------------- the run


def kv_bytes(cfg, n, elem_bytes, depth=0):
    """KV bytes a decode token reads on average over N tokens after `depth` cached ones."""
    return 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * cfg["head_dim"] * elem_bytes * (depth + (n + 1) / 2)


def test_label(test, n, depth):
    return f"tg{n}@d{depth}" if test == "tgd" else f"{test}{n}"


def summarize(results, best_bw, n, depth=0):
    """Table rows from the cells; best_bw = {threads: best bytes/s of the run}."""
    med = statistics.median
    rows = []
    for c in results["cells"]:
        m_runs, l_runs = c["runs"]["mpakt"], c["runs"]["llama"]
        m_ok = [r for r in m_runs if "tps" in r]
        l_ok = [r for r in l_runs if "tps" in r]
        row = {k: c[k] for k in ("shape", "dtype", "threads", "test")}
        row["mpakt_tps"] = med(r["tps"] for r in m_ok) if m_ok else None
        row["mpakt_tps_best"] = max(r["tps"] for r in m_ok) if m_ok else None
        row["mpakt_server_tps"] = med(r["server_tps"] for r in m_ok) if m_ok and c["test"] != "pp" else None
        row["llama_tps"] = med(r["tps"] for r in l_ok) if l_ok else None
        row["llama_tps_best"] = max(r["tps"] for r in l_ok) if l_ok else None
        row["ratio"] = row["mpakt_tps"] / row["llama_tps"] if row["mpakt_tps"] and row["llama_tps"] else None
        row["spread"] = {side: (max(r["tps"] for r in rs) / min(r["tps"] for r in rs) - 1) if len(rs) > 1 else 0.0
                         for side, rs in (("mpakt", m_ok), ("llama", l_ok))}
        row["errors"] = [r["error"] for r in m_runs + l_runs if "error" in r]
        bwb = best_bw.get(c["threads"])
        row["bandwidth_Bps"] = bwb
        if c["test"] != "pp" and bwb:
            cfg = SHAPES[c["shape"]]["config"]
            d = depth if c["test"] == "tgd" else 0
            m_bytes = c["mpakt_resident_bytes"] + kv_bytes(cfg, n, 4, d)
            row["mpakt_bytes_per_token"] = m_bytes
            row["roofline_tps"] = bwb / m_bytes
            row["mpakt_frac"] = row["mpakt_tps"] / row["roofline_tps"] if row["mpakt_tps"] else None
            size = next((r["model_size"] for r in l_ok if r.get("model_size")), None)
            if size:
                l_bytes = size + kv_bytes(cfg, n, 2, d)
                row["llama_bytes_per_token"] = l_bytes
                row["llama_roofline_tps"] = bwb / l_bytes
                row["llama_frac"] = row["llama_tps"] / row["llama_roofline_tps"]
        notes = []
        g = results.get("gguf", {}).get(c["shape"], {}).get(c["dtype"])
        if g and g["token_embd_type"] != DTYPES[c["dtype"]][1]:
            notes.append(f"llama embd/head {g['token_embd_type'].lower()}")
        if c["test"] == "pp" and c.get("head") and c["head"] != "last position only":
            notes.append(f"head {c['head']}")
        for side in ("mpakt", "llama"):
            if row["spread"][side] > 0.15:
                notes.append(f"{side} spread {row['spread'][side] * 100:.0f}%")
        if row["errors"]:
            notes.append("FAILED: " + row["errors"][0][:80].replace("\n", " "))
        row["notes"] = "; ".join(notes)
        rows.append(row)
    # More threads going slower is what a loaded machine does to spinning thread pools: say so.
    one = {(r["shape"], r["dtype"], r["test"]): r for r in rows if r["threads"] == 1}
    for r in rows:
        base = one.get((r["shape"], r["dtype"], r["test"]))
        if r["threads"] > 1 and base:
            slower = [side for side, k in (("mpakt", "mpakt_tps"), ("llama", "llama_tps"))
                      if r[k] and base[k] and r[k] < base[k]]
            if slower:
                note = f"{'+'.join(slower)} slower than on 1 thread"
                r["notes"] = f"{r['notes']}; {note}" if r["notes"] else note
    return rows


def print_table(results):
    cpu, n = results["cpu"], results["tokens"]
    bw = results["bandwidth"]
    print(f"\nmpakt vs llama.cpp {results['peer'].get('version')} (ggml {results['peer'].get('ggml_version')}, "
          f"{results['peer'].get('variant')})  {results['date']}")
    print(f"CPU: {cpu['model']} x{cpu['cpus']} ({cpu.get('hypervisor') or 'bare metal'}); "
          f"{' '.join(cpu['simd_flags'])}")
    print(f"load average {results['loadavg_start'][0]:.1f} at the start, {results['loadavg_end'][0]:.1f} at the end; "
          f"median of {results['repeats']} interleaved repeat(s); mpakt {results['binary']}")
    print("read bandwidth (best of the run's probes): " + ", ".join(
        f"{t} thread(s) {v / 1e9:.1f} GB/s" for t, v in bw["best_Bps"].items()))
    heads = {c["head"] for c in results["cells"] if c["test"] == "pp"}
    if heads == {"last position only"}:
        print("mpakt pp: only the last position goes through the head (mpakt graph --last), as in llama-bench's prompt test")
    for note in results["notes"]:
        print(f"note: {note}")
    depth = results.get("depth", 0)
    hdr = (f"{'shape':13s} {'dtype':5s} {'thr':>3s} {'test':11s} {'mpakt':>8s} {'srv':>8s} {'llama':>8s} "
           f"{'ratio':>6s} {'roof':>7s} {'m frac':>6s} {'l frac':>6s}  notes")
    print("\n" + hdr)
    print("-" * len(hdr))
    f = lambda v, fmt: (fmt.format(v) if v is not None else "-")
    for r in results["rows"]:
        print(f"{SHAPES[r['shape']]['label']:13s} {r['dtype']:5s} {r['threads']:3d} {test_label(r['test'], n, depth):11s} "
              f"{f(r['mpakt_tps'], '{:8.1f}'):>8s} {f(r.get('mpakt_server_tps'), '{:8.1f}'):>8s} "
              f"{f(r['llama_tps'], '{:8.1f}'):>8s} {f(r['ratio'], '{:6.2f}'):>6s} "
              f"{f(r.get('roofline_tps'), '{:7.0f}'):>7s} {f(r.get('mpakt_frac'), '{:6.2f}'):>6s} "
              f"{f(r.get('llama_frac'), '{:6.2f}'):>6s}  {r['notes']}")
    print(f"\ntokens/s; mpakt = client wall time over HTTP (tg: generate on the worker loop; pp: one compiled "
          f"{n}-token call), srv = the server's tokensPerSecond;\nllama = llama-bench avg_ts; ratio = mpakt / llama; "
          f"roof = mpakt's decode roofline (bandwidth of that thread count / (residentBytes + f32 KV));\n"
          f"m frac, l frac = tok/s / own roofline (llama: GGUF size + f16 KV)"
          + (f"; tg{n}@d{depth}: decode after a {depth}-token context (its KV rows in the roofline)." if depth else "."))


def main():
    ap = argparse.ArgumentParser(description="mpakt next to llama.cpp (built here, outside the repository): decode "
                                             "and prefill tokens/s, interleaved, with the bandwidth roofline.")
    ap.add_argument("--out", required=True, help="where to write the JSON results")
    ap.add_argument("--shapes", default="smol,qwen3", help="comma list of smol, qwen3")
    ap.add_argument("--dtypes", default="bf16,q8,q4", help="comma list of bf16, q8, q4")
    ap.add_argument("--threads", default="1,2", help="comma list of thread counts")
    ap.add_argument("--repeats", type=int, default=None, help="interleaved repeats (default 3; 1 with --quick)")
    ap.add_argument("--tokens", type=int, default=None, help="tokens per tg/pp test (default 128; 32 with --quick)")
    ap.add_argument("--quick", action="store_true", help="one repeat, 32 tokens: a smoke run")
    ap.add_argument("--depth", type=int, default=0,
                    help="also decode after a context of this many tokens (tg N @ d D; llama-bench -d D); 0: not")
    ap.add_argument("--binary", default=os.environ.get("MPAKT_BINARY") or str(REPO / "build" / "mpakt"),
                    help="the mpakt binary (default $MPAKT_BINARY or build/mpakt)")
    ap.add_argument("--cache", default=os.environ.get("MPAKT_PEER_CACHE") or str(Path.home() / ".cache" / "mpakt-peer"),
                    help="where the peer, its GGUF files and the checkpoints live (default ~/.cache/mpakt-peer)")
    ap.add_argument("--peer-version", default=None, help="llama-cpp-python version to use (default: newest cached)")
    ap.add_argument("--refresh-peer", action="store_true", help="ask PyPI for the newest llama-cpp-python")
    ap.add_argument("--isa", choices=["native", "avx2", "avx_vnni", "avx512"], default="native",
                    help="avx2: both engines on their AVX2 paths (the peer built for AVX2, mpakt's kernels "
                         "held at the avx2 level) — what an AVX2-only volunteer runs; avx_vnni: the same with "
                         "AVX-VNNI's 256-bit dot products on both (an Alder Lake or later Intel core without "
                         "AVX-512; needs a CPU with AVX-VNNI); avx512: both without AMX (the peer's AMX-off "
                         "build, mpakt at avx512_bf16) — an AVX-512 machine without tiles")
    ap.add_argument("--reprint", metavar="JSON", help="print the table of an earlier run's JSON and exit")
    args = ap.parse_args()
    if args.reprint:
        results = json.loads(Path(args.reprint).read_text())
        best = {int(t): v for t, v in results["bandwidth"]["best_Bps"].items()}
        results["bandwidth"]["best_Bps"] = best
        results["rows"] = summarize(results, best, results["tokens"], results.get("depth", 0))
        print_table(results)
        return
    shapes = [s for s in args.shapes.split(",") if s]
    dtypes = [d for d in args.dtypes.split(",") if d]
    threads = [int(t) for t in args.threads.split(",") if t]
    bad = [s for s in shapes if s not in SHAPES] + [d for d in dtypes if d not in DTYPES]
    if bad:
        sys.exit(f"unknown shape or dtype: {bad}")
    if args.depth < 0:
        sys.exit(f"--depth takes a number of tokens, at least 0 (got {args.depth})")
    n = args.tokens or (32 if args.quick else 128)
    repeats = args.repeats or (1 if args.quick else 3)
    binary = Path(args.binary).resolve()
    if not binary.is_file():
        sys.exit(f"no mpakt binary at {binary}")
    cache = Path(args.cache).expanduser().resolve()
    cache.mkdir(parents=True, exist_ok=True)

    def _term(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _term)
    t_start = time.perf_counter()
    cpu = cpu_info()
    results = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
               "machine": f"{platform.machine()} {os.cpu_count()} cpus", "cpu": cpu,
               "loadavg_start": os.getloadavg(), "binary": str(binary), "tokens": n, "repeats": repeats,
               "depth": args.depth, "shapes": shapes, "dtypes": dtypes, "threads": threads, "cache": str(cache)}

    # Checkpoints (ours) and the peer with its GGUF files.
    hub = cache / "hub"
    st_dirs = {}
    for s in shapes:
        d = hub / "local" / SHAPES[s]["name"]
        log(f"checkpoint {s}: {d}")
        write_checkpoint(d, SHAPES[s]["config"])
        st_dirs[s] = d
    peer = Peer(cache, args.peer_version, args.refresh_peer)

    def smoke_ggufs(p):
        # every dtype of the smallest shape, quantized by the native build
        s = "smol" if "smol" in shapes else shapes[0]
        if "smol" not in st_dirs:
            st_dirs["smol"] = write_checkpoint(hub / "local" / SHAPES["smol"]["name"], SHAPES["smol"]["config"]).parent
        paths = p.make_ggufs(s, st_dirs[s], p.dir / "build-amx" / "bin" / "llama-quantize")
        return paths

    if args.isa == "avx_vnni" and "avx_vnni" not in cpu_info()["flags"]:
        sys.exit("peer_bench: --isa avx_vnni needs a CPU with AVX-VNNI (lscpu: avx_vnni)")
    peer.setup(smoke_ggufs, args.isa)
    results["isa"] = args.isa
    if args.isa != "native":  # inherited by the mpakt servers started below
        os.environ["MPAKT_CPU_LEVEL"] = {"avx2": "avx2", "avx_vnni": "avx2", "avx512": "avx512_bf16"}[args.isa]
        if args.isa == "avx2":
            os.environ["MPAKT_AVX_VNNI"] = "off"
    ggufs = {}
    for s in shapes:
        log(f"GGUF files {s}…")
        ggufs[s] = peer.make_ggufs(s, st_dirs[s], peer.quantize)
    results["peer"] = dict(peer.info, bench=str(peer.bench))
    results["notes"] = list(peer.notes)
    results["gguf"] = {s: {dt: {"path": str(p), **peer.describe(p)} for dt, p in ggufs[s].items() if dt in dtypes}
                       for s in shapes}

    bw = Bandwidth(cache)
    tmp = Path(tempfile.mkdtemp(prefix="mpakt-peer-bench-"))
    procs = []
    try:
        log("bandwidth (before)…")
        bw.probe(threads, "before")
        host = Proc("mpakt host", [binary, "host", hub, "--port", "0"], tmp / "host.log")
        procs.append(host)
        host_url = host.start(r"mpakt host: serving .* at (http://\S+)").group(1)
        serves = {}
        for t in threads:
            serves[t] = Serve(binary, host_url, t, tmp)
            procs.append(serves[t].proc)
        rng = np.random.default_rng(1)
        prompts = {s: [int(x) for x in rng.integers(3, SHAPES[s]["config"]["vocab_size"], n)] for s in shapes}
        contexts = {s: [int(x) for x in rng.integers(3, SHAPES[s]["config"]["vocab_size"], args.depth)] for s in shapes}
        for t, sv in serves.items():
            for s in shapes:
                for dt in dtypes:
                    sv.load(s, dt, st_dirs[s] / "config.json", n, args.depth)
        # warm-up: every mpakt graph once (llama-bench warms up inside each invocation)
        log("warm-up…")
        for t, sv in serves.items():
            for s in shapes:
                for dt in dtypes:
                    sv.tg(s, dt, min(8, n), prompts[s][0])
                    sv.pp(s, dt, prompts[s])
                    if args.depth:
                        sv.fill_context(s, dt, contexts[s])
                        sv.tg(s, dt, min(8, n), prompts[s][0], deep=True)

        cells = []
        for s in shapes:
            for dt in dtypes:
                for t in threads:
                    for test in ("tg", "pp") + (("tgd",) if args.depth else ()):
                        m = serves[t].models[(s, dt)]
                        cells.append({"shape": s, "dtype": dt, "threads": t, "test": test,
                                      "mpakt_resident_bytes": m["load"]["residentBytes"],
                                      "head": m["head"] if test == "pp" else None,
                                      "runs": {"mpakt": [], "llama": []}})
        total = repeats * len(cells)
        done_count = 0
        for rep in range(repeats):
            bw.probe(threads, f"repeat {rep + 1}")
            off = (rep * len(cells)) // repeats
            order = cells[off:] + cells[:off]
            sides = ("mpakt", "llama") if rep % 2 == 0 else ("llama", "mpakt")
            for c in order:
                for side in sides:
                    try:
                        if side == "mpakt":
                            sv = serves[c["threads"]]
                            # an untimed warm-up first, as llama-bench runs before its timed run (the
                            # prompt once; one generated token)
                            if c["test"] == "pp":
                                sv.pp(c["shape"], c["dtype"], prompts[c["shape"]])
                                r = sv.pp(c["shape"], c["dtype"], prompts[c["shape"]])
                            else:
                                sv.tg(c["shape"], c["dtype"], 1, prompts[c["shape"]][0], deep=c["test"] == "tgd")
                                r = sv.tg(c["shape"], c["dtype"], n, prompts[c["shape"]][0], deep=c["test"] == "tgd")
                        else:
                            r = peer.bench_cell(ggufs[c["shape"]][c["dtype"]], c["test"], n, c["threads"], args.depth)
                    except Exception as e:  # noqa: BLE001 - a failed cell is reported, the run goes on
                        r = {"error": str(e)[-2000:]}
                    r["repeat"], r["loadavg"] = rep, os.getloadavg()[0]
                    c["runs"][side].append(r)
                done_count += 1
                m, l = c["runs"]["mpakt"][-1], c["runs"]["llama"][-1]
                fmt = lambda r: f"{r['tps']:8.1f}" if "tps" in r else "  FAILED"
                log(f"  [{done_count}/{total} {time.perf_counter() - t_start:5.0f}s] {c['shape']:5s} {c['dtype']:4s} "
                    f"t{c['threads']} {test_label(c['test'], n, args.depth)}: mpakt {fmt(m)}  llama {fmt(l)}")
        bw.probe(threads, "after")
        for t, sv in serves.items():
            results.setdefault("mpakt_models", {})[t] = {f"{s}/{dt}": {k: v for k, v in m.items()}
                                                         for (s, dt), m in sv.models.items()}
            sv.stop()
        results["loadavg_end"] = os.getloadavg()
        results["bandwidth"] = {"best_Bps": {t: bw.best(t) for t in threads}, "probes": bw.probes,
                                "how": "bench/read_bw.c (-O3 -march=native): T threads sum their own first-touched "
                                       "slice of a 1 GiB buffer, best of 3 per probe; the roofline uses the best "
                                       "probe of the run per thread count"}
        results["cells"] = cells
        results["rows"] = summarize(results, results["bandwidth"]["best_Bps"], n, args.depth)
        results["wall_s"] = time.perf_counter() - t_start
        results["definitions"] = __doc__
        Path(args.out).write_text(json.dumps(results, indent=1))
        print_table(results)
        print(f"\nJSON: {args.out}   ({results['wall_s'] / 60:.1f} minutes)")
    finally:
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
