#!/usr/bin/env python3
"""The peer a user would pick for exact BF16 offload on one GPU: Hugging Face
transformers + accelerate, on the same checkpoint, GPU and prompt as Tarfa.

Usage: peer.py HF_DIR MODE TOKENS [OFFLOAD_DIR]
MODE: resident (the whole model on the GPU), cpu_offload (accelerate.cpu_offload:
weights in RAM, each module moved to the GPU for its forward), disk_offload
(accelerate.disk_offload: weights memory-mapped from OFFLOAD_DIR).

Prompt: token ids 1, 2, 3, 4 (tarfa run --tokens 1,2,3,4); greedy decoding of
TOKENS tokens with the model's cache, one forward per token. For disk_offload
the page cache is dropped before every timed step (so every step reads its
weights from storage, as on a machine whose RAM cannot hold the model; the
machine here has 125 GiB and would otherwise serve them from memory). Prints
one JSON line: load seconds, prefill seconds, per-token seconds, tokens.
"""
import json
import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def drop():
    os.system("sync; echo 3 > /proc/sys/vm/drop_caches")


def main():
    src, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
    model.eval()
    dev = torch.device("cuda:0")
    if mode == "resident":
        model.to(dev)
    elif mode == "cpu_offload":
        from accelerate import cpu_offload
        cpu_offload(model, execution_device=dev)
    elif mode == "disk_offload":
        from accelerate import disk_offload
        disk_offload(model, offload_dir=sys.argv[4], execution_device=dev)
    else:
        sys.exit(f"peer.py: mode {mode!r}: want resident, cpu_offload or disk_offload")
    torch.cuda.synchronize()
    load = time.time() - t0
    ids = torch.tensor([[1, 2, 3, 4]], device=dev)
    steps, toks = [], []
    with torch.no_grad():
        if mode == "disk_offload":
            drop()
        t = time.time()
        out = model(input_ids=ids, use_cache=True)
        torch.cuda.synchronize()
        prefill = time.time() - t
        past = out.past_key_values
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        toks.append(int(tok))
        for _ in range(n):
            if mode == "disk_offload":
                drop()
            t = time.time()
            out = model(input_ids=tok, past_key_values=past, use_cache=True)
            torch.cuda.synchronize()
            steps.append(time.time() - t)
            past = out.past_key_values
            tok = out.logits[:, -1].argmax(-1, keepdim=True)
            toks.append(int(tok))
    steps_sorted = sorted(steps)
    print(json.dumps({"mode": mode, "load_s": round(load, 3), "prefill_s": round(prefill, 4),
                      "step_s": [round(s, 4) for s in steps],
                      "median_step_s": steps_sorted[len(steps) // 2] if steps else None,
                      "tokens": toks, "torch": torch.__version__,
                      "gpu": torch.cuda.get_device_name(0)}), flush=True)


if __name__ == "__main__":
    main()
