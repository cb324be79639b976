"""Volunteers on other processes (issue: cluster; checklist POOL-*, DUR-*): `mpakt worker
--join` processes connect to `mpakt serve --cluster-port` over CAF's middleman; the pool counts
them, loads and generation run on them, a volunteer that dies is noticed within seconds, a
session on it fails with an error saying to prefill again, and a volunteer that joins later is
used at once. Real processes on loopback, killed with SIGKILL."""
from __future__ import annotations

import contextlib
import base64
import hashlib
import json
import os
import re
import signal
import socket
import ssl
import struct
import subprocess
import threading
import time

import pytest

from e2e_util import STORIES_DIR, Process, binary, cluster_port, expect

GOLDEN = json.loads((STORIES_DIR / "goldens" / "stories260K_once_upon.json").read_text())


class Cluster:
    def __init__(self, server, cluster_port, logs):
        self.server, self.port, self.logs = server, cluster_port, logs
        self.workers = {}
        self.token = server.volunteer_token()

    def join(self, name, memory="1G", *extra):
        proc = Process(f"mpakt worker {name}", [binary(), "worker", "--join", f"127.0.0.1:{self.port}", "--id", name,
                                                 "--memory", memory, "--threads", "1", "--token", self.token, *self.server.link_args(),
                                                 *extra],
                       self.logs / f"{name}.log")
        proc.start(r"mpakt worker: \S+ joined", timeout=30)
        self.workers[name] = proc
        self.wait_for(lambda s: name in [w["workerId"] for w in s["pool"]], f"{name} in the pool")
        return proc

    def kill(self, name):
        proc = self.workers.pop(name)
        proc.proc.send_signal(signal.SIGKILL)
        proc.proc.wait(timeout=10)

    def stop_all(self):
        """SIGTERM to every volunteer still running (SIGKILL to one that does not stop)."""
        procs = [self.workers.pop(name).proc for name in list(self.workers)]
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:  # a volunteer bounds its own shutdown to 3 s
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()

    def status(self, key):
        return expect(self.server.api.get("/api/v3/status", key=key), 200)

    def wait_for(self, cond, what, timeout=10.0, key=None):
        key = key or self.key
        deadline = time.monotonic() + timeout
        while True:
            s = self.status(key)
            if cond(s):
                return s
            assert time.monotonic() < deadline, f"waited {timeout} s for {what}; status: {s}"
            time.sleep(0.1)


def start_cluster(start_server, tmp_path_factory, name, cls=Cluster, options=(), **server_args):
    """A coordinator with no worker of its own (and `options`; `server_args` go to
    start_server, e.g. hf_endpoint), accepting volunteers, and an account on it."""
    cport = cluster_port()
    server = start_server("--dev", "--workers", "0", "--cluster-port", str(cport), *options, **server_args)
    assert f"mpakt worker --join 127.0.0.1:{cport}" in server.process.output()
    c = cls(server, cport, tmp_path_factory.mktemp(name))
    c.key = server.account(name)[1]
    return c


@pytest.fixture
def cluster(start_server, tmp_path_factory):
    """A coordinator of its own for each test, so that no test depends on what another left."""
    c = start_cluster(start_server, tmp_path_factory, "workers")
    yield c
    c.stop_all()
    c.server.process.terminate()


@pytest.fixture
def pair(cluster):
    """Two volunteers, w_a and w_b, and stories260K loaded on one of them (cluster.model on
    cluster.holder; cluster.loaded is the load's answer)."""
    cluster.join("w_a")
    cluster.join("w_b")
    before = cluster.status(cluster.key)
    cluster.loaded = expect(cluster.server.api.post("/api/v3/models", {"source": "hf:local/stories260K"},
                                                    key=cluster.key, timeout=60), 200)
    cluster.model = cluster.loaded["modelId"]
    cluster.holder = holder(cluster.status(cluster.key), before)
    return cluster


def graph_cli(*args):
    out = subprocess.run([str(binary()), "graph", str(STORIES_DIR / "config.json"), *args], capture_output=True,
                         text=True, timeout=30, check=True)
    return json.loads(out.stdout)


def holder(status, before):
    """The worker whose free bytes dropped since `before` (a status)."""
    was = {w["workerId"]: w["freeBytes"] for w in before["pool"]}
    dropped = [w["workerId"] for w in status["pool"] if w["freeBytes"] < was.get(w["workerId"], 0)]
    assert len(dropped) == 1, (before["pool"], status["pool"])
    return dropped[0]


def decode_golden(api, key, model):
    """Caches, the prompt and 20 greedy steps through a compiled graph: the golden ids."""
    sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
    expect(api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", "64"), session=sid)}, key=key), 200)
    g = expect(api.post("/api/v3/graphs", {"graph": graph_cli("--model-id", model, "--compiled", "--tokens", "1",
                                                              "--cache", "64", "--argmax")}, key=key), 200)["graphId"]
    prompt = GOLDEN["prompt_ids"]
    for pos, tok in enumerate(prompt[:-1]):
        expect(api.post("/api/v3/graph", {"graphId": g, "session": sid, "bind": {"ids": [tok], "pos": pos}}, key=key), 200)
    n = len(GOLDEN["greedy_ids"]) - len(prompt)
    r = expect(api.post("/api/v3/generate", {"graphId": g, "sessionId": sid, "ids": [prompt[-1]],
                                             "startPos": len(prompt) - 1, "maxNewTokens": n, "stream": False},
                        key=key, timeout=60), 200)
    assert prompt + r["tokens"] == GOLDEN["greedy_ids"]
    return sid, g


def test_volunteers_join_and_are_counted(cluster):
    assert cluster.status(cluster.key)["workers"] == 0
    cluster.join("w_a")
    cluster.join("w_b")
    s = cluster.status(cluster.key)
    assert s["workers"] == 2 and s["backends"]["cpu"] == 2
    assert sorted(w["workerId"] for w in s["pool"]) == ["w_a", "w_b"]
    assert s["totalBytes"] == 2 * (1 << 30)


def test_load_generate_and_chat_on_volunteers(pair):
    api, key, model, where = pair.server.api, pair.key, pair.model, pair.holder
    assert where in ("w_a", "w_b")
    # the placement is shown: in the load response, the model list and the status's pool
    assert [p["workerId"] for p in pair.loaded["placement"]] == [where]
    assert pair.loaded["placement"][0]["residentBytes"] == pair.loaded["residentBytes"]
    listed = [m for m in expect(api.get("/api/v3/models", key=key), 200)["models"] if m["modelId"] == model][0]
    assert [p["workerId"] for p in listed["placement"]] == [where]
    pool = {w["workerId"]: w for w in pair.status(key)["pool"]}
    assert pool[where]["models"] == [model] and model not in pool[({"w_a", "w_b"} - {where}).pop()]["models"]
    decode_golden(api, key, model)
    r = expect(api.post("/api/v3/chat", {"model": model, "messages": [{"role": "user", "content": "Once upon a time"}],
                                         "maxTokens": 20, "temperature": 0, "stream": False}, key=key, timeout=60), 200)
    assert r["ok"] and r["usage"]["completionTokens"] == 20


def test_a_volunteers_weights_travel_on_its_data_connection(pair):
    """The bytes of a volunteer's weights go on its data connection (actors/data_link.hpp), not
    inside the cluster link's messages: the status counts them there, and the weights that came
    that way (through the spot-checks' stand-in, which hashes them as they pass) decode the
    golden tokens."""
    out = pair.server.process.output()
    assert re.search(r"data port: +\d+ ", out), out[-2000:]
    assert "volunteer dev: data connection up" in out
    sent = pair.loaded["bytesTransferred"]
    s = pair.wait_for(lambda s: {w["workerId"]: w for w in s["pool"]}[pair.holder]["dataLink"]["bytes"] >= sent,
                      "the holder's data connection to count the model's bytes", key=pair.key)
    pool = {w["workerId"]: w for w in s["pool"]}
    other = ({"w_a", "w_b"} - {pair.holder}).pop()
    assert pool[pair.holder]["dataLink"] == {"state": "up", "bytes": sent}
    assert pool[other]["dataLink"] == {"state": "up", "bytes": 0}
    decode_golden(pair.server.api, pair.key, pair.model)


def test_a_volunteer_that_cannot_reach_the_data_port_is_admitted_and_loads_over_the_link(cluster):
    cluster.join("w_a", "1G", "--fault", "no-data-link")
    out = cluster.server.process.output()
    assert "volunteer dev has no data connection (cannot connect to the data port" in out, out[-2000:]
    r = expect(cluster.server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=cluster.key, timeout=60), 200)
    [w] = cluster.status(cluster.key)["pool"]
    assert w["dataLink"]["state"].startswith("closed: not opened: cannot connect to the data port"), w["dataLink"]
    assert w["dataLink"]["bytes"] == 0
    decode_golden(cluster.server.api, cluster.key, r["modelId"])


