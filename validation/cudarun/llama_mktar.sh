#!/usr/bin/env bash
# llama_mktar.sh [COMMIT]: .dev/llama/llama.cpp.tar.xz (OUTDIR), from the local bare
# mirror of llama.cpp: only what the CUDA/CPU build of llama-bench and
# llama-completion and the HF -> GGUF converter need (configure still reads
# the CMakeLists of every tool that tools/CMakeLists.txt adds, so those stay).
# The tree is otherwise unchanged; COMMIT and BUILD_NUMBER are added at its root.
set -euo pipefail
MIRROR=${MIRROR:-/work/.mirror/unslothai+llama.cpp/repo}
G="git --git-dir=$MIRROR"
C=$($G rev-parse "${1:-34af94cd}^{commit}")
here=${OUTDIR:-$PWD/.dev/llama}; mkdir -p "$here"
tmp=$(mktemp -d); trap 'rm -rf $tmp' EXIT
keep=(CMakeLists.txt LICENSE cmake include src common vendor
	ggml/CMakeLists.txt ggml/cmake ggml/include ggml/src
	tools/CMakeLists.txt tools/batched-bench tools/gguf-split tools/imatrix tools/llama-bench
	tools/completion tools/perplexity tools/quantize tools/tokenize tools/parser tools/tts
	tools/mtmd tools/cvector-generator tools/export-lora tools/fit-params tools/results
	convert_hf_to_gguf.py conversion gguf-py)
# ggml backends other than CPU and CUDA are added only when enabled
# (ggml_add_backend); mtmd's media and tests are read by no build.
drop=()
for d in $($G ls-tree --name-only $C ggml/src/); do
	case $d in ggml/src/ggml-*) [ -n "$($G ls-tree $C $d/CMakeLists.txt)" ] && case $d in ggml/src/ggml-cpu|ggml/src/ggml-cuda) ;; *) drop+=(":!$d");; esac;; esac
done
drop+=(":!tools/mtmd/tests" ":!tools/mtmd/test-*" ":!tools/mtmd/legacy-models" ":!gguf-py/tests")
$G archive --prefix=llama.cpp/ $C -- "${keep[@]}" "${drop[@]}" | tar -x -C $tmp
echo $C > $tmp/llama.cpp/COMMIT
$G rev-list --count $C > $tmp/llama.cpp/BUILD_NUMBER
tar -C $tmp --sort=name --mtime=@$($G log -1 --format=%ct $C) --owner=0 --group=0 --numeric-owner -cf - llama.cpp | xz -9e -T2 > $here/llama.cpp.tar.xz.tmp
mv $here/llama.cpp.tar.xz.tmp $here/llama.cpp.tar.xz
echo "$C: $(du -b $here/llama.cpp.tar.xz | cut -f1) bytes, $(du -sb $tmp/llama.cpp | cut -f1) unpacked"
