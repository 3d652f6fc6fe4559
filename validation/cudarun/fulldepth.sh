#!/usr/bin/env bash
# fulldepth.sh (on the GPU machine): issue 22 item 5, the engine at full
# depth. A 48-layer model of the real Qwen3.5-122B-A10B shapes (every
# non-expert weight at its real size: embedding, LM head, 36 Gated DeltaNet
# and 12 gated attention layers, shared experts, routers) with EXPERTS routed
# experts a layer (default 32, of the real 18.9 MB each; top-8 as in the
# release) instead of 256, so that it fits the machine's disk: written as JNF
# directly (tarfa synth --jnf: the checkpoint's bytes are made as the
# conversion reads them, never written; the same files and root as synth then
# convert, TestShardsConvert), about 41 GB.
#
# Two calls, each within LIMIT seconds (default 530; /tmp persists while the
# machine stays warm):
#	PHASE=synth   write the model into $M (skipped when it verifies already;
#	              VERIFY=0 skips tarfa verify), then the storage bound
#	PHASE=run     the storage bound again (same call as the runs), then for each
#	              VRAM budget (VRAMS, default "16GiB 12GiB"): tarfa run --backend
#	              cuda cold (page cache dropped) and warm (the same run again:
#	              what the defaults find), --json --trace; tarfa sim --measured on
#	              each trace with this call's storage bound, sim's non-expert
#	              time per layer fitted to the warm run (fit) and checked on the
#	              cold run (calibration); and the projection to 256 experts a
#	              layer (PROJECTION, labelled, with its assumptions)
#	PHASE=warm    the warm figure within one process (a second tarfa process
#	              starts with an empty RAM tier, so PHASE=run's "warm" is a
#	              second cold start): tarfa bench decode --decode-only
#	              --repeat ROUNDS (default 1) on $M, cuda at each of VRAMS, RAM
#	              tier of every expert (--ram-fraction 1), cold then warm (what
#	              one earlier generation of the same prompt left in the RAM
#	              tier and the device slots), logits compared bit for bit;
#	              bench-decode.json. DEVICE_PREFETCH=both (or on) adds each
#	              budget with the device prefetch, next to the one without
#	              in every round; PLACEMENTS (default auto; e.g. auto,balance)
#	              runs each budget under each placement, likewise;
#	              DECODE_FLAGS are added. Seen on the H200
#	              (2026-12-03): a round of one budget took more than 116 s
#	              while bench decode also read the whole model three times a
#	              round (the raw, verified and hash figures, left out since
#	              --decode-only); synth of ROUTING=local took 207 s.
# PHASE=all (default) does synth and run in one call where the time allows.
# ROUTING=local makes the model with synth --routing local (default M
# /tmp/fulldepth/jnf-local): routing with the locality of real models, where
# the next layer's router predicts the experts (the device prefetch's case).
# DTYPE=fp8 makes and measures the same model in Qwen's block-FP8 layout
# (default M /tmp/fulldepth/jnf-fp8; about half the bytes: mind the disk when
# both are kept, e.g. EXPERTS=16 for the pair).
# Results in $OUT/results.tgz (fulldepth/), with summary.txt.
#
#	# here: prepare.sh (copies this script into .dev/cuda)
#	# device call 1: command "PHASE=synth bash .dev/cuda/fulldepth.sh", carry [".dev/cuda"]
#	# device call 2: command "PHASE=run bash .dev/cuda/fulldepth.sh", carry [".dev/cuda"]
#	# device call 3 (warm): command "PHASE=warm bash .dev/cuda/fulldepth.sh", carry [".dev/cuda"]
#	# the device prefetch's A/B where hints come true, one call:
#	#   "export ROUTING=local; PHASE=synth VERIFY=0 LIMIT=240 bash .dev/cuda/fulldepth.sh;
#	#    OUT=\$OUT/w PHASE=warm VRAMS=16GiB ROUNDS=2 DEVICE_PREFETCH=both PLACEMENTS=auto,balance LIMIT=330 bash .dev/cuda/fulldepth.sh"
# On a CPU machine (the test of its CPU parts): BACKEND=cpu LAYERS=4 EXPERTS=8
# VOCAB=8192 VRAMS=0 TOKENS=4 M=/tmp/fd-small bash validation/cudarun/fulldepth.sh
set -o pipefail
dev=$(cd "$(dirname "$0")" && pwd)
cd "$dev"
. ./unpack.sh
: "${OUT:?OUT=a directory for the results}"
LIMIT=${LIMIT:-530}
PHASE=${PHASE:-all}
LAYERS=${LAYERS:-48}
EXPERTS=${EXPERTS:-32}
VOCAB=${VOCAB:-}
TOKENS=${TOKENS:-12}     # decode steps per run (cold: up to 7.3 GB of expert reads each)
VRAMS=${VRAMS:-16GiB 12GiB}
BACKEND=${BACKEND:-cuda}
JOBS=${JOBS:-1,4,16,32,64}
VERIFY=${VERIFY:-1}
WORKERS=${WORKERS:-$(nproc)} # synth --workers: files made in parallel (49 at full depth)
ROUTING=${ROUTING:-uniform} # synth --routing: uniform, or local (a stable half of each layer's experts; the next router predicts the rest)
DTYPE=${DTYPE:-bf16}     # fp8: the same model in Qwen's block-FP8 layout (synth --dtype fp8)
M=${M:-/tmp/fulldepth/jnf$([ "$DTYPE" = bf16 ] || echo "-$DTYPE")$([ "$ROUTING" = uniform ] || echo "-$ROUTING")}
T=${TARFA:-./tarfa}
start=$SECONDS
R=$OUT/fulldepth; mkdir -p "$R"
trap 'tar -czf "$OUT/results.tgz" -C "$OUT" fulldepth; rm -rf "$R"' EXIT
left() { echo $((LIMIT - (SECONDS - start))); }
say() { echo "$*" | tee -a "$R/summary.txt"; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
	nproc; grep MemTotal /proc/meminfo; df -h "$(dirname "$M")" | tail -1; } > "$R/env-$PHASE.txt" 2>&1