def test_with_the_data_port_off_weights_travel_over_the_cluster_link(start_server, tmp_path_factory):
    c = start_cluster(start_server, tmp_path_factory, "nodata", options=("--data-port", "off"))
    try:
        assert "data port:" not in c.server.process.output()
        c.join("w_a")
        r = expect(c.server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=c.key, timeout=60), 200)
        assert [w["dataLink"] for w in c.status(c.key)["pool"]] == [None]
        decode_golden(c.server.api, c.key, r["modelId"])
    finally:
        c.stop_all()
        c.server.process.terminate()


NO_CHECKS = ("--verify-fraction", "0", "--verify-first", "0")


def chat_text(c, model):
    r = expect(c.server.api.post("/api/v3/chat", {"model": model, "messages": [{"role": "user", "content": "Once upon a time"}],
                                                  "maxTokens": 24, "temperature": 0, "stream": False}, key=c.key, timeout=60), 200)
    assert r["ok"] and r["usage"]["completionTokens"] > 0
    return r["text"]


def test_a_volunteer_reads_its_weights_from_the_model_host_itself_where_it_may(start_server, tmp_path_factory):
    """LOAD-22 (weights stream from the model host straight to the volunteers;
    actors/loader/host_fetch.hpp): a volunteer that is not spot-checked and may read the host's
    address (`--host-fetch any`: the host is on loopback here) proves it reads the same file
    there and then fetches every range itself — its data connection carries no byte, the load
    still reports the published bytes, and the weights decode the golden tokens. A volunteer
    that may read public addresses only (the default) gets the same model through the
    coordinator; so does everyone with `serve --worker-fetch off`."""
    c = start_cluster(start_server, tmp_path_factory, "hostfetch", options=NO_CHECKS)
    try:
        w = c.join("w_a", "1G", "--host-fetch", "any")
        r = expect(c.server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=c.key, timeout=60), 200)
        [st] = c.status(c.key)["pool"]
        assert st["dataLink"] == {"state": "up", "bytes": 0}, st["dataLink"]
        assert r["coordinatorPeakBytes"] == 0  # (no weight byte was ever in the coordinator)
        assert r["bytesTransferred"] == expect(c.server.api.get("/api/v3/models/inspect?source=hf:local/stories260K",
                                                                  key=c.key), 200)["totalBytes"]
        assert "from the model host itself" in w.output()
        decode_golden(c.server.api, c.key, r["modelId"])
        # quantized as the ranges arrive (whole rows converted on the fetch threads): the same answer as
        # the same load relayed (QNT-09: the conversion does not depend on the way the bytes came)
        q8 = expect(c.server.api.post("/api/v3/models", {"source": "hf:local/stories260K", "quantize": "q8"},
                                      key=c.key, timeout=60), 200)
        assert q8["quantize"] == "q8" and q8["bytesTransferred"] == r["bytesTransferred"]
        assert c.status(c.key)["pool"][0]["dataLink"]["bytes"] == 0
        fetched = chat_text(c, q8["modelId"])
        q4 = expect(c.server.api.post("/api/v3/models", {"source": "hf:local/stories260K", "quantize": "q4"},
                                      key=c.key, timeout=60), 200)
        assert q4["quantize"] == "q4" and c.status(c.key)["pool"][0]["dataLink"]["bytes"] == 0
        fetched_q4 = chat_text(c, q4["modelId"])
        for m in (r, q8, q4):  # (a key holds four models at most)
            expect(c.server.api.delete(f"/api/v3/models/{m['modelId']}", key=c.key), 200)
        c.stop_all()
        # public addresses only: the probe is refused there, and the bytes come through here
        w = c.join("w_b", "1G")
        r = expect(c.server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=c.key, timeout=60), 200)
        s = c.wait_for(lambda s: s["pool"][0]["dataLink"]["bytes"] >= r["bytesTransferred"], "the relayed bytes")
        assert s["pool"][0]["dataLink"] == {"state": "up", "bytes": r["bytesTransferred"]}
        assert "from the model host itself" not in w.output()
        decode_golden(c.server.api, c.key, r["modelId"])
        q8 = expect(c.server.api.post("/api/v3/models", {"source": "hf:local/stories260K", "quantize": "q8"},
                                      key=c.key, timeout=60), 200)
        assert chat_text(c, q8["modelId"]) == fetched
        q4 = expect(c.server.api.post("/api/v3/models", {"source": "hf:local/stories260K", "quantize": "q4"},
                                      key=c.key, timeout=60), 200)
        assert chat_text(c, q4["modelId"]) == fetched_q4
    finally:
        c.stop_all()
        c.server.process.terminate()
    c = start_cluster(start_server, tmp_path_factory, "hostfetchoff", options=(*NO_CHECKS, "--worker-fetch", "off"))
    try:
        w = c.join("w_a", "1G", "--host-fetch", "any")
        r = expect(c.server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=c.key, timeout=60), 200)
        c.wait_for(lambda s: s["pool"][0]["dataLink"]["bytes"] == r["bytesTransferred"], "the relayed bytes")
        assert "from the model host itself" not in w.output()
    finally:
        c.stop_all()
        c.server.process.terminate()


