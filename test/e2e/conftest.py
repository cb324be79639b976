"""Fixtures for the end-to-end suite: a model host serving stories260K in the Hugging Face hub
layout, and `mpakt serve` coordinators (accounts need approval: no --dev) pointed at it.

Every process is real and listens on loopback; all are stopped at the end of the session.
Set MPAKT_BINARY to test a binary other than build/mpakt.

CTest runs each module as its own entry (test/CMakeLists.txt), so every module starts its own
processes and must pass alone and in any order. Each test has a time limit (a hang fails that
test, by name); a failing test shows what every process logged while it ran.
"""

from __future__ import annotations

import faulthandler
import json
import os
from pathlib import Path
import random
import shutil
import signal
import struct
import sys

import numpy as np
import pytest

import e2e_util
from e2e_util import (STORIES_DIR, Process, Server, binary, read_safetensors_index, start_with_free_port, stop_all,
                      write_safetensors)

ARCH_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "arch"

_processes = []

# A test (setup and teardown included) that runs longer than this fails as hung. A test that
# needs longer says so with @pytest.mark.timeout(seconds).
TEST_TIMEOUT_S = float(os.environ.get("MPAKT_E2E_TEST_TIMEOUT", "180"))


# --------------------------------------------------------------------------- order, time limits, logs


def pytest_addoption(parser):
    parser.addoption("--e2e-order", default="file",
                     help="file (default), reverse, or shuffle[:seed]: run the tests in another order, to show that "
                          "none depends on state an earlier test left")


def pytest_configure(config):
    config.addinivalue_line("markers", "timeout(seconds): this test's time limit, instead of MPAKT_E2E_TEST_TIMEOUT")


def pytest_collection_modifyitems(config, items):
    order = config.getoption("--e2e-order")
    if order == "reverse":
        items.reverse()
    elif order.startswith("shuffle"):
        seed = int(order.partition(":")[2] or random.randrange(1 << 30))
        print(f"e2e: tests shuffled with seed {seed} (--e2e-order shuffle:{seed} repeats it)", file=sys.stderr)
        random.Random(seed).shuffle(items)
    elif order != "file":
        raise pytest.UsageError(f"--e2e-order {order!r}: use file, reverse or shuffle[:seed]")


class HungTest(Exception):
    """A test ran past its time limit."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Arms the test's time limit, and notes where every process's log stands as it starts."""
    marker = item.get_closest_marker("timeout")
    limit = float(marker.args[0]) if marker else TEST_TIMEOUT_S

    def on_alarm(signum, frame):
        raise HungTest(f"{item.nodeid} ran past its {limit:g} s limit (stack above: where it hung)")

    # processes running as the test starts, and how far each had logged; those that ended
    # before are of no interest to it
    item._log_offsets = {id(p): p.log_size() for p in e2e_util.STARTED if p.alive()}
    item._ended_before = {id(p) for p in e2e_util.STARTED if not p.alive()}
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    # Should the exception never surface (a hang outside Python), dump every thread and exit;
    # CTest's per-module timeout is the last resort.
    faulthandler.dump_traceback_later(limit + 30, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed setup, test or teardown shows what each process logged while the test ran."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    offsets = getattr(item, "_log_offsets", {})
    ended_before = getattr(item, "_ended_before", set())
    for p in e2e_util.STARTED:
        if id(p) in ended_before:
            continue
        since = offsets.get(id(p), 0)
        text = p.log_since(since)
        if not text.strip():  # quiet during the test: its last lines still tell what it is
            text = "(nothing logged during this test; the log's last lines:)\n" + p.log_since(0, 1500)
        report.sections.append((f"log of {p.name} ({p.state()}; {p.log_path})", text))


@pytest.fixture(scope="session")
def mpakt_binary():
    b = binary()
    if not b.is_file():
        pytest.fail(f"no mpakt binary at {b}; build it (ninja -C build mpakt) or set MPAKT_BINARY", pytrace=False)
    return b


@pytest.fixture(scope="session", autouse=True)
def _stop_processes_at_exit():
    yield
    stop_all(_processes)


def _split_shards(src, dst_dir):
    """Writes stories260K as an index plus two shards with unconventional names."""
    header, data, _ = read_safetensors_index(src)
    names = sorted(header)
    halves = {"part-a.safetensors": names[: len(names) // 2], "part-b.safetensors": names[len(names) // 2 :]}
    weight_map = {}
    for shard, members in halves.items():
        tensors = {}
        for n in members:
            e = header[n]
            a, b = e["data_offsets"]
            tensors[n] = (e["dtype"], e["shape"], data[a:b])
            weight_map[n] = shard
        write_safetensors(dst_dir / shard, tensors)
    total = len(data)
    (dst_dir / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))


def write_slow_llama(folder):
    """local/slow: a random bf16 Llama of about 77 MB with stories260K's tokenizer, so chat and
    generate take seconds rather than milliseconds (tests of stopping mid-stream)."""
    folder.mkdir(parents=True)
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 768,
           "intermediate_size": 2048, "num_hidden_layers": 6, "num_attention_heads": 12, "num_key_value_heads": 4,
           "head_dim": 64, "vocab_size": 512, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "tie_word_embeddings": True, "hidden_act": "silu"}
    (folder / "config.json").write_text(json.dumps(cfg))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(STORIES_DIR / f, folder / f)
    rng = np.random.default_rng(5)
    h, inter, hd = 768, 2048, 64
    shapes = {"model.embed_tokens.weight": [512, h], "model.norm.weight": [h]}
    for i in range(6):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
                       p + "self_attn.q_proj.weight": [12 * hd, h], p + "self_attn.k_proj.weight": [4 * hd, h],
                       p + "self_attn.v_proj.weight": [4 * hd, h], p + "self_attn.o_proj.weight": [h, 12 * hd],
                       p + "mlp.gate_proj.weight": [inter, h], p + "mlp.up_proj.weight": [inter, h],
                       p + "mlp.down_proj.weight": [h, inter]})
    tensors = {}
    for name, shape in shapes.items():
        a = np.ones(shape, np.float32) if len(shape) == 1 else rng.standard_normal(shape, dtype=np.float32) * np.float32(0.05)
        u = a.view(np.uint32)
        bf16 = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
        tensors[name] = ("BF16", shape, bf16.tobytes())
    write_safetensors(folder / "model.safetensors", tensors)


