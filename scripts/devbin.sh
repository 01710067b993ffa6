#!/usr/bin/env bash
# devbin.sh - pack the binaries a GPU-machine run needs (docs/GPU.md).
#
#   scripts/devbin.sh [BUILD_DIR]        (default build/release)
#
# Strips the programs (meganeura, the benchmarks, the tests named in TESTS,
# default test_llama_hf) into .devbin/devbin.tar.xz with the shared libraries
# that the GPU machine lacks (libcjson, libpcre2-8, libutf8proc) under lib/.
# On the GPU machine, from the repository root:
#   mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
#   export LD_LIBRARY_PATH=/tmp/b/lib:$LD_LIBRARY_PATH BIN=/tmp/b
#   . .device/vk-env.sh
# .devbin/ and .device/ are git-ignored; carry both (`run` carry list).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
tests=${TESTS:-test_llama_hf}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib" .devbin
for f in "$build/meganeura" "$build"/bench/meganeura_bench*; do
  if [ -x "$f" ] && [ -f "$f" ]; then strip -o "$stage/$(basename "$f")" "$f"; fi
done
for t in $tests; do strip -o "$stage/$t" "$build/tests/$t"; done
for l in libcjson.so.1 libpcre2-8.so.0 libutf8proc.so.2; do
  p=$(ldconfig -p | awk -v l="$l" '$1 == l && /x86-64/ {print $NF; exit}')
  [ -n "$p" ] && cp -L "$p" "$stage/lib/"
done
tar -C "$stage" -cJf .devbin/devbin.tar.xz .
if [ ! -d .device ]; then cp -r ../shared/device .device; fi
ls -la .devbin/devbin.tar.xz
