"""Reference replies for the chat API on stories260K, from transformers (not from mpakt).

For each prompt: the ids Hugging Face's tokenizer gives the text (the model has no chat
template, so the conversation is the user's text, BOS added by the tokenizer), then greedy
generation with transformers' repetition penalty 1.1 (the chat API's default) until the end
token or the length limit, and the text of the new ids with special tokens skipped.

Usage: tools/goldens/setup_venv.sh && .venv-goldens/bin/python tools/goldens/gen_chat_golden.py
Writes test/fixtures/chat/stories260K_greedy.json.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import transformers
from transformers import AutoTokenizer, LlamaForCausalLM

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT.parent / "shared" / "models" / "stories260K"
OUT = ROOT / "test" / "fixtures" / "chat" / "stories260K_greedy.json"

PROMPTS = ["Once upon a time", "The little dog", "Lily and Tom went to the park. They"]
MAX_NEW = 60
PENALTY = 1.1


def main():
    tok = AutoTokenizer.from_pretrained(MODEL)
    model = LlamaForCausalLM.from_pretrained(MODEL, torch_dtype=torch.float32).eval()
    cases = []
    for text in PROMPTS:
        ids = tok(text, add_special_tokens=True)["input_ids"]
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False,
                                 repetition_penalty=PENALTY, eos_token_id=tok.eos_token_id,
                                 pad_token_id=tok.eos_token_id)
        new = out[0, len(ids):].tolist()
        cases.append({"prompt": text, "prompt_ids": ids, "new_ids": new,
                      "text": tok.decode(new, skip_special_tokens=True),
                      "finish": "stop" if new and new[-1] == tok.eos_token_id else "length"})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"model": "stories260K", "transformers": transformers.__version__,
                               "max_new_tokens": MAX_NEW, "repetition_penalty": PENALTY, "cases": cases},
                              indent=1) + "\n")
    for c in cases:
        print(c["prompt"], "->", repr(c["text"][:80]), c["finish"])


if __name__ == "__main__":
    main()
