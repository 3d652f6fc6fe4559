#!/usr/bin/env bash
# verifycopies.sh (on the GPU machine): what --device-verify costs, in one
# device call. On a `synth --preset real --layers 4` slice (Qwen3.5-122B-A10B
# shapes), with the experts in the page cache and no RAM tier, so that every
# token copies all of its 32 routed experts to the device (the case where a
# device hash after each copy weighs most), `tarfa run` alternates
# --device-verify=true and =false, PAIRS times (order swapped on odd pairs),
# and prints each run's decode tokens/s and tokens (they must be equal).
# Then one run with --scrub 1s (background passes over the device's
# resident copies too). Binaries: DEV (tarfa, gzipped beside this script).
# A dry run without a GPU: SYNTH="--preset tiny --layers 2" BACKEND_ARGS=
# "--backend cpu" OUT=/tmp/o bash validation/cudarun/verifycopies.sh, with
# a tarfa beside it.
#
#	device call: command "bash DEV/verifycopies.sh", carry [DEV]
set -o pipefail
dev=$(cd "$(dirname "$0")" && pwd)
gunzip -f "$dev"/*.gz 2>/dev/null
T=$dev/tarfa
: "${OUT:?OUT=a directory for the results}"
PAIRS=${PAIRS:-4}
B=${BENCH_DIR:-/tmp/vc}
rm -rf "$B" && mkdir -p "$B"
s0=$(date +%s)
"$T" synth --arch qwen3_5_moe ${SYNTH:---preset real --layers 4} --out "$B/hf" --json > "$OUT/synth.json" || exit 1
"$T" convert "$B/hf" --out "$B/jnf" > "$OUT/convert.log" 2>&1 || { tail -3 "$OUT/convert.log"; exit 1; }
rm -rf "$B/hf"
echo "synth + convert: $(($(date +%s) - s0)) s"
cat "$B"/jnf/*.jnf > /dev/null   # into the page cache
args=(run --model "$B/jnf" --tokens 1,2,3,4 --max-tokens 16 --heat=false --direct off --ram-budget 0 ${BACKEND_ARGS:---backend cuda --vram-budget 16GiB} --json)
for n in $(seq 1 "$PAIRS"); do
	order="true false"
	[ $((n % 2)) -eq 0 ] && order="false true"
	for v in $order; do
		"$T" "${args[@]}" --device-verify=$v > "$OUT/run-$n-$v.json" 2> "$OUT/run-$n-$v.err" || { echo "run $n $v failed"; tail -3 "$OUT/run-$n-$v.err"; }
		python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], "decode tok/s %.3f" % r["timing"]["decode_tokens_per_second"], "tokens", r["tokens"])' "$OUT/run-$n-$v.json" "$n" "$v" | tee -a "$OUT/summary.txt"
	done
done
grep -h "device:" "$OUT"/run-1-*.err | head -2
"$T" "${args[@]}" --max-tokens 64 --scrub 1s > "$OUT/scrub.json" 2> "$OUT/scrub.err"; echo "scrub run rc=$?"; tail -2 "$OUT/scrub.err"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("scrub run: decode tok/s %.3f" % r["timing"]["decode_tokens_per_second"], "tokens", r["tokens"][:16])' "$OUT/scrub.json" | tee -a "$OUT/summary.txt"
tar -C "$OUT" -czf "$OUT/results.tgz" --exclude results.tgz . 2>/dev/null
echo "done: $(($(date +%s) - s0)) s"
