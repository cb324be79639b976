#!/usr/bin/env python3
"""Generate test/fixtures/kv_cache.json: golden values for KV caches held as bf16 or f16.

Rounding: f32 values and the 16-bit patterns they become in a half-width cache, from numpy's
float16 conversion and ml_dtypes' bfloat16 (both round to nearest even, as torch's
`.to(torch.float16)` / `.to(torch.bfloat16)` do). The values include exact ties (even and odd
below), overflow to infinity, f16 subnormals and signed zeros.

Attention: q, k and v as f32; the expected output is scaled dot-product attention computed in
float64 over k and v rounded by those same libraries (the attention formula itself is checked
against transformers by the op table's attention fixtures; what is new here is only that the
keys and values pass through the cache's dtype first).

Usage:  python tools/goldens/gen_kv_cache.py   (needs numpy and ml_dtypes)
"""

import base64
import json
import os

import ml_dtypes
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "test", "fixtures", "kv_cache.json")
HALF = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}


def b64(a, dtype):
    return base64.b64encode(np.ascontiguousarray(a, dtype=dtype).tobytes()).decode("ascii")


def rounding_values(rng):
    """f32 values that exercise the rounding: random magnitudes plus constructed ties."""
    parts = [
        rng.standard_normal(256).astype(np.float32),
        (rng.standard_normal(128) * 1e4).astype(np.float32),
        (rng.standard_normal(128) * 1e-6).astype(np.float32),
    ]
    # bf16 ties: the low 16 bits exactly half way, upper halves even and odd
    hi = rng.integers(0x0080, 0x7f00, 128, dtype=np.uint32)
    sign = rng.integers(0, 2, 128, dtype=np.uint32) << 31
    parts.append(((hi << 16) | 0x8000 | sign).view(np.float32))
    # f16 ties among normals: f32 mantissa's low 13 bits half way, exponents inside f16's range
    exp = rng.integers(127 - 14, 127 + 15, 128, dtype=np.uint32)
    mant = rng.integers(0, 1 << 10, 128, dtype=np.uint32)
    parts.append(((exp << 23) | (mant << 13) | 0x1000).view(np.float32))
    # f16 subnormal ties (odd multiples of 2^-25) and neighbours
    k = np.arange(1, 64, 2, dtype=np.float64)
    parts.append((k * 2.0 ** -25).astype(np.float32))
    parts.append((k * 2.0 ** -25 * 1.0000001).astype(np.float32))
    special = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.0, 65520.0, 65536.0, -1e6, 1e-30, 3.3895314e38, 3.4028235e38,
               1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 2.0 ** -24, 2.0 ** -25,
               np.float32(np.inf), -np.float32(np.inf)]
    parts.append(np.array(special, dtype=np.float32))
    return np.concatenate(parts).astype(np.float32)


def attention(q, k, v, heads, kv_heads, head_dim, v_head_dim, pos_offset, window=0):
    """Causal scaled dot-product attention in float64 (query row t at pos_offset + t)."""
    rows, keys = q.shape[0], k.shape[0]
    group = heads // kv_heads
    out = np.zeros((rows, heads * v_head_dim), dtype=np.float64)
    q, k, v = q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)
    for t in range(rows):
        pos = pos_offset + t
        first = max(0, pos - window + 1) if window else 0
        last = min(keys - 1, pos)
        for h in range(heads):
            g = h // group
            qh = q[t, h * head_dim:(h + 1) * head_dim]
            kh = k[first:last + 1, g * head_dim:(g + 1) * head_dim]
            vh = v[first:last + 1, g * v_head_dim:(g + 1) * v_head_dim]
            s = kh @ qh / np.sqrt(head_dim)
            w = np.exp(s - s.max())
            out[t, h * v_head_dim:(h + 1) * v_head_dim] = (w / w.sum()) @ vh
    return out


def main():
    rng = np.random.default_rng(20261202)
    doc = {"numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__, "rounding": [], "attention": []}
    x = rounding_values(rng)
    for name, t in HALF.items():
        with np.errstate(over="ignore"):  # values past the dtype's range become inf, as intended
            bits = x.astype(t).view(np.uint16)
        doc["rounding"].append({"dtype": name, "count": int(x.size), "valuesB64": b64(x, "<f4"),
                                "bitsB64": b64(bits, "<u2")})
    cases = [
        # name, heads, kv_heads, head_dim, v_head_dim, rows, keys, pos_offset, window
        ("decode over a long cache", 4, 1, 64, 64, 1, 300, 290, 0),
        ("prefill from an offset", 4, 2, 128, 128, 20, 40, 10, 0),
        ("verify rows, odd widths", 4, 1, 32, 48, 3, 300, 280, 0),
        ("window", 4, 2, 16, 16, 6, 64, 40, 9),
    ]
    for dname, t in HALF.items():
        for name, heads, kvh, hd, vhd, rows, keys, pos, window in cases:
            q = rng.standard_normal((rows, heads * hd)).astype(np.float32)
            k = rng.standard_normal((keys, kvh * hd)).astype(np.float32)
            v = rng.standard_normal((keys, kvh * vhd)).astype(np.float32)
            kr = k.astype(t).astype(np.float64)
            vr = v.astype(t).astype(np.float64)
            want = attention(q, kr, vr, heads, kvh, hd, vhd, pos, window).astype(np.float32)
            doc["attention"].append({
                "name": dname + " " + name, "dtype": dname, "heads": heads, "kvHeads": kvh, "headDim": hd,
                "vHeadDim": vhd, "rows": rows, "keys": keys, "posOffset": pos, "window": window,
                "qB64": b64(q, "<f4"), "kB64": b64(k, "<f4"), "vB64": b64(v, "<f4"), "expectedB64": b64(want, "<f4")})
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {x.size} rounding values per dtype, {len(doc['attention'])} attention cases")


if __name__ == "__main__":
    main()
