"""The operator's console page (web/console.html at GET /console) in a real browser: Debian's
headless Chromium driven by Selenium against a real `mpakt serve` with two volunteers (the
fixtures of test_cluster.py). Without a key it shows the sign-in form; a key that is not an
operator's shows the server's 403 message; an operator sees the grid live: during a
generation its workers, memory, models, sessions and the generation equal GET /api/v3/status
and GET /api/v3/admin/actors; the volunteer holding the model is killed with SIGKILL mid-way and
the page shows it lost, the model placed again on the other volunteer, then the grid healthy
again, without a reload. A model spread over two volunteers is drawn under its pipeline, and a
stream that drops is opened again.

Screenshots of those moments are written to a folder the test prints (MPAKT_CONSOLE_SCREENSHOTS
names one, e.g. docs/images to refresh the pictures of docs/operating.md).

Needs the Debian packages chromium and chromium-driver and the PyPI package selenium, like
test_chat_page.py."""
from __future__ import annotations

import http.client
import json
import os
from pathlib import Path
import subprocess
import threading
import time

import pytest

from e2e_util import binary, expect
from test_cluster import start_cluster

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

_missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
if _missing:
    pytest.skip(f"the browser tests need {' and '.join(_missing)} (Debian packages chromium and chromium-driver)",
                allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="the browser tests need the PyPI package selenium")

from selenium.common.exceptions import StaleElementReferenceException, TimeoutException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

WEB = Path(__file__).resolve().parents[2] / "web"
OPERATOR = "console-page-op"
PASSWORD = "a long password"  # (Server.account's)
SCREEN = (1440, 1000)
CACHE = 1024
# Every graph call on the volunteers waits this long first: a generation of GENERATE tokens
# through the ordinary loop (one call per token) runs for over 20 s unless its worker dies.
DELAY_MS = "20"
GENERATE = 1000


@pytest.fixture(scope="module")
def grid(start_server, tmp_path_factory, slow_model, hub_dir):
    """A coordinator with two volunteers, an operator's account, another account's key,
    hf:local/slow (77 MB: placing it again after a loss takes a moment the page can show)
    loaded on one volunteer, a session on it with its caches, and a compiled greedy step."""
    c = start_cluster(start_server, tmp_path_factory, "console-page")
    server, api = c.server, c.server.api
    _, op_key = server.account(OPERATOR)
    r = server.admin("grant-admin", OPERATOR)
    assert r.returncode == 0, r.stdout + r.stderr
    c.join("w_a", "1G", "--delay-ms", DELAY_MS)
    c.join("w_b", "1G", "--delay-ms", DELAY_MS)
    model = expect(api.post("/api/v3/models", {"source": slow_model}, key=c.key, timeout=60), 200)["modelId"]
    on = [w["workerId"] for w in c.status(c.key)["pool"] if model in w["models"]]
    assert len(on) == 1, c.status(c.key)

    def graph_cli(*args):
        out = subprocess.run([str(binary()), "graph", str(hub_dir / "local" / "slow" / "config.json"), *args],
                             capture_output=True, text=True, timeout=30, check=True)
        return json.loads(out.stdout)

    sid = expect(api.post("/api/v3/sessions", {"modelId": model, "label": "console"}, key=c.key), 200)["session"]["sessionId"]
    expect(api.post("/api/v3/graph", {"graph": dict(graph_cli("--alloc-cache", str(CACHE)), session=sid)}, key=c.key), 200)
    greedy = expect(api.post("/api/v3/graphs", {"label": "greedy", "graph": graph_cli(
        "--model-id", model, "--compiled", "--tokens", "1", "--cache", str(CACHE), "--argmax")}, key=c.key), 200)["graphId"]
    yield {"cluster": c, "api": api, "key": c.key, "op_key": op_key, "model": model, "holder": on[0], "session": sid,
           "graph": greedy}
    c.stop_all()
    server.process.terminate()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    named = os.environ.get("MPAKT_CONSOLE_SCREENSHOTS")
    folder = Path(named).resolve() if named else tmp_path_factory.mktemp("console-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nconsole screenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-extensions",
              f"--window-size={SCREEN[0]},{SCREEN[1]}", "--force-color-profile=srgb"):
        options.add_argument(a)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_script_timeout(10)
    yield driver
    driver.quit()


