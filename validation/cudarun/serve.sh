#!/usr/bin/env bash
# serve.sh (on the GPU machine): issue 22 item 1, where a batched step's
# time goes. On a 2-layer slice of Qwen3.5-122B-A10B shapes (synth --preset
# real --layers 2: 512 routed experts of 18.9 MB, the real vocabulary),
# tarfa bench serve on each backend (cuda: the whole device, so every
# expert stays resident after its first use; cpu: 16 cores), one process
# per concurrency level with a CPU profile of the whole process
# (TARFA_CPUPROFILE), then again with a profile of the level's requests
# alone (--cpuprofile: level-BACKEND-C.pprof), and the tables as JSON. LIMIT seconds in all. TIMED
# lists client counts run once more on cuda with --device-time. EXECTRACE=1
# adds an execution trace to each level-alone run (level-BACKEND-C.trace:
# go tool trace shows where the step's goroutine waited). VARIANTS
# (';'-separated "label|VAR=value …|flags …") are run at 16 clients on cuda
# after that, in ROUNDS rounds (default 2), each round also running the
# plain level first, so that every variant sits beside a baseline.
#
#	device call: command "bash .dev/cuda/serve.sh", carry [".dev/cuda"]
set -o pipefail
cd "$(dirname "$0")"
. ./unpack.sh
: "${OUT:?}"
LIMIT=${LIMIT:-540}
TOKENS=${TOKENS:-32}
CLIENTS=${CLIENTS:-1 16}
BACKENDS=${BACKENDS:-cuda cpu}
TIMED=${TIMED:-} # client counts run again on cuda with --device-time (kernel and copy time per step)
VARIANTS=${VARIANTS:-}
ROUNDS=${ROUNDS:-2}
start=$SECONDS
left() { echo $((LIMIT - (SECONDS - start))); }
R=$OUT/serve; mkdir -p "$R"
trap 'tar -czf "$OUT/results.tgz" -C "$OUT" serve; rm -rf "$R"' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$R/env.txt"
B=${SLICE:-/tmp/slice2}
if [ ! -s $B/jnf/manifest.json ]; then
	rm -rf $B; mkdir -p $B
	s0=$SECONDS
	# synth --jnf: the files and root of synth then convert, without the
	# Hugging Face copy (about 90 s on 16 cores, against 137 for the two).
	./tarfa synth --arch qwen3_5_moe --preset real --layers 2 --jnf --workers "$(nproc)" --out $B/jnf --no-tokenizer 2>&1 | tail -1
	echo "synth --jnf $((SECONDS - s0)) s" | tee -a "$R/env.txt"
fi
for be in $BACKENDS; do
	runs=$CLIENTS
	[ $be = cuda ] && for c in $TIMED; do runs="$runs $c-timed"; done
	for c in $runs; do
		[ "$(left)" -lt 60 ] && { echo "$be $c: skipped, $(left) s left"; continue; }
		tok=$TOKENS; [ $be = cpu ] && tok=$((TOKENS / 2))
		extra=(); n=${c%-timed}; [ "$n" != "$c" ] && extra=(--device-time)
		s0=$SECONDS
		TARFA_CPUPROFILE=$R/prof-$be-$c.pprof timeout $(($(left) - 20)) ./tarfa bench serve --model $B/jnf --backend $be \
			--clients $n --max-tokens $tok --prompt-tokens 16 --heat=false --json "${extra[@]}" > "$R/serve-$be-$c.json" 2> "$R/serve-$be-$c.err"
		rc=$? # the line below reports this run's status (the profiled run after it is skipped for the timed runs)
		# The same level again with a profile of its requests alone (the
		# load and the solo references left out: bench serve --cpuprofile).
		[ "$n" = "$c" ] && [ "$(left)" -gt 60 ] && timeout $(($(left) - 20)) ./tarfa bench serve --model $B/jnf --backend $be \
			--clients $n --max-tokens $tok --prompt-tokens 16 --heat=false --json --cpuprofile "$R/level-$be" ${EXECTRACE:+--exectrace "$R/level-$be"} > "$R/serve-$be-$c-level.json" 2> "$R/serve-$be-$c-level.err"
		echo "$be clients=$c rc=$rc $((SECONDS - s0)) s: $(tr -d '\n' < "$R/serve-$be-$c.json" | head -c 600)"
	done
done
if [ -n "$VARIANTS" ]; then
	IFS=';' read -ra vs <<< "baseline||;$VARIANTS"
	for round in $(seq "$ROUNDS"); do
		for v in "${vs[@]}"; do
			IFS='|' read -r label envs flags <<< "$v"
			[ "$(left)" -lt 40 ] && { echo "variant $label: skipped, $(left) s left"; continue; }
			f="$R/variant-$round-${label// /_}"
			# shellcheck disable=SC2086 # envs and flags are word lists
			env $envs timeout $(($(left) - 20)) ./tarfa bench serve --model $B/jnf --backend ${VBACKEND:-cuda} --clients 16 --max-tokens $TOKENS \
				--prompt-tokens 16 --heat=false --json $flags > "$f.json" 2> "$f.err"
			echo "variant $round $label ($envs $flags) rc=$?: $(tr -d '\n' < "$f.json" | head -c 900)"
		done
	done
fi
echo "done in $((SECONDS - start)) s"
