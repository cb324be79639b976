"""Gated repositories and pinned revisions of hf: sources, against `mpakt host` serving a gated
copy of stories260K (a `.gated` token list, as the hub gates repositories) with two revisions:
a load needs a token (the request's own, or the grid's from --hf-token-file), which never shows
in an answer or a log; a load records the commit the host resolved its revision to, shows it,
and a lost worker's share is fetched again from that commit even after the branch moved."""
from __future__ import annotations

import json
import shutil
import struct
import time

import numpy as np
import pytest

from e2e_util import STORIES_DIR, WORK_S, expect
from test_durability import grid  # noqa: F401 (the fixture: a coordinator and two volunteers)

REPO = "gated/stories"
USER_TOKEN, GRID_TOKEN = "hf_user_token_5f2e", "hf_grid_token_9a1c"
C_MAIN = "a" * 40
C_OLD = "b" * 40
GOLDEN_LOGITS = np.load(STORIES_DIR / "goldens" / "stories260K_once_upon_logits_f64.npy")
PROMPT = json.loads((STORIES_DIR / "goldens" / "stories260K_once_upon.json").read_text())["prompt_ids"]


def scaled_norm(src, dst, factor):
    """stories260K's checkpoint with its final norm's weights scaled: other logits, same shapes."""
    data = bytearray(src.read_bytes())
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    a, b = header["model.norm.weight"]["data_offsets"]
    w = np.frombuffer(bytes(data[8 + n + a:8 + n + b]), dtype=np.float32) * factor
    data[8 + n + a:8 + n + b] = w.astype(np.float32).tobytes()
    dst.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def repo(hub_dir):
    root = hub_dir / REPO
    (root / "revisions" / "v-old").mkdir(parents=True)
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(STORIES_DIR / f, root / f)
        shutil.copy(STORIES_DIR / f, root / "revisions" / "v-old" / f)
    scaled_norm(STORIES_DIR / "model.safetensors", root / "revisions" / "v-old" / "model.safetensors", 1.5)
    (root / ".gated").write_text(f"{USER_TOKEN}\n{GRID_TOKEN}\n")
    (root / ".commit").write_text(C_MAIN + "\n")
    (root / "revisions" / "v-old" / ".commit").write_text(C_OLD)
    return root


def prefill_logits(api, key, model):
    g = expect(api.post(f"/api/v3/models/{model}/graph", {"ids": PROMPT, "pos": 0}, key=key), 200)["graph"]
    out = expect(api.post("/api/v3/graph", {"graph": g}, key=key, timeout=WORK_S), 200)["outputs"]["logits"]
    return np.array(out["data"]).reshape(out["shape"][-2], out["shape"][-1])


def test_a_gated_repository_needs_a_token_that_never_shows(server, repo):
    api = server.api
    key = server.account("gated-user")[1]
    log_start = server.process.log_size()
    source = "hf:" + REPO
    for token in (None, "hf_not_on_the_list"):
        body = {"source": source} | ({"token": token} if token else {})
        r = expect(api.post("/api/v3/models", body, key=key, timeout=WORK_S), 400, "gated or private", REPO)
        assert "hf_not" not in r["error"]
        q = f"/api/v3/models/inspect?source={source}" + (f"&token={token}" if token else "")
        expect(api.get(q, key=key, timeout=WORK_S), 400, "gated or private")
    info = expect(api.get(f"/api/v3/models/inspect?source={source}&token={USER_TOKEN}", key=key, timeout=WORK_S), 200)
    assert isinstance(info, dict) and info
    loaded = expect(api.post("/api/v3/models", {"source": source, "token": USER_TOKEN}, key=key, timeout=WORK_S), 200)
    assert loaded["revision"] == "main" and loaded["commit"] == C_MAIN
    listed = [m for m in expect(api.get("/api/v3/models", key=key), 200)["models"] if m["modelId"] == loaded["modelId"]]
    assert listed[0]["commit"] == C_MAIN and listed[0]["source"] == source
    assert np.abs(prefill_logits(api, key, loaded["modelId"]) - GOLDEN_LOGITS[:len(PROMPT)]).max() < 1e-4
    # chat reads the model's tokenizer from the gated repository with the same token
    done = expect(api.post("/api/v3/chat", {"model": loaded["modelId"], "messages": [{"role": "user", "content": "Once"}],
                                            "maxTokens": 4, "stream": False}, key=key, timeout=WORK_S), 200)
    assert done["ok"]
    everything = json.dumps([loaded, listed, info]) + server.process.log_since(log_start, 10**7)
    assert USER_TOKEN not in everything and "hf_not_on_the_list" not in everything


