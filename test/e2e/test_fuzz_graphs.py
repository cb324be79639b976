"""Hostile graphs: the op fixtures' graphs, mutated at random with a fixed seed (huge, zero,
negative and fractional numbers, wrong types, dropped and renamed fields), sent to a real
server. Every request gets an answer — 200 or one {"error": ...} naming the fault — and the
server stays up. Bounded: a few hundred requests, seconds."""
from __future__ import annotations

import copy
import json
import random
from pathlib import Path

from e2e_util import REPO_ROOT

FIXTURES = REPO_ROOT / "test" / "fixtures" / "ops"
NASTY_NUMBERS = [0, -1, 1e12, 2**63, 0.5, float(10**300), -2**31, 65536, 3]
NASTY_VALUES = [None, True, "x", [], {}, [1e12, 1e12, 1e12], {"$bind": "pos"}]


def mutate(value, rng):
    """One random change somewhere inside `value` (returns the changed copy)."""
    paths = []

    def walk(v, path):
        paths.append(path)
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, path + [k])
        elif isinstance(v, list):
            for i, x in enumerate(v[:8]):
                walk(x, path + [i])

    walk(value, [])
    out = copy.deepcopy(value)
    path = rng.choice(paths[1:]) if len(paths) > 1 else []
    parent, leaf = None, out
    for p in path:
        parent, leaf = leaf, leaf[p]
    if parent is None:
        return out
    key = path[-1]
    roll = rng.random()
    if isinstance(leaf, (int, float)) and not isinstance(leaf, bool) and roll < 0.6:
        parent[key] = rng.choice(NASTY_NUMBERS)
    elif roll < 0.75 and isinstance(parent, dict):
        del parent[key]
    elif roll < 0.85 and isinstance(parent, dict):
        parent[str(key) + "x"] = parent.pop(key)
    else:
        parent[key] = rng.choice(NASTY_VALUES)
    return out


def test_mutated_fixture_graphs_never_knock_the_server_over(server):
    _, key = server.account("fuzzer")
    rng = random.Random(20261129)
    graphs = []
    for f in sorted(FIXTURES.glob("*.json")):
        for case in json.loads(f.read_text())["cases"][:3]:
            graphs.append(case["graph"])
    answered = 0
    for i in range(400):
        g = rng.choice(graphs)
        for _ in range(rng.randint(1, 3)):
            g = mutate(g, rng)
        r = server.api.post("/api/v3/graph", {"graph": g}, key=key, timeout=30)
        assert r.status in (200, 400, 404, 409, 413, 503), f"request {i}: {r!r}"
        if r.status != 200:
            assert isinstance(r.json, dict) and set(r.json) == {"error"} and r.error, f"request {i}: {r!r}"
            assert "\n" not in r.error
        answered += 1
    assert answered == 400
    server.assert_up()
