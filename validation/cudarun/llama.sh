#!/usr/bin/env bash
# llama.sh (on the GPU machine, from the repository root): issue 22 item 6,
# the peer users pick. llama.cpp (CUDA, sm_90) on the 4-layer synth --preset
# real slice of Qwen3.5-122B-A10B shapes as a BF16 GGUF, fully offloaded
# (-ngl 99) and with the routed experts on the CPU (-ot exps=CPU; and
# --n-cpu-moe 2, half the layers' experts), next to Tarfa and transformers +
# accelerate on the same slice, GPU and prompt (4 tokens, then 48 decoded).
#
#	set -o pipefail; bash validation/cudarun/llama.sh 2>&1 | tee $OUT/llama.log
#
# Run that same command in calls one after another (the machine stays warm
# 30 s after each) until it prints "llama.sh: all done". Every step keeps its
# output under L (default /tmp/llama: outside the tree, which the tool copies
# anew), is skipped when that output exists, and is not begun when less of
# the call is left than it needs (LIMIT seconds in all, default 530): the
# call then ends at once. $OUT/results.jsonl gets every result so far.
#
# Needs: .dev/llama/llama.cpp.tar.xz (made by llama_mktar.sh; llama_build.sh builds it), made beside the
# tree and never committed (fetched code); TARFA (a -tags
# cuda tarfa; default: .dev/cuda/tarfa.gz from prepare.sh); python3 with torch,
# transformers and accelerate (the device image's; llama.cpp's converter
# needs nothing more: numpy, pyyaml and tqdm come with transformers).
#
# The 64 GiB disk holds two copies of the 4-layer slice (23 GB), not three,
# and the GGUF and the JNF are both made from the HF copy. So: HF, the GGUF,
# llama.cpp, the GGUF removed, HF -> JNF, Tarfa (llama.cpp and Tarfa in one
# call), then transformers on the HF copy, which is removed last. Expected:
# call 1 the build (about 6-8 min of 16 cores, synth beside it; a second call
# if it is cut short), call 2 smoke test, GGUF, llama.cpp and Tarfa (LLAMA_S,
# default 420, is the time that step asks for: less on the 2-layer slice),
# call 3 transformers.
#
# The slice needs an attention layer: on a slice of Gated DeltaNet layers only
# (--layers 2 or less) llama.cpp 34af94cd9 aborts (GGML_ASSERT(buffer) in
# llama_kv_cache::set_input_k_idxs). The 2026-12-03 run used SLICE="--preset
# real --layers 4 --experts 64" (8.65 GB: every step in two calls).
#
# SLICE and TARFA_BACKEND change the slice and Tarfa's backend flags (a dry
# run on a CPU machine: SLICE="--preset tiny" TARFA_BACKEND="--backend cpu").
set -o pipefail
export PYTHONUNBUFFERED=1
: "${OUT:?run on the device: OUT is where results go}"
LIMIT=${LIMIT:-530}
s0=$SECONDS
left() { echo $((LIMIT - (SECONDS - s0))); }
root=$PWD
L=${L:-/tmp/llama}
R=$L/res
mkdir -p $R
finish() { cat $R/*.jsonl > $OUT/results.jsonl 2>/dev/null; }
trap finish EXIT
# need NAME SECONDS: false (and the call ends) when fewer seconds are left.
need() { [ "$(left)" -ge "$2" ] && return 0; echo "$1: needs about $2 s, $(left) s left: run llama.sh again"; exit 0; }
S=$L/src/llama.cpp
BIN=$L/build/bin
T=$L/tarfa
if [ -n "$TARFA" ]; then T=$TARFA; elif [ ! -x $T ]; then gunzip -c .dev/cuda/tarfa.gz > $T && chmod +x $T || exit 1; fi
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
echo "cores $(nproc), $(df -h --output=avail $L | tail -1 | tr -d " ") free in $L; $(nvcc --version | tail -1); $($T version 2>&1 | cut -c1-40)"

# The slice, as Hugging Face safetensors, with synth's small tokenizer (the
# GGUF needs one; transformers reads only the weights). Made beside the build
# when that runs (synth takes a core or two for about 2 minutes).
synth() {
	rm -rf $L/hf
	$T synth --arch qwen3_5_moe ${SLICE:---preset real --layers 4} --out $L/hf --json > $R/synth.tmp || { echo "synth failed"; return 1; }
	mv $R/synth.tmp $R/synth.jsonl; echo "synth: $(cat $R/synth.jsonl)"
}
want_hf() { [ ! -s $L/hf/config.json ] && { [ ! -e $R/jnf.done ] || [ ! -e $R/peer-cpu_offload.jsonl ]; }; }

# A. build (and synth beside it)
if [ ! -x $BIN/llama-bench ] || [ ! -x $BIN/llama-completion ]; then
	need build 120
	sp=
	if want_hf && [ "$(left)" -ge 300 ]; then synth & sp=$!; fi
	BUILD_S=$(($(left) - 30)) L=$L bash "$(dirname "$0")/llama_build.sh"; rc=$?
	[ -n "$sp" ] && wait $sp
	[ $rc -eq 0 ] || { echo "build not finished: run llama.sh again"; exit 0; }
fi
echo "llama.cpp $(cat $S/COMMIT), built"

# B1. smoke test on a tiny synth checkpoint: converter, loader, one decode.
if [ ! -e $R/smoke.done ]; then
	need smoke 60
	rm -rf $L/tiny
	$T synth --arch qwen3_5_moe --preset tiny --out $L/tiny/hf > /dev/null || exit 1
	python3 validation/cudarun/llama_convert.py $S $L/tiny/hf $L/tiny/tiny.gguf > $L/tiny/convert.log 2>&1 || { tail -30 $L/tiny/convert.log; exit 1; }
	$BIN/llama-completion -m $L/tiny/tiny.gguf -p '"#$%' -n 8 --temp 0 -no-cnv --ignore-eos -c 256 -ngl 99 -lv 4 --verbose-prompt < /dev/null > $L/tiny/run.log 2>&1 || { tail -30 $L/tiny/run.log; exit 1; }
	grep -aE 'offloaded|eval time|error| I +[0-9]+ -> ' $L/tiny/run.log
	$BIN/llama-bench -m $L/tiny/tiny.gguf -p 4 -n 8 -ngl 99 -r 2 || exit 1
	touch $R/smoke.done
fi

# B2. the slice, if the build did not make it.
if want_hf; then
	need synth 150
	synth || exit 1
fi

# B4. HF -> BF16 GGUF (llama.cpp's converter; llama_convert.py says why the wrapper).
if [ ! -s $L/slice.gguf ] && [ ! -e $R/llama.done ]; then
	need "gguf convert" 240
	s=$SECONDS
	timeout $(($(left) - 10)) python3 validation/cudarun/llama_convert.py $S $L/hf $L/slice.gguf.tmp > $L/convert.log 2>&1 || { tail -20 $L/convert.log; rm -f $L/slice.gguf.tmp; exit 1; }
	mv $L/slice.gguf.tmp $L/slice.gguf
	echo "gguf convert $((SECONDS - s)) s: $(du -b $L/slice.gguf)"
fi

# C1. llama.cpp: llama-bench (tg48: 48 tokens decoded from an empty context,
# and pp4; its -d 4 was dropped while the abort above was chased, which had
# another cause), then llama-completion, the generating tool, for the
# same two placements.
if [ ! -e $R/llama.done ]; then
	need "llama.cpp, then Tarfa in the same call" ${LLAMA_S:-420}
	for ot in "-ngl 99" "-ngl 99 -ot exps=CPU" "-ngl 99 -ncmoe 2"; do
		echo "-- llama-bench $ot"
		$BIN/llama-bench -m $L/slice.gguf -p 4 -n 48 -r 5 -t 16 $ot -o jsonl 2> $L/bench.err | tee -a $R/llama-bench.tmp || { tail -20 $L/bench.err; exit 1; }
	done
	for ot in "-ngl 99" "-ngl 99 -ot exps=CPU"; do
		echo "-- llama-completion $ot"
		$BIN/llama-completion -m $L/slice.gguf -p '"#$%' -n 48 --temp 0 -no-cnv --ignore-eos -c 512 -t 16 -lv 4 $ot < /dev/null > $L/completion.log 2>&1
		echo "rc=$?"; grep -aE 'load time|prompt eval time|eval time|total time|offloaded|CUDA0 model buffer|CPU_Mapped model buffer' $L/completion.log
		# timings, and the generated bytes (hex: a random slice's text is not
		# UTF-8) to set beside Tarfa's tokens
		python3 -c 'import json,re,sys; b=open(sys.argv[1], "rb").read(); t=b.decode(errors="replace"); m=re.findall(r"(prompt eval|eval) time =\s*([\d.]+) ms /\s*(\d+) (?:tokens|runs)", t); g=re.search(rb"\n\"#\$%(.*?)\n\n[\d.]+ I common_perf_print:", b, re.S); print(json.dumps({"tool": "llama-completion", "args": sys.argv[2], "timings": [{"what": w, "ms": float(ms), "n": int(n)} for w, ms, n in m], "text_hex": g.group(1).hex() if g else None}))' $L/completion.log "$ot" >> $R/llama-completion.tmp
	done
	mv $R/llama-bench.tmp $R/llama-bench.jsonl; mv $R/llama-completion.tmp $R/llama-completion.jsonl
	touch $R/llama.done
fi
rm -f $L/slice.gguf

# C2. HF -> JNF, then Tarfa, in the call that ran llama.cpp when time allows.
if [ ! -e $R/jnf.done ]; then
	need "tarfa convert" 150
	rm -rf $L/jnf
	s=$SECONDS
	$T convert $L/hf --out $L/jnf 2>&1 | tail -1
	[ -s $L/jnf/manifest.json ] || exit 1
	echo "tarfa convert $((SECONDS - s)) s"
	touch $R/jnf.done
fi
run() { # label, flags...
	local name=$1; shift
	[ -e $R/tarfa-$name.jsonl ] && return
	need "tarfa $name" 40
	timeout $(($(left) - 10)) $T run --model $L/jnf ${TARFA_BACKEND:---backend cuda} --tokens 1,2,3,4 --max-tokens 48 --heat=false --json "$@" > $L/r.json 2> $L/r.err
	echo "tarfa $name rc=$?: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); t=r["timing"]; print("decode %.2f tok/s, prefill %.2f tok/s, load %.1f s, tokens %s..." % (t["decode_tokens_per_second"], t["prefill_tokens_per_second"], t["load_seconds"], r["tokens"][:4]))' $L/r.json 2>/dev/null || tail -2 $L/r.err)"
	grep -E "device:|experts:" $L/r.err | head -3
	python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r["label"]=sys.argv[2]; print(json.dumps(r))' $L/r.json "$name" > $R/tarfa-$name.jsonl 2>/dev/null || rm -f $R/tarfa-$name.jsonl
}
run whole-device
run vram16 --vram-budget 16GiB
run vram16-again --vram-budget 16GiB
run vram16-pagecache --vram-budget 16GiB --direct off --ram-budget 0
# D. transformers + accelerate (peer.py) on the HF copy, last: resident 48
# tokens; cpu_offload 8 (about 3 s a token). The HF copy and the JNF fit the
# disk together (the GGUF is gone by now).
for m in resident:48 cpu_offload:8; do
	mode=${m%:*} n=${m#*:}
	[ -e $R/peer-$mode.jsonl ] && continue
	[ -s $L/hf/config.json ] || break
	need "transformers $mode" $((60 + n * 4))
	timeout $(($(left) - 10)) python3 validation/cudarun/peer.py $L/hf $mode $n > $R/peer-$mode.tmp 2> $L/peer-$mode.err
	echo "transformers $mode rc=$?: $(cat $R/peer-$mode.tmp)"; tail -2 $L/peer-$mode.err
	# a failure is recorded too (not tried again in every call)
	[ -s $R/peer-$mode.tmp ] || python3 -c 'import json,sys; print(json.dumps({"mode": sys.argv[1], "error": open(sys.argv[2]).read()[-400:]}))' $mode $L/peer-$mode.err > $R/peer-$mode.tmp
	mv $R/peer-$mode.tmp $R/peer-$mode.jsonl
done

rm -rf $L/hf
echo "llama.sh: all done"