def test_the_grids_token_file_opens_gated_repositories(start_server, repo, tmp_path):
    token_file = tmp_path / "hf-token"
    token_file.write_text(GRID_TOKEN + "\n")
    srv = start_server("--hf-token-file", str(token_file))
    key = srv.account("grid-token")[1]
    loaded = expect(srv.api.post("/api/v3/models", {"source": "hf:" + REPO}, key=key, timeout=WORK_S), 200)
    assert loaded["commit"] == C_MAIN
    # a request's own token wins over the grid's
    expect(srv.api.post("/api/v3/models", {"source": "hf:" + REPO, "token": "hf_not_on_the_list"}, key=key,
                        timeout=WORK_S), 400, "gated or private")
    assert GRID_TOKEN not in srv.process.log_since(0, 10**7)


def test_a_pinned_revision_loads_its_own_files(server, repo):
    api = server.api
    key = server.account("pinned")[1]
    old = expect(api.post("/api/v3/models", {"source": f"hf:{REPO}@v-old", "token": USER_TOKEN}, key=key,
                          timeout=WORK_S), 200)
    assert old["revision"] == "v-old" and old["commit"] == C_OLD
    by_id = expect(api.post("/api/v3/models", {"source": f"hf:{REPO}@{C_MAIN}", "token": USER_TOKEN}, key=key,
                            timeout=WORK_S), 200)
    assert by_id["commit"] == C_MAIN
    a, b = prefill_logits(api, key, old["modelId"]), prefill_logits(api, key, by_id["modelId"])
    assert np.abs(b - GOLDEN_LOGITS[:len(PROMPT)]).max() < 1e-4 and np.abs(a - b).max() > 1e-2


@pytest.mark.timeout(300)
def test_a_lost_workers_share_is_fetched_again_from_the_loads_commit(grid, hub_dir, tmp_path):
    """The branch moves after the load (main now holds other weights under another commit);
    the volunteer holding the model is killed; the model placed again computes what it did."""
    api, key = grid.server.api, grid.key
    root = hub_dir / "gated" / "moving"
    shutil.copytree(hub_dir / REPO, root)
    # the hub keeps every commit: main's, by its id, once main moves on
    shutil.copytree(STORIES_DIR, root / "revisions" / C_MAIN, ignore=shutil.ignore_patterns("goldens", "llama2c", "*.md"))
    try:
        model = expect(api.post("/api/v3/models", {"source": "hf:gated/moving", "token": USER_TOKEN}, key=key,
                                timeout=WORK_S), 200)
        assert model["commit"] == C_MAIN
        before = prefill_logits(api, key, model["modelId"])
        # main moves on: other weights, another commit (its old commit stays reachable by id)
        scaled_norm(STORIES_DIR / "model.safetensors", tmp_path / "moved.safetensors", 2.0)
        shutil.copy(tmp_path / "moved.safetensors", root / "model.safetensors")
        (root / ".commit").write_text("c" * 40)
        holder = grid.holder(model["modelId"])
        grid.kill(holder)
        deadline = time.monotonic() + 60
        while grid.holder(model["modelId"]) == holder:
            assert time.monotonic() < deadline, "the model was not placed again"
            time.sleep(0.1)
        after = prefill_logits(api, key, model["modelId"])
        assert np.abs(after - before).max() < 1e-6, "the share was fetched from the moved branch"
        listed = [m for m in expect(api.get("/api/v3/models", key=key), 200)["models"] if m["modelId"] == model["modelId"]]
        assert listed[0]["commit"] == C_MAIN
    finally:
        shutil.rmtree(root, ignore_errors=True)