@pytest.fixture
def page(browser, grid):
    """/console, fresh: nothing kept in the browser."""
    base = grid["cluster"].server.base_url
    browser.get(base + "/console")
    browser.execute_script("localStorage.clear(); sessionStorage.clear();")
    browser.get(base + "/console")
    return browser


# --------------------------------------------------------------------------- helpers


def by_id(d, ident):
    return d.find_element(By.ID, ident)


def shown(d, ident):
    return by_id(d, ident).is_displayed()


def text_of(d, css):
    """An element's text read in one script call: the details panel and the graph are redrawn
    every second, so an element Selenium found may be replaced before its text is read."""
    return d.execute_script("const e = document.querySelector(arguments[0]); return e ? e.textContent.trim() : null;", css)


def wait_for(d, what, timeout=10.0, message=""):
    try:
        # (an element replaced by a redraw between finding and reading it: try again)
        return WebDriverWait(d, timeout, poll_frequency=0.05,
                             ignored_exceptions=[StaleElementReferenceException]).until(lambda _: what())
    except TimeoutException:
        banner = d.find_elements(By.ID, "error-banner")
        err = banner[0].text if banner and banner[0].is_displayed() else ""
        pytest.fail(f"{message or 'the page did not get there'} within {timeout:g} s"
                    + (f"; the page shows the error: {err}" if err else ""), pytrace=False)


def shoot(d, shots, name):
    path = shots / name
    d.execute_script("window.scrollTo(0, 0)")
    d.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def mb(n):
    """The page's mb(): decimal megabytes, fewer decimals as the number grows."""
    v = n / 1e6
    return (f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 1 else f"{v:.2f}") + " MB"


READ_PAGE = """
const nodes = [...document.querySelectorAll('#graph [data-testid=node]')].map(n => {
  const m = /translate\\(([-\\d.]+),([-\\d.]+)\\)/.exec(n.getAttribute('transform'));
  return {kind: n.dataset.kind, id: n.dataset.id, state: n.dataset.state, answered: n.dataset.answered,
          total: n.dataset.totalBytes, free: n.dataset.freeBytes, used: n.dataset.usedBytes,
          resident: n.dataset.residentBytes, tokens: n.dataset.tokens, x: +m[1], y: +m[2], text: n.textContent};
});
const counts = {};
for (const dd of document.querySelectorAll('#counts dd')) counts[dd.dataset.testid] = dd.textContent;
const mem = document.getElementById('grid-memory');
return {nodes, counts, atMs: +document.getElementById('snapshot-at').dataset.atMs,
        health: document.getElementById('health').dataset.state,
        healthText: document.getElementById('health-text').textContent,
        memory: {total: mem.dataset.totalBytes, free: mem.dataset.freeBytes, text: mem.textContent},
        stream: document.getElementById('stream-status').dataset.state};
"""


def read_page(d):
    return d.execute_script(READ_PAGE)


def api_picture(grid):
    body = expect(grid["api"].get("/api/v3/admin/actors", key=grid["op_key"]), 200)
    status = expect(grid["api"].get("/api/v3/status", key=grid["key"]), 200)
    return body, status


