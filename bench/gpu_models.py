#!/usr/bin/env python3
"""Writes the GPU benchmark's models: Hugging Face folders (config.json + model.safetensors) of
the Qwen3-0.6B and Llama-3-8B shapes with random bf16 weights (matrices normal·0.02, norms 1),
for `mpakt_step_bench --backend cuda` (backends/cuda/run_device_checks.sh).

The values are drawn on the GPU with PyTorch where it and a device are there (an 8B shape is
16 GB: drawing it with numpy would cost minutes of a short device window), else with numpy.
A folder already written is kept.

Usage: python3 bench/gpu_models.py OUT_DIR [--shapes qwen3,llama3-8b]
Prints one line per shape: NAME<TAB>FOLDER.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from peer_bench import SHAPES, write_checkpoint  # noqa: E402

LLAMA3_8B = {
    "label": "Llama-3-8B",
    "name": "llama3-8b-shaped-s0",
    "config": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 128000, "eos_token_id": 128001,
        "torch_dtype": "bfloat16", "attention_bias": False, "mlp_bias": False,
    },
}
GPU_SHAPES = {"qwen3": SHAPES["qwen3"], "llama3-8b": LLAMA3_8B, "smol": SHAPES["smol"]}


def torch_fill(seed):
    """write_checkpoint's `fill` drawing on the GPU; None without PyTorch or a device."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)

    def fill(shape, std):
        if len(shape) == 1:
            t = torch.ones(shape, dtype=torch.bfloat16, device="cuda")
        else:
            t = (torch.randn(shape, generator=g, device="cuda", dtype=torch.float32) * std).to(torch.bfloat16)
        return t.view(torch.int16).cpu().numpy().tobytes()
    return fill


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="folder to write the model folders in")
    ap.add_argument("--shapes", default="qwen3,llama3-8b", help="comma list of " + ", ".join(GPU_SHAPES))
    args = ap.parse_args()
    fill = torch_fill(0)
    print("drawing weights with", "PyTorch on the GPU" if fill else "numpy on the CPU", file=sys.stderr, flush=True)
    for key in args.shapes.split(","):
        shape = GPU_SHAPES[key]
        folder = Path(args.out) / shape["name"]
        write_checkpoint(folder, shape["config"], fill=fill)
        print(f"{key}\t{folder}", flush=True)


if __name__ == "__main__":
    main()
