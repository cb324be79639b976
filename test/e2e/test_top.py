"""`mpakt top` (docs/operating.md): the console's picture in a terminal, read from
GET /api/v3/admin/actors with an operator's key. Against a coordinator with two volunteers, a
model and a session: `--once` prints the same workers, memory, models and sessions as
GET /api/v3/status; run in tmux (read back with capture-pane) it redraws live — a generation
shows while it runs, and a volunteer killed with SIGKILL leaves the table while the model moves
to the other one. A key that is not an operator's is refused with the server's words."""
from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time

import pytest

from e2e_util import binary, expect
from test_console import operator_grid



def bytes_text(b):
    """mpakt top's byte counts (1024-based, one decimal from K on)."""
    units = ["B", "K", "M", "G", "T"]
    u = 0
    while abs(b) >= 1024 and u < 4:
        b /= 1024
        u += 1
    return f"{b:.0f}{units[u]}" if u == 0 else f"{b:.1f}{units[u]}"


@pytest.fixture(scope="module")
def grid(start_server, tmp_path_factory):
    g = operator_grid(start_server, tmp_path_factory, "top")
    yield g
    g["cluster"].stop_all()
    g["cluster"].server.process.terminate()


def top_once(grid, key):
    return subprocess.run([binary(), "top", "--url", grid["url"], "--key", key, "--once"], capture_output=True,
                          text=True, timeout=30)


def worker_rows(screen):
    """{worker id: its row} from the WORKERS table of a picture."""
    rows, inside = {}, False
    for line in screen.splitlines():
        if line.startswith("WORKERS"):
            inside = True
            continue
        if inside and not line.strip():
            break
        if inside and "pipeline over" not in line:
            rows[line.split()[0]] = line
    return rows


def totals(screen):
    m = re.search(r"grid: (\d+) workers \((\d+) busy, (\d+) not answering\), (\d+) models, (\d+) sessions, "
                  r"(\d+) generations", screen)
    assert m, screen
    return tuple(int(g) for g in m.groups())


def agrees_with_status(screen, status):
    """The picture's workers (ids, memory used of offered), counts and model placement are the
    status's."""
    rows = worker_rows(screen)
    assert sorted(rows) == sorted(w["workerId"] for w in status["pool"]), (rows, status["pool"])
    for w in status["pool"]:
        used = f"{bytes_text(w['totalBytes'] - w['freeBytes'])} / {bytes_text(w['totalBytes'])}"
        assert used in rows[w["workerId"]], (used, rows[w["workerId"]])
    workers, _, silent, models, sessions, _ = totals(screen)
    assert workers == status["workers"] == len(status["pool"]) and silent == 0


def test_once_prints_what_status_says(grid):
    api, key = grid["api"], grid["key"]
    r = top_once(grid, grid["op_key"])
    assert r.returncode == 0, r.stderr
    status = expect(api.get("/api/v3/status", key=key), 200)
    agrees_with_status(r.stdout, status)
    _, _, _, models, sessions, gens = totals(r.stdout)
    assert (models, sessions, gens) == (1, 1, 0)
    assert grid["model"] in r.stdout and grid["session"] in r.stdout
    # the model is placed on its holder, and the session is there too
    model_line = next(line for line in r.stdout.splitlines() if grid["model"] in line and "hf:local/stories260K" in line)
    assert grid["holder"] in model_line
    session_line = next(line for line in r.stdout.splitlines() if line.split()[:1] == [grid["session"]])
    assert grid["holder"] in session_line and grid["model"] in session_line


def test_a_key_that_is_not_an_operators_is_refused_in_the_servers_words(grid):
    r = top_once(grid, grid["key"])
    assert r.returncode == 1 and "answered 403" in r.stderr and "operator" in r.stderr, r.stderr
    r = top_once(grid, "mpk_" + "A" * 43)
    assert r.returncode == 1 and "answered 401" in r.stderr, r.stderr
    r = subprocess.run([binary(), "top", "--url", grid["url"]], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--key" in r.stderr


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (Debian package tmux)")
def test_in_tmux_it_redraws_a_generation_and_a_lost_volunteer(grid, tmp_path):
    c, api, key = grid["cluster"], grid["api"], grid["key"]
    name = f"mpakt-top-{c.server.port}"
    subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
    cmd = f"{binary()} top --url {grid['url']} --key {grid['op_key']} --interval 0.3"
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "170", "-y", "60", cmd], check=True)
    shots = []

    def screen():
        out = subprocess.run(["tmux", "capture-pane", "-p", "-t", name], capture_output=True, text=True).stdout
        shots.append(out)
        return out

    def wait_screen(cond, what, timeout=20):
        deadline = time.monotonic() + timeout
        while True:
            s = screen()
            if "grid:" in s and cond(s):
                return s
            assert time.monotonic() < deadline, (f"waited {timeout} s for {what}; the screen:\n{s}\n"
                                                 f"mpakt top --once:\n{top_once(grid, grid['op_key']).stdout}")
            time.sleep(0.2)

    try:
        s = wait_screen(lambda s: totals(s)[0] == 2, "the two volunteers")
        agrees_with_status(s, expect(api.get("/api/v3/status", key=key), 200))
        # a generation through the per-call loop (each call delayed): it shows while it runs
        prompt, sid, g = grid["prompt"], grid["session"], grid["graph"]
        done = {}

        def generate():
            done["r"] = api.post("/api/v3/generate", {"graphId": g, "sessionId": sid, "ids": [prompt[-1]],
                                                       "startPos": len(prompt) - 1, "maxNewTokens": 60, "stream": False,
                                                       "workerLoop": False}, key=key, timeout=120)

        t = threading.Thread(target=generate)
        t.start()
        s = wait_screen(lambda s: totals(s)[5] == 1 and re.search(r"\d+/60", s), "the generation")
        gen_line = next(line for line in s.splitlines() if re.search(r"\d+/60", line))
        assert sid in gen_line
        t.join(timeout=120)
        expect(done["r"], 200)
        wait_screen(lambda s: totals(s)[5] == 0, "the generation to end")
        # the model's holder killed: it leaves the table, the model moves to the other volunteer
        other = "w_b" if grid["holder"] == "w_a" else "w_a"
        c.kill(grid["holder"])
        s = wait_screen(lambda s: sorted(worker_rows(s)) == [other] and any(
            grid["model"] in line and other in line for line in s.splitlines()), "the volunteer to go and the model to move",
            timeout=40)
        agrees_with_status(s, expect(api.get("/api/v3/status", key=key), 200))
    finally:
        (tmp_path / "screens.txt").write_text("\n\n".join(shots[-5:]))
        print(f"mpakt top's last screens: {tmp_path / 'screens.txt'}")
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