class CuttingProxy:
    """A TCP proxy in front of the model host that drops connections: in the answers to the
    first `times` requests for the first data range asked for (not a file's start, at least
    64 KB long), after `cut_after` bytes of each answer have passed. Records every range asked
    for."""

    def __init__(self, upstream_url, cut_after=32 * 1024, times=1):
        self.upstream = int(upstream_url.rsplit(":", 1)[1])
        self.cut_after = cut_after
        self.lock = threading.Lock()
        self.target, self.left, self.cuts, self.ranges = None, times, 0, []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        upstream = socket.create_connection(("127.0.0.1", self.upstream))
        cut = threading.Event()

        def close_both():
            for s in (client, upstream):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        def to_host():
            while data := client.recv(65536):
                for first, last in re.findall(rb"[Rr]ange: bytes=(\d+)-(\d+)", data):
                    first, last = int(first), int(last)
                    with self.lock:
                        self.ranges.append((first, last))
                        if self.target is None and first > 0 and last - first >= 65536:
                            self.target = (first, last)
                        if (first, last) == self.target and self.left > 0:
                            self.left -= 1
                            cut.set()
                upstream.sendall(data)

        def to_client():
            passed = 0
            while data := upstream.recv(65536):
                if cut.is_set():
                    if passed + len(data) >= self.cut_after:
                        client.sendall(data[:self.cut_after - passed])
                        with self.lock:
                            self.cuts += 1
                        close_both()
                        return
                    passed += len(data)
                client.sendall(data)

        threads = [threading.Thread(target=f, daemon=True) for f in (to_host, to_client)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        close_both()
        client.close()
        upstream.close()

    def close(self):
        self.listener.close()


@contextlib.contextmanager
def volunteer_behind_cuts(start_server, tmp_path_factory, host_url, times):
    """A coordinator whose --hf-endpoint is a CuttingProxy(times) in front of the model host,
    and one volunteer that reads its weights from that host itself (w_a, --host-fetch any).
    Yields (cluster, volunteer, proxy)."""
    proxy = CuttingProxy(host_url, times=times)
    c = start_cluster(start_server, tmp_path_factory, "hostcut", options=NO_CHECKS, hf_endpoint=proxy.url)
    try:
        yield c, c.join("w_a", "1G", "--host-fetch", "any"), proxy
        c.server.assert_up()
    finally:
        c.stop_all()
        c.server.process.terminate()
        proxy.close()


def test_a_volunteer_reading_the_model_host_asks_again_for_a_range_the_host_dropped(start_server, tmp_path_factory,
                                                                                     host_url):
    """A volunteer that reads its weights from the model host itself, and loses the connection
    in the middle of a range's answer, asks for that range again and the load goes on (a
    dropped answer is the grid's trouble, not a bad source: actors/loader/reader.hpp,
    every_host_transient) — where before its first such cut failed the whole load as "cannot
    reach source". The coordinator's --hf-endpoint is a proxy that cuts one data range."""
    with volunteer_behind_cuts(start_server, tmp_path_factory, host_url, times=1) as (c, w, proxy):
        r = expect(c.server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=c.key, timeout=60), 200)
        assert "from the model host itself" in w.output()
        assert c.status(c.key)["pool"][0]["dataLink"]["bytes"] == 0  # (nothing was relayed)
        assert proxy.cuts == 1, proxy.ranges
        assert proxy.ranges.count(proxy.target) == 2, proxy.ranges  # asked for again, once
        decode_golden(c.server.api, c.key, r["modelId"])


def test_a_range_a_volunteer_cannot_read_from_the_model_host_is_relayed_instead(start_server, tmp_path_factory,
                                                                               host_url):
    """A volunteer reading its weights from the model host whose range fails every time it
    asks (its first try and both retries cut) does not fail the load: the coordinator has
    every request answered, the volunteer drops what it got, and loads the model again through
    itself (actors/coordinator/load_job.cpp) — the golden tokens decode, the bytes crossed the
    cluster link. Before, the load failed with the host's error (503, "reading the body
    failed: partial message")."""
    with volunteer_behind_cuts(start_server, tmp_path_factory, host_url, times=3) as (c, w, proxy):
        r = expect(c.server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=c.key, timeout=90), 200)
        assert "from the model host itself" in w.output()
        assert proxy.cuts == 3, proxy.ranges
        assert proxy.ranges.count(proxy.target) == 4, proxy.ranges  # three by the volunteer, then the relay's
        assert "loading it again through the coordinator" in c.server.process.output()
        c.wait_for(lambda s: s["pool"][0]["dataLink"]["bytes"] == r["bytesTransferred"], "the relayed bytes")
        decode_golden(c.server.api, c.key, r["modelId"])


def test_a_spot_checked_volunteer_reads_its_weights_itself_beside_its_verifier(cluster):
    """A spot-checked volunteer that may read the model host reads its weights there, as its
    verifier in the coordinator does: its data connection carries none of them, and each is
    checked on arrival against the verifier's copy (docs/decisions.md, "Loading")."""
    w = cluster.join("w_a", "1G", "--host-fetch", "any")
    r = expect(cluster.server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=cluster.key, timeout=60), 200)
    assert r["coordinatorPeakBytes"] == 0, r
    checks = cluster.wait_for(lambda s: (s["pool"][0]["checks"] or {}).get("weightsChecked", 0) > 0, "weights checked")
    assert checks["pool"][0]["dataLink"]["bytes"] == 0, checks["pool"][0]
    assert checks["pool"][0]["checks"]["weightsUnchecked"] == 0, checks["pool"][0]["checks"]


def test_a_volunteer_that_dies_is_noticed_and_others_keep_serving(pair):
    api, key = pair.server.api, pair.key
    other = "w_b" if pair.holder == "w_a" else "w_a"
    t0 = time.monotonic()
    pair.kill(other)
    pair.wait_for(lambda s: s["workers"] == 1, "the dead volunteer to leave the pool", timeout=8)
    assert time.monotonic() - t0 < 8
    decode_golden(api, key, pair.model)  # the model's worker is untouched
    pair.server.assert_up()


def test_a_session_on_a_dead_volunteer_says_to_prefill_again(pair):
    api, key = pair.server.api, pair.key
    sid, graph = decode_golden(api, key, pair.model)
    pair.kill(pair.holder)
    pair.wait_for(lambda s: s["workers"] == 1, "the dead volunteer to leave the pool", timeout=8)
    r = api.post("/api/v3/graph", {"graphId": graph, "session": sid, "bind": {"ids": [1], "pos": 5}}, key=key, timeout=30)
    expect(r, 503, sid, "prefill")
    pair.server.assert_up()


def test_a_volunteer_that_joins_later_is_used_at_once(cluster):
    api, key = cluster.server.api, cluster.key
    cluster.join("w_a")
    cluster.kill("w_a")
    cluster.wait_for(lambda s: s["workers"] == 0, "the pool to empty", timeout=8)
    cluster.join("w_c", "512M")
    s = cluster.status(key)
    assert s["workers"] == 1 and s["freeBytes"] > 0
    model = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=key, timeout=60), 200)["modelId"]
    decode_golden(api, key, model)


def test_a_volunteer_too_small_for_a_tensor_is_never_given_it(cluster, slow_model):
    """Placement goes by free memory: a 77 MB model lands on the volunteer that can hold it,
    never on one offering 1 MB."""
    api, key = cluster.server.api, cluster.key
    cluster.join("w_c", "512M")
    cluster.join("w_tiny", "1M")
    expect(api.post("/api/v3/models", {"source": slow_model}, key=key, timeout=60), 200)
    pool = {w["workerId"]: w for w in cluster.status(key)["pool"]}
    assert pool["w_tiny"]["freeBytes"] == pool["w_tiny"]["totalBytes"]
    assert pool["w_c"]["freeBytes"] < pool["w_c"]["totalBytes"] - 70_000_000


