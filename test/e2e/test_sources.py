"""Which sources a server reads (LOAD-09 … LOAD-17, INS): local paths only inside the folders
`mpakt serve --allow-local DIR` names, URL sources and their redirects only to public
addresses unless `--allow-private-sources`, the operator's own --hf-endpoint always. A refused
or unreachable source is the caller's error: a 400 naming it, the same for paths that exist
and paths that do not."""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import threading
from urllib.parse import quote

import pytest

from e2e_util import WORK_S, binary, expect, free_port

STORY_FILE = "/local/stories260K/resolve/main/model.safetensors"


@pytest.fixture(scope="module")
def plain(start_server):
    """A server with the default policy, and a key on it."""
    srv = start_server()
    return srv, srv.account("plain")[1]


def refusal(srv, key, source):
    """Inspect and load of `source` are both 400; returns inspect's message."""
    r = srv.api.get("/api/v3/models/inspect?source=" + quote(source, safe=""), key=key, timeout=WORK_S)
    expect(r, 400, source)
    expect(srv.api.post("/api/v3/models", {"source": source}, key=key, timeout=WORK_S), 400, source)
    return r.error


def test_local_paths_are_refused_by_default_whether_they_exist_or_not(plain, hub_dir):
    srv, key = plain
    paths = [str(hub_dir / "local" / "stories260K"), str(hub_dir / "local" / "stories260K" / "model.safetensors"),
             "/etc/passwd", "/no/such/folder", "relative/path.safetensors"]
    messages = {refusal(srv, key, p).replace(p, "PATH") for p in paths}
    assert len(messages) == 1, messages
    assert "--allow-local" in messages.pop()


def test_urls_to_private_addresses_are_refused_but_the_hf_endpoint_is_trusted(plain, host_url, no_range_host_url):
    srv, key = plain
    # another host on loopback, and the endpoint's own host under another name
    for url in (no_range_host_url + STORY_FILE, host_url.replace("127.0.0.1", "localhost") + STORY_FILE):
        msg = refusal(srv, key, url)
        assert "not a public address" in msg and "--allow-private-sources" in msg, msg
    # the operator's model host, by hf: source or by URL
    expect(srv.api.get("/api/v3/models/inspect?source=hf:local/stories260K", key=key, timeout=WORK_S), 200)
    expect(srv.api.get("/api/v3/models/inspect?source=" + quote(host_url + STORY_FILE, safe=""), key=key,
                       timeout=WORK_S), 200)


def test_allowed_local_folders_are_read_and_nothing_outside_them(start_server, hub_dir, tmp_path):
    allowed = tmp_path / "allowed"
    shutil.copytree(hub_dir / "local" / "stories260K", allowed / "stories260K")
    link = allowed / "escape"
    os.symlink(hub_dir / "arch", link)
    srv = start_server("--allow-local", str(allowed))
    key = srv.account("local-reader")[1]
    loaded = expect(srv.api.post("/api/v3/models", {"source": str(allowed / "stories260K")}, key=key, timeout=WORK_S), 200)
    assert loaded["modelId"].startswith("m_")
    outside = [str(hub_dir / "arch" / "llama2"), str(link / "llama2"), str(allowed / ".." / "x"), "/etc/passwd"]
    messages = {refusal(srv, key, p).replace(p, "PATH") for p in outside}
    assert len(messages) == 1 and "outside the folders" in messages.pop(), messages
    # a folder that does not exist is refused when the server starts
    r = subprocess.run([str(binary()), "serve", "--port", "0", "--data-dir", str(tmp_path / "data"), "--allow-local",
                        str(tmp_path / "nothing")], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "is not a folder" in r.stderr, (r.returncode, r.stderr)


def test_private_sources_when_allowed_and_unreachable_ones(start_server, no_range_host_url):
    srv = start_server("--allow-private-sources")
    key = srv.account("private-reader")[1]
    # reached: this host refuses Range, which only a request that got there can know
    url = no_range_host_url + STORY_FILE
    expect(srv.api.get("/api/v3/models/inspect?source=" + quote(url, safe=""), key=key, timeout=WORK_S), 400,
           "does not honour Range")
    # nothing listens there: the caller's error, naming the URL, not a 503
    dead = f"http://127.0.0.1:{free_port()}/x.safetensors"
    expect(srv.api.get("/api/v3/models/inspect?source=" + quote(dead, safe=""), key=key, timeout=WORK_S), 400,
           "cannot reach source", dead)


class _Redirector(http.server.BaseHTTPRequestHandler):
    target = ""

    def do_GET(self):
        self.send_response(302)
        self.send_header("Location", self.target + self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def redirector(host_url):
    """A model host that redirects every request to the real one under the name localhost."""
    handler = type("Redirect", (_Redirector,), {"target": host_url.replace("127.0.0.1", "localhost")})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_redirects_are_checked_like_any_url(start_server, redirector):
    srv = start_server(hf_endpoint=redirector)
    key = srv.account("redirected")[1]
    r = srv.api.get("/api/v3/models/inspect?source=hf:local/stories260K", key=key, timeout=WORK_S)
    expect(r, 400, "localhost", "not a public address")
    srv = start_server("--allow-private-sources", hf_endpoint=redirector)
    key = srv.account("redirected-ok")[1]
    expect(srv.api.get("/api/v3/models/inspect?source=hf:local/stories260K", key=key, timeout=WORK_S), 200)
