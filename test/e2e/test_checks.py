"""Spot-checks of volunteers (issue: volunteers the grid can trust; actors/coordinator/
checked_worker.hpp): a volunteer's first passes, then a fraction, are re-run on a verifier in
the coordinator and compared. Real `mpakt worker` processes over the TLS cluster link; the
lying one runs with `--fault corrupt-results:1` (every graph answer and every drawn token of
its altered)."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time

import pytest

from e2e_util import STORIES_DIR, binary, expect
from test_cluster import graph_cli, run_volunteer, start_cluster

GOLDEN = json.loads((STORIES_DIR / "goldens" / "stories260K_once_upon.json").read_text())
PROMPT = GOLDEN["prompt_ids"]


@pytest.fixture
def grid(start_server, tmp_path_factory):
    """A coordinator with no worker of its own; volunteers join per test."""
    c = start_cluster(start_server, tmp_path_factory, "checker")
    yield c
    c.stop_all()
    c.server.process.terminate()


def join_faulty(c, name, fault, *extra):
    """A volunteer with a token of its own (a quarantine refuses the token) and `fault` (and
    `extra` options); its process and its token."""
    made = c.server.admin("volunteer-token", name + "-box")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[0]
    saved, c.token = c.token, token
    try:
        return c.join(name, "1G", "--fault", fault, *extra), token
    finally:
        c.token = saved


def compiled_step(c, model):
    """A compiled one-token decode step over 64 cache rows, ending in argmax."""
    return expect(c.server.api.post("/api/v3/graphs", {"graph": graph_cli(
        "--model-id", model, "--compiled", "--tokens", "1", "--cache", "64", "--argmax")}, key=c.key), 200)["graphId"]


def load_stories(c):
    r = expect(c.server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=c.key, timeout=60), 200)
    return r["modelId"], r["placement"][0]["workerId"]


def placed_on(c, model, worker, timeout=30):
    """Waits until `model` is placed on `worker` alone (after its worker was lost)."""
    deadline = time.monotonic() + timeout
    while True:
        ms = [m for m in expect(c.server.api.get("/api/v3/models", key=c.key), 200)["models"] if m["modelId"] == model]
        if ms and [p["workerId"] for p in ms[0]["placement"]] == [worker]:
            return
        assert time.monotonic() < deadline, f"model {model} was not placed on {worker}: {ms}"
        time.sleep(0.1)


def prefilled_session(c, model, step):
    """A session with caches, the prompt but its last token fed by `step` (compiled, one
    token), checkpointed; returns it and the step's answers."""
    api, key = c.server.api, c.key
    sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
    expect(api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", "64"), session=sid)}, key=key), 200)
    expect(api.post(f"/api/v3/sessions/{sid}/checkpoint", {}, key=key), 200)
    answers = []
    for pos, tok in enumerate(PROMPT[:-1]):
        r = expect(api.post("/api/v3/graph", {"graphId": step, "session": sid, "bind": {"ids": [tok], "pos": pos}},
                            key=key, timeout=60), 200)
        answers.append(r["outputs"])
    return sid, answers


def generate(c, step, sid, n):
    body = {"graphId": step, "sessionId": sid, "ids": [PROMPT[-1]], "startPos": len(PROMPT) - 1, "maxNewTokens": n,
            "stream": False}
    return expect(c.server.api.post("/api/v3/generate", body, key=c.key, timeout=120), 200)


def generates_golden(c, step, sid):
    """The rest of the golden greedy ids, generated from `sid` (the prompt fed but its last)."""
    n = len(GOLDEN["greedy_ids"]) - len(PROMPT)
    assert PROMPT + generate(c, step, sid, n)["tokens"] == GOLDEN["greedy_ids"]


def test_an_honest_volunteer_passes_its_first_checks_bit_for_bit(grid):
    grid.join("w_honest")
    model, where = load_stories(grid)
    assert where == "w_honest"
    step = compiled_step(grid, model)
    n = len(GOLDEN["greedy_ids"]) - len(PROMPT)
    for _ in range(2):  # (two sessions: more passes than the first 8, all checked)
        sid, _ = prefilled_session(grid, model, step)
        r = generate(grid, step, sid, n)
        assert PROMPT + r["tokens"] == GOLDEN["greedy_ids"]
    # its first 8 passes (allocations, prefill steps, generations) were re-run and agreed bit for bit
    st = grid.wait_for(lambda s: s["pool"][0]["checks"]["passed"] >= 8, "the checks to be counted")
    checks = st["pool"][0]["checks"]
    assert checks["exact"] is True and checks["firstLeft"] == 0, checks
    assert checks["unchecked"] == 0 and checks["inconclusive"] == 0, checks
    assert st["quarantined"] == []


def holding_stories(c, name, fault):
    """A volunteer with `fault` holding stories260K, and an honest volunteer beside it: its
    process, its token and the model."""
    proc, token = join_faulty(c, name, fault)
    model, where = load_stories(c)
    assert where == name
    c.join("w_honest")
    return proc, token, model


def liar_holding_stories(grid):
    """A liar holding stories260K, an honest volunteer beside it, and a compiled step."""
    liar, token, model = holding_stories(grid, "w_liar", "corrupt-results:1")
    return liar, token, model, compiled_step(grid, model)


def test_a_lying_volunteer_is_caught_in_a_graph_call_and_no_client_sees_the_lie(grid):
    liar, token, model, step = liar_holding_stories(grid)
    api, key = grid.server.api, grid.key
    sid, answers = prefilled_session(grid, model, step)
    # caught at its first answer with values; that call was answered from the verifier
    st = grid.wait_for(lambda s: s["quarantined"] and [w["workerId"] for w in s["pool"]] == ["w_honest"],
                       "the liar to be quarantined and gone", timeout=20)
    q = st["quarantined"][0]
    assert q["workerId"] == "w_liar" and q["volunteer"] == "w_liar-box", q
    assert "differs from the verifier's" in q["reason"] and "same kernel path" in q["reason"], q
    assert liar.proc.wait(timeout=15) == 4
    assert "disconnected this volunteer" in liar.output()
    # every answer the client got equals an undisturbed run's (the same calls on the honest volunteer)
    placed_on(grid, model, "w_honest")
    sid2, honest = prefilled_session(grid, model, step)
    assert answers == honest
    n = len(GOLDEN["greedy_ids"]) - len(PROMPT)
    assert PROMPT + generate(grid, step, sid, n)["tokens"] == GOLDEN["greedy_ids"]
    assert "quarantined volunteer w_liar-box (w_liar)" in grid.server.process.output()
    # the token is refused from now on
    saved, grid.token = grid.token, token
    try:
        rc, out = run_volunteer(grid, "--token", token, name="w_liar_again")
    finally:
        grid.token = saved
    assert rc == 4 and "was quarantined" in out, out
    # and the token store says so too, so a restarted coordinator refuses it as well
    deadline = time.monotonic() + 10
    while True:
        listed = [line for line in grid.server.admin("volunteer-tokens").stdout.splitlines() if "w_liar-box" in line]
        if listed and "quarantined" in listed[0]:
            break
        assert time.monotonic() < deadline, f"the quarantine was not recorded in the token store: {listed}"
        time.sleep(0.2)
    assert "recorded the quarantine of volunteer w_liar-box in the token store" in grid.server.process.output()
    grid.server.assert_up()


def test_a_liar_is_caught_on_a_big_inline_graph_and_no_client_sees_the_lie(grid):
    """A checked inline graph of more than 256 KiB (its text searched for the models it names,
    and parsed, on a helper thread, not on the scheduler thread the checked worker shares): a
    liar holding the model is caught on it like on a small one, and the client gets the
    verifier's answer, which an honest volunteer's run of the same graph gives too."""
    liar, _, model = holding_stories(grid, "w_liar", "corrupt-results:1")
    g = graph_cli("--model-id", model, "--ids", ",".join(map(str, PROMPT)))
    pad = 80_000  # an input nothing asks for the sum of: bulk for the text
    g["inputs"].append({"name": "pad", "shape": [pad], "data": [0.25] * pad})
    g["steps"].append({"op": "add", "in": ["pad", "pad"], "out": "pad2"})
    assert len(json.dumps(g)) > 256 * 1024
    api, key = grid.server.api, grid.key
    answer = expect(api.post("/api/v3/graph", {"graph": g}, key=key, timeout=60), 200)["outputs"]
    st = grid.wait_for(lambda s: s["quarantined"] and [w["workerId"] for w in s["pool"]] == ["w_honest"],
                       "the liar to be quarantined and gone", timeout=20)
    assert st["quarantined"][0]["workerId"] == "w_liar" and "differs from the verifier's" in st["quarantined"][0]["reason"]
    assert liar.proc.wait(timeout=15) == 4
    placed_on(grid, model, "w_honest")
    assert expect(api.post("/api/v3/graph", {"graph": g}, key=key, timeout=60), 200)["outputs"] == answer
    grid.server.assert_up()


def test_a_lying_volunteer_is_caught_mid_generation_and_the_tokens_are_an_undisturbed_runs(grid):
    liar, _, model, step = liar_holding_stories(grid)
    api, key = grid.server.api, grid.key
    # The prompt goes in with one call that answers nothing (no value the liar can alter).
    sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
    expect(api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", "64"), session=sid)}, key=key), 200)
    prefill = graph_cli("--model-id", model, "--ids", ",".join(map(str, PROMPT[:-1])), "--cache", "64", "--last")
    prefill["outputs"] = []
    expect(api.post("/api/v3/graph", {"graph": dict(prefill, session=sid)}, key=key, timeout=60), 200)
    expect(api.post(f"/api/v3/sessions/{sid}/checkpoint", {}, key=key), 200)
    assert grid.status(key)["quarantined"] == []  # (nothing it answered so far could lie)
    n = len(GOLDEN["greedy_ids"]) - len(PROMPT)
    r = generate(grid, step, sid, n)
    assert r["ok"] is True and PROMPT + r["tokens"] == GOLDEN["greedy_ids"], r
    st = grid.wait_for(lambda s: s["quarantined"], "the liar to be quarantined", timeout=20)
    assert st["quarantined"][0]["workerId"] == "w_liar"
    assert "generated token 0" in st["quarantined"][0]["reason"], st["quarantined"]
    assert liar.proc.wait(timeout=15) == 4
    grid.server.assert_up()


# ---- weights: challenged as they arrive, and again on an operator's request

def operator_key(c):
    _, key = c.server.account("check-operator")
    assert c.server.admin("grant-admin", "check-operator").returncode == 0
    return key


def test_an_honest_volunteers_weights_are_checked_as_they_arrive_and_on_request(grid):
    grid.join("w_honest")
    api, key = grid.server.api, grid.key
    plain = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=key, timeout=60), 200)
    q8 = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K", "quantize": "q8"}, key=key, timeout=60), 200)
    n = plain["tensorCount"] if "tensorCount" in plain else len(expect(api.get(
        "/api/v3/models/inspect?source=hf:local/stories260K", key=key), 200)["tensors"])
    # as published (f32 kept as f32): checked against the digest of the bytes that passed the
    # coordinator; converted to q8: against the verifier's copy
    st = grid.wait_for(lambda s: s["pool"][0]["checks"]["weightsChecked"] >= 2 * n, "every weight to be checked")
    assert st["pool"][0]["checks"]["weightsUnchecked"] == 0, st["pool"][0]["checks"]
    op = operator_key(grid)
    expect(api.post("/api/v3/admin/workers/w_honest/check", {}, key=key), 403)
    report = expect(api.post("/api/v3/admin/workers/w_honest/check", {}, key=op, timeout=60), 200)
    assert report == {"workerId": "w_honest", "volunteer": "dev", "weights": 2 * n, "agreed": 2 * n, "unchecked": 0,
                      "differed": 0, "notChecked": 0, "quarantined": False}, report
    expect(api.post("/api/v3/admin/workers/w_nobody/check", {}, key=op), 404, "no worker w_nobody")
    assert plain["modelId"] != q8["modelId"]
    assert grid.status(key)["quarantined"] == []


