#!/usr/bin/env python3
"""Generate golden fixtures for every op of ops.json into test/fixtures/ops/<op>.json.

Expected values come from PyTorch and Hugging Face transformers (the real modeling code,
imported, not re-derived) wherever transformers implements the thing; plain torch in
float64 elsewhere. Inputs are always exactly representable f32 values; expected values are
computed in float64 where the reference allows it and stored as f32.

After writing, a self-check decodes every fixture, validates it against ops.json (op names,
parameter names, input counts, shapes, hold formats) and re-runs every graph through a small
independent numpy interpreter written from the ops.json wording, so a fixture whose
transformers-derived expectation disagrees with our reading of the spec fails loudly here.

Usage:  tools/goldens/setup_venv.sh && .venv-goldens/bin/python tools/goldens/gen_ops.py
        [--check-only] [--ops rope,attention]
"""

import argparse
import base64
import json
import math
import os
import re
import sys
import types
import zlib

import numpy as np
import torch
import torch.nn.functional as F
import transformers

transformers.logging.set_verbosity_error()
torch.set_grad_enabled(False)

from transformers.activations import ACT2FN  # noqa: E402
from transformers.generation.logits_process import (  # noqa: E402
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)
from transformers import masking_utils  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
OUT_DIR = os.path.join(REPO, "test", "fixtures", "ops")
SPEC_CANDIDATES = [
    os.environ.get("MPAKT_OPS_JSON", ""),
    os.path.join(REPO, "shared", "spec", "ops.json"),
    os.path.join(REPO, "..", "shared", "spec", "ops.json"),
    os.path.join(REPO, "schemas", "ops.json"),
]

TORCH_VERSION = torch.__version__
TF_VERSION = transformers.__version__

TOL_F32 = {"abs": 1e-5, "rel": 1e-4}
TOL_HALF = {"abs": 1e-4, "rel": 1e-3}  # weights held bf16/f16 (expected uses the rounded weight)
TOL_Q = {"abs": 2e-3, "rel": 2e-2}  # weights held q8/q4 (expected uses our dequantised weight)
TOL_EXACT = {"abs": 0.0, "rel": 0.0}


# ----------------------------------------------------------------------------------------------
# helpers: tensors, encoding, case construction
# ----------------------------------------------------------------------------------------------

def gen_for(op):
    """A torch generator seeded from the op name, so each op's cases are reproducible on their own."""
    return torch.Generator().manual_seed(zlib.crc32(op.encode()) & 0x7FFFFFFF)


def randn(g, *shape, scale=1.0, shift=0.0):
    """Random normal values that are exactly representable in f32, returned as float64."""
    t = torch.randn(*shape, generator=g, dtype=torch.float32) * np.float32(scale) + np.float32(shift)
    return t.to(torch.float32).double()


def rand_uniform(g, *shape, lo=0.0, hi=1.0):
    t = torch.rand(*shape, generator=g, dtype=torch.float32) * np.float32(hi - lo) + np.float32(lo)
    return t.to(torch.float32).double()


def f64(x):
    if isinstance(x, torch.Tensor):
        return x.detach().double()
    return torch.tensor(np.asarray(x, dtype=np.float64))


def as_f32_array(t):
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu().double().numpy()
    return np.asarray(t, dtype=np.float64).astype(np.float32)


def b64(t):
    return base64.b64encode(as_f32_array(t).astype("<f4").tobytes()).decode("ascii")


def unb64(s, shape):
    a = np.frombuffer(base64.b64decode(s), dtype="<f4").astype(np.float32)
    n = int(np.prod(shape)) if len(shape) else 1
    if a.size != n:
        raise ValueError(f"data has {a.size} values, shape {shape} needs {n}")
    return a.reshape(shape)


def shape_of(t):
    return [int(d) for d in (t.shape if hasattr(t, "shape") else np.asarray(t).shape)]


def step(op, ins, out, **params):
    s = {"op": op, "in": list(ins), "out": out}
    if params:
        s["params"] = params
    return s


def make_case(name, ref, inputs, steps, outputs, expected, tol=None, hold=None, check=None):
    """inputs: list of (name, tensor) with f32-exact values; expected: {name: tensor}."""
    ins = []
    for n, t in inputs:
        arr = as_f32_array(t)
        src = t.detach().double().numpy() if isinstance(t, torch.Tensor) else np.asarray(t, np.float64)
        if not np.array_equal(arr.astype(np.float64), src, equal_nan=False):
            raise AssertionError(f"{name}: input {n} is not exactly representable in f32")
        ins.append({"name": n, "shape": shape_of(t), "dataB64": b64(t)})
    exp = {}
    for n, t in expected.items():
        a = as_f32_array(t)
        if np.isnan(a).any():
            raise AssertionError(f"{name}: expected {n} holds NaN")
        exp[n] = {"shape": shape_of(t), "dataB64": b64(a)}
    c = {"name": name, "ref": ref, "graph": {"inputs": ins, "steps": steps, "outputs": list(outputs)}}
    if hold:
        c["hold"] = dict(hold)
    c["expected"] = exp
    c["tol"] = dict(tol or TOL_F32)
    if check:
        c["check"] = check
    return c


def single(op, name, ref, inputs, expected, params=None, tol=None, hold=None, check=None, out="y"):
    """A one-step graph: op over all inputs, output `out`."""
    st = [step(op, [n for n, _ in inputs], out, **(params or {}))]
    return make_case(name, ref, inputs, st, [out], {out: expected}, tol=tol, hold=hold, check=check)


# ----------------------------------------------------------------------------------------------
# weight formats held by the worker: bf16, f16 and our q8 / q4 block formats
# ----------------------------------------------------------------------------------------------

def round_half_away(q):
    q = np.asarray(q, dtype=np.float64)
    return np.sign(q) * np.floor(np.abs(q) + 0.5)


def q8_dequant(w):
    """q8: blocks of 32 along the last dim; d16 = f16(max|x|/127); q = round(x/d16) in [-127,127]."""
    w = as_f32_array(w)
    assert w.shape[-1] % 32 == 0, "q8 needs the last dim to be a multiple of 32"
    b = w.reshape(-1, 32)
    d = (np.abs(b).max(axis=1) / np.float32(127.0)).astype(np.float32)
    d16 = d.astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d16[:, None] == 0, np.float32(0), (b / d16[:, None]).astype(np.float32))
    q = np.clip(round_half_away(q), -127, 127)
    return torch.tensor((q * d16[:, None].astype(np.float64)).reshape(w.shape))


def q4_dequant(w):
    """q4: blocks of 32; d16 = f16((max-min)/15), m16 = f16(min); q = round((x-m16)/d16) in [0,15]."""
    w = as_f32_array(w)
    assert w.shape[-1] % 32 == 0, "q4 needs the last dim to be a multiple of 32"
    b = w.reshape(-1, 32)
    lo = b.min(axis=1)
    hi = b.max(axis=1)
    d = ((hi - lo) / np.float32(15.0)).astype(np.float32)
    d16 = d.astype(np.float16).astype(np.float32)
    m16 = lo.astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d16[:, None] == 0, np.float32(0),
                     ((b - m16[:, None]).astype(np.float32) / d16[:, None]).astype(np.float32))
    q = np.clip(round_half_away(q), 0, 15)
    deq = q * d16[:, None].astype(np.float64) + m16[:, None].astype(np.float64)
    return torch.tensor(deq.reshape(w.shape))


def held(w, fmt):
    """The value a worker holding `w` in format `fmt` computes with, as float64."""
    w = f64(w)
    if fmt == "f32":
        return w
    if fmt == "bf16":
        return w.float().to(torch.bfloat16).double()
    if fmt == "f16":
        return w.float().to(torch.float16).double()
    if fmt == "q8":
        return q8_dequant(w)
    if fmt == "q4":
        return q4_dequant(w)
    raise ValueError(fmt)


def tol_for(fmt):
    return {"f32": TOL_F32, "bf16": TOL_HALF, "f16": TOL_HALF, "q8": TOL_Q, "q4": TOL_Q}[fmt]


# ----------------------------------------------------------------------------------------------
# elementwise and small ops
# ----------------------------------------------------------------------------------------------

def binary_cases(op, fn, sym):
    g = gen_for(op)
    cases = []
    a = randn(g, 3, 8)
    b = randn(g, 3, 8)
    cases.append(single(op, "same_shape", f"torch float64 a {sym} b", [("a", a), ("b", b)], fn(a, b)))
    r = randn(g, 8)
    cases.append(single(op, "row_vector_broadcast", f"torch float64 a {sym} b, b [C] broadcast over rows",
                        [("a", a), ("b", r)], fn(a, r[None, :])))
    s = randn(g, 1)
    cases.append(single(op, "scalar_b", f"torch float64 a {sym} b, b [1] broadcast to every element",
                        [("a", a), ("b", s)], fn(a, s)))
    a3 = randn(g, 2, 3, 4)
    r3 = randn(g, 4)
    cases.append(single(op, "row_vector_3d", f"torch float64 a {sym} b, a [2,3,4], b [4]",
                        [("a", a3), ("b", r3)], fn(a3, r3)))
    r1 = randn(g, 1, 8)
    cases.append(single(op, "row_vector_1xc", f"torch float64 a {sym} b, b [1,C] (a row vector written 2-D)",
                        [("a", a), ("b", r1)], fn(a, r1)))
    s3 = randn(g, 1)
    cases.append(single(op, "scalar_b_3d", f"torch float64 a {sym} b, a [2,3,4], b [1]",
                        [("a", a3), ("b", s3)], fn(a3, s3)))
    return cases


def gen_add():
    return binary_cases("add", lambda a, b: a + b, "+")


def gen_sub():
    return binary_cases("sub", lambda a, b: a - b, "-")


def gen_mul():
    return binary_cases("mul", lambda a, b: a * b, "*")


def unary_inputs(g):
    """Standard inputs for activations: a dense range, random rows, a 3-D tensor and extremes."""
    rng = torch.linspace(-12, 12, 97, dtype=torch.float32).double()
    rnd = randn(g, 4, 16, scale=3.0)
    r3 = randn(g, 2, 3, 8, scale=2.0)
    ext = f64(np.array([-1000, -100, -88.5, -30, -10, -1e-3, -1e-7, 0, 1e-7, 1e-3, 10, 30, 88.5, 100, 1000],
                       dtype=np.float32))
    return [("range_1d", rng), ("random_2d", rnd), ("rank3", r3), ("extremes", ext)]


def act_cases(op, fn, ref):
    g = gen_for(op)
    cases = []
    for nm, x in unary_inputs(g):
        cases.append(single(op, nm, ref, [("x", x)], fn(x)))
    return cases


def gen_relu():
    return act_cases("relu", ACT2FN["relu"], "transformers ACT2FN['relu'] in float64")


def gen_silu():
    return act_cases("silu", ACT2FN["silu"], "transformers ACT2FN['silu'] (torch.nn.functional.silu) in float64")


def gen_tanh():
    return act_cases("tanh", torch.tanh, "torch.tanh in float64")


def gen_sigmoid():
    return act_cases("sigmoid", torch.sigmoid, "torch.sigmoid in float64")


def gen_gelu():
    fn = ACT2FN["gelu_pytorch_tanh"]
    other = ACT2FN["gelu_new"]
    for _, x in unary_inputs(gen_for("gelu")):
        assert torch.allclose(fn(x), other(x), atol=1e-12), "gelu_new and gelu_pytorch_tanh disagree"
    return act_cases("gelu", fn, "transformers ACT2FN['gelu_pytorch_tanh'] (== ACT2FN['gelu_new']) in float64")


def gen_gelu_exact():
    return act_cases("gelu_exact", ACT2FN["gelu"], "transformers ACT2FN['gelu'] (erf GELU) in float64")


def gen_gelu_quick():
    return act_cases("gelu_quick", ACT2FN["quick_gelu"], "transformers ACT2FN['quick_gelu'] = x*sigmoid(1.702x) in float64")


def gen_scale():
    g = gen_for("scale")
    x = randn(g, 3, 5)
    cases = []
    for nm, f in [("factor_eighth", 0.125), ("factor_negative", -3.0), ("factor_zero", 0.0), ("factor_irrational", 0.7071067811865476)]:
        cases.append(single("scale", nm, "torch float64 x * factor", [("x", x)], x * f, params={"factor": f}))
    x3 = randn(g, 2, 2, 3)
    cases.append(single("scale", "rank3", "torch float64 x * factor", [("x", x3)], x3 * 2.5, params={"factor": 2.5}))
    return cases


def gen_softcap():
    g = gen_for("softcap")
    cases = []
    x = f64(np.linspace(-200, 200, 41, dtype=np.float32))
    for cap in [30.0, 50.0, 1.0]:
        cases.append(single("softcap", f"cap_{int(cap)}", "torch float64 cap*tanh(x/cap) (Gemma 2 final_logit_softcapping)",
                            [("x", x)], cap * torch.tanh(x / cap), params={"cap": cap}))
    lg = randn(g, 3, 40, scale=20.0)
    cases.append(single("softcap", "logits_2d_cap_30", "torch float64 cap*tanh(x/cap)", [("x", lg)],
                        30.0 * torch.tanh(lg / 30.0), params={"cap": 30.0}))
    return cases


def gen_softmax():
    g = gen_for("softmax")
    cases = []
    x = randn(g, 3, 10, scale=2.0)
    cases.append(single("softmax", "random_2d", "torch.softmax(dim=-1) float64", [("x", x)], torch.softmax(x, -1)))
    big = f64(np.array([[1000, 1001, 1002, 999], [-1000, -1001, -999, -1002], [88, 89, 90, 0],
                        [3e4, 3e4, -3e4, 0]], dtype=np.float32))
    cases.append(single("softmax", "large_logits", "torch.softmax float64; naive exp would overflow in f32",
                        [("x", big)], torch.softmax(big, -1)))
    ninf = f64(np.array([[1.0, -np.inf, 2.0, -np.inf], [-np.inf, -np.inf, 0.5, -np.inf]], dtype=np.float32))
    cases.append(single("softmax", "with_neg_inf", "torch.softmax float64; -inf entries give 0",
                        [("x", ninf)], torch.softmax(ninf, -1)))
    x3 = randn(g, 2, 3, 5)
    cases.append(single("softmax", "rank3", "torch.softmax(dim=-1) float64", [("x", x3)], torch.softmax(x3, -1)))
    x1 = randn(g, 7)
    cases.append(single("softmax", "rank1", "torch.softmax float64", [("x", x1)], torch.softmax(x1, -1)))
    sc = randn(g, 4, 4)
    m = sc.clone()
    m[torch.triu(torch.ones(4, 4, dtype=torch.bool), 1)] = float("-inf")
    st = [step("causal_mask", ["s"], "m"), step("softmax", ["m"], "p")]
    cases.append(make_case("after_causal_mask", "causal_mask then torch.softmax float64", [("s", sc)], st, ["p"],
                           {"p": torch.softmax(m, -1)}))
    return cases


def gen_causal_mask():
    g = gen_for("causal_mask")
    cases = []
    for nm, shp in [("square_4x4", (4, 4)), ("batched_2x3x3", (2, 3, 3)), ("rank4_2x2x3x3", (2, 2, 3, 3)), ("one_1x1", (1, 1))]:
        a = randn(g, *shp)
        n = shp[-1]
        e = a.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
        cases.append(single("causal_mask", nm, "torch masked_fill(triu(ones, diagonal=1), -inf)", [("a", a)], e, tol=TOL_EXACT))
    return cases


def reduce_shape(x):
    return [1] if x.dim() == 1 else list(x.shape[:-1])


