#!/usr/bin/env python3
"""Hugging Face reference outputs for the synthetic checkpoints of package hfgen.

Usage: reference.py [--fp8-path auto|native|kernel-emulated|dequantize] SYNTHREF_DIR OUT_DIR

For every SYNTHREF_DIR/NAME/checkpoint it writes OUT_DIR/NAME/reference.json and
OUT_DIR/NAME/reference.safetensors in the format of the shared fixtures:
prompts (seeded random token ids), 12-token greedy continuations of the fp32 and
bf16 runs (keys promptI.fp32 / promptI.bf16), and float32 logits at every prompt
position (promptI.logits.fp32 / promptI.logits.bf16), eager attention.

BF16 checkpoints run on the CPU, exactly as the committed references were made
(transformers 5.17, default grouped_mm experts).

Block-FP8 checkpoints (config.json quantization_config quant_method "fp8", the
layout of Qwen's FP8 releases; validation/testdata/synthref-fp8) run through
transformers' own FP8 implementation, FineGrainedFP8; fp32/bf16 name the dtype
of everything that is not FP8 (activations included):
  native      FP8Linear / FP8 experts: the weights stay F8_E4M3 with their
              weight_scale_inv, activations are quantised per 1×bk group and the
              products run in triton kernels. Needs a CUDA GPU and triton. Every
              F8_E4M3 element and every scale of the checkpoint must be loaded as
              such, or the run fails.
  dequantize  FineGrainedFP8Config(dequantize=True): each weight is dequantised
              at load (code × weight_scale_inv per block) and the model runs
              unquantised (W8A16, a different function from native's W8A8). Runs on
              the CPU. Checked: no F8_E4M3 parameter is left, and a dequantised
              matrix equals code × scale_inv exactly in the fp32 run.
  kernel-emulated
              native, with one part replaced: the matmul of the kernels-community
              finegrained-fp8 hub kernel that transformers 5.x's FP8Linear and
              FP8Experts call (finegrained_fp8_linear; the `kernels` package and the
              hub download it needs are absent offline) is emulate_w8a8 below, the
              W8A8 function that kernel and transformers' earlier in-tree triton
              kernels compute, in float64. Loading, the FP8 modules, which modules
              stay unquantised and the activations' dtype stay transformers'; the
              experts run transformers' eager FP8Experts loop (the batched and
              grouped kernels are refused); every FP8Linear and FP8Experts module
              must have gone through the emulated matmul, or the run fails.
  auto        (default) native; if native cannot load or run, says so on stderr
              and runs dequantize. reference.json's provenance records which path
              ran, why native did not, and the versions.
Anything unexpected (missing or unexpected keys, a path that loads something other
than it claims) fails the run: no reference is better than a mislabelled one.
"""
import argparse
import json
import os
import sys
import traceback

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

LENGTHS = [1, 7, 19, 80]
DTYPES = (("fp32", torch.float32), ("bf16", torch.bfloat16))


class ReferenceError(Exception):
    """A reference that cannot be made as labelled."""


def prompts_for(cfg):
    vocab = cfg.get("text_config", cfg)["vocab_size"]
    g = torch.Generator().manual_seed(20261129)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in LENGTHS]


def quant_config(cfg):
    q = cfg.get("quantization_config") or cfg.get("text_config", {}).get("quantization_config")
    if q is None:
        return None
    if q.get("quant_method") != "fp8" or q.get("fmt", "e4m3") != "e4m3":
        raise ReferenceError(f"quantization_config {q}: this script knows block FP8 (quant_method fp8, fmt e4m3) only")
    return q


def run_model(model, prompts, device, tag, tensors, greedy, want_dtype=None):
    if want_dtype is not None and model.get_input_embeddings().weight.dtype != want_dtype:
        raise ReferenceError(f"{tag} run: the model's float weights are {model.get_input_embeddings().weight.dtype}, "
                             f"not {want_dtype} (the quantizer changed the dtype; the reference would be mislabelled)")
    for i, p in enumerate(prompts):
        ids = torch.tensor([p], device=device)
        with torch.no_grad():
            logits = model(ids).logits[0].float().cpu()
            gen = model.generate(ids, max_new_tokens=12, min_new_tokens=12, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)
        if not torch.isfinite(logits).all():
            raise ReferenceError(f"prompt {i} ({tag}): non-finite logits")
        tensors[f"prompt{i}.logits.{tag}"] = logits.contiguous()
        greedy[f"prompt{i}.{tag}"] = gen[0, len(p):].cpu().tolist()