def differences(page, body, status):
    """Where the page's graph and counts differ from the API's picture and status (an empty
    list: they agree). Generation token counts grow between two reads and are compared apart."""
    diff = []
    nodes = {(n["kind"], n["id"]): n for n in page["nodes"] if n["state"] not in ("lost", "recovered") or n["kind"] != "worker"}
    actors = {(a["kind"], a["id"]): a for a in body["actors"]}

    def same(what, got, want):
        if got != want:
            diff.append(f"{what}: the page has {got!r}, the API {want!r}")

    def ids(kind, among):
        return sorted(i for k, i in among if k == kind)

    for kind in ("coordinator", "pool", "accounts", "worker", "model", "session", "generation", "pipeline", "load"):
        same(f"{kind} ids", ids(kind, nodes), ids(kind, actors))
    # every worker with its memory, as GET /api/v3/status has it
    same("workers", ids("worker", nodes), sorted(w["workerId"] for w in status["pool"]))
    for w in status["pool"]:
        n = nodes.get(("worker", w["workerId"]))
        if not n:
            continue
        used = w["totalBytes"] - w["freeBytes"]
        same(f"{w['workerId']} total", n["total"], str(w["totalBytes"]))
        same(f"{w['workerId']} free", n["free"], str(w["freeBytes"]))
        same(f"{w['workerId']} used", n["used"], str(used))
        same(f"{w['workerId']} resident", n["resident"], str(actors[("worker", w["workerId"])]["state"]["residentBytes"]))
        if f"{mb(used)} used of {mb(w['totalBytes'])}" not in n["text"]:
            diff.append(f"{w['workerId']}: the text {n['text']!r} does not say {mb(used)} used of {mb(w['totalBytes'])}")
    # each model under the worker the status lists it on (a spread one under its pipeline),
    # with its resident bytes
    for w in status["pool"]:
        wx = nodes.get(("worker", w["workerId"]), {}).get("x")
        for m in w["models"]:
            n, a = nodes.get(("model", m)), actors.get(("model", m))
            if n and a:
                pipe = nodes.get(("pipeline", f"pipeline of {m}"))
                same(f"column of model {m}", n["x"], pipe["x"] if pipe else wx)
                same(f"model {m} resident", n["resident"], str(a["state"]["residentBytes"]))
    # sessions under their worker's (or pipeline's) column, marked lost as the API says
    for (k, i), a in actors.items():
        if k == "session" and ("session", i) in nodes:
            n = nodes[("session", i)]
            same(f"session {i} lost", n["state"] == "lost", a["state"]["lost"] == 1)
            where = a["state"].get("worker", "")
            where = ("pipeline" if where.startswith("pipeline of ") else "worker", where)
            if where in nodes:
                same(f"column of session {i}", n["x"], nodes[where]["x"])
        if ("answered" in a) and (k, i) in nodes:
            same(f"{k} {i} answered", nodes[(k, i)]["answered"], "true" if a["answered"] else "false")
    c = page["counts"]
    same("count of workers", c.get("count-workers"), str(status["workers"]))
    for kind, testid in (("model", "count-models"), ("session", "count-sessions"), ("generation", "count-generations"),
                         ("load", "count-loads"), ("graph", "count-graphs")):
        same(f"count of {kind}s", c.get(testid), str(len(ids(kind, actors))))
    same("count of actors", c.get("count-actors"), str(len(body["actors"])))
    same("grid total bytes", page["memory"]["total"], str(status["totalBytes"]))
    same("grid free bytes", page["memory"]["free"], str(status["freeBytes"]))
    return diff


def agrees_with_the_api(d, grid, timeout=6.0):
    """Waits (a picture a second) until the page's next picture agrees with the API's; returns
    (page, actors body, status). Fails saying where they still differ."""
    deadline = time.monotonic() + timeout
    while True:
        page = read_page(d)
        body, status = api_picture(grid)
        diff = differences(page, body, status)
        if not diff:
            return page, body, status
        if time.monotonic() > deadline:
            pytest.fail("the page does not agree with the API:\n  " + "\n  ".join(diff), pytrace=False)
        time.sleep(0.25)


def click(d, css):
    """A click through the page's script: the graph and tables are redrawn every second, so
    an element Selenium found may be replaced before its click lands."""
    assert d.execute_script("const e = document.querySelector(arguments[0]); if (!e) return false;"
                            "e.dispatchEvent(new MouseEvent('click', {bubbles: true})); return true;", css), css