def gen_argmax():
    g = gen_for("argmax")
    cases = []

    def am(x):
        return torch.argmax(x, dim=-1).double().reshape(reduce_shape(x))

    x = randn(g, 3, 10)
    cases.append(single("argmax", "random_2d", "torch.argmax(dim=-1) (first maximum)", [("x", x)], am(x), tol=TOL_EXACT))
    ties = f64(np.array([[1, 5, 2, 5, 5, 0], [7, 7, 7, 7, 7, 7], [-np.inf, -3, -np.inf, -3, -4, -5]], dtype=np.float32))
    cases.append(single("argmax", "ties_lowest_index", "torch.argmax: ties resolve to the lowest index", [("x", ties)],
                        am(ties), tol=TOL_EXACT))
    x1 = f64(np.array([0.5, 3.0, -1.0, 3.0, 2.9], dtype=np.float32))
    cases.append(single("argmax", "rank1_gives_1", "torch.argmax over a 1-D input, output [1]", [("x", x1)], am(x1),
                        tol=TOL_EXACT))
    x3 = randn(g, 2, 3, 5)
    cases.append(single("argmax", "rank3", "torch.argmax(dim=-1), output [2,3]", [("x", x3)], am(x3), tol=TOL_EXACT))
    xv = randn(g, 2, 300, scale=4.0)
    cases.append(single("argmax", "vocab_300", "torch.argmax over logits [2,300]", [("x", xv)], am(xv), tol=TOL_EXACT))
    return cases


def gen_reduce_max():
    g = gen_for("reduce_max")
    cases = []

    def rm(x):
        return x.max(dim=-1).values.reshape(reduce_shape(x))

    x = randn(g, 3, 7)
    cases.append(single("reduce_max", "random_2d", "torch.max(dim=-1).values", [("x", x)], rm(x), tol=TOL_EXACT))
    x1 = randn(g, 9)
    cases.append(single("reduce_max", "rank1_gives_1", "torch.max over 1-D, output [1]", [("x", x1)], rm(x1), tol=TOL_EXACT))
    x3 = randn(g, 2, 2, 5)
    cases.append(single("reduce_max", "rank3", "torch.max(dim=-1).values, output [2,2]", [("x", x3)], rm(x3), tol=TOL_EXACT))
    xi = f64(np.array([[-np.inf, -5, -np.inf], [-np.inf, -np.inf, -np.inf], [2, 2, 1]], dtype=np.float32))
    cases.append(single("reduce_max", "with_neg_inf_and_ties", "torch.max(dim=-1).values (an all -inf row gives -inf)",
                        [("x", xi)], rm(xi), tol=TOL_EXACT))
    return cases


def gen_reduce_sum():
    g = gen_for("reduce_sum")
    cases = []
    for nm, x in [("rank2", randn(g, 3, 4)), ("rank1", randn(g, 6)), ("rank3", randn(g, 2, 3, 4)),
                  ("large_4096", rand_uniform(g, 64, 64, lo=-1.0, hi=2.0))]:
        cases.append(single("reduce_sum", nm, "torch.sum over every element, float64, output [1]", [("x", x)],
                            x.sum().reshape(1), tol={"abs": 1e-4, "rel": 1e-5}))
    return cases


def gen_reduce_mean():
    g = gen_for("reduce_mean")
    cases = []
    for nm, x in [("rank2", randn(g, 3, 4)), ("rank1", randn(g, 6)), ("rank3", randn(g, 2, 3, 4)),
                  ("large_4096", rand_uniform(g, 64, 64, lo=-1.0, hi=2.0))]:
        cases.append(single("reduce_mean", nm, "torch.mean over every element, float64, output [1]", [("x", x)],
                            x.mean().reshape(1), tol={"abs": 1e-5, "rel": 1e-5}))
    return cases


def glu_cases(op, act, ref):
    g = gen_for(op)
    cases = []
    gt, up = randn(g, 4, 16, scale=2.0), randn(g, 4, 16)
    cases.append(single(op, "rows_4x16", ref, [("gate", gt), ("up", up)], act(gt) * up))
    g3, u3 = randn(g, 2, 3, 8, scale=3.0), randn(g, 2, 3, 8)
    cases.append(single(op, "rank3", ref, [("gate", g3), ("up", u3)], act(g3) * u3))
    ge = f64(np.array([-100, -20, -5, -1, 0, 1, 5, 20, 100], dtype=np.float32))
    ue = f64(np.array([1, -2, 3, 0.5, 7, -1, 2, 1, -0.5], dtype=np.float32))
    cases.append(single(op, "extremes_1d", ref, [("gate", ge), ("up", ue)], act(ge) * ue))
    return cases


def gen_swiglu():
    # Llama MLP: down(act_fn(gate_proj(x)) * up_proj(x)) with ACT2FN['silu']
    return glu_cases("swiglu", ACT2FN["silu"], "LlamaMLP gate: ACT2FN['silu'](gate) * up, float64")


def gen_geglu():
    # Gemma MLP: act_fn(gate_proj(x)) * up_proj(x) with hidden_activation gelu_pytorch_tanh
    return glu_cases("geglu", ACT2FN["gelu_pytorch_tanh"], "GemmaMLP gate: ACT2FN['gelu_pytorch_tanh'](gate) * up, float64")


# ----------------------------------------------------------------------------------------------
# shape ops
# ----------------------------------------------------------------------------------------------

def gen_reshape():
    g = gen_for("reshape")
    cases = []
    for nm, src, dst in [("2x12_to_4x6", (2, 12), [4, 6]), ("3x8_to_2x3x4", (3, 8), [2, 3, 4]),
                         ("2x3x4_to_24", (2, 3, 4), [24]), ("1x10_to_10x1", (1, 10), [10, 1])]:
        a = randn(g, *src)
        cases.append(single("reshape", nm, "torch.reshape (row-major, same values)", [("a", a)], a.reshape(dst),
                            params={"shape": dst}, tol=TOL_EXACT))
    a = randn(g, 2, 6)
    st = [step("reshape", ["a"], "r", shape=[3, 4]), step("transpose", ["r"], "t")]
    cases.append(make_case("then_transpose", "torch reshape [3,4] then .T", [("a", a)], st, ["t"],
                           {"t": a.reshape(3, 4).T.contiguous()}, tol=TOL_EXACT))
    return cases


def gen_transpose():
    g = gen_for("transpose")
    cases = []
    for nm, shp in [("3x5", (3, 5)), ("1x7", (1, 7)), ("16x9", (16, 9))]:
        a = randn(g, *shp)
        cases.append(single("transpose", nm, "torch .T", [("a", a)], a.T.contiguous(), tol=TOL_EXACT))
    return cases


def gen_slice():
    g = gen_for("slice")
    cases = []
    a = randn(g, 6, 5)
    cases.append(single("slice", "axis0_default", "torch a[1:4]", [("a", a)], a[1:4], params={"start": 1, "length": 3},
                        tol=TOL_EXACT))
    a = randn(g, 4, 10)
    cases.append(single("slice", "axis_minus1", "torch a[:, 3:7]", [("a", a)], a[:, 3:7],
                        params={"start": 3, "length": 4, "axis": -1}, tol=TOL_EXACT))
    cases.append(single("slice", "axis1_on_2d", "torch a[:, 0:2] (axis 1 is the last axis of a 2-D tensor)", [("a", a)],
                        a[:, 0:2], params={"start": 0, "length": 2, "axis": 1}, tol=TOL_EXACT))
    a3 = randn(g, 4, 3, 5)
    cases.append(single("slice", "axis0_rank3", "torch a[1:3] on [4,3,5]", [("a", a3)], a3[1:3],
                        params={"start": 1, "length": 2, "axis": 0}, tol=TOL_EXACT))
    b3 = randn(g, 2, 3, 8)
    cases.append(single("slice", "axis_minus1_rank3", "torch a[..., 2:7] on [2,3,8]", [("a", b3)], b3[..., 2:7],
                        params={"start": 2, "length": 5, "axis": -1}, tol=TOL_EXACT))
    w = randn(g, 12, 8)
    cases.append(single("slice", "held_bf16_weight_axis0",
                        "rows 4..7 of a weight held bf16: torch w.to(bfloat16)[4:8] (exact in f32)",
                        [("w", w)], held(w, "bf16")[4:8], params={"start": 4, "length": 4}, tol=TOL_EXACT,
                        hold={"w": "bf16"}))
    wq = randn(g, 6, 64)
    cases.append(single("slice", "held_q8_weight_axis0", "rows 2..4 of a weight held q8 (our block format, dequantised)",
                        [("w", wq)], held(wq, "q8")[2:5], params={"start": 2, "length": 3}, tol=TOL_Q,
                        hold={"w": "q8"}))
    # api-v3 recipe: split a fused [3C, C] projection held bf16, transpose a part, multiply
    C = 8
    win = randn(g, 3 * C, C, scale=0.3)
    x = randn(g, 3, C)
    wr = held(win, "bf16")
    st = [step("slice", ["Win"], "Wg", start=C, length=C), step("transpose", ["Wg"], "Wgt"),
          step("matmul", ["x", "Wgt"], "G")]
    cases.append(make_case("held_bf16_fused_projection_recipe",
                           "LFM2 in_proj [3C,C] held bf16: slice rows C..2C, transpose, x @ W^T (torch float64)",
                           [("x", x), ("Win", win)], st, ["G"], {"G": x @ wr[C:2 * C].T}, tol=TOL_HALF,
                           hold={"Win": "bf16"}))
    return cases


def gen_concat():
    g = gen_for("concat")
    cases = []
    a, b = randn(g, 2, 5), randn(g, 3, 5)
    cases.append(single("concat", "axis0_default", "torch.cat(dim=0)", [("a", a), ("b", b)], torch.cat([a, b], 0), tol=TOL_EXACT))
    a, b = randn(g, 4, 3), randn(g, 4, 5)
    cases.append(single("concat", "axis_minus1", "torch.cat(dim=-1)", [("a", a), ("b", b)], torch.cat([a, b], -1),
                        params={"axis": -1}, tol=TOL_EXACT))
    cases.append(single("concat", "axis1_on_2d", "torch.cat(dim=1) (the last axis of a 2-D tensor)", [("a", a), ("b", b)],
                        torch.cat([a, b], 1), params={"axis": 1}, tol=TOL_EXACT))
    a, b = randn(g, 1, 2, 4), randn(g, 2, 2, 4)
    cases.append(single("concat", "axis0_rank3", "torch.cat(dim=0) of [1,2,4] and [2,2,4]", [("a", a), ("b", b)],
                        torch.cat([a, b], 0), params={"axis": 0}, tol=TOL_EXACT))
    a, b = randn(g, 2, 3, 2), randn(g, 2, 3, 5)
    cases.append(single("concat", "axis_minus1_rank3", "torch.cat(dim=-1) of [2,3,2] and [2,3,5]", [("a", a), ("b", b)],
                        torch.cat([a, b], -1), params={"axis": -1}, tol=TOL_EXACT))
    return cases


def gen_zeros():
    g = gen_for("zeros")
    cases = []
    for nm, shp in [("shape_3x4", [3, 4]), ("shape_5", [5]), ("shape_2x3x4", [2, 3, 4])]:
        cases.append(make_case(nm, "torch.zeros", [], [step("zeros", [], "z", shape=shp)], ["z"],
                               {"z": torch.zeros(shp, dtype=torch.float64)}, tol=TOL_EXACT))
    x = randn(g, 2, 3)
    st = [step("zeros", [], "z", shape=[2, 3]), step("add", ["z", "x"], "y")]
    cases.append(make_case("then_add", "torch.zeros([2,3]) + x", [("x", x)], st, ["y", "z"],
                           {"y": x, "z": torch.zeros(2, 3, dtype=torch.float64)}, tol=TOL_EXACT))
    return cases


def gen_cache_write():
    g = gen_for("cache_write")
    cases = []
    for nm, rows, off in [("offset0", 3, 0), ("offset_mid", 2, 3), ("fill_to_end", 2, 6), ("single_row_decode", 1, 5)]:
        cache = randn(g, 8, 4)
        vals = randn(g, rows, 4)
        e = cache.clone()
        e[off:off + rows] = vals
        st = [step("cache_write", ["cache", "values"], "out", offset=off)]
        cases.append(make_case(nm, "torch: cache[offset:offset+rows] = values (in place; output is the cache)",
                               [("cache", cache), ("values", vals)], st, ["out", "cache"], {"out": e, "cache": e},
                               tol=TOL_EXACT))
    vals = randn(g, 2, 4)
    e = torch.zeros(6, 4, dtype=torch.float64)
    e[2:4] = vals
    st = [step("zeros", [], "kc", shape=[6, 4]), step("cache_write", ["kc", "values"], "kc2", offset=2)]
    cases.append(make_case("zeros_then_write", "torch.zeros([6,4]) then rows 2..3 = values", [("values", vals)], st,
                           ["kc2"], {"kc2": e}, tol=TOL_EXACT))
    cache = randn(g, 6, 3)
    v1, v2 = randn(g, 2, 3), randn(g, 1, 3)
    e = cache.clone()
    e[0:2] = v1
    e[4:5] = v2
    st = [step("cache_write", ["cache", "v1"], "c1", offset=0), step("cache_write", ["c1", "v2"], "c2", offset=4)]
    cases.append(make_case("chained_writes", "two writes: rows 0..1 then row 4 (second writes into the first's output)",
                           [("cache", cache), ("v1", v1), ("v2", v2)], st, ["c2"], {"c2": e}, tol=TOL_EXACT))
    return cases


# ----------------------------------------------------------------------------------------------
# matmul / linear / embedding
# ----------------------------------------------------------------------------------------------

def gen_matmul():
    g = gen_for("matmul")
    cases = []

    def add(nm, a, b, transB, fmt="f32", ref_extra=""):
        bw = held(b, fmt)
        e = a @ (bw.T if transB else bw)
        params = {"transB": True} if transB else {}
        hold = {"b": fmt} if fmt != "f32" else None
        ref = f"torch float64 a @ {'b.T' if transB else 'b'}" + (f", b rounded to {fmt} first" if fmt != "f32" else "") + ref_extra
        cases.append(single("matmul", nm, ref, [("a", a), ("b", b)], e, params=params, tol=tol_for(fmt), hold=hold))

    add("rows5_b_kn", randn(g, 5, 24), randn(g, 24, 7, scale=0.5), False)
    add("rows5_transb", randn(g, 5, 24), randn(g, 7, 24, scale=0.5), True)
    add("row1_decode_transb", randn(g, 1, 64), randn(g, 48, 64, scale=0.2), True)
    add("row1_decode_b_kn", randn(g, 1, 40), randn(g, 40, 12, scale=0.2), False)
    add("rows33_transb", randn(g, 33, 40), randn(g, 17, 40, scale=0.2), True)
    add("leading_dims_folded", randn(g, 2, 3, 16), randn(g, 16, 5, scale=0.3), False, ref_extra=", a [2,3,16] -> [2,3,5]")
    add("leading_dims_folded_transb", randn(g, 2, 3, 16), randn(g, 5, 16, scale=0.3), True)
    add("transb_false_explicit", randn(g, 2, 8), randn(g, 8, 3), False)
    cases[-1]["graph"]["steps"][0]["params"] = {"transB": False}
    add("hold_bf16_transb", randn(g, 3, 64), randn(g, 40, 64, scale=0.2), True, "bf16")
    add("hold_bf16_b_kn", randn(g, 3, 64), randn(g, 64, 40, scale=0.2), False, "bf16")
    add("hold_f16_transb", randn(g, 4, 64), randn(g, 24, 64, scale=0.2), True, "f16")
    add("hold_f16_decode", randn(g, 1, 64), randn(g, 24, 64, scale=0.2), True, "f16")
    add("hold_q8_transb_rows4", randn(g, 4, 64), randn(g, 24, 64, scale=0.2), True, "q8")
    add("hold_q8_decode", randn(g, 1, 96), randn(g, 20, 96, scale=0.2), True, "q8")
    add("hold_q8_b_kn", randn(g, 3, 40), randn(g, 40, 32, scale=0.2), False, "q8")
    add("hold_q4_transb_rows4", randn(g, 4, 64), randn(g, 24, 64, scale=0.2), True, "q4")
    add("hold_q4_decode", randn(g, 1, 96), randn(g, 20, 96, scale=0.2), True, "q4")
    add("hold_q4_leading_dims", randn(g, 2, 5, 64), randn(g, 20, 64, scale=0.2), True, "q4")
    return cases