def write(out, name, cfg, prompts, tensors, greedy, provenance, atol=5e-4):
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, "reference.safetensors"))
    ref = {"name": name, "model_type": cfg["model_type"], "prompts": prompts, "greedy": greedy,
           "atol": atol, "config": cfg, "provenance": provenance}
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(name, "ok", [len(p) for p in prompts], {k: v[:4] for k, v in greedy.items() if k.endswith("fp32")},
          provenance.get("fp8_path", ""))


def versions():
    v = {"transformers": transformers.__version__, "torch": torch.__version__}
    for mod in ("triton", "accelerate", "safetensors"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception as e:  # recorded, not fatal: native needs triton and says so itself
            v[mod] = f"unavailable: {type(e).__name__}: {e}"
    if torch.cuda.is_available():
        v["cuda"] = torch.version.cuda
        v["gpu"] = torch.cuda.get_device_name(0)
    return v


def run_bf16(ckpt, out, name, cfg):
    prompts = prompts_for(cfg)
    tensors, greedy = {}, {}
    for tag, dtype in DTYPES:
        model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype, attn_implementation="eager")
        model.eval()
        run_model(model, prompts, "cpu", tag, tensors, greedy)
        del model
    prov = {**versions(), "device": "cpu", "attn_implementation": "eager", "script": "validation/hfgen/reference.py"}
    write(out, name, cfg, prompts, tensors, greedy, prov)


def checkpoint_fp8(ckpt):
    """The F8_E4M3 tensors and the weight_scale_inv tensors of the checkpoint:
    name -> tensor (on the CPU, as stored)."""
    fp8, scales = {}, {}
    for f in sorted(os.listdir(ckpt)):
        if not f.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(ckpt, f), "pt") as st:
            for k in st.keys():
                t = st.get_tensor(k)
                if t.dtype == torch.float8_e4m3fn:
                    fp8[k] = t
                elif k.endswith("weight_scale_inv"):
                    scales[k] = t
    if not fp8:
        raise ReferenceError(f"{ckpt}: quantization_config says fp8, but no tensor is F8_E4M3")
    for k in fp8:
        if k + "_scale_inv" not in scales:
            raise ReferenceError(f"{ckpt}: {k} has no {k}_scale_inv")
    return fp8, scales


def load_checked(ckpt, **kw):
    model, info = AutoModelForCausalLM.from_pretrained(ckpt, attn_implementation="eager", output_loading_info=True, **kw)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")}
    if bad:
        raise ReferenceError(f"loading {ckpt}: {bad}")
    model.eval()
    return model


def load_native(ckpt, dtype, fp8, scales, **kw):
    if not torch.cuda.is_available():
        raise ReferenceError("no CUDA device: transformers' FP8Linear runs on a GPU only")
    import triton  # noqa: F401  (FineGrainedFP8's kernels; an ImportError is the reason native cannot run)
    model = load_checked(ckpt, dtype=dtype, device_map="cuda", **kw)
    params = dict(model.named_parameters())
    got_fp8 = sum(p.numel() for p in params.values() if p.dtype == torch.float8_e4m3fn)
    want_fp8 = sum(t.numel() for t in fp8.values())
    got_scale = sum(p.numel() for n, p in params.items() if "scale" in n and p.dtype in (torch.float32, torch.bfloat16))
    want_scale = sum(t.numel() for t in scales.values())
    if got_fp8 != want_fp8 or got_scale != want_scale:
        raise ReferenceError(f"native FP8 load: {got_fp8} F8_E4M3 and {got_scale} scale elements in the model, "
                             f"the checkpoint has {want_fp8} and {want_scale}")
    kinds = sorted({type(m).__name__ for m in model.modules() if any(
        p.dtype == torch.float8_e4m3fn for p in m.parameters(recurse=False))})
    # One forward pass: a missing or failing triton kernel shows here, not mid-reference.
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]], device="cuda"))
    return model, {"fp8_modules": kinds}


