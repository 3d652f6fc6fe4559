#!/usr/bin/env bash
# build.sh (called by validation/cudarun/llama.sh): llama.cpp's llama-bench and
# llama-completion from TAR (default .dev/llama/llama.cpp.tar.xz under the repository root,
# git-ignored: fetched code, made by llama_mktar.sh).
#
#	BUILD_S=SECONDS L=WORKDIR bash validation/cudarun/llama_build.sh
#
# Unpacks the tarball into $L/src/llama.cpp (once; its COMMIT file names the
# commit), configures $L/build (once) and builds the two targets there within
# BUILD_S seconds. Resumable: a second call goes on with the same ninja build.
# Exit 0 only when both binaries exist; nonzero (with a line saying why) when
# the time ran out or a step failed.
#
# CUDA (sm_90) when nvcc is found, else a CPU build; GGML_CUDA=ON|OFF forces
# one. JOBS (default: all cores) is ninja's -j.
TAR=${TAR:-$PWD/.dev/llama/llama.cpp.tar.xz}
set -o pipefail
: "${L:?L is the work directory}" "${BUILD_S:?BUILD_S is the time budget in seconds}"
end=$((SECONDS + BUILD_S))
left() { echo $((end - SECONDS)); }
S=$L/src/llama.cpp
B=$L/build
[ -d /usr/local/cuda/bin ] && PATH=$PATH:/usr/local/cuda/bin
if [ -z "$GGML_CUDA" ]; then
	if command -v nvcc > /dev/null; then GGML_CUDA=ON; else GGML_CUDA=OFF; fi
fi

if [ ! -s $S/COMMIT ]; then
	rm -rf $L/src/.unpack && mkdir -p $L/src/.unpack || exit 1
	tar -xJf $TAR -C $L/src/.unpack || { echo "build.sh: cannot unpack $TAR"; exit 1; }
	# The one change to the tree: llama-completion returns without flushing
	# its asynchronous log (common/log.h: "Call common_log_flush() before
	# exit"), so its closing timing lines, which llama.sh reads, are lost in
	# some runs. Logging only; nothing computed changes.
	f=$L/src/.unpack/llama.cpp/tools/completion/completion.cpp
	[ "$(grep -c '^    llama_backend_free();$' $f)" = 1 ] &&
		sed -i 's/^    llama_backend_free();$/&\n    common_log_flush(common_log_main());/' $f &&
		grep -q '^    common_log_flush(common_log_main());$' $f || { echo "build.sh: cannot patch $f"; exit 1; }
	rm -rf $S && mv $L/src/.unpack/llama.cpp $S && rmdir $L/src/.unpack || exit 1
fi
C=$(cat $S/COMMIT)

if [ ! -s $B/build.ninja ]; then
	[ "$(left)" -gt 0 ] || { echo "build.sh: no time left to configure"; exit 1; }
	cuda=(-DGGML_CUDA=OFF)
	# The FlashAttention kernels (fattn-*.cu, about a third of the CUDA
	# sources and more of the build time) are compiled empty unless
	# LLAMA_FA=ON: llama.cpp then runs attention without them (-fa auto
	# finds none), which at the 52 positions of llama.sh's runs is a small
	# part of a token's time.
	[ "$GGML_CUDA" = ON ] && cuda=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
		-DGGML_CUDA_FA=${LLAMA_FA:-OFF} -DGGML_CUDA_FA_ALL_QUANTS=OFF -DGGML_CUDA_NCCL=OFF)
	timeout -k 5 $(left) cmake -S $S -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda[@]}" \
		-DGGML_NATIVE=ON -DLLAMA_OPENSSL=OFF \
		-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
		-DLLAMA_BUILD_COMMIT=${C:0:9} -DLLAMA_BUILD_NUMBER=$(cat $S/BUILD_NUMBER 2>/dev/null || echo 0) \
		> $L/configure.log 2>&1
	rc=$?
	if [ $rc -ne 0 ]; then
		tail -20 $L/configure.log
		rm -f $B/build.ninja # configure again next time
		echo "build.sh: configure failed (rc=$rc, log $L/configure.log)"
		exit 1
	fi
	grep -E "CUDA Toolkit found|CMAKE_CUDA_ARCHITECTURES=|Including CPU backend|Adding CPU backend variant" $L/configure.log
fi

s=$SECONDS
[ "$(left)" -gt 0 ] || { echo "build.sh: no time left to build"; exit 1; }
# timeout signals the whole group: ninja stops and removes what it was writing.
timeout -k 10 $(left) cmake --build $B --target llama-bench llama-completion -j ${JOBS:-$(nproc)} > $L/build.log 2>&1
rc=$?
grep -E "^\[[0-9]+/[0-9]+\]" $L/build.log | tail -1 | cut -c1-100
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
	echo "build.sh: out of time after $((SECONDS - s)) s (log $L/build.log): call again to go on"
	exit 1
elif [ $rc -ne 0 ]; then
	grep -E "error|FAILED" $L/build.log | head -20
	echo "build.sh: build failed (rc=$rc, log $L/build.log)"
	exit 1
fi
[ -x $B/bin/llama-bench ] && [ -x $B/bin/llama-completion ] || { echo "build.sh: built, but no $B/bin/llama-bench or llama-completion"; exit 1; }
echo "build.sh: llama.cpp ${C:0:9} built (GGML_CUDA=$GGML_CUDA) in $((SECONDS - s)) s"