def test_a_legacy_volunteer_sets_the_pools_widen_factor(cluster):
    api = cluster.server.api
    cluster.join("w_c", "512M")
    before = expect(api.get("/api/versions"), 200)["limits"]["widenFactor"]
    cluster.join("w_old", "256M", "--legacy")
    after = expect(api.get("/api/versions"), 200)["limits"]["widenFactor"]
    assert before["bf16"] == 1 and after["bf16"] == 2
    cluster.kill("w_old")
    cluster.wait_for(lambda s: "w_old" not in [w["workerId"] for w in s["pool"]], "w_old to leave")
    assert expect(api.get("/api/versions"), 200)["limits"]["widenFactor"]["bf16"] == 1


def penalised_sample_graph():
    """A graph with no model or session (any worker may run it) that uses the sample op's
    penalty feature: sample.penalty."""
    return {"inputs": [{"name": "hist", "shape": [3], "data": [1, 2, -1]}],
            "steps": [{"op": "zeros", "in": [], "out": "l", "params": {"shape": [1, 4]}},
                      {"op": "sample", "in": ["l", "hist"], "out": "tok", "params": {"repetitionPenalty": 1.3}}],
            "outputs": ["tok"]}


def test_a_volunteer_lacking_a_feature_is_never_given_a_graph_using_it(start_server, tmp_path_factory):
    """Routing by capability: a volunteer that leaves out sample.penalty (like an older
    program) never receives a graph using it, even with the most free memory; with no other
    volunteer the graph is refused naming the feature."""
    c = start_cluster(start_server, tmp_path_factory, "capability")
    server = c.server
    try:
        c.join("w_old", "2G", "--without", "sample.penalty")
        status = c.status(c.key)
        assert "sample.penalty" not in status["features"]
        api = server.api
        r = api.post("/api/v3/graph", {"graph": penalised_sample_graph()}, key=c.key)
        expect(r, 503, "sample.penalty")
        # a plain graph still runs on it
        plain = {"steps": [{"op": "zeros", "in": [], "out": "z", "params": {"shape": [2]}}], "outputs": ["z"]}
        expect(api.post("/api/v3/graph", {"graph": plain}, key=c.key), 200)
        c.join("w_new", "256M")
        assert "sample.penalty" not in c.status(c.key)["features"]  # the pool-wide set: w_old still lacks it
        for _ in range(5):  # w_old has far more free memory, yet never gets it
            expect(api.post("/api/v3/graph", {"graph": penalised_sample_graph()}, key=c.key), 200)
    finally:
        c.stop_all()


def test_placement_ranks_volunteers_by_measured_time(start_server, tmp_path_factory, slow_model):
    """The pool times a probe call on every volunteer (end to end: the link, the queue, the
    machine) and places on the clearly faster one even when a slower one has more free memory;
    memory still decides what fits. A volunteer started with --delay-ms answers every call late,
    as a distant or slow one would."""
    c = start_cluster(start_server, tmp_path_factory, "ranking")
    server = c.server
    try:
        c.join("w_slow", "2G", "--delay-ms", "60")
        c.join("w_fast", "64M")
        s = c.wait_for(lambda s: all(w["measuredMs"] for w in s["pool"]), "both volunteers measured")
        measured = {w["workerId"]: w["measuredMs"] for w in s["pool"]}
        assert measured["w_slow"] >= 60 > measured["w_fast"], measured
        api = server.api
        loaded = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=c.key, timeout=60), 200)
        assert [p["workerId"] for p in loaded["placement"]] == ["w_fast"]  # though w_slow has 30x the room
        decode_golden(api, c.key, loaded["modelId"])
        # 77 MB fit only on the slow one: memory comes first
        big = expect(api.post("/api/v3/models", {"source": slow_model}, key=c.key, timeout=60), 200)
        assert [p["workerId"] for p in big["placement"]] == ["w_slow"]
    finally:
        c.stop_all()


def gpu_present():
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not gpu_present(), reason="no GPU on this machine")
def test_a_volunteer_with_a_gpu_reports_cuda_and_decodes_the_golden_tokens(start_server, tmp_path_factory):
    """Where a usable GPU exists (and the build has CUDA), `mpakt worker` computes on it: the
    pool counts it under backends.cuda, and its decode equals transformers' tokens (steps the
    GPU path lacks run on the CPU reference kernels). --cpu keeps a volunteer on the CPU."""
    c = start_cluster(start_server, tmp_path_factory, "gpu")
    server = c.server
    try:
        proc = c.join("w_gpu", "2G")
        if "computes on: cuda" not in proc.output():
            pytest.skip("no usable GPU here (or a build without CUDA)")
        s = c.status(c.key)
        assert s["backends"].get("cuda") == 1 and s["pool"][0]["backend"] == "cuda"
        # what it leaves to the CPU is declared: ops of the catalogue (moe among them today)
        host_ops = s["pool"][0]["hostOps"]
        assert host_ops == sorted(host_ops) and set(host_ops) < set(o["op"] for o in expect(server.api.get("/api/ops"), 200)["ops"])
        model = expect(server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=c.key, timeout=60),
                       200)["modelId"]
        decode_golden(server.api, c.key, model)
        # the spot-checks compare its passes with the verifier's CPU kernels within the tolerance
        # between paths, never bit for bit, even where its host CPU runs the verifier's level
        s = c.status(c.key)
        assert s["pool"][0]["checks"]["exact"] is False and s["quarantined"] == [], (s["pool"][0]["checks"], s["quarantined"])
        c.join("w_cpu", "2G", "--cpu")
        assert c.status(c.key)["backends"]["cpu"] == 1
    finally:
        c.stop_all()


