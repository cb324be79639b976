#!/usr/bin/env python3
"""Writes a small Llama-shaped model folder (config.json + model.safetensors, random f32
weights) whose decode at long context is dominated by reading its KV caches: 4 layers,
hidden 512, 8 heads of 64, 2 KV heads (grouped-query, as Llama 3), so each position costs
1 KiB of f32 cache per layer against 34 MB of weights in all.

    python bench/kv_model.py DIR
    build/bench/mpakt_step_bench DIR --prefill 8192 --tokens 64 --kv-dtype bf16

Only numpy is needed.
"""

import json
import os
import struct
import sys

import numpy as np


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "kv_model"
    os.makedirs(out, exist_ok=True)
    hidden, heads, kv_heads, head_dim, layers, inter, vocab = 512, 8, 2, 64, 4, 1024, 512
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
              "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
              "num_hidden_layers": layers, "intermediate_size": inter, "vocab_size": vocab,
              "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
              "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    rng = np.random.default_rng(7)

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    tensors = {"model.embed_tokens.weight": w(vocab, hidden), "model.norm.weight": np.ones(hidden, np.float32),
               "lm_head.weight": w(vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors.update({
            p + "input_layernorm.weight": np.ones(hidden, np.float32),
            p + "post_attention_layernorm.weight": np.ones(hidden, np.float32),
            p + "self_attn.q_proj.weight": w(heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": w(kv_heads * head_dim, hidden),
            p + "self_attn.v_proj.weight": w(kv_heads * head_dim, hidden),
            p + "self_attn.o_proj.weight": w(hidden, heads * head_dim),
            p + "mlp.gate_proj.weight": w(inter, hidden),
            p + "mlp.up_proj.weight": w(inter, hidden),
            p + "mlp.down_proj.weight": w(hidden, inter),
        })
    header, offset = {}, 0
    for name, t in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for t in tensors.values():
            f.write(t.tobytes())
    print(f"wrote {out}: {offset / 1e6:.1f} MB of weights")


if __name__ == "__main__":
    main()