@pytest.fixture(scope="session")
def hub_dir(tmp_path_factory):
    """A folder in hub layout: local/stories260K (as published), local/sharded (the same
    tensors as an index and two shards), local/int8, local/fp8 and local/gptq (quantised
    checkpoints the loader must refuse). local/slow is added by the slow_model fixture."""
    root = tmp_path_factory.mktemp("hub")
    model = root / "local" / "stories260K"
    model.mkdir(parents=True)
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        if (STORIES_DIR / f).exists():
            shutil.copy(STORIES_DIR / f, model / f)
    # every architecture fixture as hf:arch/<family> (test_architectures.py)
    for d in sorted(ARCH_DIR.iterdir()):
        if (d / "reference.json").exists():
            (root / "arch" / d.name).mkdir(parents=True)
            for f in ("config.json", "model.safetensors"):
                shutil.copy(d / f, root / "arch" / d.name / f)
    # a checkpoint whose config no builder maps
    (root / "arch" / "unmappable").mkdir()
    shutil.copy(ARCH_DIR / "llama2" / "model.safetensors", root / "arch" / "unmappable" / "model.safetensors")
    (root / "arch" / "unmappable" / "config.json").write_text(json.dumps({"model_type": "xyz", "hidden_size": 32}))
    sharded = root / "local" / "sharded"
    sharded.mkdir()
    _split_shards(STORIES_DIR / "model.safetensors", sharded)

    f32 = struct.pack("<4f", 1, 2, 3, 4)
    for name, tensors in {
        "int8": {"layer.weight": ("I8", [4, 4], bytes(16)), "norm.weight": ("F32", [4], f32)},
        "fp8": {"layer.weight": ("F8_E4M3", [4, 4], bytes(16)), "norm.weight": ("F32", [4], f32)},
        "gptq": {"layer.qweight": ("I32", [2, 4], bytes(32)), "layer.scales": ("F16", [1, 4], bytes(8)),
                 "norm.weight": ("F32", [4], f32)},
    }.items():
        d = root / "local" / name
        d.mkdir()
        write_safetensors(d / "model.safetensors", tensors)
    return root


@pytest.fixture(scope="session")
def slow_model(hub_dir):
    """hf:local/slow (write_slow_llama) in the hub: written when a test first asks for it, as
    it takes seconds and only a few modules use it."""
    write_slow_llama(hub_dir / "local" / "slow")
    return "hf:local/slow"


def _start_host(hub_dir, tmp_path_factory, no_range=False):
    logs = tmp_path_factory.mktemp("host-logs")
    extra = ["--no-range"] if no_range else []

    def make(port):
        return Process("mpakt host" + (" --no-range" if no_range else ""),
                       [binary(), "host", hub_dir, "--port", port, *extra], logs / f"host-{port}.log")

    proc, port = start_with_free_port(make, r"mpakt host: serving .* at (http://\S+)")
    _processes.append(proc)
    return f"http://127.0.0.1:{port}"


@pytest.fixture(scope="session")
def host_url(mpakt_binary, hub_dir, tmp_path_factory):
    """Base URL of `mpakt host` serving hub_dir with Range support."""
    return _start_host(hub_dir, tmp_path_factory)


@pytest.fixture(scope="session")
def no_range_host_url(mpakt_binary, hub_dir, tmp_path_factory):
    """Base URL of `mpakt host --no-range` serving the same folder."""
    return _start_host(hub_dir, tmp_path_factory, no_range=True)


@pytest.fixture(scope="session")
def start_server(mpakt_binary, host_url, tmp_path_factory):
    """Starts an extra `mpakt serve` with the given flags (and --hf-endpoint at the host unless
    one is given); it runs until the end of the session."""

    def start(*flags, hf_endpoint=None):
        data = tmp_path_factory.mktemp("serve-data")
        argv_flags = list(flags) + ["--hf-endpoint", hf_endpoint or host_url]

        def make(port):
            return Process("mpakt serve " + " ".join(flags), [binary(), "serve", "--port", port, "--data-dir", data,
                                                               *argv_flags], data / f"serve-{port}.log")

        proc, port = start_with_free_port(make, r"mpakt serve: listening on http://")
        _processes.append(proc)
        return Server(proc, port, data, flags)

    return start


@pytest.fixture(scope="session")
def server(start_server):
    """The main coordinator: default settings, sign-ups need an operator's approval."""
    return start_server()


@pytest.fixture(scope="session")
def stories_config():
    return json.loads((STORIES_DIR / "config.json").read_text())


@pytest.fixture(scope="session")
def stories_golden():
    """{"prompt_ids": [...], "greedy_ids": [...]} — greedy_ids starts with the prompt."""
    return json.loads((STORIES_DIR / "goldens" / "stories260K_once_upon.json").read_text())


@pytest.fixture(scope="session")
def stories_index():
    """The stories260K checkpoint's header (name -> dtype, shape, data_offsets) and data size."""
    header, data, raw = read_safetensors_index(STORIES_DIR / "model.safetensors")
    return {"header": header, "data_bytes": len(data), "file_bytes": len(raw)}