def test_backend_asked_for_is_the_backend_given_or_the_program_says_why(start_server, tmp_path_factory):
    """`--backend cuda` computes on the GPU or not at all: without a usable one (no GPU, no
    driver, or a build without CUDA) the volunteer and `mpakt serve` exit with status 6 naming
    why, in CUDA's words. `auto` (a volunteer's default) falls back to the CPU and says so in its
    banner and in the pool's status (backendNote); `cpu` is the CPU with no note. Where a GPU is
    usable, cuda and auto both count under backends.cuda."""
    c = start_cluster(start_server, tmp_path_factory, "backends")
    try:
        probe = subprocess.Popen([str(binary()), "worker", "--join", f"127.0.0.1:{c.port}", "--id", "w_cuda", "--memory",
                                  "256M", "--threads", "1", "--token", c.token, *c.server.link_args(), "--backend", "cuda"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            rc = probe.wait(timeout=15)
        except subprocess.TimeoutExpired:
            rc = None  # joined: it runs until stopped
        if rc is None:
            # a usable GPU: the volunteer computes there, and auto takes it too
            probe.send_signal(signal.SIGTERM)
            probe.wait(timeout=10)
            auto = c.join("w_auto", "256M")
            assert "computes on: cuda (GPU " in auto.output()
            s = c.status(c.key)
            entry = next(w for w in s["pool"] if w["workerId"] == "w_auto")
            assert entry["backend"] == "cuda" and entry["backendNote"] is None
            return
        out = probe.stdout.read()
        assert rc == 6, out
        assert "--backend cuda: no usable CUDA device: " in out or "has no CUDA backend" in out, out
        assert "not starting" in out and "w_cuda" not in [w["workerId"] for w in c.status(c.key)["pool"]]
        reason = out.split("--backend cuda: ", 1)[1].split("; not starting", 1)[0]

        auto = c.join("w_auto", "256M")  # (no --backend: auto)
        assert f"computes on: cpu (auto: {reason})" in auto.output()
        c.join("w_cpu", "256M", "--backend", "cpu")
        s = c.status(c.key)
        notes = {w["workerId"]: (w["backend"], w["backendNote"]) for w in s["pool"]}
        assert notes == {"w_auto": ("cpu", "auto: " + reason), "w_cpu": ("cpu", None)}, notes
        assert all(w["hostOps"] == [] for w in s["pool"])  # a CPU worker runs every op itself
        assert s["backends"]["cpu"] == 2 and s["backends"].get("cuda", 0) == 0

        bad = subprocess.run([str(binary()), "worker", "--join", f"127.0.0.1:{c.port}", "--backend", "gpu"],
                             capture_output=True, text=True, timeout=10)
        assert bad.returncode == 2 and "--backend takes cpu, cuda or auto" in bad.stderr

        # mpakt serve: the same choice for its embedded workers (default cpu)
        served = subprocess.run([str(binary()), "serve", "--port", "0", "--data-dir", str(tmp_path_factory.mktemp("s6")),
                                 "--backend", "cuda"], capture_output=True, text=True, timeout=30)
        assert served.returncode == 6 and f"--backend cuda: {reason}; not starting" in served.stderr, served.stderr
        auto_server = start_server("--dev", "--workers", "2", "--backend", "auto")
        banner = auto_server.process.output()
        assert f"worker w_local0 computes on: cpu (auto: {reason})" in banner
        assert f"worker w_local1 computes on: cpu (auto: {reason})" in banner
        key = auto_server.account("backends")[1]
        pool = expect(auto_server.api.get("/api/v3/status", key=key), 200)["pool"]
        assert sorted((w["workerId"], w["backendNote"]) for w in pool) == [("w_local0", "auto: " + reason),
                                                                           ("w_local1", "auto: " + reason)]
        auto_server.process.terminate()
    finally:
        c.stop_all()


# ---- join tokens (issue: volunteers the grid can trust) ----

def run_volunteer(cluster, *token_args, name="w_x", timeout=30, link=None):
    """A volunteer that should be refused: its exit status and what it printed. It trusts the
    coordinator's certificate unless `link` says otherwise."""
    link = cluster.server.link_args() if link is None else link
    r = subprocess.run([str(binary()), "worker", "--join", f"127.0.0.1:{cluster.port}", "--id", name, "--memory", "256M",
                        "--threads", "1", *token_args, *link], capture_output=True, text=True, timeout=timeout,
                       env={k: v for k, v in os.environ.items() if k != "MPAKT_VOLUNTEER_TOKEN"})
    return r.returncode, r.stdout + r.stderr


def test_a_volunteer_without_a_valid_token_is_refused_before_it_joins(cluster):
    """No token, a wrong one, a revoked one, an expired one: each volunteer exits with status 4
    naming why, the coordinator logs the refusal, and the pool never sees the worker (so no
    weight or session reaches it)."""
    server = cluster.server
    rc, out = run_volunteer(cluster)
    assert rc == 4 and "no --token" in out, out
    rc, out = run_volunteer(cluster, "--token", "mpv_" + "A" * 43)
    assert rc == 4 and "invalid volunteer token" in out, out
    rc, out = run_volunteer(cluster, "--token", "not even the shape of a token")
    assert rc == 4 and "invalid volunteer token" in out, out
    made = server.admin("volunteer-token", "bob-box")
    assert made.returncode == 0, made.stderr
    revoked = made.stdout.strip().splitlines()[0]
    assert server.admin("revoke-volunteer", "bob-box").returncode == 0
    rc, out = run_volunteer(cluster, "--token", revoked)
    assert rc == 4 and "bob-box was revoked" in out, out
    made = server.admin("volunteer-token", "carol-box", "--expires", "0.00001")  # under a second
    assert made.returncode == 0, made.stderr
    time.sleep(1.5)
    rc, out = run_volunteer(cluster, "--token", made.stdout.strip().splitlines()[0])
    assert rc == 4 and "carol-box expired" in out, out
    s = cluster.status(cluster.key)
    assert s["workers"] == 0 and s["pool"] == []
    log = server.process.output()
    assert log.count("refused a volunteer from 127.0.0.1") == 5, log[-2000:]
    listed = server.admin("volunteer-tokens").stdout
    assert "bob-box" in listed and "revoked" in listed and "carol-box" in listed and "expired" in listed
    assert "mpv_" not in listed  # tokens are kept hashed and never shown again
    server.assert_up()


def test_a_token_holder_joins_within_its_cap_and_is_disconnected_when_revoked(cluster):
    """A volunteer with a token of its own joins, offers no more than the token's memory cap,
    runs the golden decode; revoking the token disconnects it within seconds (exit status 4)
    and the pool drops it, while a volunteer with another token keeps serving."""
    server, api, key = cluster.server, cluster.server.api, cluster.key
    made = server.admin("volunteer-token", "dana-box", "--memory-cap", "300M")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[0]
    assert token.startswith("mpv_")
    proc = Process("mpakt worker w_dana", [binary(), "worker", "--join", f"127.0.0.1:{cluster.port}", "--id", "w_dana",
                                            "--memory", "1G", "--threads", "1", "--token", token, *server.link_args()],
                   cluster.logs / "w_dana.log")
    proc.start(r"mpakt worker: \S+ joined .* as volunteer dana-box", timeout=30)
    s = cluster.wait_for(lambda s: s["workers"] == 1, "w_dana in the pool")
    assert s["pool"][0]["workerId"] == "w_dana" and s["pool"][0]["totalBytes"] == 300 * (1 << 20)
    model = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=key, timeout=60), 200)["modelId"]
    sid, g = decode_golden(api, key, model)
    expect(api.post(f"/api/v3/sessions/{sid}/checkpoint", {}, key=key), 200)
    steps = expect(api.get(f"/api/v3/sessions/{sid}", key=key), 200)["steps"]
    cluster.join("w_other")
    t0 = time.monotonic()
    assert server.admin("revoke-volunteer", "dana-box").returncode == 0
    assert proc.proc.wait(timeout=15) == 4
    assert time.monotonic() - t0 < 10
    assert "disconnected this volunteer" in proc.output()
    cluster.wait_for(lambda s: [w["workerId"] for w in s["pool"]] == ["w_other"], "the revoked volunteer to leave")
    assert "disconnecting volunteer dana-box" in server.process.output()
    # its checkpointed session is restored on the other volunteer, as for any lost worker
    greedy = GOLDEN["greedy_ids"]
    r = expect(api.post("/api/v3/graph", {"graphId": g, "session": sid, "bind": {"ids": [greedy[-1]], "pos": len(greedy) - 1}},
                        key=key, timeout=60), 200)
    assert r["outputs"], r
    assert expect(api.get(f"/api/v3/sessions/{sid}", key=key), 200)["steps"] == steps + 1
    model = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=key, timeout=60), 200)["modelId"]
    decode_golden(api, key, model)
    server.assert_up()


# ---- the link: TLS (issue: volunteers the grid can trust) ----

