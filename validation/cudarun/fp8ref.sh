#!/usr/bin/env bash
# fp8ref.sh (on the GPU machine): reference logits for the block-FP8
# checkpoints of validation/testdata/synthref-fp8 from transformers' own
# FP8 implementation (FineGrainedFP8: FP8Linear's triton W8A8 kernels on the
# GPU; reference.py --fp8-path auto falls back to its dequantize=True path,
# loudly, if native cannot run, and records which ran), then Tarfa's
# validate hf on the CPU reference against them. Needs nothing built here
# but the tarfa binary of prepare.sh (bundled in .dev/cuda). Results go to
# $OUT/synthref-fp8/NAME/{reference.json,reference.safetensors} — to be
# committed beside the checkpoints with the provenance the JSON records —
# and $OUT/fp8ref.log.
#
#   FP8_PATH=native|dequantize|auto (default auto)
set -o pipefail
cd "$(dirname "$0")"
. ./unpack.sh
root=$(cd ../.. && pwd)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.version.cuda)'
python3 -c 'import triton; print("triton", triton.__version__)' || echo "triton: not importable (native FP8 cannot run)"
echo "== reference.py --fp8-path ${FP8_PATH:-auto}"
timeout 900 python3 "$root/validation/hfgen/reference.py" --fp8-path "${FP8_PATH:-auto}" \
  "$root/validation/testdata/synthref-fp8" "$OUT/synthref-fp8" > $OUT/fp8ref.log 2>&1; echo "reference.py rc=$?"
tail -20 $OUT/fp8ref.log
echo "== validate hf (cpu) against them"
for n in q3-fp8 q35-fp8; do
  timeout 300 ./tarfa validate hf --backend cpu --checkpoint "$root/validation/testdata/synthref-fp8/$n/checkpoint" \
    --reference "$OUT/synthref-fp8/$n" > $OUT/v.tmp 2>&1; rc=$?
  echo "validate $n rc=$rc"; cat $OUT/v.tmp >> $OUT/fp8ref.log; tail -4 $OUT/v.tmp
done
rm -f $OUT/v.tmp
