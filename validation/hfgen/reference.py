#!/usr/bin/env python3
"""Hugging Face reference outputs for the synthetic checkpoints of package hfgen.

Usage: reference.py SYNTHREF_DIR OUT_DIR

For every SYNTHREF_DIR/NAME/checkpoint it writes OUT_DIR/NAME/reference.json and
OUT_DIR/NAME/reference.safetensors in the format of the shared fixtures:
prompts (seeded random token ids), 12-token greedy continuations of the fp32 and
bf16 runs (keys promptI.fp32 / promptI.bf16), and float32 logits at every prompt
position (promptI.logits.fp32 / promptI.logits.bf16), eager attention, on the CPU,
exactly as the fixtures were made (transformers 5.17, default grouped_mm experts).
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

LENGTHS = [1, 7, 19, 80]


def run(ckpt, out, name):
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    vocab = cfg.get("text_config", cfg)["vocab_size"]
    g = torch.Generator().manual_seed(20261129)
    prompts = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in LENGTHS]
    tensors, greedy = {}, {}
    for tag, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype, attn_implementation="eager")
        model.eval()
        for i, p in enumerate(prompts):
            ids = torch.tensor([p])
            with torch.no_grad():
                logits = model(ids).logits[0].float()
                gen = model.generate(ids, max_new_tokens=12, min_new_tokens=12, do_sample=False,
                                     eos_token_id=None, pad_token_id=0)
            tensors[f"prompt{i}.logits.{tag}"] = logits.contiguous()
            greedy[f"prompt{i}.{tag}"] = gen[0, len(p):].tolist()
        del model
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, "reference.safetensors"))
    ref = {"name": name, "model_type": cfg["model_type"], "prompts": prompts, "greedy": greedy,
           "atol": 5e-4, "config": cfg,
           "provenance": {"transformers": transformers.__version__, "torch": torch.__version__,
                          "device": "cpu", "attn_implementation": "eager", "script": "validation/hfgen/reference.py"}}
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(name, "ok", [len(p) for p in prompts], {k: v[:4] for k, v in greedy.items() if k.endswith("fp32")})


def main():
    src, dst = sys.argv[1], sys.argv[2]
    torch.set_num_threads(max(1, os.cpu_count() // 2))
    for name in sorted(os.listdir(src)):
        ckpt = os.path.join(src, name, "checkpoint")
        if os.path.isdir(ckpt):
            run(ckpt, os.path.join(dst, name), name)


if __name__ == "__main__":
    main()