def presented_certificate(port):
    """The DER certificate the cluster port presents to a TLS client (no verification here),
    and what the port says after the handshake to a client without a certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, ctx.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
        try:
            after = tls.recv(4096)
        except (ssl.SSLError, OSError) as e:
            after = repr(e)
    return der, after


def test_the_cluster_port_speaks_tls_with_the_certificate_its_banner_names(cluster):
    """The cluster port presents the certificate in the data folder, whose SHA-256 the banner
    prints; a client without the volunteers' link certificate is dropped after the handshake;
    plain bytes get no answer but a TLS alert; a volunteer pinning another fingerprint, or none,
    is refused before it sends anything (exit 5, 2); the coordinator stays up, nobody else
    joins, and the volunteer already joined keeps its link and decodes. (A failed handshake
    used to leave an OpenSSL error behind that dropped every other volunteer's link:
    app/ssl_error_queue.cpp.)"""
    server, key = cluster.server, cluster.key
    fp = server.coordinator_fingerprint()
    cluster.join("w_tls")
    der, after = presented_certificate(cluster.port)
    assert hashlib.sha256(der).hexdigest() == fp
    pem = (server.data_dir / "cluster" / "coordinator.pem").read_text()
    assert ssl.PEM_cert_to_DER_cert(pem) == der
    assert (server.data_dir / "cluster" / "coordinator.key").stat().st_mode & 0o077 == 0
    assert after in (b"",) or "CERTIFICATE_REQUIRED" in str(after).upper() or "EOF" in str(after).upper(), after
    # A plain CAF client waits for the server's BASP handshake, which a CAF port without TLS
    # sends at once on accepting: this port sends nothing before a TLS ClientHello.
    with socket.create_connection(("127.0.0.1", cluster.port), timeout=10) as sock:
        sock.settimeout(1.5)
        with pytest.raises(socket.timeout):
            sock.recv(64)
    for payload in (b"\x00" * 64, b"GET / HTTP/1.1\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", cluster.port), timeout=10) as sock:
            sock.sendall(payload)
            try:
                got = sock.recv(4096)
            except OSError:
                got = b""
            assert got == b"" or got[0] == 0x15, got  # nothing, or a TLS alert record
    rc, out = run_volunteer(cluster, "--token", cluster.token, link=["--coordinator-fingerprint", "AB:" * 31 + "AB"])
    assert rc == 5 and f"fingerprint {fp}, not the pinned {'ab' * 32}" in out, out
    rc, out = run_volunteer(cluster, "--token", cluster.token, link=[])
    assert rc == 2 and "--coordinator-fingerprint" in out, out
    rc, out = run_volunteer(cluster, "--token", cluster.token, link=["--coordinator-fingerprint", "12"])
    assert rc == 2 and "64 hex digits" in out, out
    server.assert_up()
    st = cluster.status(key)
    assert [w["workerId"] for w in st["pool"]] == ["w_tls"], st
    assert cluster.workers["w_tls"].alive()
    model = expect(server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=key, timeout=60), 200)
    assert model["bytesTransferred"] > 0
    decode_golden(server.api, key, model["modelId"])


def openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r


def test_a_volunteer_may_trust_a_ca_for_a_coordinator_certificate_it_issued(start_server, tmp_path_factory):
    """`mpakt serve --cluster-cert/--cluster-key` with a certificate from the operator's CA,
    issued for coordinator.grid.test and 127.0.0.1: a volunteer with `--ca` of that CA joins
    127.0.0.1; one trusting another CA does not, nor one joining by a name the certificate was
    not issued for (localhost), which exits 5 saying so before anything of its own travels."""
    d = tmp_path_factory.mktemp("grid-ca")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "30", "-subj", "/CN=test grid CA", cwd=d)
    openssl("req", "-x509", *ec, "-keyout", "other.key", "-out", "other.pem", "-days", "30", "-subj", "/CN=other CA", cwd=d)
    openssl("req", *ec, "-keyout", "coord.key", "-out", "coord.csr", "-subj", "/CN=coordinator.grid.test", cwd=d)
    (d / "san.ext").write_text("subjectAltName=DNS:coordinator.grid.test,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "coord.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "coord.pem",
            "-days", "30", "-extfile", "san.ext", cwd=d)
    cport = cluster_port()
    server = start_server("--dev", "--workers", "0", "--cluster-port", str(cport), "--cluster-cert", str(d / "coord.pem"),
                          "--cluster-key", str(d / "coord.key"))
    c = Cluster(server, cport, tmp_path_factory.mktemp("ca-logs"))
    c.key = server.account("calink")[1]
    try:
        der = ssl.PEM_cert_to_DER_cert((d / "coord.pem").read_text())
        assert server.coordinator_fingerprint() == hashlib.sha256(der).hexdigest()
        rc, out = run_volunteer(c, "--token", c.token, link=["--ca", str(d / "other.pem")], timeout=60)
        assert rc == 5 and "not issued by a CA of --ca" in out and "joined" not in out, out
        named = subprocess.run([str(binary()), "worker", "--join", f"localhost:{cport}", "--id", "w_name", "--memory", "256M",
                                "--threads", "1", "--token", c.token, "--ca", str(d / "ca.pem")], capture_output=True,
                               text=True, timeout=60)
        out = named.stdout + named.stderr
        assert named.returncode == 5 and "not for localhost" in out and "joined" not in out, out
        assert c.status(c.key)["workers"] == 0
        proc = Process("mpakt worker w_ca", [binary(), "worker", "--join", f"127.0.0.1:{cport}", "--id", "w_ca", "--memory",
                                             "512M", "--threads", "1", "--token", c.token, "--ca", str(d / "ca.pem")],
                       c.logs / "w_ca.log")
        proc.start(r"mpakt worker: \S+ joined", timeout=30)
        c.workers["w_ca"] = proc
        c.wait_for(lambda s: [w["workerId"] for w in s["pool"]] == ["w_ca"], "w_ca in the pool")
        server.assert_up()
    finally:
        c.stop_all()
        server.process.terminate()


def test_failed_joins_are_rate_limited_per_address_and_garbage_on_the_port_harms_nothing(start_server,
                                                                                         tmp_path_factory):
    cport = cluster_port()
    server = start_server("--dev", "--workers", "0", "--cluster-port", str(cport), "--join-failures-per-address", "3")
    c = Cluster(server, cport, tmp_path_factory.mktemp("joinlimit"))
    c.key = server.account("joinlimit")[1]
    try:
        for _ in range(3):
            rc, out = run_volunteer(c, "--token", "mpv_" + "B" * 43)
            assert rc == 4 and "invalid volunteer token" in out, out
        # past the limit even a valid token is refused, unchecked, for the rest of the minute
        rc, out = run_volunteer(c, "--token", c.token)
        assert rc == 4 and "too many failed joins from 127.0.0.1" in out, out
        # bytes that are not CAF's protocol, and a connection that says nothing
        for payload in (b"\x00" * 64, b"GET / HTTP/1.1\r\n\r\n", bytes(range(256)) * 8, b""):
            with socket.create_connection(("127.0.0.1", cport), timeout=5) as sock:
                if payload:
                    sock.sendall(payload)
                time.sleep(0.2)
        server.assert_up()
        assert c.status(c.key)["workers"] == 0
    finally:
        c.stop_all()
        server.process.terminate()


def stranger_with_the_link_certificate(server, cport, tmp):
    """A TLS connection to the cluster port as anyone can make one: presenting the link
    certificate (public by design: actors/cluster_tls.hpp; its Ed25519 key is the SHA-256 of a
    fixed sentence), not checking the coordinator's. Returns the socket after the coordinator's
    first frame (its BASP handshake) arrived."""
    seed = hashlib.sha256(b"mpakt cluster link certificate, public by design, v1").digest()
    der = bytes.fromhex("302e020100300506032b657004220420") + seed  # PKCS#8 of an Ed25519 key
    key = tmp / "link.key"
    key.write_text("-----BEGIN PRIVATE KEY-----\n" + base64.b64encode(der).decode() + "\n-----END PRIVATE KEY-----\n")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(server.data_dir / "cluster" / "volunteer-link.pem", key)
    sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", cport), timeout=10), server_hostname="coordinator")
    assert len(sock.recv(65536)) >= 32  # (the coordinator speaks first)
    return sock


def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def test_a_stranger_announcing_a_huge_frame_is_cut_off_before_the_coordinator_makes_room_for_it(start_server,
                                                                                               tmp_path_factory):
    """CAF's middleman makes room for the payload a BASP header announces (up to 4 GiB) as soon
    as it reads the header. Strangers presenting the public link certificate announce 4 GiB
    payloads in 72 bytes each, several at once: the cluster port's front closes each connection
    at its header (the coordinator's memory does not move, GET /metrics counts them, the log
    names the frame); one more addresses a message to another actor than the gate and is
    closed the same way; a real volunteer then joins, loads and decodes as ever."""
    cport = cluster_port()
    server = start_server("--dev", "--workers", "0", "--cluster-port", str(cport), "--metrics-open")
    tmp = tmp_path_factory.mktemp("bigframe")
    c = Cluster(server, cport, tmp)
    c.key = server.account("bigframe")[1]
    pid = server.process.proc.pid
    try:
        before = rss_mb(pid)
        strangers = [stranger_with_the_link_certificate(server, cport, tmp) for _ in range(6)]
        for sock in strangers:  # a client handshake announcing 4 GiB - 16
            sock.sendall(struct.pack(">BBBBIQQQ", 1, 0, 0, 0, 0xFFFFFFF0, 1, 0, 0) + b"\0" * 40)
        peak = before
        for sock in strangers:
            try:
                assert sock.recv(1) == b"", "the front left a connection that announced 4 GiB open"
            except (ssl.SSLError, ConnectionError):
                pass  # (closed while it wrote)
            peak = max(peak, rss_mb(pid))
        for _ in range(10):  # (the old middleman cleared its 4 GiB over seconds)
            time.sleep(0.1)
            peak = max(peak, rss_mb(pid))
        assert peak - before < 256, f"the coordinator grew from {before:.0f} to {peak:.0f} MB"
        out = server.process.output()
        assert out.count("frame 1 announces 4294967280 bytes, more than the 1048576 allowed") == 6, out[-3000:]
        # CAF delivers a message to any actor whose handle crossed a link, by its number: before
        # its join a connection may message the gate alone (actor 3 here stands for the pool)
        sock = stranger_with_the_link_certificate(server, cport, tmp)
        sock.sendall(struct.pack(">BBBBIQQQ", 2, 0, 0, 0, 8, 0, 1, 3) + b"\0" * 8)
        try:
            assert sock.recv(1) == b""
        except (ssl.SSLError, ConnectionError):
            pass
        assert "frame 1 is a message for actor 3, not the gate, before the join" in server.process.output()
        text = server.api.get("/metrics").text
        assert 'mpakt_cluster_connections_closed_total{reason="frame"} 7' in text, text
        # the grid goes on: a volunteer joins, loads and decodes the golden tokens
        c.join("w_after")
        m = expect(server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=c.key, timeout=60), 200)
        assert m["placement"][0]["workerId"] == "w_after"
        decode_golden(server.api, c.key, m["modelId"])
        server.assert_up()
    finally:
        c.stop_all()
        server.process.terminate()


def test_an_admitted_volunteers_answers_may_be_larger_than_a_joiners_frames(cluster):
    """The cluster port's front holds a connection to 1 MiB frames until the gate admits its
    volunteer, and hears of the admission from the gate: a graph whose answer from the
    volunteer is several MiB (400,000 floats) comes back whole, and the link stays up."""
    cluster.join("w_big")
    graph = {"steps": [{"op": "zeros", "in": [], "out": "z", "params": {"shape": [400000]}},
                       {"op": "softmax", "in": ["z"], "out": "p"}], "outputs": ["p"]}
    for _ in range(2):
        r = expect(cluster.server.api.post("/api/v3/graph", {"graph": graph}, key=cluster.key, timeout=60), 200)
        data = r["outputs"]["p"]["data"]
        assert len(data) == 400000 and abs(data[0] - 2.5e-6) < 1e-9
    assert "closed a cluster connection" not in cluster.server.process.output()
    assert [w["workerId"] for w in cluster.status(cluster.key)["pool"]] == ["w_big"]


def test_an_admitted_volunteer_messaging_the_coordinators_actors_by_number_is_cut_off(start_server, tmp_path_factory):
    """CAF delivers a message from any peer to any actor whose handle crossed a link, by its
    number. A volunteer with a valid token (`--fault forge-messages`) sends the pool's `add`,
    with its own worker, to every actor of the coordinator that asks it something — to join
    the pool a second time, past the checked worker that spot-checks it. The cluster port's
    front closes its connection at the first such message (the log names the frame and the
    actor); the pool never lists it. An honest volunteer then joins, loads and decodes the
    golden tokens (a generation on its own loop: its tokens reach their listener), and the
    front left none of its frames out."""
    cport = cluster_port()
    server = start_server("--dev", "--workers", "0", "--cluster-port", str(cport), "--metrics-open")
    c = Cluster(server, cport, tmp_path_factory.mktemp("forge"))
    c.key = server.account("forge")[1]
    try:
        forger = Process("mpakt worker w_forge", [binary(), "worker", "--join", f"127.0.0.1:{cport}", "--id", "w_forge",
                                                  "--memory", "1G", "--threads", "1", "--token", c.token,
                                                  *server.link_args(), "--fault", "forge-messages"],
                         c.logs / "w_forge.log")
        forger.start(r"forge-messages: sent the pool's add to actor \d+", timeout=30)
        deadline = time.monotonic() + 10
        while "which is neither the gate nor a listener" not in server.process.output():
            assert time.monotonic() < deadline, server.process.output()[-3000:]
            time.sleep(0.1)
        assert re.search(r"closed a cluster connection from 127\.0\.0\.1: frame \d+ is a message for actor \d+, which is "
                         r"neither the gate nor a listener of this volunteer's generations", server.process.output())
        for _ in range(20):  # (the pool probes its members every few seconds: the forger would be there twice)
            assert "w_forge" not in [w["workerId"] for w in c.status(c.key)["pool"]]
            time.sleep(0.1)
        forger.proc.kill()
        forger.proc.wait(timeout=10)
        c.join("w_honest")
        m = expect(server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=c.key, timeout=60), 200)
        assert m["placement"][0]["workerId"] == "w_honest"
        decode_golden(server.api, c.key, m["modelId"])
        assert [w["workerId"] for w in c.status(c.key)["pool"]] == ["w_honest"]
        text = server.api.get("/metrics").text
        assert 'mpakt_cluster_connections_closed_total{reason="frame"} 1' in text, text
        assert "mpakt_cluster_frames_left_out_total{" not in text, text
        server.assert_up()
    finally:
        c.stop_all()
        server.process.terminate()


def test_a_volunteers_large_answer_crosses_the_cluster_port_whole_and_one_past_the_budget_closes_its_link(
        start_server, tmp_path_factory):
    """CAF makes room for the payload a BASP header announces (up to 4 GiB) as soon as the header
    arrives, so the cluster port's front holds a volunteer's answer larger than a joiner's frame
    until its last byte has come (actors/cluster_guard.hpp), within --cluster-reply-budget for all
    volunteers together. A graph whose outputs are 2 MB of JSON comes back whole through a real
    volunteer; one whose outputs would be 12 MB, past an 8 MB budget, closes that volunteer's link
    at the answer's header (the log names the frame and both sizes) and the call fails cleanly;
    the server stays up and an honest volunteer then decodes the golden tokens."""
    cport = cluster_port()
    server = start_server("--dev", "--workers", "0", "--cluster-port", str(cport), "--metrics-open",
                          "--cluster-reply-budget", "8M")
    c = Cluster(server, cport, tmp_path_factory.mktemp("replies"))
    c.key = server.account("replies")[1]

    def zeros(n):
        return {"graph": {"inputs": [], "steps": [{"op": "zeros", "in": [], "out": "y", "params": {"shape": [n]}}],
                          "outputs": ["y"]}}
    try:
        big = c.join("w_big")
        r = server.api.post("/api/v3/graph", zeros(1_000_000), key=c.key, timeout=60)
        assert r.status == 200, r
        y = r.json["outputs"]["y"]
        assert y["shape"] == [1_000_000] and len(y["data"]) == 1_000_000 and not any(y["data"]), y["shape"]
        assert len(r.text) > 2_000_000
        r = server.api.post("/api/v3/graph", zeros(6_000_000), key=c.key, timeout=60)
        assert r.status == 503, r
        assert "left the grid" in r.json["error"], r.text
        assert re.search(r"closed a cluster connection from 127\.0\.0\.1: frame \d+ is a reply of \d+ bytes, more than "
                         r"the 8388608 the coordinator holds for volunteers' replies", server.process.output())
        c.wait_for(lambda s: "w_big" not in [w["workerId"] for w in s["pool"]], "w_big to leave the pool")
        big.proc.wait(timeout=15)
        c.workers.pop("w_big")
        c.join("w_honest")
        m = expect(server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=c.key, timeout=60), 200)
        decode_golden(server.api, c.key, m["modelId"])
        text = server.api.get("/metrics").text
        assert 'mpakt_cluster_connections_closed_total{reason="frame"} 1' in text, text
        server.assert_up()
    finally:
        c.stop_all()
        server.process.terminate()


def test_a_volunteer_whose_status_no_worker_sends_is_removed_at_its_first_status(cluster):
    """The pool keeps each worker's status and every status and placement answer shows it, so a
    volunteer's status is bounded (names 128 bytes, lists 512 names). One that lists 20,000
    features (`--fault bloated-status`) is removed at its first status — the log names the
    field — never listed in the pool; the server stays up and an honest volunteer joins and
    decodes."""
    c = cluster
    made = c.server.admin("volunteer-token", "bloated-box")  # (a token of its own: a removal holds its joins back)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[0]
    bloated = Process("mpakt worker w_bloated", [binary(), "worker", "--join", f"127.0.0.1:{c.port}", "--id", "w_bloated",
                                                 "--memory", "1G", "--threads", "1", "--token", token,
                                                 *c.server.link_args(), "--fault", "bloated-status"],
                      c.logs / "w_bloated.log")
    bloated.start(r"mpakt worker: \S+ joined", timeout=30)
    try:
        assert bloated.proc.wait(timeout=20) != 0
        assert re.search(r"removed volunteer bloated-box from the grid: it answered a status no worker sends: its features lists "
                         r"\d+ names \(512 at most\)", c.server.process.output())
        assert "w_bloated" not in [w["workerId"] for w in c.status(c.key)["pool"]]
        c.join("w_honest")
        m = expect(c.server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=c.key, timeout=60), 200)
        decode_golden(c.server.api, c.key, m["modelId"])
        c.server.assert_up()
    finally:
        if bloated.proc.poll() is None:
            bloated.proc.kill()


def test_refused_volunteers_are_sent_no_weight_bytes_by_the_transfer_counters(start_server, tmp_path_factory):
    """Clients refused at the cluster port (wrong tokens, bytes that are not TLS) while
    a legitimate volunteer holds and loads models: the coordinator's counters (GET /metrics)
    account for every weight byte it read as sent to that volunteer alone, count the refusals,
    and list no other worker."""
    prometheus_parser = pytest.importorskip("prometheus_client.parser")
    cport = cluster_port()
    server = start_server("--dev", "--workers", "0", "--cluster-port", str(cport), "--metrics-open")
    c = Cluster(server, cport, tmp_path_factory.mktemp("nobytes"))
    c.key = server.account("nobytes")[1]
    api = server.api

    def counters():
        text = api.get("/metrics").text
        fams = {f.name: f for f in prometheus_parser.text_string_to_metric_families(text)}
        total = lambda fam: sum(x.value for x in fams[fam].samples if x.name == fam + "_total") if fam in fams else 0
        resident = {x.labels["worker"]: x.value for x in fams["mpakt_worker_resident_bytes"].samples} \
            if "mpakt_worker_resident_bytes" in fams else {}
        return total("mpakt_load_bytes"), total("mpakt_volunteer_joins_refused"), total("mpakt_volunteer_joins"), resident

    try:
        rc, out = run_volunteer(c, "--token", "mpv_" + "C" * 43, name="w_before")
        assert rc == 4 and "invalid volunteer token" in out, out
        c.join("w_ok")
        loaded = [expect(api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=c.key, timeout=60), 200)]
        # while it holds a model: a wrong token, and bytes that are not TLS
        rc, out = run_volunteer(c, "--token", "mpv_" + "D" * 43, name="w_during")
        assert rc == 4 and "invalid volunteer token" in out, out
        for payload in (b"\x00" * 64, bytes(range(256)) * 8):
            with socket.create_connection(("127.0.0.1", cport), timeout=5) as sock:
                sock.sendall(payload)
                time.sleep(0.2)
        loaded.append(expect(api.post("/api/v3/models", {"source": "hf:local/stories260K", "quantize": "q8"}, key=c.key,
                                      timeout=60), 200))
        read, refused, admitted, resident = counters()
        assert read == sum(r["bytesTransferred"] for r in loaded) > 0, (read, loaded)
        assert all(r["placement"][0]["workerId"] == "w_ok" for r in loaded), loaded
        assert refused == 2 and admitted == 1, (refused, admitted)
        assert set(resident) == {"w_ok"} and resident["w_ok"] >= sum(r["residentBytes"] for r in loaded), resident
        assert c.status(c.key)["workers"] == 1
        server.assert_up()
    finally:
        c.stop_all()
        server.process.terminate()


def test_dev_makes_no_volunteer_token_when_the_cluster_port_is_beyond_loopback(start_server):
    """--dev's ready-made join token is for one machine: a coordinator whose cluster port others
    can reach says so and makes none, so only tokens an operator made let anyone join."""
    cport = cluster_port()
    server = start_server("--dev", "--address", "0.0.0.0", "--workers", "0", "--cluster-port", str(cport))
    out = server.process.output()
    assert f"mpakt worker --join 0.0.0.0:{cport}" in out, out[-2000:]
    assert "--dev makes no volunteer token: the cluster port listens on 0.0.0.0, beyond loopback" in out, out[-2000:]
    assert "mpv_" not in out
    assert "dev" not in server.admin("volunteer-tokens").stdout
    server.assert_up()