def events(d):
    return d.execute_script("return [...document.querySelectorAll('[data-testid=event]')].map(e => "
                            "({seq: +e.dataset.seq, what: e.dataset.what, kind: e.dataset.kind, id: e.dataset.id,"
                            " text: e.textContent}))")


def generate(grid, seen):
    """A greedy generation of GENERATE tokens on the session, one call per token (no stop
    token: it runs until its worker dies); keeps its done event."""
    conn = http.client.HTTPConnection("127.0.0.1", grid["cluster"].server.port, timeout=90)
    body = {"graphId": grid["graph"], "sessionId": grid["session"], "ids": [1], "startPos": 0,
            "maxNewTokens": GENERATE, "workerLoop": False}
    conn.request("POST", "/api/v3/generate", json.dumps(body), {"x-api-key": grid["key"], "Content-Type": "application/json"})
    resp = conn.getresponse()
    seen["status"] = resp.status
    event = None
    try:
        for line in resp:
            line = line.decode().rstrip("\r\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "done":
                seen["done"] = json.loads(line[6:])
    except (OSError, http.client.HTTPException):
        pass
    finally:
        conn.close()


# --------------------------------------------------------------------------- tests


def test_the_console_is_served_and_asks_for_a_key(page, grid):
    api = grid["api"]
    for path in ("/console", "/console.html"):
        r = api.get(path)
        assert r.status == 200 and r.headers.get("Content-Type", "").startswith("text/html"), (path, r)
        assert r.body == (WEB / "console.html").read_bytes(), path
    assert api.get("/console.js").body == (WEB / "console.js").read_bytes()
    expect(api.get("/no-such-page"), 404)
    expect(api.get("/console.html/.."), 404)
    expect(api.get("/" + "x" * 300), 404)  # (longer than a file name may be)
    d = page
    wait_for(d, lambda: shown(d, "auth"), 5, "no sign-in form without a key")
    assert shown(d, "login-form") and shown(d, "key-form")
    assert not shown(d, "console") and not shown(d, "forbidden")


def test_a_key_that_is_not_an_operators_gets_the_403_message(page, grid, shots):
    d = page
    message = expect(grid["api"].get("/api/v3/admin/actors/stream", key=grid["key"]), 403)["error"]
    by_id(d, "key-input").send_keys(grid["key"])
    by_id(d, "key-submit").click()
    wait_for(d, lambda: shown(d, "forbidden"), 5, "the 403 was not shown")
    assert by_id(d, "forbidden-message").text == f"{message} (HTTP 403)"
    assert not shown(d, "console") and not shown(d, "auth")
    shoot(d, shots, "console-forbidden.png")
    by_id(d, "forbidden-sign-out").click()
    wait_for(d, lambda: shown(d, "auth"), 5, "'use another key' did not show the sign-in form")
    assert d.execute_script("return localStorage.getItem('mpakt.consoleKey')") is None


@pytest.mark.timeout(120)
def test_the_grid_live_during_a_generation_and_a_volunteer_killed_mid_way(page, grid, shots):
    d, c, holder, model = page, grid["cluster"], grid["holder"], grid["model"]
    other = "w_b" if holder == "w_a" else "w_a"
    # sign in with the operator's name and password: the page makes itself a key
    by_id(d, "login-username").send_keys(OPERATOR)
    by_id(d, "login-password").send_keys(PASSWORD)
    by_id(d, "login-submit").click()
    wait_for(d, lambda: shown(d, "console") and read_page(d)["stream"] == "live", 10, "the console did not go live")
    assert d.execute_script("return localStorage.getItem('mpakt.consoleKey')").startswith("mpk_")
    page0, _, _ = agrees_with_the_api(d, grid)
    assert page0["health"] == "healthy", page0["healthText"]

    # a generation decoding on the holder
    seen = {}
    talker = threading.Thread(target=generate, args=(grid, seen), daemon=True)
    talker.start()
    wait_for(d, lambda: any(n["kind"] == "generation" for n in read_page(d)["nodes"]), 30, "no generation on the page")
    page1, body, status = agrees_with_the_api(d, grid)
    gens = [a for a in body["actors"] if a["kind"] == "generation"]
    assert len(gens) == 1, gens
    gen = gens[0]
    node = next(n for n in page1["nodes"] if n["kind"] == "generation")
    assert node["id"] == gen["id"] and 1 <= int(node["tokens"]) <= gen["state"]["tokens"], (node, gen["state"])
    sid = next(link[8:] for link in gen["links"] if link.startswith("session:"))
    session = next(n for n in page1["nodes"] if n["kind"] == "session" and n["id"] == sid)
    holder_x = next(n["x"] for n in page1["nodes"] if n["kind"] == "worker" and n["id"] == holder)
    assert session["x"] == holder_x and node["y"] > session["y"], (session, node)
    assert model in next(w for w in status["pool"] if w["workerId"] == holder)["models"]
    # the count keeps up with the tokens
    wait_for(d, lambda: int(next((n["tokens"] for n in read_page(d)["nodes"] if n["kind"] == "generation"), "0"))
             > int(node["tokens"]), 5, "the generation's token count did not grow")
    # its full snapshot, on a click
    click(d, f"#graph [data-testid=node][data-kind=generation][data-id={gen['id']}]")
    wait_for(d, lambda: text_of(d, "#details-title") == f"generation {gen['id']}", 3, "no details for the generation")
    links = d.execute_script("return [...document.querySelectorAll('[data-testid=details-link]')].map(b => b.textContent)")
    assert sorted(links) == sorted(gen["links"]), (links, gen["links"])
    shoot(d, shots, "console-generation.png")

    # the table of workers, sorted and filtered, and a worker's full snapshot
    click(d, "[data-testid=kind-tab][data-kind=worker]")
    rows = lambda: d.execute_script(  # noqa: E731
        "return [...document.querySelectorAll('#actor-table tbody tr[data-testid=actor-row]')].map(r => r.dataset.id)")
    assert sorted(rows()) == ["w_a", "w_b"]
    click(d, "#actor-table [data-column=freeBytes]")
    frees = {w["workerId"]: w["freeBytes"] for w in status["pool"]}
    assert rows() == sorted(frees, key=lambda w: (frees[w], w)), rows()
    click(d, "#actor-table [data-column=freeBytes]")
    assert rows() == sorted(frees, key=lambda w: (-frees[w], w)), rows()
    filt = by_id(d, "table-filter")
    filt.send_keys(other)
    wait_for(d, lambda: rows() == [other], 3, "the filter did not leave the one worker")
    filt.clear()
    d.execute_script("arguments[0].dispatchEvent(new Event('input'))", filt)
    click(d, f"#graph [data-testid=node][data-kind=worker][data-id={holder}]")
    wait_for(d, lambda: text_of(d, "#details-title") == f"worker {holder}", 3, "no details for the worker")
    w = next(a for a in body["actors"] if a["kind"] == "worker" and a["id"] == holder)
    st = d.execute_script("return Object.fromEntries([...document.querySelectorAll('[data-testid=details-state] tr')]"
                          ".map(r => [r.dataset.name, r.cells[r.cells.length - 1].textContent]))")
    # (busyGraph, busySteps, …: only while a call computes, which comes and goes every 20 ms)
    stable = lambda keys: {k for k in keys if not k.startswith("busy")}  # noqa: E731
    assert stable(st) == stable(w["state"]), (sorted(st), sorted(w["state"]))
    for k in ("totalBytes", "backend", "kernels", "threads"):
        assert st[k] == str(w["state"][k]), (k, st[k], w["state"][k])
    links = d.execute_script("return [...document.querySelectorAll('[data-testid=details-link]')].map(b => b.textContent)")
    assert f"model:{model}" in links and f"session:{sid}" in links, links
    assert text_of(d, "[data-testid=details-answered]") == "yes"

    # the volunteer holding the model dies while the generation runs
    assert "done" not in seen and [a for a in api_picture(grid)[0]["actors"] if a["id"] == gen["id"]], seen
    d.execute_script("""
        window.__notReloaded = true;
        window.__states = [];
        const note = () => {
          const n = document.querySelector('#graph [data-testid=node][data-kind=worker][data-id=%s]');
          const s = (n ? n.dataset.state : 'absent') + '/' + document.getElementById('health').dataset.state;
          if (window.__states[window.__states.length - 1] !== s) window.__states.push(s);
        };
        note();
        new MutationObserver(note).observe(document.getElementById('graph'), {childList: true});""" % holder)
    c.kill(holder)
    wait_for(d, lambda: any(e["what"] == "lost" and e["id"] == holder for e in events(d)), 10,
             "the page's event log did not say the worker was lost")
    shoot(d, shots, "console-lost.png")
    wait_for(d, lambda: any(e["what"] == "recovered" and e["id"] == holder for e in events(d)), 60,
             "the page's event log did not say the worker's models were placed again")
    wait_for(d, lambda: read_page(d)["health"] == "healthy", 10, "the page did not show the grid healthy again")
    page2, body2, status2 = agrees_with_the_api(d, grid)
    shoot(d, shots, "console-recovered.png")
    talker.join(timeout=10)
    assert seen.get("status") == 200 and seen["done"]["stopped"] == "error" and seen["done"]["tokens"], seen
    assert len(seen["done"]["tokens"]) < GENERATE

    # no reload; the worker's node went from up to lost to recovered, the health with it
    assert d.execute_script("return window.__notReloaded") is True
    states = d.execute_script("return window.__states")
    assert states[0] == "up/healthy", states
    lost_at = states.index(next(s for s in states if s.startswith("lost/")))
    recovered_at = states.index(next(s for s in states if s.startswith("recovered/")))
    assert lost_at < recovered_at and states[lost_at] == "lost/recovering" and states[-1] == "recovered/healthy", states
    ghost = next(n for n in page2["nodes"] if n["kind"] == "worker" and n["id"] == holder)
    assert ghost["state"] == "recovered" and "lost at" in ghost["text"] and "recovered at" in ghost["text"], ghost
    # the model on the volunteer left, as GET /api/v3/status says
    assert [w["workerId"] for w in status2["pool"]] == [other] and model in status2["pool"][0]["models"]
    moved = next(n for n in page2["nodes"] if n["kind"] == "model" and n["id"] == model)
    assert moved["x"] == next(n["x"] for n in page2["nodes"] if n["kind"] == "worker" and n["id"] == other)
    assert page2["counts"]["count-workers"] == "1" and page2["counts"]["count-generations"] == "0"
    # the log has it all, in order: the reply started, the worker lost, recovered, the reply ended
    log = sorted(events(d), key=lambda e: e["seq"])
    what = [(e["what"], e["kind"], e["id"]) for e in log]
    assert ("started", "generation", gen["id"]) in what and ("ended", "generation", gen["id"]) in what, what
    assert what.index(("started", "generation", gen["id"])) < what.index(("lost", "worker", holder)) \
        < what.index(("recovered", "worker", holder)), what
    assert what.index(("lost", "worker", holder)) < what.index(("ended", "generation", gen["id"])), what
    assert d.execute_script("return document.querySelector('[data-testid=stream-status]').dataset.state") == "live"
    grid["cluster"].server.assert_up()


# Run in the page before its own script: each admin stream the page opens can be cut by the test
# (window.__streams[i]()), as a dropped connection would end it.
CUTTABLE_STREAMS = """
const realFetch = window.fetch;
window.__streams = [];
window.fetch = async (...args) => {
  const res = await realFetch(...args);
  if (!String(args[0]).endsWith('/api/v3/admin/actors/stream') || !res.ok) return res;
  const reader = res.body.getReader();
  let feed;
  const body = new ReadableStream({
    start(c) { feed = c; },
    async pull(c) { const {value, done} = await reader.read(); if (done) c.close(); else c.enqueue(value); },
    cancel() { reader.cancel(); },
  });
  window.__streams.push(() => { feed.error(new TypeError('the connection dropped')); reader.cancel(); });
  return new Response(body, {status: res.status, headers: res.headers});
};
"""


def test_a_spread_model_under_its_pipeline_and_a_dropped_stream_opened_again(start_server, tmp_path_factory, browser,
                                                                             shots):
    """stories260K spread over two volunteers that cannot hold it alone: the page draws its
    pipeline with the model and a session under it, a line to each part's worker, and agrees
    with the API; when its stream drops it says so and opens it again, without a reload."""
    c = start_cluster(start_server, tmp_path_factory, "console-page-spread")
    script = None
    try:
        api, key = c.server.api, c.key
        _, op_key = c.server.account("spread-page-op")
        assert c.server.admin("grant-admin", "spread-page-op").returncode == 0
        c.join("w_left", "1000K")
        c.join("w_right", "1000K")
        model = expect(api.post("/api/v3/models", {"source": "hf:local/stories260K"}, key=key, timeout=60), 200)["modelId"]
        sid = expect(api.post("/api/v3/sessions", {"modelId": model}, key=key), 200)["session"]["sessionId"]
        d = browser
        d.get(c.server.base_url + "/console")
        d.execute_script("localStorage.clear(); sessionStorage.clear();")
        script = d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": CUTTABLE_STREAMS})["identifier"]
        d.get(c.server.base_url + "/console")
        by_id(d, "key-input").send_keys(op_key)
        by_id(d, "key-submit").click()
        wait_for(d, lambda: any(n["kind"] == "pipeline" for n in read_page(d)["nodes"]), 10, "no pipeline on the page")
        page, body, _ = agrees_with_the_api(d, {"api": api, "key": key, "op_key": op_key})
        pipe_id = f"pipeline of {model}"
        nodes = {(n["kind"], n["id"]): n for n in page["nodes"]}
        pipe, m, sess = nodes[("pipeline", pipe_id)], nodes[("model", model)], nodes[("session", sid)]
        assert pipe["x"] == m["x"] == sess["x"] and pipe["y"] < m["y"] < sess["y"], (pipe, m, sess)
        assert "2 parts · 0 lost" in pipe["text"], pipe["text"]
        edges = d.execute_script("return [...document.querySelectorAll('#graph path.edge')]"
                                 ".map(e => [e.dataset.from, e.dataset.to].sort().join(' '))")
        for w in ("w_left", "w_right"):
            assert " ".join(sorted([f"pipeline:{pipe_id}", f"worker:{w}"])) in edges, edges
            assert nodes[("worker", w)]["y"] < pipe["y"]
        assert page["counts"]["count-pipelines"] == "1"
        shoot(d, shots, "console-pipeline.png")
        # the stream drops: the page says so, opens it again and is live, without a reload
        d.execute_script("window.__notReloaded = true; window.__streams[window.__streams.length - 1]()")
        wait_for(d, lambda: read_page(d)["stream"] == "reconnecting", 3, "a dropped stream was not noticed")
        at = read_page(d)["atMs"]
        wait_for(d, lambda: read_page(d)["stream"] == "live" and read_page(d)["atMs"] > at, 10, "the stream was not opened again")
        assert d.execute_script("return [window.__notReloaded, window.__streams.length]") == [True, 2]
        agrees_with_the_api(d, {"api": api, "key": key, "op_key": op_key})
    finally:
        if script:
            browser.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": script})
        c.stop_all()
        c.server.process.terminate()