def gen_linear():
    g = gen_for("linear")
    cases = []

    def add(nm, x, w, bias, transB, fmt="f32"):
        ww = held(w, fmt)
        if transB:  # torch.nn.functional.linear(x, w, bias) == x @ w.T + bias
            e = F.linear(x, ww, bias)
        else:
            e = x @ ww + bias
        params = {"transB": True} if transB else {}
        hold = {"w": fmt} if fmt != "f32" else None
        ref = ("torch.nn.functional.linear(x, w, bias)" if transB else "torch x @ w + bias") + " float64" + \
              (f", w rounded to {fmt} first" if fmt != "f32" else "")
        cases.append(single("linear", nm, ref, [("x", x), ("w", w), ("bias", bias)], e, params=params,
                            tol=tol_for(fmt), hold=hold))

    add("rows4_w_kn", randn(g, 4, 12), randn(g, 12, 6, scale=0.5), randn(g, 6), False)
    add("rows4_transb", randn(g, 4, 12), randn(g, 6, 12, scale=0.5), randn(g, 6), True)
    add("row1_decode_transb", randn(g, 1, 64), randn(g, 32, 64, scale=0.2), randn(g, 32), True)
    add("rows33_transb", randn(g, 33, 24), randn(g, 10, 24, scale=0.3), randn(g, 10), True)
    add("leading_dims_folded", randn(g, 2, 3, 8), randn(g, 8, 5, scale=0.5), randn(g, 5), False)
    add("hold_bf16_transb", randn(g, 3, 64), randn(g, 16, 64, scale=0.2), randn(g, 16), True, "bf16")
    add("hold_f16_transb", randn(g, 3, 64), randn(g, 16, 64, scale=0.2), randn(g, 16), True, "f16")
    add("hold_q8_transb", randn(g, 3, 64), randn(g, 16, 64, scale=0.2), randn(g, 16), True, "q8")
    add("hold_q4_transb", randn(g, 3, 64), randn(g, 16, 64, scale=0.2), randn(g, 16), True, "q4")
    add("hold_q8_decode", randn(g, 1, 64), randn(g, 16, 64, scale=0.2), randn(g, 16), True, "q8")
    return cases


def gen_embedding():
    g = gen_for("embedding")
    cases = []

    def lookup(ids, table):
        V, C = table.shape
        rows = []
        for i in ids.tolist():
            i = int(i)
            rows.append(table[i] if 0 <= i < V else torch.zeros(C, dtype=torch.float64))
        return torch.stack(rows)

    def add(nm, ids, table, fmt="f32", ref=""):
        e = lookup(ids, held(table, fmt))
        emb = torch.nn.Embedding(table.shape[0], table.shape[1]).double()
        emb.weight.copy_(held(table, fmt))
        ok = [(0 <= int(i) < table.shape[0]) for i in ids.tolist()]
        if any(ok):
            sel = torch.tensor([int(i) for i, k in zip(ids.tolist(), ok) if k])
            assert torch.equal(emb(sel), e[torch.tensor(ok)])
        hold = {"table": fmt} if fmt != "f32" else None
        r = "torch.nn.Embedding lookup" + (f" of the table rounded to {fmt}" if fmt != "f32" else "") + ref
        cases.append(single("embedding", nm, r, [("ids", ids), ("table", table)], e,
                            tol=TOL_EXACT if fmt in ("f32", "bf16", "f16") else TOL_Q, hold=hold))

    t = randn(g, 50, 16)
    add("f32_table", f64([3, 0, 49, 7, 7]), t)
    add("out_of_range_and_negative", f64([5, 50, -1, 1000, 2]), t, ref="; ids >= V and negative ids give a zero row")
    tb = randn(g, 40, 32)
    add("hold_bf16", f64([1, 39, 0, 17]), tb, "bf16")
    add("hold_f16", f64([1, 39, 0, 17]), tb, "f16")
    tq = randn(g, 30, 64)
    add("hold_q8", f64([29, 0, 5, 5, 12]), tq, "q8")
    add("hold_q4", f64([29, 0, 5, 5, 12]), tq, "q4")
    add("hold_q8_out_of_range", f64([30, -2, 4]), tq, "q8", ref="; ids 30 (== V) and -2 give a zero row")
    add("single_id_decode", f64([11]), t)
    return cases


# ----------------------------------------------------------------------------------------------
# norms
# ----------------------------------------------------------------------------------------------