def test_a_volunteer_that_alters_its_weights_is_quarantined_and_the_model_served_elsewhere(grid):
    flipper, _ = join_faulty(grid, "w_flip", "corrupt-weights")
    api, key = grid.server.api, grid.key
    r = api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=key, timeout=60)
    st = grid.wait_for(lambda s: s["quarantined"], "the volunteer to be quarantined", timeout=20)
    q = st["quarantined"][0]
    assert q["workerId"] == "w_flip" and "differs from what it was sent" in q["reason"], q
    assert flipper.proc.wait(timeout=15) == 4
    # the load either failed cleanly or its model is placed again once a worker can take it
    assert r.status in (200, 503), r
    grid.join("w_honest")
    model, where = load_stories(grid)
    assert where == "w_honest"
    step = compiled_step(grid, model)
    sid, _ = prefilled_session(grid, model, step)
    n = len(GOLDEN["greedy_ids"]) - len(PROMPT)
    assert PROMPT + generate(grid, step, sid, n)["tokens"] == GOLDEN["greedy_ids"]
    grid.server.assert_up()


def test_a_checked_volunteer_reading_the_model_host_itself_has_its_weights_checked_against_the_verifiers(grid):
    """A spot-checked volunteer that may read the model host (`--host-fetch any`: the host is on
    loopback) reads its weights there itself, and so does its verifier: no weight byte passes
    through the coordinator (coordinatorPeakBytes 0), and every weight, as published and
    quantized on load, is challenged on arrival against the verifier's copy of the same bytes.
    The golden tokens decode."""
    grid.join("w_reader", "1G", "--host-fetch", "any")
    api, key = grid.server.api, grid.key
    plain = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=key, timeout=60), 200)
    q8 = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K", "quantize": "q8"}, key=key, timeout=60), 200)
    assert plain["coordinatorPeakBytes"] == 0 and q8["coordinatorPeakBytes"] == 0, (plain, q8)
    n = len(expect(api.get("/api/v3/models/inspect?source=hf:local/stories260K", key=key), 200)["tensors"])
    st = grid.wait_for(lambda s: s["pool"][0]["checks"]["weightsChecked"] >= 2 * n, "every weight to be checked")
    assert st["pool"][0]["checks"]["weightsUnchecked"] == 0, st["pool"][0]["checks"]
    step = compiled_step(grid, plain["modelId"])
    sid, _ = prefilled_session(grid, plain["modelId"], step)
    m = len(GOLDEN["greedy_ids"]) - len(PROMPT)
    assert PROMPT + generate(grid, step, sid, m)["tokens"] == GOLDEN["greedy_ids"]
    assert grid.status(key)["quarantined"] == []


def test_a_volunteer_that_alters_the_weights_it_read_from_the_model_host_is_quarantined(grid):
    """The same with `--fault corrupt-weights`: the weights it read itself differ from the
    verifier's copy of the same bytes, and it is quarantined on arrival."""
    flipper, _ = join_faulty(grid, "w_flip", "corrupt-weights", "--host-fetch", "any")
    r = grid.server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=grid.key, timeout=60)
    st = grid.wait_for(lambda s: s["quarantined"], "the volunteer to be quarantined", timeout=20)
    q = st["quarantined"][0]
    assert q["workerId"] == "w_flip" and "differs from what it was sent" in q["reason"], q
    assert flipper.proc.wait(timeout=15) == 4
    assert r.status in (200, 503), r