def emulate_w8a8(input, weight, weight_scale_inv, block_size, output_dtype, activation_scale=None):
    """The W8A8 block-FP8 product with dynamic per-1×bk-group activation
    quantisation (transformers' FineGrainedFP8 matmul: act_quant, then the
    block matmul), in float64 where that kernel rounds: per row and group g of
    bk columns, s = amax|x|/448 and q = e4m3(x/s) in float32 (the input loaded
    as float32, as act_quant does; an all-zero group gives q = 0), then
    y_n = Σ_g (Σ_k q_k·w_nk)·s_g·S[n/bn][g], products and sums in float64 (each
    group sum is exact there), rounded once to output_dtype."""
    if activation_scale is not None:
        raise ReferenceError("a static activation scale: the checkpoints here are activation_scheme dynamic")
    if weight.dtype != torch.float8_e4m3fn or weight.ndim != 2:
        raise ReferenceError(f"emulate_w8a8: weight {weight.dtype} {tuple(weight.shape)}, want a 2-D float8_e4m3fn")
    bn, bk = block_size
    n, k = weight.shape
    g = (k + bk - 1) // bk
    x = input.reshape(-1, k).float()
    xp = torch.nn.functional.pad(x, (0, g * bk - k)).view(-1, g, bk)
    s = xp.abs().amax(-1)
    s = s / 448.0
    q = torch.where(s[..., None] == 0, torch.zeros_like(xp), xp / s[..., None])
    q = q.to(torch.float8_e4m3fn).double()
    w = torch.nn.functional.pad(weight.double(), (0, g * bk - k)).view(n, g, bk)
    p = torch.einsum("mgk,ngk->mng", q, w)
    sw = weight_scale_inv.double().repeat_interleave(bn, 0)[:n]
    y = (p * s.double()[:, None, :] * sw[None]).sum(-1)
    return y.to(output_dtype).reshape(*input.shape[:-1], n)


def install_emulated_kernel():
    """Makes transformers' FP8 modules call emulate_w8a8 where they would call
    the hub kernel's matmul; returns a dict of calls per weight storage."""
    import transformers.integrations.finegrained_fp8 as f8
    calls = {}

    def matmul(input, weight, weight_scale_inv, block_size, output_dtype, activation_scale=None):
        key = weight.untyped_storage().data_ptr()
        calls[key] = calls.get(key, 0) + 1
        return emulate_w8a8(input, weight, weight_scale_inv, block_size, output_dtype, activation_scale)

    def refused(*a, **kw):
        raise ReferenceError("a batched or grouped FP8 experts kernel was called; the reference runs the eager loop")

    f8._FINEGRAINED_FP8 = f8.FineGrainedFP8(matmul=matmul, batched_matmul=refused, grouped_matmul=refused)
    os.environ["TRANSFORMERS_DISABLE_DEEPGEMM_LINEAR"] = "1"
    return calls


def check_emulated_calls(model, calls):
    """Every FP8 module of model went through the emulated matmul."""
    missed, n = [], 0
    for name, m in model.named_modules():
        ws = [p for p in m.parameters(recurse=False) if p.dtype == torch.float8_e4m3fn]
        if not ws:
            continue
        n += 1
        if not any(calls.get(p.untyped_storage().data_ptr(), 0) for p in ws):
            missed.append(f"{name} ({type(m).__name__})")
    if n == 0 or missed:
        raise ReferenceError(f"emulated FP8 kernel: {n} FP8 modules, never called for {missed[:5]}")
    return n


def dequantized(code, inv, bn, bk):
    w = code.float()
    s = inv.float().repeat_interleave(bn, 0).repeat_interleave(bk, 1)[: w.shape[0], : w.shape[1]]
    return w * s


def load_dequantize(ckpt, dtype, fp8, scales, q):
    from transformers import FineGrainedFP8Config
    qc = FineGrainedFP8Config(weight_block_size=tuple(q["weight_block_size"]), dequantize=True,
                              modules_to_not_convert=q.get("modules_to_not_convert"))
    model = load_checked(ckpt, dtype=dtype, device_map="cpu", quantization_config=qc)
    params = dict(model.named_parameters())
    left = [n for n, p in params.items() if p.dtype == torch.float8_e4m3fn]
    if left:
        raise ReferenceError(f"dequantize=True left F8_E4M3 parameters: {left[:5]}")
    if dtype == torch.float32:
        # A non-expert matrix (same name in the model): exactly code × scale_inv.
        bn, bk = q["weight_block_size"]
        checked = 0
        for k, code in fp8.items():
            if ".experts." in k or k not in params:
                continue
            want = dequantized(code, scales[k + "_scale_inv"], bn, bk)
            if not torch.equal(params[k].detach().cpu(), want):
                d = (params[k].detach().cpu() - want).abs().max().item()
                raise ReferenceError(f"dequantize=True: {k} is not code × scale_inv (max |Δ| {d})")
            checked += 1
        if checked == 0:
            raise ReferenceError("dequantize=True: no FP8 matrix found under its checkpoint name to check")
    return model, {}