cat "$R/env-$PHASE.txt"

synth() {
	if [ -s "$M/manifest.json" ] && [ -s "$M.verified" ]; then
		say "model: $M exists and verified ($(cat "$M.verified"))"; return
	fi
	mkdir -p "$(dirname "$M")"
	s0=$SECONDS
	# --jnf resumes an interrupted run (the files finished are re-verified and kept).
	timeout $(($(left) - 10)) $T synth --arch qwen3_5_moe --preset real --layers $LAYERS --experts $EXPERTS ${VOCAB:+--vocab $VOCAB} \
		--dtype $DTYPE --routing $ROUTING --workers $WORKERS --jnf --out "$M" --json > "$R/synth.json" 2> "$R/synth.err"
	rc=$?
	say "synth --jnf rc=$rc in $((SECONDS - s0)) s: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%d layers x %d experts top-%d, %.2f GB of tensors, %.0f MB/s, root %s" % (r["layers"], r["experts"], r["top_k"], r["bytes"]/1e9, r["bytes"]/r["seconds"]/1e6, r["root"]))' "$R/synth.json" 2>&1)"
	[ $rc -eq 0 ] || { tail -3 "$R/synth.err"; return 1; }
	du -sb "$M" | tee -a "$R/summary.txt"
	if [ "$VERIFY" = 1 ]; then
		s0=$SECONDS
		timeout $(($(left) - 10)) $T verify "$M" > "$R/verify.txt" 2>&1
		rc=$?
		say "verify rc=$rc in $((SECONDS - s0)) s: $(tail -1 "$R/verify.txt")"
		[ $rc -eq 0 ] && tail -1 "$R/verify.txt" > "$M.verified"
	else
		echo "not verified (VERIFY=0)" > "$M.verified"
	fi
}

bound() { # name: the storage bound, every routed expert read with O_DIRECT per job count
	[ "$(left)" -lt 90 ] && { say "bound $1: skipped, $(left) s left"; return; }
	timeout $(($(left) - 30)) $T bench read "$M" --jobs $JOBS --json > "$R/bound-$1.json" 2> "$R/bound-$1.err"
	say "storage bound ($1) rc=$?: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("; ".join("%d in flight %.2f GB/s%s" % (f["jobs"], f["gbps"], "" if f["direct"] else " (buffered)") for f in r["figures"]), "| best %.2f GB/s, %s%s" % (r["best"]["gbps"], "cache dropped" if r["cache_dropped"] else "CACHE NOT DROPPED: " + r.get("cache_note", ""), ""))' "$R/bound-$1.json" 2>&1)"
}