def test_a_model_too_large_to_copy_reaches_a_checked_volunteer_through_the_coordinator(start_server, tmp_path_factory):
    """A model beyond the verifier's room (--verify-memory 64K) is not copied: the volunteer
    may not read it itself (nothing would check what it read) and gets its bytes through the
    coordinator, which hashes them on their way."""
    c = start_cluster(start_server, tmp_path_factory, "budget_fetch", options=("--verify-memory", "64K"))
    try:
        c.join("w_reader", "1G", "--host-fetch", "any")
        r = expect(c.server.api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=c.key, timeout=60), 200)
        assert r["coordinatorPeakBytes"] > 0, r
        st = c.wait_for(lambda s: s["pool"][0]["checks"]["weightsChecked"] > 0, "weights to be checked")
        assert st["pool"][0]["checks"]["weightsUnchecked"] == 0 and st["quarantined"] == [], st["pool"][0]["checks"]
    finally:
        c.stop_all()
        c.server.process.terminate()


def test_weights_altered_after_their_arrival_check_are_caught_by_an_operators_recheck(grid):
    """`--fault corrupt-weights-later`: every weight arrives intact and passes its check, then
    changes. The operator's re-check (POST /api/v3/admin/workers/ID/check) finds it, and the
    volunteer is quarantined like one caught on arrival; the model is served elsewhere."""
    sly, _ = join_faulty(grid, "w_sly", "corrupt-weights-later")
    api, key = grid.server.api, grid.key
    model, where = load_stories(grid)
    assert where == "w_sly"
    n = len(expect(api.get("/api/v3/models/inspect?source=hf:local/stories260K", key=key), 200)["tensors"])
    st = grid.wait_for(lambda s: s["pool"][0]["checks"]["weightsChecked"] >= n, "every weight to be checked on arrival")
    assert st["quarantined"] == [] and st["pool"][0]["checks"]["weightsUnchecked"] == 0, st
    grid.join("w_honest")
    report = expect(api.post("/api/v3/admin/workers/w_sly/check", {}, key=operator_key(grid), timeout=60), 200)
    # the first weight answered is found altered: the volunteer is quarantined at once and the
    # report comes then (it used to be left hanging once the volunteer was ended)
    assert report["workerId"] == "w_sly" and report["quarantined"] is True, report
    assert report["differed"] >= 1 and report["agreed"] == 0, report
    assert report["weights"] + report["notChecked"] == n, report
    st = grid.wait_for(lambda s: s["quarantined"], "the volunteer to be quarantined", timeout=20)
    q = st["quarantined"][0]
    assert q["workerId"] == "w_sly" and "differs from what it was sent" in q["reason"], q
    assert sly.proc.wait(timeout=15) == 4
    # its model is placed again on the honest volunteer and decodes as it should
    placed_on(grid, model, "w_honest")
    step = compiled_step(grid, model)
    sid, _ = prefilled_session(grid, model, step)
    assert PROMPT + generate(grid, step, sid, len(GOLDEN["greedy_ids"]) - len(PROMPT))["tokens"] == GOLDEN["greedy_ids"]
    grid.server.assert_up()


def test_a_volunteer_answering_malformed_outputs_is_quarantined_and_the_client_gets_a_clean_error(start_server,
                                                                                                  tmp_path_factory):
    """Even a pass not chosen for a check is read before its text reaches a client: an answer that
    is no outputs object (here nested 100,000 deep and unfinished) fails the call with a clear
    503 and quarantines the volunteer; the server stays up and the work goes on elsewhere."""
    c = start_cluster(start_server, tmp_path_factory, "malformed",
                      options=("--verify-first", "0", "--verify-fraction", "0.000001"))
    server = c.server
    try:
        bad, _, model = holding_stories(c, "w_bad", "malformed-answers")
        api, key = server.api, c.key
        step = compiled_step(c, model)
        sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
        # Its first answer (the caches' allocation) is the bad one: the call fails cleanly — with
        # the reason, or, when the coordinator has already seen the volunteer go, as any call on
        # a session whose worker left the grid.
        r = api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", "64"), session=sid)}, key=key, timeout=60)
        assert r.status == 503, r
        assert "answered malformed outputs and was quarantined" in r.text or "left the grid" in r.text, r
        st = c.wait_for(lambda s: s["quarantined"] and [w["workerId"] for w in s["pool"]] == ["w_honest"],
                        "the volunteer to be quarantined and gone", timeout=20)
        assert "not an outputs object" in st["quarantined"][0]["reason"], st["quarantined"]
        assert st["pool"][0]["checks"]["passed"] == 0  # (nothing was chosen for a check)
        assert bad.proc.wait(timeout=15) == 4
        server.assert_up()
        sid, _ = prefilled_session(c, model, step)
        generates_golden(c, step, sid)
    finally:
        c.stop_all()
        server.process.terminate()


@pytest.mark.parametrize("what", ["graph call", "compile"])
def test_a_volunteer_that_leaves_work_unanswered_past_the_limit_is_removed_and_its_work_goes_elsewhere(
        start_server, tmp_path_factory, what):
    """A volunteer that takes graph calls and compiles and never answers them, while it answers
    the pool's probes (`--fault unanswered-calls`: it looks healthy and fast, so it keeps being
    chosen). Its worker would stop a graph at the call's limit and say so, and a compile waits
    at most behind such calls; one that lets 15 s more pass has stopped answering. The caller
    gets an error at the limit; 15 s past it the volunteer is removed from the grid — not
    quarantined: nothing says it lied, its token stays valid, though it may not join again at
    once — and its model goes to the honest volunteer, where the work goes on."""
    c = start_cluster(start_server, tmp_path_factory, "unanswered", options=("--graph-timeout-ms", "2000"))
    server = c.server
    try:
        silent, token, model = holding_stories(c, "w_silent", "unanswered-calls")
        api, key = server.api, c.key
        t0 = time.monotonic()
        if what == "graph call":
            sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
            r = api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", "64"), session=sid)}, key=key, timeout=60)
            assert r.status == 504, r
            assert "--graph-timeout-ms limit (2000 ms)" in r.text, r.text
            limit = r"its limit \(2 s\)"
        else:
            r = api.post("/api/v3/graphs", {"graph": graph_cli("--model-id", model, "--compiled", "--tokens", "1", "--cache", "64",
                                                               "--argmax")}, key=key, timeout=60)
            assert r.status in (503, 504), r
            limit = r"the limit \(2 s\)"
        assert time.monotonic() - t0 < 15
        st = c.wait_for(lambda s: [w["workerId"] for w in s["pool"]] == ["w_honest"], "the silent volunteer to be removed",
                        timeout=40)
        assert st["quarantined"] == [], st["quarantined"]
        why = f"it left a {what} unanswered 15 s past {limit}"
        assert re.search(r"removed volunteer w_silent-box from the grid: " + why, server.process.output())
        assert silent.proc.wait(timeout=15) != 0
        # its token may not rejoin at once (a minute after a first removal)
        code, out = run_volunteer(c, "--token", token, name="w_silent_again")
        assert code != 0 and re.search(r"volunteer w_silent-box was removed from the grid \(" + why +
                                       r"\); it may join again in \d+ s", out), out
        placed_on(c, model, "w_honest")
        step = compiled_step(c, model)
        sid, _ = prefilled_session(c, model, step)
        generates_golden(c, step, sid)
        server.assert_up()
    finally:
        c.stop_all()
        server.process.terminate()


@pytest.mark.parametrize("fault", ["silent-generations", "flood-tokens"])
def test_a_generation_a_volunteer_stalls_or_floods_goes_on_elsewhere_once_it_is_removed(start_server, tmp_path_factory,
                                                                                     fault):
    """A worker-side generation's steps are graphs under the coordinator's limit, so its tokens
    come at least that often, numbered from 0, never more than asked for. A volunteer that
    accepts generations and never sends a token or an end (`--fault silent-generations`) is
    removed 15 s past the step limit; one that sends each token 101 times (`--fault
    flood-tokens`) at its first repeated token, before the client sees it. Spot-checks are off,
    so nothing but the volunteer's relay stands between it and the pool. The session,
    checkpointed before, is restored on the honest volunteer and the same generation request
    ends there with the golden tokens: the client sees a late answer, not a hung or a wrong one."""
    c = start_cluster(start_server, tmp_path_factory, "gen" + fault.split("-")[0],
                      options=("--graph-timeout-ms", "2000", "--verify-first", "0", "--verify-fraction", "0"))
    server = c.server
    try:
        bad, _, model = holding_stories(c, "w_bad", fault)
        step = compiled_step(c, model)
        sid, _ = prefilled_session(c, model, step)
        expect(server.api.post(f"/api/v3/sessions/{sid}/checkpoint", {}, key=c.key), 200)
        t0 = time.monotonic()
        generates_golden(c, step, sid)
        took = time.monotonic() - t0
        if fault == "silent-generations":
            assert 15 < took < 60, took
            why = r"it left generation \S+ without a token for 2 s \(the step limit\) and 15 s more"
        else:
            why = r"it sent generation \S+ token number 0 where number 1 was due"
        assert re.search(r"removed volunteer w_bad-box from the grid: " + why, server.process.output())
        st = c.status(c.key)
        assert [w["workerId"] for w in st["pool"]] == ["w_honest"] and st["quarantined"] == [], st
        assert bad.proc.wait(timeout=15) != 0
        server.assert_up()
    finally:
        c.stop_all()
        server.process.terminate()


