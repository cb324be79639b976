#!/usr/bin/env python3
"""Writes a GGUF file for llama.cpp with exactly the weights of one of our bf16 safetensors
checkpoints (Llama or Qwen3 layout, HF tensor names), for bench/peer_bench.py.

Runs in the peer's own virtual environment (the `gguf` package from the llama.cpp sources that
peer_bench.py downloads; never in the repository's .venv):

    VENV/bin/python bench/peer_gguf.py write CONFIG.json MODEL.safetensors OUT.gguf
    VENV/bin/python bench/peer_gguf.py describe FILE.gguf     # JSON: tensor types and bytes

Matrices keep their bf16 bits (GGML type BF16); 1-D norm weights are written as F32, as
llama.cpp's own converter does. Llama's q/k projections are permuted from the HF rotary layout
to llama.cpp's (as its converter does), so both programs compute the same function. The
vocabulary is a placeholder SentencePiece list (<unk>, <s>, </s>, the 256 byte tokens, then
t<i>) of the config's size: the benchmark feeds token ids, never text.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import gguf

ARCHES = {"llama": "llama", "qwen3": "qwen3"}


def read_safetensors(path: Path):
    """{name: uint16 or float array (memory-mapped)} of a safetensors file."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    base = 8 + n
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        dt = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}[e["dtype"]]
        out[name] = (e["dtype"], mm[base + a:base + b].view(dt).reshape(e["shape"]))
    return out


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF rotary layout (halves) -> llama.cpp's (interleaved pairs), per head."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write(config_path: Path, st_path: Path, out_path: Path):
    cfg = json.loads(config_path.read_text())
    arch = ARCHES[cfg["model_type"]]
    if not cfg.get("tie_word_embeddings"):
        raise SystemExit("peer_gguf: only tied embeddings are handled")
    L, h = cfg["num_hidden_layers"], cfg["hidden_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or h // nh
    vocab = cfg["vocab_size"]
    tensors = read_safetensors(st_path)

    w = gguf.GGUFWriter(str(out_path), arch)
    w.add_name(out_path.stem)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_context_length(cfg.get("max_position_embeddings", 8192))
    w.add_embedding_length(h)
    w.add_block_count(L)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_vocab_size(vocab)

    toks = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)]
    toks += [f"t{i}".encode() for i in range(len(toks), vocab)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + \
            [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (vocab - 259)
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * vocab)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)

    def put(gname, hfname, perm_heads=None):
        dtype, a = tensors[hfname]
        if a.ndim == 1:  # norms: f32, as llama.cpp's converter writes them
            w.add_tensor(gname, bf16_to_f32(a) if dtype == "BF16" else a.astype(np.float32))
            return
        if dtype != "BF16":
            raise SystemExit(f"peer_gguf: {hfname} is {dtype}, expected BF16")
        a = np.ascontiguousarray(permute(a, perm_heads) if perm_heads else a)
        w.add_tensor(gname, a, raw_dtype=gguf.GGMLQuantizationType.BF16)

    put("token_embd.weight", "model.embed_tokens.weight")
    for i in range(L):
        p, g = f"model.layers.{i}.", f"blk.{i}."
        llama = arch == "llama"
        put(g + "attn_norm.weight", p + "input_layernorm.weight")
        put(g + "attn_q.weight", p + "self_attn.q_proj.weight", nh if llama else None)
        put(g + "attn_k.weight", p + "self_attn.k_proj.weight", nkv if llama else None)
        put(g + "attn_v.weight", p + "self_attn.v_proj.weight")
        put(g + "attn_output.weight", p + "self_attn.o_proj.weight")
        if arch == "qwen3":
            put(g + "attn_q_norm.weight", p + "self_attn.q_norm.weight")
            put(g + "attn_k_norm.weight", p + "self_attn.k_norm.weight")
        put(g + "ffn_norm.weight", p + "post_attention_layernorm.weight")
        put(g + "ffn_gate.weight", p + "mlp.gate_proj.weight")
        put(g + "ffn_up.weight", p + "mlp.up_proj.weight")
        put(g + "ffn_down.weight", p + "mlp.down_proj.weight")
    put("output_norm.weight", "model.norm.weight")

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def describe(path: Path):
    r = gguf.GGUFReader(str(path))
    types, total = {}, 0
    for t in r.tensors:
        k = t.tensor_type.name
        types.setdefault(k, {"tensors": 0, "bytes": 0})
        types[k]["tensors"] += 1
        types[k]["bytes"] += int(t.n_bytes)
        total += int(t.n_bytes)
    emb = next(t for t in r.tensors if t.name == "token_embd.weight")
    print(json.dumps({"tensor_bytes": total, "types": types, "token_embd_type": emb.tensor_type.name,
                      "token_embd_bytes": int(emb.n_bytes)}))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "write":
        write(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
    elif len(sys.argv) == 3 and sys.argv[1] == "describe":
        describe(Path(sys.argv[2]))
    else:
        sys.exit(__doc__)