run() { # name, vram, cold|warm, flags...
	local name=$1 vram=$2 temp=$3; shift 3
	[ "$(left)" -lt 60 ] && { say "run $name: skipped, $(left) s left"; return; }
	[ "$temp" = cold ] && { sync; echo 3 > /proc/sys/vm/drop_caches || say "run $name: drop_caches failed: not cold"; }
	local vf=()
	[ "$BACKEND" = cuda ] && vf=(--vram-budget "$vram")
	timeout $(($(left) - 20)) $T run --model "$M" --backend $BACKEND "${vf[@]}" --tokens 1,2,3,4 --max-tokens $TOKENS \
		--heat=false --json --trace "$R/trace-$name.jsonl" "$@" > "$R/run-$name.json" 2> "$R/run-$name.err"
	say "run $name ($BACKEND ${vram}, $temp) rc=$?: $(python3 - "$R/run-$name.json" "$R/bound-run.json" $LAYERS <<'EOF' 2>&1
import json, sys
r = json.load(open(sys.argv[1])); t = r["timing"]; L = r["expert_levels"]; d, m, s = L["device"], L["ram"], L["storage"]
out = "decode %.3f s/token (%.2f tok/s), prefill %.2f s, load %.2f s; uses device %d/%d hit (%d slots), RAM %d/%d (%d), storage %d reads" % (
    1 / t["decode_tokens_per_second"], t["decode_tokens_per_second"], t["prefill_seconds"], t["load_seconds"],
    d["hits"], d["uses"], d["capacity"], m["hits"], m["uses"], m["capacity"], s["uses"])
try:
    b = json.load(open(sys.argv[2])); gbps = b["best"]["gbps"]; eb = b["bytes"] / b["experts"]
    layers = int(sys.argv[3])
    out += "; storage bound %.3f s/token (%dx8 experts of %.1f MB at %.2f GB/s: every routed expert of a token from storage)" % (layers * 8 * eb / gbps / 1e9, layers, eb / 1e6, gbps)
except Exception as e:
    out += "; no storage bound (%s)" % e
print(out)
EOF
)"
}

# DENSE is sim's --dense-ms-per-layer, fitted by fit() to a warm run (its
# own default until then).
DENSE=
fit() { # name: --dense-ms-per-layer such that sim's mean on the run's trace is the run's decode s/token
	[ -s "$R/run-$1.json" ] || { say "fit $1: no run"; return; }
	DENSE=0; sim "$1" quiet; local s0; s0=$(simmean "$1")
	DENSE=1; sim "$1" quiet; local s1; s1=$(simmean "$1")
	DENSE=$(python3 -c "import json; m=1/json.load(open('$R/run-$1.json'))['timing']['decode_tokens_per_second']; print('%.4f' % max(0, (m - $s0) / ($s1 - $s0)) if $s1 > $s0 else 0)")
	say "fit on $1: --dense-ms-per-layer $DENSE (sim's mean is $s0 s/token at 0 ms, $s1 at 1 ms; the run measured $(python3 -c "import json; print('%.3f' % (1/json.load(open('$R/run-$1.json'))['timing']['decode_tokens_per_second']))"))"
}
simmean() { python3 -c 'import json,sys; print("%.6f" % json.load(open(sys.argv[1]))["result"]["seconds_per_token"]["mean"])' "$R/sim-$1.json"; }

sim() { # name [quiet]: tarfa sim on the run's trace, hardware from this call's bound
	[ -s "$R/run-$1.json" ] || { say "sim $1: no run"; return; }
	local gbps
	gbps=$(python3 -c 'import json,sys; print("%.3f" % json.load(open(sys.argv[1]))["best"]["gbps"])' "$R/bound-run.json" 2>/dev/null || echo 7)
	# A run without device slots computed its experts on the host: sim
	# models that with --vram-gib 0.
	local vg=(--vram-gib 0) slots
	slots=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["expert_levels"]["device"]["capacity"])' "$R/run-$1.json" 2>/dev/null || echo 0)
	[ "$BACKEND" = cuda ] && [ "$slots" -gt 0 ] && vg=()
	$T sim --trace "$R/trace-$1.jsonl" --measured "$R/run-$1.json" --warmup 4 --storage-gbps "$gbps" --cores "$(nproc)" --queue-depth 16 \
		${DENSE:+--dense-ms-per-layer $DENSE} "${vg[@]}" --json > "$R/sim-$1.json" 2> "$R/sim-$1.err"
	local rc=$?
	[ "${2:-}" = quiet ] && return
	say "sim $1 (the run's trace, slots and RAM tier; storage $gbps GB/s measured; dense ${DENSE:-default} ms/layer) rc=$rc: $(python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); r=o["result"]; print("simulated %.3f s/token, measured %.3f, simulated/measured %.2f" % (r["seconds_per_token"]["mean"], o.get("measured_decode_seconds_per_token", 0), o.get("simulated_over_measured", 0)))' "$R/sim-$1.json" 2>&1)"
}

project() { # name: PROJECTION to 256 experts a layer from run name's capacities and this call's bound
	[ -s "$R/sim-$1.json" ] || { say "projection $1: no calibration"; return; }
	python3 - "$R/sim-$1.json" > "$R/project-$1.args" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))["result"]["config"]