def test_weights_beyond_the_verifiers_room_are_not_copied_and_their_passes_go_unchecked(start_server, tmp_path_factory):
    """--verify-memory bounds the verifiers' copies for all volunteers together: a model that
    does not fit is not copied, passes on it are counted as unchecked (never as a mismatch),
    weights kept as published are still checked as they arrive, and decoding is undisturbed."""
    c = start_cluster(start_server, tmp_path_factory, "budget", options=("--verify-memory", "64K"))
    server = c.server
    try:
        c.join("w_honest")
        model, _ = load_stories(c)
        step = compiled_step(c, model)
        sid, _ = prefilled_session(c, model, step)
        generates_golden(c, step, sid)
        # (the allocation reads no weight: checked; the prefill steps and the generation cannot be)
        st = c.wait_for(lambda s: s["pool"][0]["checks"]["unchecked"] >= 5, "the unchecked passes to be counted")
        checks = st["pool"][0]["checks"]
        assert checks["passed"] == 1 and st["quarantined"] == [], checks
        assert checks["weightsChecked"] > 0 and checks["weightsUnchecked"] == 0, checks  # (f32 kept as f32)
    finally:
        c.stop_all()
        server.process.terminate()


def test_a_model_beyond_the_verifiers_room_is_checked_on_its_output_head(start_server, tmp_path_factory, monkeypatch):
    """With room for stories260K's token embedding (128 KiB, also its output head: tied) but not
    the whole model (about 1 MB), the verifier keeps the head alone, and a checked pass redoes
    one product: the volunteer is asked for the activation entering the head and the logits
    besides its answer, and the verifier's product must match (here on another kernel path,
    AVX2, within the tolerance), as must the token argmax drew from it. The caller's answers
    carry what it asked for only. A worker-side generation is checked once it ends, on one of
    its steps done again as a probed graph call."""
    c = start_cluster(start_server, tmp_path_factory, "head", options=("--verify-memory", "256K"))
    server = c.server
    try:
        monkeypatch.setenv("MPAKT_CPU_LEVEL", "avx2")
        c.join("w_honest")
        monkeypatch.delenv("MPAKT_CPU_LEVEL")
        model, _ = load_stories(c)
        step = compiled_step(c, model)
        sid, answers = prefilled_session(c, model, step)
        assert all(set(a) == {"tok"} for a in answers), answers[0].keys()
        n = len(GOLDEN["greedy_ids"]) - len(PROMPT)
        assert PROMPT + generate(c, step, sid, n)["tokens"] == GOLDEN["greedy_ids"]
        # the allocation (no weight) re-run whole; each prompt step probed on the head
        # (the allocation re-run whole; each prompt step probed on the head; the generation by
        # one of its steps done again and probed)
        st = c.wait_for(lambda s: s["pool"][0]["checks"]["passed"] >= len(PROMPT) + 1, "the probed passes to be counted")
        checks = st["pool"][0]["checks"]
        assert st["quarantined"] == [] and checks["unchecked"] == 0, checks
        # an inline graph's outputs come back as asked too
        g = graph_cli("--model-id", model, "--ids", ",".join(map(str, PROMPT)))
        r = expect(server.api.post("/api/v3/graph", {"graph": g}, key=c.key, timeout=60), 200)
        assert set(r["outputs"]) == set(g["outputs"]), r["outputs"].keys()
        server.assert_up()
    finally:
        c.stop_all()
        server.process.terminate()


def test_a_big_inline_graph_on_a_model_beyond_the_verifiers_room_is_probed_too(start_server, tmp_path_factory):
    """A checked inline graph of more than 256 KiB on a model the verifier holds in part: its text
    is read, and written again to ask for the probe's two values, on a helper thread (the checked
    worker shares the coordinator's scheduler thread); the pass is checked on the head like a
    small one, and the caller gets what it asked for only."""
    c = start_cluster(start_server, tmp_path_factory, "headbig", options=("--verify-memory", "256K"))
    server = c.server
    try:
        c.join("w_honest")
        model, _ = load_stories(c)
        g = graph_cli("--model-id", model, "--ids", ",".join(map(str, PROMPT)))
        pad = 80_000  # an input nothing asks for the sum of: bulk for the text
        g["inputs"].append({"name": "pad", "shape": [pad], "data": [0.25] * pad})
        g["steps"].append({"op": "add", "in": ["pad", "pad"], "out": "pad2"})
        assert len(json.dumps(g)) > 256 * 1024
        r = expect(server.api.post("/api/v3/graph", {"graph": g}, key=c.key, timeout=60), 200)
        assert set(r["outputs"]) == set(g["outputs"]), r["outputs"].keys()
        st = c.wait_for(lambda s: s["pool"][0]["checks"]["passed"] >= 1, "the big call's check to be counted")
        checks = st["pool"][0]["checks"]
        assert st["quarantined"] == [] and checks["unchecked"] == 0 and checks["passed"] == 1, checks
        server.assert_up()
    finally:
        c.stop_all()
        server.process.terminate()


