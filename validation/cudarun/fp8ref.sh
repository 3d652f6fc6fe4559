#!/usr/bin/env bash
# fp8ref.sh (on the GPU machine): reference logits for the block-FP8
# checkpoints of validation/testdata/synthref-fp8 from transformers' own
# FP8 implementation (FineGrainedFP8), two ways (reference.py's docstring):
#   kernel-emulated  transformers' FP8Linear / FP8Experts on the GPU with the
#                    hub kernel's W8A8 matmul emulated in float64 (the kernel
#                    needs the `kernels` package and a hub download: absent
#                    here) -> $OUT/fp8ref/synthref-fp8/NAME (the conformance
#                    reference, atol 5e-4)
#   dequantize       FineGrainedFP8Config(dequantize=True), W8A16 on the CPU
#                    -> $OUT/fp8ref/w8a16/NAME (another function: atol 4e-3)
# then Tarfa's validate hf against each, on the CPU reference and on cuda.
# Everything lands in $OUT/fp8ref.tar (one file) and $OUT/fp8ref.log. Needs
# the tarfa binary of prepare.sh (bundled in .dev/cuda).
set -o pipefail
cd "$(dirname "$0")"
. ./unpack.sh
root=$(cd ../.. && pwd)
R=$OUT/fp8ref; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.version.cuda)'
python3 -c 'import triton; print("triton", triton.__version__)' || echo "triton: not importable"
python3 -c 'import kernels; print("kernels", kernels.__version__)' 2>&1 | tail -1
for p in kernel-emulated:synthref-fp8 dequantize:w8a16; do
	path=${p%%:*} dir=${p#*:}
	echo "== reference.py --fp8-path $path"
	timeout 600 python3 "$root/validation/hfgen/reference.py" --fp8-path $path \
		"$root/validation/testdata/synthref-fp8" "$R/$dir" >> $OUT/fp8ref.log 2>&1; echo "reference.py $path rc=$?"
	grep " ok \[" $OUT/fp8ref.log | tail -2
done
for dir in synthref-fp8 w8a16; do
	for n in q3-fp8 q35-fp8; do
		for be in cpu cuda; do
			timeout 300 ./tarfa validate hf --backend $be --checkpoint "$root/validation/testdata/synthref-fp8/$n/checkpoint" \
				--reference "$R/$dir/$n" > $OUT/v.tmp 2>&1; rc=$?
			echo "validate $dir/$n --backend $be rc=$rc"; cat $OUT/v.tmp >> $OUT/fp8ref.log; tail -7 $OUT/v.tmp | head -5; tail -2 $OUT/v.tmp | head -1
		done
	done
done
tar -C $R -cf $OUT/fp8ref.tar . && rm -rf $R
rm -f $OUT/v.tmp
