#!/usr/bin/env python3
"""llama_convert.py LLAMA_SRC HF_DIR OUT.gguf: llama.cpp's convert_hf_to_gguf.py
on a `tarfa synth` checkpoint, to a BF16 GGUF.

Synth writes a small real BPE tokenizer with Qwen2's pre-tokenizer regex; its
token ids hash to nothing in the converter's table of known pre-tokenizers
(get_vocab_base_pre), which then refuses the model. This names the
pre-tokenizer instead (LLAMA_PRE, default "qwen2", whose regex is synth's) and
runs the converter unchanged otherwise. --no-mtp: synth writes no MTP block
(the converter would otherwise ask for mtp.* tensors). Anything after the three
arguments goes to the converter.
"""
import os
import runpy
import sys

src, hf, out = sys.argv[1:4]
sys.path.insert(0, src)
sys.path.insert(1, os.path.join(src, "gguf-py"))
import conversion.base as base  # noqa: E402  (the converter's own module, imported once)

pre = os.environ.get("LLAMA_PRE", "qwen2")
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv = [os.path.join(src, "convert_hf_to_gguf.py"), hf, "--outfile", out, "--outtype", "bf16", "--no-mtp"] + sys.argv[4:]
runpy.run_path(sys.argv[0], run_name="__main__")