def test_a_liar_holding_a_model_beyond_the_verifiers_room_is_caught_on_its_output_head(start_server, tmp_path_factory):
    """The same room, and a liar (`--fault corrupt-results:1`, every answer's first value
    altered): its first probed pass shows a token that is not the argmax of the verifier's
    product. It is quarantined, and the call — all it asked for is that token — is answered
    from the verifier's product, so the client gets an undisturbed run's token. On the previous
    build such passes went unchecked and the lie (a token of 4443 in a 512-token vocabulary)
    reached the client."""
    c = start_cluster(start_server, tmp_path_factory, "headliar", options=("--verify-memory", "256K"))
    server = c.server
    try:
        liar, _, model = holding_stories(c, "w_liar", "corrupt-results:1")
        step = compiled_step(c, model)
        api, key = server.api, c.key
        sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
        expect(api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", "64"), session=sid)}, key=key), 200)
        expect(api.post(f"/api/v3/sessions/{sid}/checkpoint", {}, key=key), 200)  # (restored elsewhere after)
        got = expect(api.post("/api/v3/graph", {"graphId": step, "session": sid, "bind": {"ids": [PROMPT[0]], "pos": 0}},
                              key=key, timeout=60), 200)["outputs"]
        st = c.wait_for(lambda s: s["quarantined"] and [w["workerId"] for w in s["pool"]] == ["w_honest"],
                        "the liar to be quarantined and gone", timeout=20)
        q = st["quarantined"][0]
        assert q["workerId"] == "w_liar" and "where the verifier's product has its maximum at" in q["reason"], q
        assert liar.proc.wait(timeout=15) == 4
        placed_on(c, model, "w_honest")
        sid2, honest = prefilled_session(c, model, step)
        assert got == honest[0], (got, honest[0])
        n = len(GOLDEN["greedy_ids"]) - len(PROMPT)
        assert PROMPT + generate(c, step, sid2, n)["tokens"] == GOLDEN["greedy_ids"]
        server.assert_up()
    finally:
        c.stop_all()
        server.process.terminate()


def test_a_liar_in_its_generations_on_a_model_beyond_the_verifiers_room_is_caught_after_one(start_server,
                                                                                            tmp_path_factory):
    """`--fault corrupt-generation-tokens`: graph calls answered right, every token of a
    worker-side generation altered. With the verifier holding only the head, the generation is
    checked when it ends: one of its steps is done again as a probed graph call, which draws
    another token than the loop sent, and the volunteer is quarantined. (The client has seen
    that generation's tokens: the check comes after it; the whole-model check of a smaller
    model streams the verifier's tokens instead.) On the previous build it was never caught."""
    c = start_cluster(start_server, tmp_path_factory, "genliar", options=("--verify-memory", "256K"))
    server = c.server
    try:
        liar, _, model = holding_stories(c, "w_liar", "corrupt-generation-tokens")
        step = compiled_step(c, model)
        sid, _ = prefilled_session(c, model, step)
        assert c.status(c.key)["quarantined"] == []  # (its graph calls were probed and honest)
        n = len(GOLDEN["greedy_ids"]) - len(PROMPT)
        r = generate(c, step, sid, n)
        assert r["workerLoop"] is True and PROMPT + r["tokens"] != GOLDEN["greedy_ids"], r  # (the lie went out)
        st = c.wait_for(lambda s: s["quarantined"] and [w["workerId"] for w in s["pool"]] == ["w_honest"],
                        "the liar to be quarantined and gone", timeout=20)
        q = st["quarantined"][0]
        assert q["workerId"] == "w_liar" and "the same step, done again and checked on the output head" in q["reason"], q
        assert liar.proc.wait(timeout=15) == 4
        placed_on(c, model, "w_honest")
        sid2, _ = prefilled_session(c, model, step)
        assert PROMPT + generate(c, step, sid2, n)["tokens"] == GOLDEN["greedy_ids"]
        server.assert_up()
    finally:
        c.stop_all()
        server.process.terminate()


def test_a_volunteer_that_lies_now_and_then_is_caught_within_its_checked_passes(start_server, tmp_path_factory):
    """`--fault corrupt-results:0.25`: a quarter of the liar's answers and drawn tokens are
    altered, the rest honest. With its first 64 passes all checked (`--verify-first 64`), it is
    caught among them (it survives 30 checked passes with probability 0.75^30 < 2e-4) and
    quarantined, and the client's answers and tokens are an undisturbed run's."""
    c = start_cluster(start_server, tmp_path_factory, "sometimes", options=("--verify-first", "64"))
    server = c.server
    try:
        liar, _, model = holding_stories(c, "w_liar", "corrupt-results:0.25")
        step = compiled_step(c, model)
        n = len(GOLDEN["greedy_ids"]) - len(PROMPT)
        got = []
        for _ in range(3):  # each: an allocation, the prompt's steps, a whole generation
            sid, answers = prefilled_session(c, model, step)
            got.append((answers, PROMPT + generate(c, step, sid, n)["tokens"]))
        st = c.wait_for(lambda s: s["quarantined"], "the liar to be quarantined", timeout=30)
        q = st["quarantined"][0]
        assert q["workerId"] == "w_liar", q
        assert "differs from the verifier's" in q["reason"] or "generated token" in q["reason"], q
        assert liar.proc.wait(timeout=15) == 4
        assert [w["workerId"] for w in st["pool"]] == ["w_honest"]
        # what the client got, call for call and token for token, is what the honest volunteer gives
        placed_on(c, model, "w_honest")
        sid, honest = prefilled_session(c, model, step)
        for answers, tokens in got:
            assert answers == honest
            assert tokens == GOLDEN["greedy_ids"]
        server.assert_up()
    finally:
        c.stop_all()
        server.process.terminate()


def join_on_avx2(grid, name, monkeypatch):
    """A volunteer `name` whose kernels are held to the AVX2 level (MPAKT_CPU_LEVEL); skips the
    test when the coordinator's own kernels are at that level too (one path)."""
    monkeypatch.setenv("MPAKT_CPU_LEVEL", "avx2")
    grid.join(name)
    monkeypatch.delenv("MPAKT_CPU_LEVEL")
    st = grid.status(grid.key)
    assert st["pool"][0]["kernels"].startswith("avx2 "), st["pool"][0]["kernels"]
    own = re.search(r"CPU kernels: (\S+)", grid.server.process.output()).group(1)  # (its banner)
    if own in ("avx2", "scalar"):
        pytest.skip("the coordinator's kernels are at the AVX2 level too: one path")


def test_an_honest_volunteer_on_another_kernel_path_is_not_quarantined_for_a_q8_prefill(grid, monkeypatch):
    """A volunteer whose kernels are at the AVX2 level (MPAKT_CPU_LEVEL) against the
    coordinator's own: its answers are compared within the tolerance of the weights' dtype.
    A q8 prefill of many rows multiplies int8 activations on one path and int16 on another,
    which moves the logits by a few percent of their scale: an honest volunteer, not a liar."""
    join_on_avx2(grid, "w_avx2", monkeypatch)
    api, key = grid.server.api, grid.key
    model = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K", "quantize": "q8"}, key=key, timeout=60),
                   200)["modelId"]
    ids = [(7 * i + 3) % 500 + 2 for i in range(48)]  # 48 rows: the many-row product
    g = graph_cli("--model-id", model, "--ids", ",".join(map(str, ids)))
    for _ in range(3):
        expect(api.post("/api/v3/graph", {"graph": g}, key=key, timeout=60), 200)
    st = grid.wait_for(lambda s: s["pool"] and s["pool"][0]["checks"]["passed"] >= 3, "the checks to be counted")
    checks = st["pool"][0]["checks"]
    assert checks["exact"] is False and st["quarantined"] == [], (checks, st["quarantined"])


def test_an_honest_volunteer_on_another_kernel_path_is_not_quarantined_for_a_bf16_prefill(grid, slow_model, hub_dir,
                                                                                           monkeypatch):
    """The same for bf16 weights (hf:local/slow): a prefill of many rows rounds its products'
    activations to bf16 on every path, which turns the paths' last-bit differences in the other
    ops into a bf16 step here and there — a few tenths of a percent of the logits' scale, over
    the 1e-3 float weights get: bf16's own tolerance (3e-2) keeps the honest volunteer, for its
    answers and for the caches its prefill wrote."""
    join_on_avx2(grid, "w_avx2_bf16", monkeypatch)
    api, key = grid.server.api, grid.key
    model = expect(api.post("/api/v3/models", {"source": slow_model}, key=key, timeout=120), 200)["modelId"]

    def slow_graph(*args):
        out = subprocess.run([str(binary()), "graph", str(hub_dir / "local" / "slow" / "config.json"), *args],
                             capture_output=True, text=True, timeout=30, check=True)
        return json.loads(out.stdout)

    ids = [(7 * i + 3) % 500 + 2 for i in range(48)]  # 48 rows: the many-row products
    g = slow_graph("--model-id", model, "--ids", ",".join(map(str, ids)))
    sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
    expect(api.post("/api/v3/graph", {"graph": dict(slow_graph("--alloc-cache", "64"), session=sid)}, key=key), 200)
    prefill = slow_graph("--model-id", model, "--ids", ",".join(map(str, ids)), "--cache", "64")
    for _ in range(3):
        expect(api.post("/api/v3/graph", {"graph": g}, key=key, timeout=60), 200)
    expect(api.post("/api/v3/graph", {"graph": dict(prefill, session=sid)}, key=key, timeout=60), 200)
    st = grid.wait_for(lambda s: s["pool"] and s["pool"][0]["checks"]["passed"] >= 5, "the checks to be counted")
    checks = st["pool"][0]["checks"]
    assert checks["exact"] is False and st["quarantined"] == [], (checks, st["quarantined"])
    grid.server.assert_up()