def run_fp8(ckpt, out, name, cfg, q, path):
    prompts = prompts_for(cfg)
    fp8, scales = checkpoint_fp8(ckpt)
    tensors, greedy = {}, {}
    prov = {**versions(), "attn_implementation": "eager", "script": "validation/hfgen/reference.py",
            "fp8_path_requested": path, "quantization_config": q,
            "note": "fp32/bf16: the dtype of everything but the FP8 weights (activations included)"}
    chosen = None
    if path == "kernel-emulated":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        calls = install_emulated_kernel()
        modules = 0
        for tag, dtype in DTYPES:
            calls.clear()
            model, extra = load_native(ckpt, dtype, fp8, scales, experts_implementation="eager")
            run_model(model, prompts, "cuda", tag, tensors, greedy, dtype)
            modules = check_emulated_calls(model, calls)
            prov.update(extra)
            del model
        chosen = path
        prov.update(device="cuda", fp8_path=path, fp8_modules_checked=modules, experts_implementation="eager",
                    fp8_semantics="W8A8: transformers' FP8Linear / FP8Experts (eager) with the hub kernel's matmul "
                                  "emulated in float64 (validation/hfgen/reference.py emulate_w8a8): activations "
                                  "quantised per 1x%d group, s = amax/448 and x/s in float32, group sums and scales "
                                  "in float64" % q["weight_block_size"][1])
    if path in ("auto", "native"):
        try:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            for tag, dtype in DTYPES:
                model, extra = load_native(ckpt, dtype, fp8, scales)
                run_model(model, prompts, "cuda", tag, tensors, greedy, dtype)
                prov.update(extra)
                del model
            chosen = "native"
            prov.update(device="cuda", fp8_path="native",
                        fp8_semantics="W8A8: FP8Linear, activations quantised per 1x%d group (act_quant), triton w8a8 block matmul" % q["weight_block_size"][1])
        except Exception as e:
            if path == "native" or isinstance(e, ReferenceError) and "native FP8 load" in str(e):
                # Asked for native, or native loaded something else than the checkpoint: never relabel.
                raise
            msg = f"{type(e).__name__}: {e}"
            print(f"\n*** {name}: transformers' native FP8 path could not run ({msg});\n"
                  f"*** falling back to FineGrainedFP8Config(dequantize=True) (W8A16), recorded in reference.json\n",
                  file=sys.stderr)
            traceback.print_exc()
            prov["native_error"] = msg
            tensors, greedy = {}, {}
    if chosen is None:
        for tag, dtype in DTYPES:
            model, extra = load_dequantize(ckpt, dtype, fp8, scales, q)
            run_model(model, prompts, "cpu", tag, tensors, greedy, dtype)
            prov.update(extra)
            del model
        prov.update(device="cpu", fp8_path="dequantize",
                    fp8_semantics="W8A16: weights dequantised at load (code x weight_scale_inv), unquantised activations",
                    atol_note="W8A16 is another function than W8A8 (it skips the activation quantisation, a relative "
                              "step of up to 2^-4 per value): atol 4e-3 bounds how far apart the two may be here, "
                              "not Tarfa's error")
        write(out, name, cfg, prompts, tensors, greedy, prov, atol=4e-3)
        return
    write(out, name, cfg, prompts, tensors, greedy, prov)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fp8-path", choices=("auto", "native", "kernel-emulated", "dequantize"), default="auto")
    ap.add_argument("src")
    ap.add_argument("dst")
    a = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() // 2))
    names = [n for n in sorted(os.listdir(a.src)) if os.path.isdir(os.path.join(a.src, n, "checkpoint"))]
    if not names:
        raise SystemExit(f"{a.src}: no NAME/checkpoint directory")
    for name in names:
        ckpt = os.path.join(a.src, name, "checkpoint")
        cfg = json.load(open(os.path.join(ckpt, "config.json")))
        q = quant_config(cfg)
        if q is None:
            run_bf16(ckpt, os.path.join(a.dst, name), name, cfg)
        else:
            run_fp8(ckpt, os.path.join(a.dst, name), name, cfg, q, a.fp8_path)


if __name__ == "__main__":
    try:
        main()
    except ReferenceError as e:
        raise SystemExit(f"reference.py: {e}")