def gen_rmsnorm():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    g = gen_for("rmsnorm")
    cases = []

    def rms64(x, w, eps, off=0.0, group=None):
        shp = x.shape
        if group:
            x = x.reshape(*shp[:-1], shp[-1] // group, group)
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (w + off)
        return y.reshape(shp)

    def via_module(mod_cls, x, w, eps, group=None):
        n = group or x.shape[-1]
        m = mod_cls(n, eps=eps)
        m.weight.data = w.float()
        shp = x.shape
        xx = x.float().reshape(*shp[:-1], shp[-1] // n, n) if group else x.float()
        return m(xx).double().reshape(shp)

    def add(nm, x, w, eps_param, mod_cls, off=0.0, group=None, ref=""):
        eps = 1e-6 if eps_param is None else eps_param
        e = rms64(x, w, eps, off, group)
        hf = via_module(mod_cls, x, w, eps, group)
        err = (hf - e).abs().max().item()
        assert err < 1e-5 * max(1.0, e.abs().max().item()), f"rmsnorm {nm}: transformers differs by {err}"
        params = {}
        if eps_param is not None:
            params["eps"] = eps_param
        if off:
            params["weightOffset"] = off
        if group:
            params["groupSize"] = group
        cases.append(single("rmsnorm", nm, f"{mod_cls.__name__} (checked) == float64 formula{ref}",
                            [("x", x), ("gamma", w)], e, params=params))

    add("llama_default_eps", randn(g, 5, 32), randn(g, 32, scale=0.2, shift=1.0), None, LlamaRMSNorm)
    xs = randn(g, 3, 16, scale=2e-3)
    ws = randn(g, 16, scale=0.1, shift=1.0)
    add("small_x_default_eps", xs, ws, None, LlamaRMSNorm, ref="; tiny x so eps=1e-6 vs 1e-5 matters")
    add("small_x_eps_1e5", xs, ws, 1e-5, LlamaRMSNorm, ref="; tiny x, rms_norm_eps 1e-5")
    add("gemma_weight_offset_1", randn(g, 4, 32), randn(g, 32, scale=0.3), 1e-6, GemmaRMSNorm, off=1.0,
        ref="; Gemma stores gamma as an offset from 1")
    add("qwen3_qnorm_groupsize", randn(g, 4, 4 * 16), randn(g, 16, scale=0.2, shift=1.0), 1e-6, Qwen3RMSNorm, group=16,
        ref="; per-head q_norm over [T, heads*head_dim] viewed as [T, heads, head_dim]")
    add("gemma3_qnorm_groupsize_offset", randn(g, 3, 2 * 32), randn(g, 32, scale=0.3), 1e-6, Gemma3RMSNorm, off=1.0,
        group=32, ref="; Gemma 3 per-head q_norm (1 + gamma)")
    add("rank3_leading_dims", randn(g, 2, 3, 24), randn(g, 24, scale=0.2, shift=1.0), 1e-5, LlamaRMSNorm)
    add("groupsize_equals_c", randn(g, 3, 16), randn(g, 16, scale=0.2, shift=1.0), 1e-6, Qwen3RMSNorm, group=16)
    return cases


def gen_layernorm():
    g = gen_for("layernorm")
    cases = []

    def ln(x, w, b, eps):
        m = torch.nn.LayerNorm(x.shape[-1], eps=eps).double()
        m.weight.copy_(w)
        m.bias.copy_(b)
        return m(x)

    def add(nm, x, w, b, eps_param, ref=""):
        eps = 1e-5 if eps_param is None else eps_param
        params = {"eps": eps_param} if eps_param is not None else {}
        cases.append(single("layernorm", nm, f"torch.nn.LayerNorm(eps={eps}) float64{ref}",
                            [("x", x), ("gamma", w), ("beta", b)], ln(x, w, b, eps), params=params))

    C = 32
    add("default_eps", randn(g, 4, C), randn(g, C, scale=0.2, shift=1.0), randn(g, C, scale=0.1), None)
    add("bert_eps_1e12", randn(g, 4, C), randn(g, C, scale=0.2, shift=1.0), randn(g, C, scale=0.1), 1e-12)
    add("large_mean_offset", randn(g, 3, C, scale=0.5, shift=100.0), randn(g, C, scale=0.2, shift=1.0),
        randn(g, C, scale=0.1), None, "; x ~ 100 + N(0, 0.5^2): needs a centred variance")
    add("small_variance_eps_matters", randn(g, 3, C, scale=3e-3), randn(g, C, scale=0.2, shift=1.0),
        randn(g, C, scale=0.1), None)
    add("rank3_leading_dims", randn(g, 2, 3, 16), randn(g, 16, scale=0.2, shift=1.0), randn(g, 16, scale=0.1), 1e-6)
    x = randn(g, 3, C)
    w = randn(g, C, scale=0.2, shift=1.0)
    st = [step("zeros", [], "z", shape=[C]), step("layernorm", ["x", "gamma", "z"], "y")]
    cases.append(make_case("bias_free_via_zeros", "torch.nn.LayerNorm(bias=False) float64; beta from a zeros op",
                           [("x", x), ("gamma", w)], st, ["y"], {"y": ln(x, w, torch.zeros(C, dtype=torch.float64), 1e-5)}))
    return cases


# ----------------------------------------------------------------------------------------------
# rope
# ----------------------------------------------------------------------------------------------

def rope_reference(x, headDim, offset=0, base=None, rotaryDim=None, interleaved=False, scaling=None, invFreq=None,
                   attentionFactor=None):
    """x [T, H*D] float64. Frequencies and attention scaling from transformers' rope init functions
    (through GPTNeoXRotaryEmbedding, which calls ROPE_INIT_FUNCTIONS[rope_type] and runs the dynamic /
    longrope update with position_ids = offset + arange(T)); rotation applied with transformers'
    GPT-NeoX apply_rotary_pos_emb (half-split, partial) or GPT-J apply_rotary_pos_emb (interleaved)."""
    from transformers import GPTNeoXConfig
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
    from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb as neox_apply
    from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_apply

    T, W = x.shape
    D = headDim
    H = W // D
    rd = rotaryDim or D
    pos = torch.arange(T, dtype=torch.float64) + offset
    if invFreq is not None:
        inv = torch.tensor(invFreq, dtype=torch.float32)
        attn = 1.0
    else:
        rp = json.loads(json.dumps(scaling)) if scaling else {"rope_type": "default"}
        mpe = rp.pop("max_position_embeddings", 4096)
        rp.setdefault("rope_theta", float(base if base is not None else 10000.0))
        rp["partial_rotary_factor"] = rd / D
        cfg = GPTNeoXConfig(hidden_size=H * D, num_attention_heads=H, num_hidden_layers=1,
                            max_position_embeddings=mpe, rope_parameters=rp)
        emb = GPTNeoXRotaryEmbedding(cfg)
        cos_hf, _ = emb(x.float()[None], pos.long()[None])
        inv = emb.inv_freq.detach().clone().float()
        attn = float(emb.attention_scaling)
        assert inv.numel() == rd // 2
        ang32 = pos[:, None] * inv.double()[None, :]
        mine = torch.cat([ang32.cos(), ang32.cos()], -1) * attn
        assert (cos_hf[0].double() - mine).abs().max() < 1e-4 + 2e-6 * float(pos.max()), "cos mismatch vs transformers"
    if attentionFactor is not None:
        attn = float(attentionFactor)
    ang = pos[:, None] * inv.double()[None, :]  # [T, rd/2], float64 angles from the f32 inverse frequencies
    if not interleaved:
        cos = torch.cat([ang.cos(), ang.cos()], -1) * attn
        sin = torch.cat([ang.sin(), ang.sin()], -1) * attn
        q = x.reshape(1, T, H, D).transpose(1, 2)  # [1, H, T, D]
        qe, _ = neox_apply(q, q, cos[None], sin[None])  # rotates q[..., :rd], passes the rest
        return qe.transpose(1, 2).reshape(T, H * D), inv, attn
    sin = ang.sin() * attn
    cos = ang.cos() * attn
    q = x.reshape(1, T, H, D)
    q_rot, q_pass = q[..., :rd], q[..., rd:]
    q_rot = gptj_apply(q_rot, sin[None], cos[None])
    return torch.cat([q_rot, q_pass], -1).reshape(T, H * D), inv, attn


def gen_rope():
    g = gen_for("rope")
    cases = []

    def add(nm, T, H, D, ref, tol=None, **p):
        x = randn(g, T, H * D)
        kw = {k: v for k, v in p.items()}
        e, inv, attn = rope_reference(x, D, **kw)
        params = {"headDim": D}
        params.update(kw)
        r = ref + f" [inv_freq from transformers, attention scaling {attn:.9g}]"
        cases.append(single("rope", nm, r, [("x", x)], e, params=params, tol=tol))
        return inv, attn

    HS = "GPTNeoXRotaryEmbedding(default rope) + gpt_neox.apply_rotary_pos_emb (half-split)"
    add("half_split_default", 5, 2, 16, HS)
    add("half_split_offset", 4, 2, 16, HS, offset=37)
    add("base_500000", 4, 3, 16, HS, offset=3, base=500000.0)
    add("decode_t1_offset_1000", 1, 4, 32, HS, tol={"abs": 3e-4, "rel": 1e-4}, offset=1000)
    GJ = "default inv_freq + gptj.apply_rotary_pos_emb (rotate_every_two, interleaved pairs)"
    add("interleaved_gptj", 5, 2, 16, GJ, interleaved=True)
    add("interleaved_offset_base", 3, 2, 16, GJ, interleaved=True, offset=20, base=50000.0)
    add("rotary_dim_partial_neox", 4, 2, 32, "GPT-NeoX/Pythia partial_rotary_factor 0.25: " + HS, rotaryDim=8)
    add("rotary_dim_partial_interleaved_gptj", 4, 2, 32,
        "GPT-J rotary_dim 16: rotate q[..., :16] with gptj.apply_rotary_pos_emb, pass the rest", rotaryDim=16,
        interleaved=True, offset=5)
    add("inv_freq_explicit", 4, 2, 16, "explicit inv_freq list + gpt_neox.apply_rotary_pos_emb",
        invFreq=[1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125], offset=2)
    add("inv_freq_partial_attention_factor", 3, 2, 16,
        "explicit inv_freq (rotaryDim 8) with attentionFactor 0.9 multiplying cos and sin",
        invFreq=[0.9, 0.3, 0.1, 0.03], rotaryDim=8, attentionFactor=0.9, offset=4)
    add("attention_factor_plain", 4, 2, 16, "default rope with cos and sin multiplied by attentionFactor 1.3",
        attentionFactor=1.3, offset=1)
    # --- scaling objects, as in config.json (rope_scaling / rope_parameters) ---
    SC = "ROPE_INIT_FUNCTIONS['{}'] via GPTNeoXRotaryEmbedding + gpt_neox.apply_rotary_pos_emb"
    add("scaling_linear", 4, 2, 16, SC.format("linear"), offset=10, scaling={"rope_type": "linear", "factor": 4.0})
    add("scaling_linear_legacy_type_key", 3, 2, 16, SC.format("linear") + "; legacy 'type' key",
        offset=6, scaling={"type": "linear", "factor": 2.0})
    add("scaling_dynamic_below_max", 5, 2, 16, SC.format("dynamic") + "; seq_len = offset+T = 15 <= 64: unscaled",
        offset=10, scaling={"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 64})
    add("scaling_dynamic_above_max", 6, 2, 16,
        SC.format("dynamic") + "; dynamic_rope_update with seq_len = max(position_ids)+1 = 66 > 64",
        offset=60, scaling={"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 64})
    add("scaling_dynamic_decode_above_max", 1, 2, 16, SC.format("dynamic") + "; decode row at position 99, seq_len 100",
        offset=99, scaling={"type": "dynamic", "factor": 4.0, "max_position_embeddings": 32})
    add("scaling_dynamic_partial", 3, 2, 32, SC.format("dynamic") + "; rotaryDim 16 so dim/(dim-2) uses 16",
        offset=70, rotaryDim=16, scaling={"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 48})
    add("scaling_yarn_derived_attention", 4, 2, 32, SC.format("yarn") + "; attention_factor = 0.1*ln(factor)+1",
        offset=7, scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32})
    add("scaling_yarn_attention_factor", 4, 2, 32, SC.format("yarn") + "; attention_factor given",
        offset=7, scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                           "attention_factor": 0.8})
    add("scaling_yarn_mscale_mscale_all_dim", 3, 2, 32,
        SC.format("yarn") + "; attention_factor = get_mscale(f, mscale)/get_mscale(f, mscale_all_dim)",
        offset=50, scaling={"type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.707,
                            "beta_fast": 32, "beta_slow": 1, "original_max_position_embeddings": 4096})
    add("scaling_yarn_deepseek_mscale_equal", 3, 2, 32,
        SC.format("yarn") + "; DeepSeek-V3 style mscale == mscale_all_dim == 1 gives attention factor 1.0",
        offset=50, scaling={"type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                            "beta_fast": 32, "beta_slow": 1, "original_max_position_embeddings": 4096})
    add("scaling_yarn_mscale_only_ignored", 3, 2, 32,
        SC.format("yarn") + "; mscale without mscale_all_dim is ignored: attention factor from factor alone",
        offset=9, scaling={"rope_type": "yarn", "factor": 8.0, "mscale": 0.707, "original_max_position_embeddings": 64})
    add("scaling_yarn_truncate_false_betas", 4, 2, 32,
        SC.format("yarn") + "; truncate false (gpt-oss) and custom beta_fast/beta_slow",
        offset=11, scaling={"rope_type": "yarn", "factor": 8.0, "beta_fast": 16.0, "beta_slow": 2.0, "truncate": False,
                            "original_max_position_embeddings": 64})
    add("scaling_yarn_partial", 3, 2, 32, SC.format("yarn") + "; rotaryDim 16 (partial_rotary_factor 0.5)",
        offset=12, rotaryDim=16, scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32})
    add("scaling_yarn_interleaved", 3, 2, 32, "ROPE_INIT_FUNCTIONS['yarn'] + gptj.apply_rotary_pos_emb (interleaved)",
        offset=12, interleaved=True, scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32})
    sf = [1.0, 1.05, 1.1, 1.2, 1.4, 1.7, 2.1, 2.6]
    lf = [1.0, 1.3, 1.9, 2.8, 4.0, 6.5, 9.0, 12.0]
    LR = "ROPE_INIT_FUNCTIONS['longrope'] + longrope_frequency_update (long factors iff max(position_ids)+1 > original_max_position_embeddings)"
    add("scaling_longrope_short", 5, 2, 16, LR + "; seq_len 8 <= 32: short_factor",
        offset=3, scaling={"rope_type": "longrope", "short_factor": sf, "long_factor": lf,
                           "original_max_position_embeddings": 32, "max_position_embeddings": 128})
    add("scaling_longrope_long", 5, 2, 16, LR + "; seq_len 45 > 32: long_factor",
        offset=40, scaling={"rope_type": "longrope", "short_factor": sf, "long_factor": lf,
                            "original_max_position_embeddings": 32, "max_position_embeddings": 128})
    add("scaling_longrope_boundary_equal", 4, 2, 16, LR + "; seq_len == 32 exactly: still short_factor",
        offset=28, scaling={"type": "longrope", "short_factor": sf, "long_factor": lf,
                            "original_max_position_embeddings": 32, "max_position_embeddings": 128})
    add("scaling_longrope_boundary_plus_one", 4, 2, 16, LR + "; seq_len 33: long_factor for every row",
        offset=29, scaling={"type": "longrope", "short_factor": sf, "long_factor": lf,
                            "original_max_position_embeddings": 32, "max_position_embeddings": 128})
    add("scaling_longrope_attention_factor_given", 3, 2, 16,
        LR + "; attention_factor given, so max_position_embeddings is not needed",
        offset=50, scaling={"rope_type": "longrope", "short_factor": sf, "long_factor": lf,
                            "original_max_position_embeddings": 32, "attention_factor": 1.1})
    sf12 = [1.0 + 0.1 * i for i in range(12)]
    lf12 = [1.0 + 0.9 * i for i in range(12)]
    add("scaling_longrope_partial_phi4mini", 3, 2, 32, LR + "; rotaryDim 24 (Phi-4-mini partial_rotary_factor 0.75)",
        offset=70, rotaryDim=24, scaling={"rope_type": "longrope", "short_factor": sf12, "long_factor": lf12,
                                          "original_max_position_embeddings": 64, "max_position_embeddings": 256})
    L3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
    inv, _ = add("scaling_llama3", 4, 2, 64, SC.format("llama3") + "; Llama 3.1 parameters, theta 500000",
                 offset=7, base=500000.0, scaling=L3)
    # make sure all three llama3 bands (unchanged, smoothed, divided) are present for head_dim 64
    base_inv = 1.0 / (500000.0 ** (torch.arange(0, 64, 2).double() / 64))
    ratio = inv.double() / base_inv
    assert (ratio > 0.999).any() and (ratio < 0.126).any() and ((ratio > 0.13) & (ratio < 0.99)).any()
    L3b = dict(L3)
    L3b["rope_theta"] = 500000.0
    add("scaling_llama3_v5_rope_parameters", 2, 2, 64,
        SC.format("llama3") + "; transformers-5 rope_parameters object carrying rope_theta (equal to base)",
        offset=300, base=500000.0, scaling=L3b)
    add("scaling_default_v5", 3, 2, 16, HS + "; rope_parameters {'rope_type': 'default', 'rope_theta': 10000}",
        offset=2, scaling={"rope_type": "default", "rope_theta": 10000.0})
    add("yarn_attention_factor_param_overrides", 3, 2, 32,
        SC.format("yarn") + " with attention_factor 1.25 inside the config; the op gets it as attentionFactor",
        offset=5, scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
        attentionFactor=1.25)
    # same expected computed by transformers with attention_factor in the scaling object: check they agree
    x_chk = randn(torch.Generator().manual_seed(1), 3, 64)
    a1, _, _ = rope_reference(x_chk, 32, offset=5, scaling={"rope_type": "yarn", "factor": 4.0,
                              "original_max_position_embeddings": 32}, attentionFactor=1.25)
    a2, _, _ = rope_reference(x_chk, 32, offset=5, scaling={"rope_type": "yarn", "factor": 4.0,
                              "original_max_position_embeddings": 32, "attention_factor": 1.25})
    assert torch.allclose(a1, a2, atol=1e-12)
    # MLA-style partial rope on the last 8 of every 24-wide head, keeping one row per token
    T, H, Dn, Dr = 3, 2, 16, 8
    q = randn(g, T, H * (Dn + Dr))
    q3 = q.reshape(T, H, Dn + Dr)
    qr, _, _ = rope_reference(q3[..., Dn:].reshape(T, H * Dr), Dr, offset=41)
    e = torch.cat([q3[..., :Dn], qr.reshape(T, H, Dr)], -1).reshape(T, H * (Dn + Dr))
    st = [step("reshape", ["q"], "q3", shape=[T, H, Dn + Dr]),
          step("slice", ["q3"], "qn", start=0, length=Dn, axis=-1),
          step("slice", ["q3"], "qp", start=Dn, length=Dr, axis=-1),
          step("reshape", ["qp"], "qp2", shape=[T, H * Dr]),
          step("rope", ["qp2"], "qr", headDim=Dr, offset=41),
          step("reshape", ["qr"], "qr3", shape=[T, H, Dr]),
          step("concat", ["qn", "qr3"], "qc", axis=-1),
          step("reshape", ["qc"], "y", shape=[T, H * (Dn + Dr)])]
    cases.append(make_case("mla_partial_rope_recipe", "DeepSeek MLA-style: rope only the last 8 channels of each head "
                           "(gpt_neox.apply_rotary_pos_emb on q[..., 16:]) at positions 41..43",
                           [("q", q)], st, ["y"], {"y": e}))
    return cases


# ----------------------------------------------------------------------------------------------
# attention
# ----------------------------------------------------------------------------------------------

def attention_reference(q, k, v, heads, headDim, kvHeads=None, vHeadDim=None, causal=True, posOffset=0, scale=None,
                        softcap=None, window=None, alibi=None, alibiMax=None, alibiSlopes=None, bias=None):
    """Gemma2's eager_attention_forward (scores*scaling, softcap, + additive mask, softmax, @ v, GQA by repeat_kv)
    in float64, with the additive mask built from transformers.masking_utils mask functions evaluated at
    q_idx = posOffset + t and kv_idx = s, plus the BLOOM / MPT alibi tensors and the optional bias."""
    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    H, D = heads, headDim
    KV = kvHeads or H
    Dv = vHeadDim or D
    T, S = q.shape[0], k.shape[0]
    Q = q.reshape(T, H, D).permute(1, 0, 2)[None]
    K = k.reshape(S, KV, D).permute(1, 0, 2)[None]
    V = v.reshape(S, KV, Dv).permute(1, 0, 2)[None]
    q_idx = (torch.arange(T) + posOffset)[:, None]
    kv_idx = torch.arange(S)[None, :]
    if causal:
        fn = masking_utils.sliding_window_causal_mask_function(window) if window else masking_utils.causal_mask_function
    else:
        fn = (masking_utils.sliding_window_bidirectional_mask_function(window) if window
              else masking_utils.bidirectional_mask_function)
    allowed = torch.as_tensor(fn(0, 0, q_idx, kv_idx)).expand(T, S)
    add = torch.zeros(1, H, T, S, dtype=torch.float64)
    add.masked_fill_(~allowed[None, None], float("-inf"))
    if alibi:
        al = build_alibi_tensor(torch.ones(1, S, dtype=torch.long), H, torch.float64)  # [H, 1, S] = slope_h * s
        add = add + al.reshape(1, H, 1, S)
    if alibiMax is not None:
        al = build_mpt_alibi_tensor(H, S, alibi_bias_max=alibiMax).double()  # [H, 1, S] = slope_h * (s - (S-1))
        add = add + al.reshape(1, H, 1, S)
    if alibiSlopes is not None:
        sl = torch.tensor(alibiSlopes, dtype=torch.float32).double()
        rel = (kv_idx - q_idx).double()  # s - pos
        add = add + sl[None, :, None, None] * rel[None, None]
    if bias is not None:
        add = add + (bias[None, None] if bias.dim() == 2 else bias[None])
    module = types.SimpleNamespace(num_key_value_groups=H // KV, head_dim=D, training=False)
    out, _ = eager_attention_forward(module, Q, K, V, add, dropout=0.0, scaling=scale if scale is not None else D ** -0.5,
                                     softcap=softcap)
    return out.reshape(T, H * Dv)


def gen_attention():
    g = gen_for("attention")
    cases = []

    def add(nm, ref, T, S, H, D, KV=None, Dv=None, garbage_from=None, qscale=1.0, bias_shape=None, tol=None, **p):
        KV_ = KV or H
        Dv_ = Dv or D
        q = randn(g, T, H * D, scale=qscale)
        k = randn(g, S, KV_ * D, scale=qscale)
        v = randn(g, S, KV_ * Dv_)
        if garbage_from is not None:  # cache rows not yet written: must be hidden by causality
            k[garbage_from:] = randn(g, S - garbage_from, KV_ * D, scale=30.0)
            v[garbage_from:] = randn(g, S - garbage_from, KV_ * Dv_, scale=1000.0)
        inputs = [("q", q), ("k", k), ("v", v)]
        bias = None
        if bias_shape is not None:
            bias = randn(g, *bias_shape)
            mflat = bias.reshape(-1)
            mflat[torch.randperm(mflat.numel(), generator=g)[: mflat.numel() // 6]] = -1e9
            inputs.append(("bias", bias))
        params = {"heads": H, "headDim": D}
        if KV is not None:
            params["kvHeads"] = KV
        if Dv is not None:
            params["vHeadDim"] = Dv
        params.update(p)
        e = attention_reference(q, k, v, H, D, kvHeads=KV, vHeadDim=Dv, bias=bias, **p)
        cases.append(single("attention", nm, ref, inputs, e, params=params, tol=tol))

    EA = "gemma2.eager_attention_forward float64 + masking_utils.{}"
    CM = EA.format("causal_mask_function")
    BM = EA.format("bidirectional_mask_function")
    add("mha_causal_default", CM, 5, 5, 2, 8)
    add("gqa_causal_4_over_2", CM, 6, 6, 4, 8, KV=2, causal=True)
    add("gqa_4_over_1_noncausal_cross", BM + " (T=4 queries over S=7 keys)", 4, 7, 4, 8, KV=1, causal=False)
    add("noncausal_self", BM, 5, 5, 2, 8, causal=False)
    add("kv_cache_prefill_posoffset", CM + "; preallocated cache S=12, rows 7.. hold garbage", 4, 12, 2, 8,
        garbage_from=7, posOffset=3)
    add("kv_cache_decode_t1", CM + "; decode at position 9 of a 16-row cache", 1, 16, 4, 8, KV=2, garbage_from=10,
        posOffset=9)
    add("decode_long_s_300", CM + "; decode at position 256 over a 300-row cache (rows 257.. garbage)", 1, 300, 4, 16,
        KV=1, garbage_from=257, posOffset=256)
    add("decode_long_s_full", CM + "; decode at the last row (position 199) of a 200-row cache", 1, 200, 2, 16, KV=2,
        posOffset=199)
    SW = EA.format("sliding_window_causal_mask_function(window)  [kv_idx > q_idx - window and kv_idx <= q_idx]")
    SB = EA.format("sliding_window_bidirectional_mask_function(window)  [abs(q_idx - kv_idx) <= window]")
    add("window_causal", SW, 10, 10, 2, 8, window=3)
    add("window_causal_posoffset_cache", SW + "; cache rows 9.. garbage", 3, 12, 2, 8, garbage_from=9, posOffset=6,
        window=4)
    add("window_causal_decode", SW + "; decode at position 20, window 5", 1, 24, 2, 8, KV=1, garbage_from=21,
        posOffset=20, window=5)
    add("window_noncausal", SB, 9, 9, 2, 8, causal=False, window=2)
    add("window_noncausal_posoffset", SB + "; queries at positions 2..5 over keys 0..9", 4, 10, 2, 8, causal=False,
        posOffset=2, window=3)
    SC = EA.format("causal_mask_function") + " with softcap (scores*scale, cap*tanh(/cap), then mask)"
    add("softcap_gemma2", SC, 5, 5, 2, 16, qscale=3.0, scale=0.25, softcap=5.0)
    add("softcap_window_gqa_gemma2", SC + "; sliding layer: window 4, GQA", 7, 7, 4, 16, KV=2, qscale=3.0,
        scale=0.0625, softcap=50.0, window=4)
    add("scale_granite", CM + "; scaling = attention_multiplier 0.7", 5, 5, 2, 8, scale=0.7)
    AB = CM + " + bloom.build_alibi_tensor (slope_h * key position)"
    add("alibi_bloom_4_heads", AB, 6, 6, 4, 8, alibi=True)
    add("alibi_bloom_6_heads", AB + "; 6 heads (not a power of 2)", 5, 5, 6, 8, alibi=True)
    add("alibi_bloom_posoffset_cache", AB + "; posOffset 5 over a 10-row cache", 3, 10, 4, 8, garbage_from=8,
        posOffset=5, alibi=True)
    AM = CM + " + mpt.build_mpt_alibi_tensor(alibi_bias_max)"
    add("alibi_mpt_max8_6_heads", AM + "; 6 heads (not a power of 2)", 5, 5, 6, 8, alibiMax=8)
    add("alibi_mpt_max8_4_heads", AM, 5, 5, 4, 8, alibiMax=8)
    add("alibi_mpt_max4_decode", AM + "; alibi_bias_max 4, decode at position 6", 1, 8, 4, 8, garbage_from=7,
        posOffset=6, alibiMax=4)
    AS = CM + " + explicit slopes: slope_h * (s - pos)"
    add("alibi_slopes_explicit", AS, 5, 5, 3, 8, alibiSlopes=[0.5, 0.25, 0.125])
    add("alibi_slopes_noncausal", BM + " + explicit slopes: slope_h * (s - pos)", 4, 6, 2, 8, causal=False,
        alibiSlopes=[0.3, 0.05])
    add("bias_t_s_noncausal", BM + " + additive bias [T,S] (-1e9 entries mask)", 4, 6, 2, 8, causal=False,
        bias_shape=(4, 6))
    add("bias_heads_t_s_causal", CM + " + additive bias [heads,T,S] (T5-style position bias)", 5, 5, 3, 8,
        bias_shape=(3, 5, 5))
    add("bias_heads_t_s_posoffset", CM + " + bias [heads,T,S] with posOffset 3 over a 7-row cache", 2, 7, 2, 8,
        garbage_from=5, posOffset=3, bias_shape=(2, 2, 7))
    add("vheaddim_mla", CM + "; value width 8 != query/key width 12 (MLA)", 4, 4, 2, 12, Dv=8)
    add("vheaddim_gqa_decode", CM + "; GQA 4/1, headDim 24, vHeadDim 16, decode at 5", 1, 9, 4, 24, KV=1, Dv=16,
        garbage_from=6, posOffset=5)
    add("softcap_alibi_bias_order", EA.format("causal_mask_function") +
        " softcap first, then + slope*(s-pos) + bias [T,S], then mask", 4, 4, 2, 8, qscale=3.0, softcap=2.0,
        alibiSlopes=[0.5, 0.125], bias_shape=(4, 4))
    return cases


# ----------------------------------------------------------------------------------------------
# moe
# ----------------------------------------------------------------------------------------------

def moe_case_inputs(x, logits, bias, gate, up, down, layout):
    """Inputs and names for the three expert-weight layouts."""
    E = gate.shape[0]
    ins = [("x", x), ("logits", logits)]
    if bias is not None:
        ins.append(("sel_bias", bias))
    if layout == "separate":
        for e in range(E):
            ins += [(f"gate{e}", gate[e]), (f"up{e}", up[e]), (f"down{e}", down[e])]
    elif layout == "fused":
        ins += [("gate_up", torch.cat([gate, up], dim=1)), ("down", down)]
    elif layout == "stacked":
        ins += [("gate", gate), ("up", up), ("down", down)]
    return ins


def moe_route_spec(logits, topK, scoring="softmax", normalize=False, scale=1.0, nGroup=None, topKGroup=None,
                   groupTopK=1, bias=None):
    """Routing per the ops.json wording in float64 (used for margin checks and the self-check)."""
    lg = f64(logits)
    sc = torch.softmax(lg, -1) if scoring == "softmax" else torch.sigmoid(lg)
    ch = sc + (f64(bias) if bias is not None else 0.0)
    T, E = lg.shape
    if nGroup:
        gs = ch.reshape(T, nGroup, E // nGroup).topk(groupTopK, -1).values.sum(-1)
        keep = torch.zeros(T, nGroup, dtype=torch.bool)
        keep.scatter_(1, gs.topk(topKGroup, -1).indices, True)
        ch = ch.masked_fill(~keep.repeat_interleave(E // nGroup, 1), float("-inf"))
    idx = ch.topk(topK, -1).indices
    w = sc.gather(1, idx)
    if normalize:
        w = w / w.sum(-1, keepdim=True)
    return idx, w * scale, ch, sc


def moe_margin_ok(logits, topK, **kw):
    """True when no routing decision is within 1e-4 of a tie (so f32 kernels choose the same experts)."""
    idx, _, ch, _ = moe_route_spec(logits, topK, **kw)
    srt = ch.sort(-1, descending=True).values
    fin = torch.isfinite(srt[:, topK])
    gap = (srt[:, topK - 1] - srt[:, topK]).where(fin, torch.full_like(srt[:, 0], 1.0))
    if kw.get("nGroup"):
        T, E = ch.shape
        lg = f64(logits)
        sc = torch.softmax(lg, -1) if kw.get("scoring", "softmax") == "softmax" else torch.sigmoid(lg)
        c2 = sc + (f64(kw["bias"]) if kw.get("bias") is not None else 0.0)
        gs = c2.reshape(T, kw["nGroup"], E // kw["nGroup"]).topk(kw.get("groupTopK", 1), -1).values.sum(-1)
        gsrt = gs.sort(-1, descending=True).values
        gk = kw["topKGroup"]
        if gk < kw["nGroup"] and (gsrt[:, gk - 1] - gsrt[:, gk]).min() < 1e-4:
            return False
    return bool(gap.min() > 1e-4)


def build_moe_module(kind, C, I, E, topK, act, norm=None, scale=None, nGroup=None, topKGroup=None):
    if kind == "mixtral":
        from transformers import MixtralConfig
        from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
        cfg = MixtralConfig(hidden_size=C, intermediate_size=I, num_local_experts=E, num_experts_per_tok=topK,
                            num_attention_heads=2, num_key_value_heads=2, hidden_act=act)
        return MixtralSparseMoeBlock(cfg)
    if kind == "qwen2_moe":
        from transformers import Qwen2MoeConfig
        from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock
        cfg = Qwen2MoeConfig(hidden_size=C, moe_intermediate_size=I, shared_expert_intermediate_size=I, num_experts=E,
                             num_experts_per_tok=topK, norm_topk_prob=bool(norm), num_attention_heads=2,
                             num_key_value_heads=2, hidden_act=act)
        return Qwen2MoeSparseMoeBlock(cfg)
    if kind == "qwen3_moe":
        from transformers import Qwen3MoeConfig
        from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock
        cfg = Qwen3MoeConfig(hidden_size=C, moe_intermediate_size=I, num_experts=E, num_experts_per_tok=topK,
                             norm_topk_prob=bool(norm), num_attention_heads=2, num_key_value_heads=2, hidden_act=act)
        return Qwen3MoeSparseMoeBlock(cfg)
    if kind == "olmoe":
        from transformers import OlmoeConfig
        from transformers.models.olmoe.modeling_olmoe import OlmoeSparseMoeBlock
        cfg = OlmoeConfig(hidden_size=C, intermediate_size=I, num_experts=E, num_experts_per_tok=topK,
                          norm_topk_prob=bool(norm), num_attention_heads=2, num_key_value_heads=2, hidden_act=act)
        return OlmoeSparseMoeBlock(cfg)
    if kind == "deepseek_v3":
        from transformers import DeepseekV3Config
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE
        cfg = DeepseekV3Config(hidden_size=C, moe_intermediate_size=I, n_routed_experts=E, num_experts_per_tok=topK,
                               n_group=nGroup, topk_group=topKGroup, norm_topk_prob=bool(norm), routed_scaling_factor=scale,
                               n_shared_experts=1, num_attention_heads=2, num_key_value_heads=2, hidden_act=act)
        return DeepseekV3MoE(cfg)
    if kind == "deepseek_v2":
        from transformers import DeepseekV2Config
        from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2Moe
        cfg = DeepseekV2Config(hidden_size=C, moe_intermediate_size=I, n_routed_experts=E, num_experts_per_tok=topK,
                               n_group=nGroup, topk_group=topKGroup, topk_method="group_limited_greedy",
                               routed_scaling_factor=scale, n_shared_experts=1, num_attention_heads=2,
                               num_key_value_heads=2, hidden_act=act)
        return DeepseekV2Moe(cfg)
    raise ValueError(kind)


def moe_reference(kind, x, wr, gate, up, down, topK, act="silu", norm=None, scale=None, nGroup=None, topKGroup=None,
                  sel_bias=None):
    """Run the transformers MoE block's router and routed experts (shared experts excluded) with our weights.
    Returns (output float64, router logits as the f32 values passed to the op)."""
    E, I, C = gate.shape
    m = build_moe_module(kind, C, I, E, topK, act, norm=norm, scale=scale, nGroup=nGroup, topKGroup=topKGroup)
    m = m.double()
    m.gate.weight.data = wr.clone()
    m.experts.gate_up_proj.data = torch.cat([gate, up], dim=1).clone()
    m.experts.down_proj.data = down.clone()
    if kind in ("deepseek_v3", "deepseek_v2"):
        # these routers run in float32 by design (F.linear on .float()); keep their weights f32
        m.gate.weight.data = wr.float()
        logits = F.linear(x.float(), wr.float()).double()
        if kind == "deepseek_v3":
            m.gate.e_score_correction_bias.data = sel_bias.float()
    else:
        logits = (x @ wr.T).float().double()
    h = x.clone()
    _, w, idx = m.gate(h)
    out = m.experts(h, idx, w)
    if kind in ("mixtral", "qwen3_moe", "olmoe"):  # these blocks have no shared expert: compare with the full block
        full = m(x[None]).reshape(out.shape)
        assert torch.allclose(full, out, atol=1e-12)
    return out.double(), logits, idx


def gen_moe():
    g = gen_for("moe")
    cases = []

    def make_weights(E, C, I, wscale=0.3):
        return (randn(g, E, I, C, scale=wscale), randn(g, E, I, C, scale=wscale), randn(g, E, C, I, scale=wscale))

    def family(prefix, kind, ref, T, C, I, E, topK, params, layouts=("separate", "fused", "stacked"), act="silu",
               norm=None, scale=None, nGroup=None, topKGroup=None, groupTopK=1, use_bias=False, hold_fmt=None,
               check_alt=None, omit_in=()):
        for attempt in range(50):
            x = randn(g, T, C)
            wr = randn(g, E, C, scale=0.8)
            sel_bias = randn(g, E, scale=0.15) if use_bias else None
            logits = (x @ wr.T).float().double() if kind not in ("deepseek_v3", "deepseek_v2") else \
                F.linear(x.float(), wr.float()).double()
            kw = dict(scoring=params.get("scoring", "softmax"), normalize=False, nGroup=nGroup, topKGroup=topKGroup,
                      groupTopK=groupTopK, bias=sel_bias)
            if not moe_margin_ok(logits, topK, **kw):
                continue
            if check_alt and not check_alt(logits, sel_bias):
                continue
            break
        else:
            raise RuntimeError(f"moe {prefix}: no well-separated routing found")
        gate, up, down = make_weights(E, C, I)
        gh, uh, dh = (held(gate, hold_fmt), held(up, hold_fmt), held(down, hold_fmt)) if hold_fmt else (gate, up, down)
        out, lg, idx = moe_reference(kind, x, wr, gh, uh, dh, topK, act=act, norm=norm, scale=scale, nGroup=nGroup,
                                     topKGroup=topKGroup, sel_bias=sel_bias)
        assert torch.equal(lg, logits)
        sidx, _, _, _ = moe_route_spec(logits, topK, **kw)
        assert torch.equal(idx.sort(-1).values, sidx.sort(-1).values), f"{prefix}: transformers routing != spec routing"
        for layout in layouts:
            p = dict(params)
            p["topK"] = topK
            if layout != "separate" or "layout" not in omit_in:
                p["layout"] = layout
            ins = moe_case_inputs(x, logits, sel_bias, gate, up, down, layout)
            hold = None
            if hold_fmt:
                hold = {n: hold_fmt for n, _ in ins if n not in ("x", "logits", "sel_bias")}
            r = ref + f"; experts as '{layout}'" + (f", held {hold_fmt}" if hold_fmt else "")
            tol = tol_for(hold_fmt) if hold_fmt else TOL_F32
            cases.append(single("moe", f"{prefix}_{layout}", r, ins, out, params=p, tol=tol, hold=hold))

    T, C, I, E = 5, 16, 8, 8
    family("mixtral_softmax_norm", "mixtral", "MixtralSparseMoeBlock (router softmax, top-2, renormalised)", T, C, I, E, 2,
           {"scoring": "softmax", "normalize": True})
    family("qwen2_moe_norm_false", "qwen2_moe",
           "Qwen2MoeSparseMoeBlock routed part (gate + experts; shared expert excluded), norm_topk_prob False",
           T, C, I, E, 2, {"normalize": False}, omit_in=("layout",))
    family("qwen3_moe_norm_true", "qwen3_moe", "Qwen3MoeSparseMoeBlock, norm_topk_prob True, top-4", T, C, I, E, 4,
           {"scoring": "softmax", "normalize": True}, norm=True)
    family("qwen2_moe_norm_true", "qwen2_moe", "Qwen2MoeSparseMoeBlock routed part, norm_topk_prob True",
           T, C, I, E, 2, {"normalize": True}, norm=True, layouts=("separate",))
    family("olmoe_norm_false", "olmoe", "OlmoeSparseMoeBlock, norm_topk_prob False (defaults: softmax, no normalize)",
           T, C, I, E, 2, {}, norm=False)

    def grouped_matters(scoring, nGroup, topKGroup, groupTopK, topK, use_bias):
        def chk(logits, bias):
            base = dict(scoring=scoring, nGroup=nGroup, topKGroup=topKGroup, groupTopK=groupTopK, bias=bias)
            i0 = moe_route_spec(logits, topK, **base)[0].sort(-1).values
            alts = [dict(base, nGroup=None, topKGroup=None)]
            if groupTopK != 1:
                alts.append(dict(base, groupTopK=1))
            if use_bias:
                alts.append(dict(base, bias=None))
            for a in alts:
                if not moe_margin_ok(logits, topK, **a):
                    return False
                if torch.equal(moe_route_spec(logits, topK, **a)[0].sort(-1).values, i0):
                    return False
            return True
        return chk

    E3 = 16
    family("deepseek_v3_sigmoid_grouped", "deepseek_v3",
           "DeepseekV3TopkRouter + DeepseekV3Experts (sigmoid, e_score_correction_bias, n_group 4, topk_group 2, "
           "group score = sum of best 2, norm_topk_prob, routed_scaling_factor 2.5; shared experts excluded)",
           4, C, I, E3, 4, {"scoring": "sigmoid", "normalize": True, "scale": 2.5, "nGroup": 4, "topKGroup": 2,
                            "groupTopK": 2, "selectionBias": True},
           norm=True, scale=2.5, nGroup=4, topKGroup=2, groupTopK=2, use_bias=True,
           check_alt=grouped_matters("sigmoid", 4, 2, 2, 4, True))
    family("deepseek_v3_norm_false", "deepseek_v3", "DeepseekV3TopkRouter, norm_topk_prob False, scale 1.5", 4, C, I, E3,
           4, {"scoring": "sigmoid", "normalize": False, "scale": 1.5, "nGroup": 4, "topKGroup": 2, "groupTopK": 2,
               "selectionBias": True},
           norm=False, scale=1.5, nGroup=4, topKGroup=2, groupTopK=2, use_bias=True, layouts=("stacked",),
           check_alt=grouped_matters("sigmoid", 4, 2, 2, 4, True))
    family("deepseek_v2_group_limited", "deepseek_v2",
           "DeepseekV2TopkRouter topk_method group_limited_greedy (softmax, group score = max, n_group 4, "
           "topk_group 2, no renormalisation, routed_scaling_factor 2.0) + DeepseekV2Experts", 4, C, I, E, 3,
           {"scoring": "softmax", "scale": 2.0, "nGroup": 4, "topKGroup": 2, "groupTopK": 1},
           scale=2.0, nGroup=4, topKGroup=2, groupTopK=1, check_alt=grouped_matters("softmax", 4, 2, 1, 3, False))
    # groupTopK omitted (defaults to 1)
    family("deepseek_v2_group_default_grouptopk", "deepseek_v2", "as deepseek_v2_group_limited with n_group 2, topk_group 1, top-2; groupTopK omitted (1)",
           4, C, I, E, 2, {"scoring": "softmax", "scale": 2.0, "nGroup": 2, "topKGroup": 1}, scale=2.0, nGroup=2,
           topKGroup=1, layouts=("fused",), check_alt=grouped_matters("softmax", 2, 1, 1, 2, False))
    family("mixtral_geglu", "mixtral", "MixtralSparseMoeBlock with hidden_act gelu_pytorch_tanh (GeGLU experts)",
           T, C, I, E, 2, {"normalize": True, "activation": "gelu"}, act="gelu_pytorch_tanh", layouts=("fused", "separate"))
    family("qwen2_moe_top1", "qwen2_moe", "Qwen2MoeSparseMoeBlock routed part, top-1, norm_topk_prob False",
           T, C, I, E, 1, {"normalize": False}, norm=False, layouts=("separate",))
    family("mixtral_top1_decode", "mixtral", "MixtralSparseMoeBlock, top-1 renormalised (weight 1), one token",
           1, C, I, E, 1, {"normalize": True}, layouts=("stacked",))
    family("mixtral_hold_bf16", "mixtral", "MixtralSparseMoeBlock with expert weights rounded to bf16",
           4, C, I, E, 2, {"normalize": True}, layouts=("stacked", "separate"), hold_fmt="bf16")
    family("qwen3_moe_hold_q8", "qwen3_moe", "Qwen3MoeSparseMoeBlock with expert weights dequantised from q8",
           3, 32, 32, 4, 2, {"normalize": True}, norm=True, layouts=("fused",), hold_fmt="q8")
    family("qwen3_moe_hold_q4", "qwen3_moe", "Qwen3MoeSparseMoeBlock with expert weights dequantised from q4",
           3, 32, 32, 4, 2, {"normalize": True}, norm=True, layouts=("stacked",), hold_fmt="q4")
    return cases


# ----------------------------------------------------------------------------------------------
# short_conv / conv1d
# ----------------------------------------------------------------------------------------------

def lfm2_module(C, K):
    from transformers import Lfm2Config
    from transformers.models.lfm2.modeling_lfm2 import Lfm2ShortConv
    cfg = Lfm2Config(hidden_size=C, num_hidden_layers=1, layer_types=["conv"], conv_L_cache=K, conv_bias=False,
                     num_attention_heads=2, num_key_value_heads=2, intermediate_size=2 * C, vocab_size=16)
    return cfg, Lfm2ShortConv(cfg, layer_idx=0).double()


def lfm2_state_rows(cache):
    """transformers keeps the conv state channels-first as [batch, C, K] (K = conv_L_cache columns, the oldest of
    which a decode step never reads); our state is the last K-1 of those columns, time-major: [K-1, C]."""
    st = cache.layers[0].conv_states[0]
    return st[0, :, 1:].T.contiguous().double()


def gen_short_conv():
    from transformers import DynamicCache
    g = gen_for("short_conv")
    cases = []
    REF = "transformers Lfm2ShortConv (torch causal_conv1d fallbacks) float64 with a DynamicCache"

    def weights(C, K):
        return (randn(g, 3 * C, C, scale=0.4), randn(g, C, 1, K, scale=0.5), randn(g, C, C, scale=0.4))

    def run(mod, cache, x):
        y = mod(x[None], cache=cache)[0]
        # the carried state becomes the next case's input, which must be f32: round it in the cache too
        st = cache.layers[0].conv_states[0]
        st.copy_(st.float().double())
        return y

    def case(nm, ref, x, w, state_in, y, state_out):
        win, wc, wo = w
        st = [step("short_conv", ["x", "in_proj", "conv", "out_proj", "state"], "y")]
        cases.append(make_case(nm, ref, [("x", x), ("in_proj", win), ("conv", wc), ("out_proj", wo),
                                         ("state", state_in)], st, ["y", "state"], {"y": y, "state": state_out}))

    for (C, K, T1, T2, label) in [(8, 3, 6, 1, "k3"), (8, 4, 5, 3, "k4"), (6, 4, 2, 1, "k4_short")]:
        cfg, mod = lfm2_module(C, K)
        w = weights(C, K)
        mod.in_proj.weight.data, mod.conv.weight.data, mod.out_proj.weight.data = [t.clone() for t in w]
        cache = DynamicCache(config=cfg)
        x1 = randn(g, T1, C)
        zero = torch.zeros(K - 1, C, dtype=torch.float64)
        y1 = run(mod, cache, x1)
        s1 = lfm2_state_rows(cache)
        # the whole prefill again without a cache must agree (zero initial state)
        assert torch.allclose(mod(x1[None])[0], y1, atol=1e-12)
        note = "1 < T < K-1" if 1 < T1 < K - 1 else "T >= K-1"
        case(f"prefill_t{T1}_{label}_zero_state", REF + f"; prefill of {T1} rows ({note}) from a zero state", x1, w,
             zero, y1, s1)
        x2 = randn(g, T2, C)
        y2 = run(mod, cache, x2)
        s2 = lfm2_state_rows(cache)
        kind = "decode step (causal_conv1d_update)" if T2 == 1 else f"{T2}-row continuation from the carried state"
        case(f"{'decode_t1' if T2 == 1 else f'continue_t{T2}'}_after_prefill_{label}",
             REF + f"; {kind} after the {T1}-row prefill", x2, w, s1, y2, s2)
        if T2 == 1:
            x3 = randn(g, 1, C)
            y3 = run(mod, cache, x3)
            case(f"second_decode_t1_{label}", REF + "; a second decode step", x3, w, s2, y3, lfm2_state_rows(cache))
    # a first token with no history: T = 1 from a zero state (transformers' prefill path)
    C, K = 8, 3
    cfg, mod = lfm2_module(C, K)
    w = weights(C, K)
    mod.in_proj.weight.data, mod.conv.weight.data, mod.out_proj.weight.data = [t.clone() for t in w]
    cache = DynamicCache(config=cfg)
    x = randn(g, 1, C)
    y = run(mod, cache, x)
    case("first_token_t1_zero_state", REF + "; a 1-row prefill from a zero state", x, w,
         torch.zeros(K - 1, C, dtype=torch.float64), y, lfm2_state_rows(cache))
    return cases


def conv1d_reference(x, w, state):
    """PyTorch depthwise conv1d (cross-correlation: w[..., K-1] multiplies the current row) over concat(state, x)."""
    C = x.shape[1]
    full = torch.cat([state, x], 0).T[None]  # [1, C, K-1+T]
    return F.conv1d(full, w, groups=C)[0].T.contiguous()


def gen_conv1d():
    g = gen_for("conv1d")
    cases = []
    REF = "torch.nn.functional.conv1d(concat(state, x).T, weight, groups=C) float64 (cross-correlation)"

    def add(nm, T, C, K, zero_state=False, ref=""):
        x = randn(g, T, C)
        w = randn(g, C, 1, K, scale=0.5)
        st = torch.zeros(K - 1, C, dtype=torch.float64) if zero_state else randn(g, K - 1, C)
        cases.append(single("conv1d", nm, REF + ref, [("x", x), ("weight", w), ("state", st)], conv1d_reference(x, w, st)))

    add("prefill_t6_k4_zero_state", 6, 8, 4, zero_state=True)
    add("prefill_t5_k3_state", 5, 8, 3)
    add("decode_t1_k4", 1, 8, 4)
    add("t2_k4_shorter_than_state", 2, 6, 4, ref="; 1 < T < K-1")
    add("k2_t3", 3, 4, 2, ref="; K = 2, state is one row")
    # asymmetric weight: only the last tap set, so y == x exactly when taps are read the right way round
    C, K, T = 4, 3, 3
    x = randn(g, T, C)
    w = torch.zeros(C, 1, K, dtype=torch.float64)
    w[:, 0, K - 1] = 1.0
    w[:, 0, 0] = 0.5
    st = randn(g, K - 1, C)
    cases.append(single("conv1d", "tap_orientation", REF + "; weight[...,K-1]=1 on the current row, weight[...,0]=0.5 "
                        "on the row K-1 back", [("x", x), ("weight", w), ("state", st)], conv1d_reference(x, w, st)))
    # api-v3 state-carry recipe for one decode row
    C, K = 6, 4
    x = randn(g, 1, C)
    w = randn(g, C, 1, K, scale=0.5)
    st = randn(g, K - 1, C)
    y = conv1d_reference(x, w, st)
    new_st = torch.cat([st, x], 0)[-(K - 1):]
    steps = [step("conv1d", ["x", "w", "st"], "y"),
             step("slice", ["st"], "tail", start=1, length=K - 2),
             step("concat", ["tail", "x"], "next"),
             step("cache_write", ["st", "next"], "st2", offset=0)]
    cases.append(make_case("decode_state_carry_recipe_k4", REF + "; then slice/concat/cache_write carry the state "
                           "(new state = last K-1 rows of concat(state, x))", [("x", x), ("w", w), ("st", st)], steps,
                           ["y", "st", "st2"], {"y": y, "st": new_st, "st2": new_st}))
    # prefill recipe: new state = slice(x, T-K+1, K-1)
    T = 6
    x = randn(g, T, C)
    st = torch.zeros(K - 1, C, dtype=torch.float64)
    y = conv1d_reference(x, w, st)
    steps = [step("conv1d", ["x", "w", "st"], "y"),
             step("slice", ["x"], "tail", start=T - K + 1, length=K - 1),
             step("cache_write", ["st", "tail"], "st2", offset=0)]
    cases.append(make_case("prefill_state_recipe_t6_k4", REF + "; new state = slice(x, T-K+1, K-1) written with "
                           "cache_write", [("x", x), ("w", w), ("st", st)], steps, ["y", "st"],
                           {"y": y, "st": x[T - K + 1:]}))
    return cases


# ----------------------------------------------------------------------------------------------
# sample
# ----------------------------------------------------------------------------------------------

def penalty_ids(history, V, penaltyWindow=None, penaltyEnd=None):
    """The distinct ids that count: history rows [end-window, end), negative slots dropped. Ids >= V are kept here
    and dropped by RepetitionPenaltyLogitsProcessor, which clamps them to a padding column it discards."""
    h = [int(v) for v in np.asarray(history).reshape(-1).tolist()]
    N = len(h)
    end = N if penaltyEnd is None else max(0, min(int(penaltyEnd), N))
    start = 0 if penaltyWindow is None else max(0, end - int(penaltyWindow))
    ids = [i for i in h[start:end] if i >= 0]
    return sorted(set(ids))


def sample_processed_logits(logits, history=None, repetitionPenalty=1.0, presencePenalty=0.0, temperature=0.0,
                            topK=0, topP=1.0, penaltyWindow=None, penaltyEnd=None):
    """penalties -> temperature -> top-k -> top-p, with transformers' logits processors (float64)."""
    lg = f64(logits)
    rows = lg.reshape(-1, lg.shape[-1]).clone()
    V = rows.shape[-1]
    if history is not None:
        ids = penalty_ids(history, V, penaltyWindow, penaltyEnd)
        if ids and repetitionPenalty != 1.0:
            proc = RepetitionPenaltyLogitsProcessor(penalty=float(repetitionPenalty))
            inp = torch.tensor(ids, dtype=torch.long)[None].repeat(rows.shape[0], 1)
            rows = proc(inp, rows)
        ids_in = [i for i in ids if i < V]
        if ids_in and presencePenalty != 0.0:
            rows[:, ids_in] -= presencePenalty
    if temperature > 0:
        rows = TemperatureLogitsWarper(float(temperature))(None, rows)
        if topK and topK > 0:
            rows = TopKLogitsWarper(int(topK))(None, rows)
        if topP < 1.0:
            rows = TopPLogitsWarper(float(topP))(None, rows)
    return rows


def sample_margin_ok(rows, topK, topP):
    """No top-k tie at the cut and no top-p cumulative sum within 1e-4 of the threshold."""
    for r in rows:
        s = r.sort(descending=True).values
        if topK and 0 < topK < r.numel() and (s[topK - 1] - s[topK]) < 1e-4:
            return False
    return True


def gen_sample():
    g = gen_for("sample")
    cases = []
    GREEDY = "temperature 0: torch.argmax (first maximum) of the logits"
    PEN = ("transformers RepetitionPenaltyLogitsProcessor over the distinct ids in the window "
           "(positive logit / p, negative * p), presence = subtract once per distinct id; then torch.argmax")

    def greedy(nm, logits, ref, history=None, **p):
        rows = sample_processed_logits(logits, history, **{k: v for k, v in p.items()
                                                           if k in ("repetitionPenalty", "presencePenalty",
                                                                    "penaltyWindow", "penaltyEnd")})
        srt = rows.sort(-1, descending=True).values
        tok = rows.argmax(-1).double()
        e = tok.reshape([1] if f64(logits).dim() == 1 else list(f64(logits).shape[:-1]))
        ins = [("logits", logits)] + ([("history", history)] if history is not None else [])
        cases.append(single("sample", nm, ref, ins, e, params=p or None, tol=TOL_EXACT, out="tok"))
        return rows, srt

    def dist(nm, logits, ref, history=None, **p):
        kw = {k: v for k, v in p.items() if k != "seed"}
        rows = sample_processed_logits(logits, history, **kw)
        probs = torch.softmax(rows, -1)
        # top-p decisions must not sit on the threshold (f32 kernels would flip them)
        tp = kw.get("topP", 1.0)
        if tp < 1.0:
            pre = sample_processed_logits(logits, history, **dict(kw, topP=1.0))
            for r in pre:
                pr = torch.softmax(r, -1).sort().values.cumsum(0)
                assert (pr - (1 - tp)).abs().min() > 1e-4, f"{nm}: top-p threshold too close"
        if kw.get("topK"):
            pre = sample_processed_logits(logits, history, **dict(kw, topK=0, topP=1.0))
            assert sample_margin_ok(pre, kw["topK"], 1.0), f"{nm}: top-k tie"
        ins = [("logits", logits)] + ([("history", history)] if history is not None else [])
        V = f64(logits).shape[-1]
        cases.append(single("sample", nm, ref, ins, probs.reshape(-1, V), params=p, tol={"abs": 1e-5, "rel": 1e-4},
                            check="distribution", out="tok"))

    V = 40
    lg = randn(g, V, scale=2.0)
    greedy("greedy_default_temperature", lg, GREEDY + "; no parameters (temperature defaults to 0)")
    t = lg.clone()
    t[7] = 9.0
    t[19] = 9.0
    greedy("greedy_ties_lowest_index", t, GREEDY + "; a tie at 7 and 19 picks 7", temperature=0)
    m = randn(g, 4, 30, scale=2.0)
    m[2, 3] = 10.0
    m[2, 25] = 10.0
    greedy("greedy_multi_row", m, GREEDY + "; one token per row of [4,30] (row 2 has a tie)")
    greedy("greedy_rank3_rows", randn(g, 2, 2, 25), GREEDY + "; logits [2,2,25] give [2,2]")
    greedy("greedy_1xv_gives_1", randn(g, 1, 33), GREEDY + "; logits [1,33] give [1]")
    greedy("greedy_ignores_topk_topp", lg, GREEDY + "; topK/topP/seed do not change temperature 0", temperature=0,
           topK=3, topP=0.5, seed=11)

    def base_logits(vals, V=24, fill=-1.0):
        lgx = randn(g, V, scale=0.1, shift=fill)
        for i, v in vals.items():
            lgx[i] = v
        return f64(np.asarray(lgx, dtype=np.float32))

    # repetition penalty: positive logits divided
    lg1 = base_logits({5: 3.0, 9: 2.4})
    greedy("rep_penalty_positive_divided", lg1, PEN, history=f64([5, 2, 13]), repetitionPenalty=1.5)
    # negative logits multiplied: best -1.0 (in history) becomes -1.3 < -1.2
    lg2 = base_logits({3: -1.0, 8: -1.2}, fill=-3.0)
    greedy("rep_penalty_negative_multiplied", lg2, PEN + " (a negative logit is multiplied, moving it down)",
           history=f64([3, 0]), repetitionPenalty=1.3)
    # distinct ids: applied once even if the id repeats
    lg3 = base_logits({4: 3.0, 10: 2.4})
    greedy("rep_penalty_distinct_once", lg3, PEN + "; id 4 appears three times but is penalised once",
           history=f64([4, 4, 1, 4]), repetitionPenalty=1.2)
    lg4 = base_logits({6: 3.0, 12: 2.6})
    greedy("presence_penalty_subtract_once", lg4, PEN + "; presence 0.3 once for an id seen three times",
           history=f64([6, 6, 6]), presencePenalty=0.3)
    lg5 = base_logits({6: 3.0, 12: 2.8})
    greedy("presence_penalty_changes_argmax", lg5, PEN + "; presence 0.5 moves the choice", history=f64([6, 2]),
           presencePenalty=0.5)
    # [N, 1] history with negative (empty) slots; -1 must not wrap around to the last id
    lg6 = base_logits({23: 3.0, 2: 2.9})
    greedy("history_n1_negative_slots", lg6, PEN + "; history [N,1], negative entries are empty slots",
           history=f64([[-1], [5], [-1], [-7], [1]]), repetitionPenalty=2.0)
    # penalty window: only the last 3 rows count
    lg7 = base_logits({9: 3.0, 14: 2.8})
    hist = f64([9, 9, 3, 1, 0, 2, 4, 11, 12, 13])
    greedy("penalty_window_excludes_old", lg7, PEN + "; penaltyWindow 3: rows 7..9 count, id 9 (rows 0-1) does not",
           history=hist, repetitionPenalty=2.0, penaltyWindow=3)
    hist2 = f64([0, 1, 2, 3, 4, 5, 6, 9, 12, 13])
    greedy("penalty_window_includes_recent", lg7, PEN + "; penaltyWindow 3: id 9 at row 7 counts", history=hist2,
           repetitionPenalty=2.0, penaltyWindow=3)
    # penaltyEnd + penaltyWindow: rows [2, 6) count, rows past the end are future garbage
    lg8 = base_logits({7: 3.0, 15: 2.7, 16: 2.5})
    hist3 = f64([15, 15, 1, 7, 2, 3, 15, 16, 15, 16])
    greedy("penalty_end_and_window", lg8, PEN + "; penaltyEnd 6, penaltyWindow 4: rows 2..5 count", history=hist3,
           repetitionPenalty=1.5, penaltyEnd=6, penaltyWindow=4)
    greedy("penalty_end_only", lg8, PEN + "; penaltyEnd 5: rows 0..4 count (ids 15 and 7 penalised, 16 not)",
           history=hist3, repetitionPenalty=1.5, penaltyEnd=5)
    greedy("penalty_window_in_middle", lg8, PEN + "; penaltyEnd 5, penaltyWindow 2: rows 3..4 count (7 penalised)",
           history=hist3, repetitionPenalty=1.5, penaltyEnd=5, penaltyWindow=2)
    greedy("penalty_window_larger_than_end", lg8, PEN + "; penaltyEnd 4, penaltyWindow 10: rows 0..3 count",
           history=hist3, repetitionPenalty=1.5, penaltyEnd=4, penaltyWindow=10)
    lg9 = base_logits({5: 2.0, 11: 1.45})
    greedy("both_penalties", lg9, PEN + "; repetition 1.3 and presence 0.4 (either order gives the same token)",
           history=f64([5, 3]), repetitionPenalty=1.3, presencePenalty=0.4)
    lg10 = base_logits({2: 3.0, 3: 2.9})
    greedy("history_id_out_of_vocab_ignored", lg10, PEN + "; an id >= V in the history is ignored (transformers drops it)",
           history=f64([2, 30, 99]), presencePenalty=1.0)
    greedy("penalty_without_history_no_effect", lg1, GREEDY + "; repetitionPenalty without a history input does nothing",
           repetitionPenalty=2.0, presencePenalty=1.0)
    greedy("penalty_all_slots_empty", lg1, PEN + "; every history slot negative: nothing penalised",
           history=f64([-1, -1, -1]), repetitionPenalty=2.0)

    # ---- distributions (temperature > 0) ----
    DREF = ("final sampling distribution: transformers TemperatureLogitsWarper -> TopKLogitsWarper -> "
            "TopPLogitsWarper, then softmax")
    l20 = randn(g, 20, scale=1.5)
    dist("temperature_only", l20, DREF, temperature=0.7, seed=1234)
    l30 = randn(g, 30, scale=1.5)
    dist("topk_5", l30, DREF, temperature=1.0, topK=5, seed=1234)
    dist("topp_0_8", l30, DREF, temperature=1.0, topP=0.8, seed=1234)
    dist("topk_topp_temperature", randn(g, 50, scale=2.0), DREF, temperature=0.8, topK=10, topP=0.9, seed=7)
    dist("multi_row_topp", randn(g, 3, 25, scale=1.5), DREF + "; one distribution per row", temperature=1.2, topP=0.7,
         seed=5)
    # top-p keeps the token that crosses the threshold: probs 0.5, 0.3, 0.15, 0.05 with p=0.7 keep two
    pk = f64(np.log(np.array([0.05, 0.5, 0.15, 0.3], dtype=np.float64)).astype(np.float32))
    dist("topp_keeps_crossing_token", pk, DREF + "; sorted probs .5/.3/.15/.05 with topP 0.7 keep .5 and .3",
         temperature=1.0, topP=0.7, seed=3)
    dist("rep_penalty_temperature_topk", randn(g, 30, scale=1.5), "repetition penalty 1.3 over the history, then " + DREF,
         history=f64([1, 4, 4, 9, -1]), temperature=0.9, topK=8, repetitionPenalty=1.3, seed=9)
    dist("presence_topp_window", randn(g, 30, scale=1.5), "presence 0.8 over history rows [1,4), then " + DREF,
         history=f64([[2], [7], [3], [11], [5]]), temperature=1.0, topP=0.95, presencePenalty=0.8, penaltyWindow=3,
         penaltyEnd=4, seed=9)
    for _ in range(200):  # a large vocabulary: draw until no cumulative sum sits within 1e-4 of the threshold
        l300 = randn(g, 300, scale=2.0)
        cs = torch.softmax(l300, -1).sort().values.cumsum(0)
        if (cs - 0.05).abs().min() > 1e-4:
            break
    dist("vocab_300_topp", l300, DREF + "; V = 300", temperature=1.0, topP=0.95, seed=42)
    dist("topk_1_is_deterministic", randn(g, 16), DREF + "; topK 1 leaves one token", temperature=0.5, topK=1, seed=2)
    return cases


# ----------------------------------------------------------------------------------------------
# registry, writing, self-check
# ----------------------------------------------------------------------------------------------

GENERATORS = {
    "add": gen_add, "sub": gen_sub, "mul": gen_mul, "scale": gen_scale,
    "relu": gen_relu, "silu": gen_silu, "tanh": gen_tanh, "sigmoid": gen_sigmoid,
    "gelu": gen_gelu, "gelu_exact": gen_gelu_exact, "gelu_quick": gen_gelu_quick,
    "softcap": gen_softcap, "softmax": gen_softmax, "causal_mask": gen_causal_mask,
    "argmax": gen_argmax, "reduce_max": gen_reduce_max, "reduce_sum": gen_reduce_sum, "reduce_mean": gen_reduce_mean,
    "swiglu": gen_swiglu, "geglu": gen_geglu,
    "reshape": gen_reshape, "transpose": gen_transpose, "slice": gen_slice, "concat": gen_concat,
    "zeros": gen_zeros, "cache_write": gen_cache_write,
    "matmul": gen_matmul, "linear": gen_linear, "embedding": gen_embedding,
    "rmsnorm": gen_rmsnorm, "layernorm": gen_layernorm,
    "rope": gen_rope, "attention": gen_attention, "moe": gen_moe,
    "short_conv": gen_short_conv, "conv1d": gen_conv1d, "sample": gen_sample,
}


def load_spec():
    for p in SPEC_CANDIDATES:
        if p and os.path.isfile(p):
            with open(p) as f:
                return json.load(f), p
    return None, None


def write_fixture(op, cases):
    doc = {"op": op, "torch": TORCH_VERSION, "transformers": TF_VERSION, "cases": cases}
    path = os.path.join(OUT_DIR, f"{op}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, allow_nan=False)
        f.write("\n")
    return path


# ---- an independent numpy interpreter, written from the ops.json wording ----

def _np_softmax(x):
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(-1, keepdims=True)


def _np_gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _np_bcast(a, b):
    if b.shape == a.shape:
        return b
    if b.size == 1:
        return b.reshape(())
    if b.size == a.shape[-1]:
        return b.reshape(a.shape[-1])
    raise ValueError(f"cannot broadcast {b.shape} to {a.shape}")


def _rows_out_shape(x):
    return (1,) if x.ndim == 1 else x.shape[:-1]


def _np_rope_inv_freq(p, rd):
    base = p.get("base", 10000.0)
    sc = p.get("scaling")
    if p.get("invFreq") is not None:
        return np.array(p["invFreq"], np.float64), 1.0
    idx = np.arange(0, rd, 2, dtype=np.float64) / rd
    if sc is None or sc.get("rope_type", sc.get("type", "default")) == "default":
        b = sc.get("rope_theta", base) if sc else base
        return 1.0 / b ** idx, 1.0
    t = sc.get("rope_type", sc.get("type"))
    base = sc.get("rope_theta", base)
    inv = 1.0 / base ** idx
    if t == "linear":
        return inv / sc["factor"], 1.0
    if t == "llama3":
        f, lo, hi, old = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"], sc["original_max_position_embeddings"]
        wl = 2 * math.pi / inv
        out = np.where(wl > old / lo, inv / f, inv)
        sm = (old / wl - lo) / (hi - lo)
        smoothed = (1 - sm) * out / f + sm * out
        med = ~(wl < old / hi) & ~(wl > old / lo)
        return np.where(med, smoothed, out), 1.0
    if t == "yarn":
        f = sc["factor"]
        orig = sc["original_max_position_embeddings"]
        af = sc.get("attention_factor")

        def gm(s, m=1.0):
            return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
        if af is None:
            af = gm(f, sc["mscale"]) / gm(f, sc["mscale_all_dim"]) if sc.get("mscale") and sc.get("mscale_all_dim") else gm(f)
        bf, bs = sc.get("beta_fast") or 32, sc.get("beta_slow") or 1

        def cd(nr):
            return rd * math.log(orig / (nr * 2 * math.pi)) / (2 * math.log(base))
        lo_, hi_ = cd(bf), cd(bs)
        if sc.get("truncate", True):
            lo_, hi_ = math.floor(lo_), math.ceil(hi_)
        lo_, hi_ = max(lo_, 0), min(hi_, rd - 1)
        if lo_ == hi_:
            hi_ += 0.001
        ramp = np.clip((np.arange(rd // 2) - lo_) / (hi_ - lo_), 0, 1)
        ext = 1 - ramp
        return (inv / f) * (1 - ext) + inv * ext, af
    raise ValueError(t)


def np_rope(x, p):
    D = int(p["headDim"])
    T = x.shape[0]
    H = x.shape[1] // D
    rd = int(p.get("rotaryDim") or D)
    off = p.get("offset", 0)
    pos = np.arange(T, dtype=np.float64) + off
    sc = p.get("scaling")
    t = sc.get("rope_type", sc.get("type")) if sc else None
    if t == "dynamic":
        base = sc.get("rope_theta", p.get("base", 10000.0))
        mpe = sc["max_position_embeddings"]
        seq = max(off + T, mpe)
        base = base * ((sc["factor"] * seq / mpe) - (sc["factor"] - 1)) ** (rd / (rd - 2))
        inv, af = 1.0 / base ** (np.arange(0, rd, 2) / rd), 1.0
    elif t == "longrope":
        base = sc.get("rope_theta", p.get("base", 10000.0))
        orig = sc["original_max_position_embeddings"]
        fac = np.array(sc["long_factor"] if off + T > orig else sc["short_factor"], np.float64)
        inv = 1.0 / (fac * base ** (np.arange(0, rd, 2) / rd))
        af = sc.get("attention_factor")
        if af is None:
            f = sc.get("factor") or sc["max_position_embeddings"] / orig
            af = 1.0 if f <= 1 else math.sqrt(1 + math.log(f) / math.log(orig))
    else:
        inv, af = _np_rope_inv_freq(p, rd)
    if p.get("attentionFactor") is not None:
        af = p["attentionFactor"]
    ang = pos[:, None] * inv[None]
    c, s = np.cos(ang) * af, np.sin(ang) * af
    y = x.reshape(T, H, D).copy()
    r = y[..., :rd].copy()
    if p.get("interleaved"):
        a, b = r[..., 0::2], r[..., 1::2]
        out = np.empty_like(r)
        out[..., 0::2] = a * c[:, None] - b * s[:, None]
        out[..., 1::2] = b * c[:, None] + a * s[:, None]
    else:
        h = rd // 2
        a, b = r[..., :h], r[..., h:]
        out = np.concatenate([a * c[:, None] - b * s[:, None], b * c[:, None] + a * s[:, None]], -1)
    y[..., :rd] = out
    return y.reshape(T, H * D)


def _bloom_slopes(H):
    p2 = 2 ** math.floor(math.log2(H))
    base = 2 ** (-(2 ** -(math.log2(p2) - 3)))
    sl = [base ** i for i in range(1, p2 + 1)]
    if p2 != H:
        eb = 2 ** (-(2 ** -(math.log2(2 * p2) - 3)))
        sl += [eb ** i for i in range(1, 1 + 2 * min(p2, H - p2), 2)]
    return np.array(sl)


def _mpt_slopes(H, amax):
    p2 = 2 ** math.ceil(math.log2(H))
    sl = 1.0 / 2 ** (np.arange(1, p2 + 1) * (amax / p2))
    if p2 != H:
        sl = np.concatenate([sl[1::2], sl[::2]])[:H]
    return sl


def np_attention(ins, p):
    q, k, v = ins[:3]
    H, D = int(p["heads"]), int(p["headDim"])
    KV = int(p.get("kvHeads") or H)
    Dv = int(p.get("vHeadDim") or D)
    T, S = q.shape[0], k.shape[0]
    causal = p.get("causal", True)
    off = p.get("posOffset", 0)
    scale = p.get("scale", D ** -0.5)
    win = p.get("window")
    out = np.zeros((T, H * Dv))
    slopes = None
    if p.get("alibi"):
        slopes = _bloom_slopes(H)
    if p.get("alibiMax") is not None:
        slopes = _mpt_slopes(H, p["alibiMax"])
    if p.get("alibiSlopes") is not None:
        slopes = np.array(p["alibiSlopes"], np.float64)
    for h in range(H):
        kh = h // (H // KV)
        for t in range(T):
            pos = off + t
            sc = (k[:, kh * D:(kh + 1) * D] @ q[t, h * D:(h + 1) * D]) * scale
            if p.get("softcap") is not None:
                sc = p["softcap"] * np.tanh(sc / p["softcap"])
            s_idx = np.arange(S)
            if slopes is not None:
                sc = sc + slopes[h] * (s_idx - pos)
            if len(ins) > 3:
                b = ins[3]
                sc = sc + (b[t] if b.ndim == 2 else b[h, t])
            if causal:
                vis = s_idx <= pos
                if win:
                    vis &= s_idx > pos - win
            else:
                vis = np.ones(S, bool)
                if win:
                    vis &= np.abs(pos - s_idx) <= win
            sc = np.where(vis, sc, -np.inf)
            w = _np_softmax(sc)
            out[t, h * Dv:(h + 1) * Dv] = w @ v[:, kh * Dv:(kh + 1) * Dv]
    return out


def np_moe(ins, p):
    x, logits = ins[0], ins[1]
    i = 2
    bias = None
    if p.get("selectionBias"):
        bias = ins[2]
        i = 3
    w = ins[i:]
    T, C = x.shape
    E = logits.shape[1]
    layout = p.get("layout", "separate")
    if layout == "separate":
        gate = np.stack(w[0::3])
        up = np.stack(w[1::3])
        down = np.stack(w[2::3])
    elif layout == "fused":
        I = w[0].shape[1] // 2
        gate, up, down = w[0][:, :I], w[0][:, I:], w[1]
    else:
        gate, up, down = w
    scores = _np_softmax(logits) if p.get("scoring", "softmax") == "softmax" else 1 / (1 + np.exp(-logits))
    choice = scores + (bias if bias is not None else 0)
    if p.get("nGroup"):
        G = int(p["nGroup"])
        gtk = int(p.get("groupTopK", 1))
        gs = -np.sort(-choice.reshape(T, G, E // G), -1)[..., :gtk].sum(-1)
        for t in range(T):
            keep = np.argsort(-gs[t], kind="stable")[: int(p["topKGroup"])]
            m = np.ones(G, bool)
            m[keep] = False
            choice[t, np.repeat(m, E // G)] = -np.inf
    act = (lambda z: z / (1 + np.exp(-z))) if p.get("activation", "silu") == "silu" else _np_gelu_tanh
    out = np.zeros_like(x)
    for t in range(T):
        idx = np.argsort(-choice[t], kind="stable")[: int(p["topK"])]
        wt = scores[t, idx]
        if p.get("normalize"):
            wt = wt / wt.sum()
        wt = wt * p.get("scale", 1.0)
        for j, e in enumerate(idx):
            hdn = act(gate[e] @ x[t]) * (up[e] @ x[t])
            out[t] += wt[j] * (down[e] @ hdn)
    return out


def np_conv(x, w, state):
    K = w.shape[-1]
    full = np.concatenate([state, x], 0)
    T = x.shape[0]
    return np.stack([(full[t:t + K] * w[:, 0, :].T).sum(0) for t in range(T)])


def np_sample(ins, p):
    lg = ins[0]
    V = lg.shape[-1]
    rows = lg.reshape(-1, V).copy()
    if len(ins) > 1:
        h = [int(v) for v in ins[1].reshape(-1)]
        N = len(h)
        end = N if p.get("penaltyEnd") is None else max(0, min(int(p["penaltyEnd"]), N))
        start = 0 if p.get("penaltyWindow") is None else max(0, end - int(p["penaltyWindow"]))
        ids = sorted({i for i in h[start:end] if 0 <= i < V})
        rp = p.get("repetitionPenalty", 1.0)
        pp = p.get("presencePenalty", 0.0)
        for i in ids:
            rows[:, i] = np.where(rows[:, i] > 0, rows[:, i] / rp, rows[:, i] * rp)
            rows[:, i] -= pp
    temp = p.get("temperature", 0.0)
    if temp == 0:
        return rows.argmax(-1).astype(np.float64).reshape(_rows_out_shape(lg)), None
    rows = rows / temp
    probs = []
    for r in rows:
        r = r.copy()
        kk = int(p.get("topK", 0))
        if 0 < kk < V:
            r[r < np.sort(r)[::-1][kk - 1]] = -np.inf
        tp = p.get("topP", 1.0)
        if tp < 1.0:
            pr = _np_softmax(r)
            order = np.argsort(-pr, kind="stable")
            before = np.concatenate([[0.0], np.cumsum(pr[order])[:-1]])
            drop = order[before >= tp]
            r[drop] = -np.inf
        probs.append(_np_softmax(r))
    return None, np.stack(probs)


def np_short_conv(ins, p):
    x, win, wc, wo, state = ins
    C = x.shape[1]
    K = wc.shape[-1]
    bcx = x @ win.T
    B, Cg, xx = bcx[:, :C], bcx[:, C:2 * C], bcx[:, 2 * C:]
    bx = B * xx
    conv = np_conv(bx, wc, state)
    full = np.concatenate([state, bx], 0)
    state[...] = full[-(K - 1):]
    return (Cg * conv) @ wo.T


def np_run_step(op, ins, p):
    a = ins[0] if ins else None
    if op == "add":
        return a + _np_bcast(a, ins[1])
    if op == "sub":
        return a - _np_bcast(a, ins[1])
    if op == "mul":
        return a * _np_bcast(a, ins[1])
    if op == "scale":
        return a * p["factor"]
    if op == "relu":
        return np.maximum(a, 0)
    if op == "silu":
        return a / (1 + np.exp(-a))
    if op == "tanh":
        return np.tanh(a)
    if op == "sigmoid":
        return 1 / (1 + np.exp(-a))
    if op == "gelu":
        return _np_gelu_tanh(a)
    if op == "gelu_exact":
        return 0.5 * a * (1 + np.vectorize(math.erf)(a / math.sqrt(2)))
    if op == "gelu_quick":
        return a / (1 + np.exp(-1.702 * a))
    if op == "softcap":
        return p["cap"] * np.tanh(a / p["cap"])
    if op == "softmax":
        return _np_softmax(a)
    if op == "causal_mask":
        n = a.shape[-1]
        return np.where(np.triu(np.ones((n, n), bool), 1), -np.inf, a)
    if op == "argmax":
        return np.argmax(a, -1).astype(np.float64).reshape(_rows_out_shape(a))
    if op == "reduce_max":
        return np.max(a, -1).reshape(_rows_out_shape(a))
    if op == "reduce_sum":
        return np.array([a.sum()])
    if op == "reduce_mean":
        return np.array([a.mean()])
    if op == "swiglu":
        return a / (1 + np.exp(-a)) * ins[1]
    if op == "geglu":
        return _np_gelu_tanh(a) * ins[1]
    if op == "reshape":
        return a.reshape(p["shape"])
    if op == "transpose":
        return a.T.copy()
    if op == "slice":
        ax = p.get("axis", 0)
        ax = a.ndim - 1 if ax in (-1, a.ndim - 1) else 0
        sl = [slice(None)] * a.ndim
        sl[ax] = slice(p["start"], p["start"] + p["length"])
        return a[tuple(sl)].copy()
    if op == "concat":
        ax = p.get("axis", 0)
        ax = a.ndim - 1 if ax in (-1, a.ndim - 1) else 0
        return np.concatenate([a, ins[1]], ax)
    if op == "zeros":
        return np.zeros(p["shape"])
    if op == "cache_write":
        a[p["offset"]:p["offset"] + ins[1].shape[0]] = ins[1]
        return a
    if op == "matmul":
        b = ins[1].T if p.get("transB") else ins[1]
        return a @ b
    if op == "linear":
        b = ins[1].T if p.get("transB") else ins[1]
        return a @ b + ins[2]
    if op == "embedding":
        V, C = ins[1].shape
        return np.stack([ins[1][int(i)] if 0 <= int(i) < V else np.zeros(C) for i in a.reshape(-1)])
    if op == "rmsnorm":
        gsz = p.get("groupSize") or a.shape[-1]
        xx = a.reshape(*a.shape[:-1], a.shape[-1] // gsz, gsz)
        y = xx / np.sqrt((xx ** 2).mean(-1, keepdims=True) + p.get("eps", 1e-6)) * (ins[1] + p.get("weightOffset", 0))
        return y.reshape(a.shape)
    if op == "layernorm":
        mu = a.mean(-1, keepdims=True)
        var = ((a - mu) ** 2).mean(-1, keepdims=True)
        return (a - mu) / np.sqrt(var + p.get("eps", 1e-5)) * ins[1] + ins[2]
    if op == "rope":
        return np_rope(a, p)
    if op == "attention":
        return np_attention(ins, p)
    if op == "moe":
        return np_moe(ins, p)
    if op == "conv1d":
        return np_conv(a, ins[1], ins[2])
    if op == "short_conv":
        return np_short_conv(ins, p)
    if op == "sample":
        tok, probs = np_sample(ins, p)
        return tok if tok is not None else probs
    raise ValueError(op)


def np_run_case(case):
    env = {}
    hold = case.get("hold", {})
    for i in case["graph"]["inputs"]:
        a = unb64(i["dataB64"], i["shape"]).astype(np.float64)
        if i["name"] in hold:
            a = held(torch.tensor(a), hold[i["name"]]).numpy().copy()
        env[i["name"]] = a
    for s in case["graph"]["steps"]:
        env[s["out"]] = np_run_step(s["op"], [env[n] for n in s["in"]], s.get("params", {}))
    return env


def self_check(spec, only=None):
    ops = {o["op"]: o for o in spec["ops"]} if spec else {}
    problems = []
    total = 0
    counts = {}
    for fn in sorted(os.listdir(OUT_DIR)):
        if not fn.endswith(".json"):
            continue
        op = fn[:-5]
        if only and op not in only:
            continue
        with open(os.path.join(OUT_DIR, fn)) as f:
            doc = json.load(f)
        total += os.path.getsize(os.path.join(OUT_DIR, fn))
        assert doc["op"] == op and doc["torch"] and doc["transformers"], fn
        names = set()
        counts[op] = len(doc["cases"])
        for c in doc["cases"]:
            where = f"{op}/{c['name']}"
            try:
                assert re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)*", c["name"]), "name is not snake_case"
                assert c["name"] not in names, "duplicate case name"
                names.add(c["name"])
                assert c["ref"] and set(c) <= {"name", "ref", "graph", "hold", "expected", "tol", "check"}
                gr = c["graph"]
                defined = {}
                for i in gr["inputs"]:
                    defined[i["name"]] = unb64(i["dataB64"], i["shape"]).shape
                assert any(s["op"] == op for s in gr["steps"]), "no step of the fixture's op"
                for s in gr["steps"]:
                    for n in s["in"]:
                        assert n in defined, f"step input {n} undefined"
                    if ops:
                        o = ops[s["op"]]
                        assert o["minInputs"] <= len(s["in"]) <= o["maxInputs"], f"{s['op']} input count {len(s['in'])}"
                        for pn in s.get("params", {}):
                            assert pn in o["params"], f"{s['op']} has no parameter {pn}"
                        for pn, pd in o["params"].items():
                            if not pd["type"].endswith("?"):
                                assert pn in s.get("params", {}), f"{s['op']} needs {pn}"
                    defined[s["out"]] = True
                for n in gr["outputs"]:
                    assert n in defined, f"output {n} undefined"
                for n, fmt in c.get("hold", {}).items():
                    assert fmt in ("bf16", "f16", "q8", "q4"), fmt
                    shp = [i["shape"] for i in gr["inputs"] if i["name"] == n][0]
                    if fmt in ("q8", "q4"):
                        assert shp[-1] % 32 == 0, f"{n} last dim {shp[-1]} not a multiple of 32"
                assert set(c["expected"]) <= set(gr["outputs"]) and c["expected"]
                check = c.get("check", "close")
                with np.errstate(over="ignore"):
                    env = np_run_case(c)
                for n, e in c["expected"].items():
                    exp = unb64(e["dataB64"], e["shape"]).astype(np.float64)
                    got = np.asarray(env[n], np.float64)
                    if check == "distribution":
                        assert np.allclose(exp.sum(-1), 1.0, atol=1e-5)
                        got = got.reshape(exp.shape)
                    assert list(got.shape) == list(exp.shape), f"{n}: numpy shape {got.shape} != {exp.shape}"
                    inf = np.isinf(exp)
                    assert np.array_equal(np.isinf(got), inf) and np.array_equal(got[inf], exp[inf]), f"{n}: inf mismatch"
                    fin = ~inf
                    # the numpy interpreter is float64 and held weights match exactly, so check at the case tolerance
                    tol = c["tol"]
                    lim = tol["abs"] + tol["rel"] * np.abs(exp[fin])
                    err = np.abs(got[fin] - exp[fin])
                    if check == "close" and tol["abs"] == 0 and tol["rel"] == 0:
                        ok = np.all(err <= np.abs(exp[fin]) * 2 ** -23 + 1e-45) if op != "sample" else np.all(err == 0)
                    else:
                        ok = np.all(err <= lim)
                    assert ok, f"{n}: numpy interpreter differs by {err.max():.3g} (limit {lim.min():.3g})"
            except Exception as ex:  # collect everything, report at the end
                problems.append(f"{where}: {ex}")
    return problems, total, counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check-only", action="store_true", help="only re-run the self-check on existing fixtures")
    ap.add_argument("--ops", default="", help="comma-separated ops to (re)generate; default all")
    args = ap.parse_args()
    spec, spec_path = load_spec()
    only = [o for o in args.ops.split(",") if o] or None
    if spec:
        missing = sorted(set(o["op"] for o in spec["ops"]) - set(GENERATORS))
        if missing:
            sys.exit(f"no generator for ops: {missing}")
    else:
        print("warning: ops.json not found; the self-check skips op/parameter validation", file=sys.stderr)
    os.makedirs(OUT_DIR, exist_ok=True)
    if not args.check_only:
        for op, fn in GENERATORS.items():
            if only and op not in only:
                continue
            cases = fn()
            write_fixture(op, cases)
    problems, total, counts = self_check(spec, only)
    for op in sorted(counts):
        print(f"{op:12s} {counts[op]:3d} cases")
    print(f"{sum(counts.values())} cases in {len(counts)} files, {total / 1e6:.2f} MB; torch {TORCH_VERSION}, "
          f"transformers {TF_VERSION}; spec {spec_path}")
    if problems:
        print("SELF-CHECK FAILED:")
        for p in problems:
            print("  " + p)
        sys.exit(1)
    print("self-check passed")


if __name__ == "__main__":
    main()