def test_a_volunteer_that_answers_right_but_keeps_wrong_caches_is_caught(grid):
    """`--fault corrupt-caches`: every answer is right, but after each call a value of the
    session's caches is changed (later answers would go wrong only positions later). A checked
    pass compares the sessions it wrote as the volunteer and the verifier hold them, so the
    first one — the allocation of the caches — catches it. The session, never checkpointed, is
    lost with the volunteer and says so; the model decodes as it should elsewhere."""
    sly, _, model = holding_stories(grid, "w_caches", "corrupt-caches")
    api, key = grid.server.api, grid.key
    sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
    expect(api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", "64"), session=sid)}, key=key), 200)
    st = grid.wait_for(lambda s: s["quarantined"], "the volunteer to be quarantined", timeout=20)
    q = st["quarantined"][0]
    assert q["workerId"] == "w_caches", q
    assert "left its session unlike the verifier's" in q["reason"] and sid in q["reason"], q
    assert sly.proc.wait(timeout=15) == 4
    placed_on(grid, model, "w_honest")
    step = compiled_step(grid, model)
    expect(api.post("/api/v3/graph", {"graphId": step, "session": sid, "bind": {"ids": [PROMPT[0]], "pos": 0}}, key=key),
           503, "prefill it again")
    sid, _ = prefilled_session(grid, model, step)
    n = len(GOLDEN["greedy_ids"]) - len(PROMPT)
    assert PROMPT + generate(grid, step, sid, n)["tokens"] == GOLDEN["greedy_ids"]
    grid.server.assert_up()


def quarantined_after_a_generation(grid, name, fault):
    """A volunteer `name` with `fault` holding stories260K beside an honest one: a session
    prefilled through its first passes (none quarantines it), a worker-side generation that
    gives the client the golden tokens, then the volunteer quarantined and gone. Its
    quarantine record, the model, the step, the session and the generation's length."""
    sly, _, model = holding_stories(grid, name, fault)
    step = compiled_step(grid, model)
    sid, _ = prefilled_session(grid, model, step)
    assert grid.status(grid.key)["quarantined"] == []  # (its graph calls were checked and honest)
    n = len(GOLDEN["greedy_ids"]) - len(PROMPT)
    r = generate(grid, step, sid, n)
    assert r["ok"] is True and r["workerLoop"] is True and PROMPT + r["tokens"] == GOLDEN["greedy_ids"], r
    st = grid.wait_for(lambda s: s["quarantined"] and [w["workerId"] for w in s["pool"]] == ["w_honest"],
                       "the volunteer to be quarantined and gone", timeout=20)
    q = st["quarantined"][0]
    assert q["workerId"] == name, q
    assert sly.proc.wait(timeout=15) == 4
    return q, model, step, sid, n


def test_a_generation_that_draws_right_tokens_but_leaves_wrong_caches_is_caught(grid):
    """`--fault corrupt-generation-caches`: graph calls are honest, and a worker-side
    generation draws the right tokens but leaves a value of the session's caches changed. A
    checked generation compares the session as both loops left it once every token agreed, so
    it is caught there: the client had the right tokens and the volunteer is quarantined. (On
    the previous build only the tokens were compared and it went unseen.)"""
    q, model, step, sid, n = quarantined_after_a_generation(grid, "w_gen_caches", "corrupt-generation-caches")
    assert "a generation drew the verifier's tokens but left session" in q["reason"] and sid in q["reason"], q
    # the model, placed again on the honest volunteer, decodes as it should
    placed_on(grid, model, "w_honest")
    sid2, _ = prefilled_session(grid, model, step)
    assert PROMPT + generate(grid, step, sid2, n)["tokens"] == GOLDEN["greedy_ids"]
    grid.server.assert_up()


def test_a_volunteer_that_hides_the_session_its_checked_generation_left_is_quarantined(grid):
    """`--fault refused-dumps-after-generations`: graph calls and generations are honest, and
    the first copy of a session asked for after a generation on it is denied as if the session
    were not there. A checked generation among the first passes asks for that copy as it ends,
    to compare the session with the verifier's; denying it hid the caches from the check (on
    the previous build the generation was counted as checked, and a volunteer could keep wrong
    caches so). The session was opened through its checked worker and not closed: the volunteer
    holds it, and is quarantined."""
    q, _, _, sid, _ = quarantined_after_a_generation(grid, "w_gen_hides", "refused-dumps-after-generations")
    assert "it would not show session " + sid + ", which it holds" in q["reason"], q
    grid.server.assert_up()


def test_an_honest_volunteers_checked_generation_leaves_it_in_the_pool(grid):
    """The same comparison on an honest volunteer: its generations are checked, sessions and
    all, and nothing is quarantined; the checks are counted."""
    grid.join("w_honest")
    model, where = load_stories(grid)
    step = compiled_step(grid, model)
    sid, _ = prefilled_session(grid, model, step)
    n = len(GOLDEN["greedy_ids"]) - len(PROMPT)
    for _ in range(2):
        assert PROMPT + generate(grid, step, sid, n)["tokens"] == GOLDEN["greedy_ids"]
    time.sleep(0.5)  # (the session comparison answers after the client's end)
    st = grid.status(grid.key)
    assert st["quarantined"] == [] and [w["workerId"] for w in st["pool"]] == ["w_honest"], st
    grid.server.assert_up()


def test_a_model_deleted_while_its_weights_are_challenged_quarantines_nobody(grid, slow_model):
    """A load answers once the volunteer holds every weight; the checks of the last weights may
    still be on their way when the client deletes the model, and the volunteer then rightly no
    longer holds them: that is no lie. (A CI run hit this and quarantined an honest volunteer —
    its challenge reached the compute side after the model's drop; the window depends on timing,
    so this test exercises the sequence rather than forcing the overtaking.)"""
    grid.join("w_honest")
    api, key = grid.server.api, grid.key
    for quantize in ("q4", "none", "q8", "q4"):
        r = expect(api.post("/api/v3/models", {"source": slow_model, "quantize": quantize}, key=key, timeout=120), 200)
        expect(api.delete(f"/api/v3/models/{r['modelId']}", key=key), 200)
    time.sleep(1.0)  # (the checks in flight answer)
    st = grid.status(key)
    assert st["quarantined"] == [] and [w["workerId"] for w in st["pool"]] == ["w_honest"], st
    model, where = load_stories(grid)
    step = compiled_step(grid, model)
    sid, _ = prefilled_session(grid, model, step)
    assert PROMPT + generate(grid, step, sid, len(GOLDEN["greedy_ids"]) - len(PROMPT))["tokens"] == GOLDEN["greedy_ids"]


# ---- later passes: windows (actors/coordinator/check_windows.hpp, docs/decisions.md "Spot-checks")

def feed_until_refused(c, model, step):
    """A new session on `model`: its caches allocated and the prompt fed by `step`, call by
    call, until one is refused (a quarantine overtaking the calls fails the one on its way
    with 503); returns the session."""
    api, key = c.server.api, c.key
    sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
    calls = [{"graph": dict(graph_cli("--alloc-cache", "64"), session=sid)}]
    calls += [{"graphId": step, "session": sid, "bind": {"ids": [tok], "pos": pos}} for pos, tok in enumerate(PROMPT)]
    for body in calls:
        if api.post("/api/v3/graph", body, key=key, timeout=60).status != 200:
            break
    return sid


def quarantine_reason(c, worker, proc):
    """Waits for `worker` to be quarantined and its process to end so; the reason given."""
    st = c.wait_for(lambda s: s["quarantined"], "the volunteer to be quarantined", timeout=30)
    q = st["quarantined"][0]
    assert q["workerId"] == worker, q
    assert proc.proc.wait(timeout=15) == 4
    return q["reason"]


@contextlib.contextmanager
def ended(c):
    """`c` for a `with` block, its volunteers stopped and its coordinator ended after it."""
    try:
        yield c
    finally:
        c.stop_all()
        c.server.process.terminate()


def windowed(start_server, tmp_path_factory, name, window):
    """A coordinator checking every window of a volunteer's passes (`--verify-fraction 1`), none
    of them as one of its first passes (`--verify-first 0`), windows of `window` passes on
    average (`--verify-window`)."""
    return start_cluster(start_server, tmp_path_factory, name,
                         options=("--verify-first", "0", "--verify-fraction", "1", "--verify-window", str(window)))


def test_a_volunteer_that_lies_unless_its_session_was_just_copied_is_caught_in_a_checked_window(start_server,
                                                                                               tmp_path_factory):
    """`--fault cheat-unless-dumped`: the volunteer answers a pass right only when its session
    was dumped since its last pass — the sign of a check when every checked pass was preceded
    by a copy of its sessions, so it went unseen while it lied on the passes left unchecked —
    and lies otherwise. Now the copies come once a window, checked or not, and a checked
    window's passes are done again once answered: its first lie is caught and it is quarantined."""
    with ended(windowed(start_server, tmp_path_factory, "cheat", 50)) as c:
        cheat, _, model = holding_stories(c, "w_cheat", "cheat-unless-dumped")
        step = compiled_step(c, model)
        prefilled_session(c, model, step)
        reason = quarantine_reason(c, "w_cheat", cheat)
        assert "checked after it was given, differs from the verifier's" in reason, reason
        # (the call it lied on may have had its answer before the check, or been sent again
        # elsewhere when the quarantine overtook it) the model decodes as it should elsewhere
        placed_on(c, model, "w_honest")
        sid2, _ = prefilled_session(c, model, step)
        assert PROMPT + generate(c, step, sid2, len(GOLDEN["greedy_ids"]) - len(PROMPT))["tokens"] == GOLDEN["greedy_ids"]
        c.server.assert_up()


@pytest.mark.parametrize("room", [("--verify-queue", "4K"), ("--verify-queue-total", "4K")],
                         ids=["per-volunteer", "all-volunteers"])
def test_what_checked_windows_hold_for_the_verifier_counts_against_the_volunteers_queue(start_server, tmp_path_factory,
                                                                                          room):
    """`--verify-queue` bounds what a volunteer's checked windows hold in the coordinator while
    they wait for its verifier — the passes, the answers the volunteer gave them, its copies of
    the windows' sessions —, `--verify-queue-total` the same for all volunteers together. A
    session copy is held whatever its size while no other copy is: with 4K, compiled decode
    steps on a session of 64 cache rows (an 80 KB copy, a token for an answer) are checked; steps of four tokens whose answer is their logits (four rows of 512
    floats, some 11 KB) do not fit: their windows go unchecked (before answers were counted,
    only the passes were); and afterwards the decode steps are checked again (what the windows
    held was given back)."""
    with ended(start_cluster(start_server, tmp_path_factory, "queue",
                             options=("--verify-first", "0", "--verify-fraction", "1", "--verify-window", "2", *room))) as c:
        c.join("w_honest")
        model, where = load_stories(c)
        assert where == "w_honest"
        api, key = c.server.api, c.key
        step = compiled_step(c, model)
        sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
        expect(api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", "64"), session=sid)}, key=key), 200)

        def steps(n):
            for pos, tok in enumerate((PROMPT * 4)[:n]):
                expect(api.post("/api/v3/graph", {"graphId": step, "session": sid, "bind": {"ids": [tok], "pos": pos}},
                                key=key, timeout=60), 200)

        # (a window whose copy comes while the verifier still holds the previous one's — it
        # judges the window before with it, then starts from it — goes unchecked: windows of two
        # passes, each checked, make that happen now and then; with copies held to the room
        # none of these windows would be checked)
        steps(12)
        st = c.wait_for(lambda s: s["pool"][0]["checks"]["passed"] >= 8, "the decode steps' checks")
        unchecked = st["pool"][0]["checks"]["unchecked"]
        logits = expect(api.post("/api/v3/graphs", {"graph": graph_cli(
            "--model-id", model, "--compiled", "--tokens", "4", "--cache", "64")}, key=key), 200)["graphId"]
        for pos in (0, 4, 8):
            r = expect(api.post("/api/v3/graph", {"graphId": logits, "session": sid,
                                                  "bind": {"ids": PROMPT[:4], "pos": pos}}, key=key, timeout=60), 200)
            assert len(json.dumps(r["outputs"])) > 4096
        st = c.wait_for(lambda s: s["pool"][0]["checks"]["unchecked"] > unchecked, "the large answers' windows to go unchecked")
        passed = st["pool"][0]["checks"]["passed"]
        steps(16)
        st = c.wait_for(lambda s: s["pool"][0]["checks"]["passed"] >= passed + 8, "the decode steps' checks again")
        assert st["quarantined"] == [], st["quarantined"]
        c.server.assert_up()


def test_an_honest_volunteer_whose_every_window_is_checked_is_never_judged_wrong(start_server, tmp_path_factory):
    """Windows of two passes on average, each checked: graph calls on sessions (copied at every
    turn of their windows), calls on no session, checkpoints, generations and a deleted session.
    Every answer is the golden one, every check agrees and none is left unchecked."""
    with ended(windowed(start_server, tmp_path_factory, "honest", 2)) as c:
        c.join("w_honest")
        model, where = load_stories(c)
        assert where == "w_honest"
        step = compiled_step(c, model)
        api, key = c.server.api, c.key
        n = len(GOLDEN["greedy_ids"]) - len(PROMPT)
        sessions = []
        for _ in range(2):
            sid, answers = prefilled_session(c, model, step)
            sessions.append((sid, answers))
            expect(api.post("/api/v3/graph", {"graph": graph_cli("--model-id", model, "--ids", "1,2,3")}, key=key), 200)
        assert sessions[0][1] == sessions[1][1]
        for sid, _ in sessions:
            assert PROMPT + generate(c, step, sid, n)["tokens"] == GOLDEN["greedy_ids"]
        expect(api.delete(f"/api/v3/sessions/{sessions[0][0]}", key=key), 200)
        sid = sessions[1][0]
        assert PROMPT + generate(c, step, sid, n)["tokens"] == GOLDEN["greedy_ids"]
        # graphs over two sessions (SES-14) between calls on one of them: their windows merge
        a, b = (expect(api.post("/api/v3/sessions", {}, key=key), 200)["session"]["sessionId"] for _ in range(2))
        for s in (a, b):
            zeros = {"op": "zeros", "in": [], "out": "z", "params": {"shape": [3, 2]}}
            expect(api.post("/api/v3/graph", {"graph": {"session": s, "inputs": [], "steps": [zeros], "retain": {"kc": "z"}}},
                            key=key), 200)

        def read(s):
            g = {"session": s, "inputs": [{"name": "t", "session": "kc"}],
                 "steps": [{"op": "scale", "in": ["t"], "out": "o", "params": {"factor": 1}}], "outputs": ["o"]}
            return expect(api.post("/api/v3/graph", {"graph": g}, key=key), 200)["outputs"]["o"]["data"]

        for k in range(6):
            g = {"session": a, "sessions": [a, b],
                 "inputs": [{"name": "ka", "session": "kc", "of": 0}, {"name": "kb", "session": "kc", "of": 1},
                            {"name": "xa", "shape": [1, 2], "data": [k, k]}, {"name": "xb", "shape": [1, 2], "data": [10 + k, 10 + k]}],
                 "steps": [{"op": "cache_write", "in": ["ka", "xa"], "out": "wa", "params": {"offset": k % 3}},
                           {"op": "cache_write", "in": ["kb", "xb"], "out": "wb", "params": {"offset": k % 3}}],
                 "outputs": ["wa"]}
            expect(api.post("/api/v3/graph", {"graph": g}, key=key), 200)
            read(a if k % 2 else b)
        assert read(a) == [3, 3, 4, 4, 5, 5] and read(b) == [13, 13, 14, 14, 15, 15]
        st = c.wait_for(lambda s: s["pool"][0]["checks"]["passed"] >= 12, "the checks to be counted", timeout=20)
        time.sleep(0.5)  # (the last window's comparison)
        st = c.status(key)
        checks = st["pool"][0]["checks"]
        assert checks["exact"] is True and checks["unchecked"] == 0 and checks["inconclusive"] == 0, checks
        assert st["quarantined"] == [] and [w["workerId"] for w in st["pool"]] == ["w_honest"], st
        c.server.assert_up()


def test_wrong_caches_are_caught_at_the_end_of_a_checked_window(start_server, tmp_path_factory):
    """`--fault corrupt-caches` (answers right, a cache value changed after each call) with no
    first passes: the verifier starts each checked window from the volunteer's copies, so the
    answers agree, and the copies at the window's end differ from the verifier's sessions.
    (Windows of one pass each, so the first one ends after the first call: with longer ones
    the calls here may all fall in one window that has not ended yet.)"""
    with ended(windowed(start_server, tmp_path_factory, "caches", 1)) as c:
        sly, _, model = holding_stories(c, "w_caches", "corrupt-caches")
        step = compiled_step(c, model)
        feed_until_refused(c, model, step)
        reason = quarantine_reason(c, "w_caches", sly)
        assert "at the end of a checked window" in reason and "unlike the verifier's" in reason, reason
        c.server.assert_up()


def test_a_generation_in_a_checked_window_is_run_again_and_its_lies_caught(start_server, tmp_path_factory):
    """`--fault corrupt-generation-tokens` (graph calls right, every token of a worker-side
    generation altered) with no first passes: the verifier runs the generation again after it
    ended, and the tokens differ."""
    with ended(windowed(start_server, tmp_path_factory, "gen", 50)) as c:
        sly, _, model = holding_stories(c, "w_tokens", "corrupt-generation-tokens")
        step = compiled_step(c, model)
        sid, _ = prefilled_session(c, model, step)
        assert c.status(c.key)["quarantined"] == []
        generate(c, step, sid, 8)
        reason = quarantine_reason(c, "w_tokens", sly)
        assert "generated token 0 was" in reason and "a checked window" in reason, reason
        c.server.assert_up()


def reads_during_a_generation(c):
    """An honest volunteer holding stories260K; a long worker-side generation streamed, and
    five graph calls reading the session's caches while it runs; then nothing is quarantined."""
    import http.client
    from test_generate import read_sse

    c.join("w_honest")
    model, _ = load_stories(c)
    api, key = c.server.api, c.key
    step = expect(api.post("/api/v3/graphs", {"graph": graph_cli(
        "--model-id", model, "--compiled", "--tokens", "1", "--cache", "256", "--argmax")}, key=key), 200)["graphId"]
    sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
    expect(api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", "256"), session=sid)}, key=key), 200)
    read = {"session": sid, "inputs": [{"name": "t", "session": "k0"}],
            "steps": [{"op": "scale", "in": ["t"], "out": "o", "params": {"factor": 1}}], "outputs": ["o"]}
    conn = http.client.HTTPConnection("127.0.0.1", c.server.port, timeout=60)
    body = {"graphId": step, "sessionId": sid, "ids": [PROMPT[0]], "startPos": 0, "maxNewTokens": 250}
    conn.request("POST", "/api/v3/generate", json.dumps(body), {"x-api-key": key})
    resp = conn.getresponse()
    assert resp.status == 200
    reads = 0
    for event, _ in read_sse(resp):
        if event == "token" and reads < 5:  # (while it runs)
            expect(api.post("/api/v3/graph", {"graph": read}, key=key), 200)
            reads += 1
    conn.close()
    assert reads == 5
    expect(api.post("/api/v3/graph", {"graph": read}, key=key), 200)
    time.sleep(1.0)  # (the verifier's turn)
    st = c.status(key)
    assert st["quarantined"] == [] and [w["workerId"] for w in st["pool"]] == ["w_honest"], st
    c.server.assert_up()


def test_a_client_reading_its_session_during_a_first_pass_generation_gets_no_honest_volunteer_quarantined(grid):
    """The same race among a volunteer's first passes: the generation's comparison and the
    reads' checks are left unjudged, the calls answered by the volunteer."""
    reads_during_a_generation(grid)


def test_a_client_reading_its_session_during_a_generation_gets_no_honest_volunteer_quarantined(start_server,
                                                                                                  tmp_path_factory):
    """Graph calls on a session while a worker-side generation runs on it (nothing forbids it)
    run between the loop's steps on the volunteer, an order its verifier cannot follow: the
    window's check ends there unjudged, rather than a client's race getting an honest volunteer
    quarantined."""
    with ended(windowed(start_server, tmp_path_factory, "race", 50)) as c:
        reads_during_a_generation(c)


@pytest.mark.parametrize("passes", ["first", "windows"])
def test_a_volunteer_that_hides_its_sessions_is_quarantined(start_server, tmp_path_factory, passes):
    """`--fault refused-dumps`: every copy of a session is denied as if the session were not
    there (its calls answered right; denying them would leave the verifier nothing to start
    from or compare with), among its first passes or in the windows after them. The session
    was opened on it through its checked worker and not closed: the first copy it denies
    quarantines it."""
    with ended((windowed(start_server, tmp_path_factory, "hides", 2) if passes == "windows"
                else start_cluster(start_server, tmp_path_factory, "hides"))) as c:
        sly, _, model = holding_stories(c, "w_hides", "refused-dumps")
        step = compiled_step(c, model)
        sid = feed_until_refused(c, model, step)
        reason = quarantine_reason(c, "w_hides", sly)
        assert "it would not show session " + sid + ", which it holds" in reason, reason
        c.server.assert_up()


@pytest.mark.parametrize("passes", ["first", "windows"])
def test_a_volunteer_whose_copies_of_sessions_are_malformed_is_quarantined(start_server, tmp_path_factory, passes):
    """`--fault malformed-dumps`: every copy of a session comes with its first tensor a byte
    short (its calls answered right) — a copy no worker writes and no verifier can load. Among
    the first passes, or at the turn of any window, checked or not (the default fraction;
    windows of two passes on average): the first such copy quarantines it (before, the verifier's failure to load it left the pass or
    the window unchecked, every one of them)."""
    with ended(start_cluster(start_server, tmp_path_factory, "malformed",
                             options=() if passes == "first" else ("--verify-first", "0", "--verify-window", "2"))) as c:
        sly, _, model = holding_stories(c, "w_malformed", "malformed-dumps")
        step = compiled_step(c, model)
        sid = feed_until_refused(c, model, step)
        reason = quarantine_reason(c, "w_malformed", sly)
        assert f"its copy of session {sid} is malformed: its tensor" in reason, reason
        assert "bytes for a shape of" in reason, reason
        placed_on(c, model, "w_honest")
        sid, _ = prefilled_session(c, model, step)
        generates_golden(c, step, sid)
        c.server.assert_up()


def test_a_volunteer_that_leaves_a_copy_of_a_session_unanswered_is_removed(start_server, tmp_path_factory):
    """`--fault unanswered-dumps`: copies of sessions are taken and never answered (its calls
    answered right). Every window begins with one, checked or not: 15 s past the limit the
    volunteer is removed — not quarantined — and its work goes to the honest volunteer."""
    with ended(start_cluster(start_server, tmp_path_factory, "nodumps",
                             options=("--verify-first", "0", "--graph-timeout-ms", "2000"))) as c:
        silent, _, model = holding_stories(c, "w_nodumps", "unanswered-dumps")
        step = compiled_step(c, model)
        api, key = c.server.api, c.key
        sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
        # (its calls are answered meanwhile)
        expect(api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", "64"), session=sid)}, key=key), 200)
        st = c.wait_for(lambda s: [w["workerId"] for w in s["pool"]] == ["w_honest"], "the volunteer to be removed",
                        timeout=40)
        assert st["quarantined"] == [], st["quarantined"]
        assert re.search(r"removed volunteer w_nodumps-box from the grid: it left a copy of a session unanswered "
                         r"15 s past the limit \(2 s\)", c.server.process.output())
        assert silent.proc.wait(timeout=15) != 0
        placed_on(c, model, "w_honest")
        sid, _ = prefilled_session(c, model, step)
        generates_golden(c, step, sid)
        c.server.assert_up()