print(c["device_slots"], c["ram_slots"])
EOF
	read -r slots ramslots < "$R/project-$1.args"
	local gbps vg=()
	gbps=$(python3 -c 'import json,sys; print("%.3f" % json.load(open(sys.argv[1]))["best"]["gbps"])' "$R/bound-run.json" 2>/dev/null || echo 7)
	[ "$BACKEND" = cuda ] && [ "$slots" -gt 0 ] && vg=(--device-slots "$slots") || vg=(--vram-gib 0)
	# The RAM tier of the projection: the bytes the measured run's tier held
	# (its slots x the expert size), now among 256 experts a layer.
	local ramgib
	ramgib=$(python3 -c "print($ramslots * 18874368 / 2**30)")
	for e in $EXPERTS 256; do
		$T sim --synthetic zipf:s=0,reuse=0 --layers $LAYERS --experts $e --top-k 8 --tokens 64 --warmup 4 --storage-gbps "$gbps" \
			--cores "$(nproc)" --queue-depth 16 --ram-gib "$ramgib" --ram-reserved-gib 0 ${DENSE:+--dense-ms-per-layer $DENSE} "${vg[@]}" --json > "$R/project-$1-$e.json" 2> "$R/project-$1-$e.err"
	done
	say "PROJECTION (simulated, not measured) $1 -> 256 experts a layer: $(python3 - "$R/project-$1-$EXPERTS.json" "$R/project-$1-256.json" "$R/sim-$1.json" $EXPERTS <<'EOF' 2>&1
import json, sys
a, b, cal = (json.load(open(p)) for p in sys.argv[1:4])
sa, sb = a["result"]["seconds_per_token"]["mean"], b["result"]["seconds_per_token"]["mean"]
meas = cal.get("measured_decode_seconds_per_token", 0)
print("uniform routing (zipf s=0, no reuse), the run's device slots and RAM-tier bytes, this call's storage bound, the fitted dense ms/layer:"
      " simulated %.3f s/token at %s experts a layer, %.3f at 256; measured %.3f at %s; 256 scaled by measured/simulated: %.3f s/token"
      % (sa, sys.argv[4], sb, meas, sys.argv[4], sb * meas / sa if sa > 0 else 0))
EOF
)"
}

case $PHASE in
synth | all)
	synth || exit 1
	[ "$PHASE" = synth ] && bound synth
	;;
esac
case $PHASE in
run | all)
	[ -s "$M/manifest.json" ] || { say "no model at $M: run PHASE=synth first"; exit 1; }
	bound run
	for v in $VRAMS; do
		n=${v,,}
		run "$n-cold" "$v" cold
		run "$n-warm" "$v" warm
		# Calibration: the non-expert time fitted to the warm run, checked
		# on the cold one (sim/measured there is the time model's error).
		DENSE=
		sim "$n-warm"
		fit "$n-warm"
		sim "$n-warm"
		sim "$n-cold"
		project "$n-cold"
	done
	;;
esac
case $PHASE in
warm)
	[ -s "$M/manifest.json" ] || { say "no model at $M: run PHASE=synth first"; exit 1; }
	vb=$(echo $VRAMS | tr ' ' ,)
	vflag=(); [ "$BACKEND" = cuda ] && [ -n "$vb" ] && [ "$vb" != 0 ] && vflag=(--vram-budget "$vb")
	timeout $(($(left) - 10)) $T bench decode "$M" --backend "$BACKEND" "${vflag[@]}" --ram-fraction 1 --decode-tokens "$TOKENS" \
		--decode-only --repeat "${ROUNDS:-1}" --device-prefetch="${DEVICE_PREFETCH:-off}" --placement "${PLACEMENTS:-auto}" --ledger=false --json ${DECODE_FLAGS:-} > "$R/bench-decode.json" 2> "$R/bench-decode.err"
	say "bench decode (cold and warm in one process) rc=$?: $(python3 -c '
import json,sys
r=json.load(open(sys.argv[1]))
for d in r.get("decode") or []:
    pf = "".join(", device prefetch %s %d" % (k, d.get("device_prefetch" + f, 0)) for k, f in (("copied", "ed"), ("used", "_used"), ("unused", "_unused"), ("skipped", "_skipped")) if d["backend"].get("device_prefetch"))
    print("%s: %.3f s/token [%s] (device hits %d of %d%s);" % (d.get("name"), d["seconds_per_token"]["median"], "%d rounds, %.3f-%.3f" % (d["seconds_per_token"]["n"], d["seconds_per_token"]["min"], d["seconds_per_token"]["max"]), d.get("device_hits", 0), d.get("device_uses", 0), pf), end=" ")
print("bit-identical" if r.get("bit_identical") else "LOGITS DIFFER")' "$R/bench-decode.json" 2>&1)"
	;;
esac
say "done in $((SECONDS - start)) s"
