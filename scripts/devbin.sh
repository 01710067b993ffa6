#!/usr/bin/env bash
# devbin.sh - pack the binaries a GPU-machine run needs (docs/GPU.md).
#
#   scripts/devbin.sh [BUILD_DIR]        (default build/release)
#
# Strips the programs (meganeura, the benchmarks, the tests named in TESTS,
# default test_llama_hf) into .devbin/devbin.tar.xz with the shared libraries
# that the GPU machine may lack (libcjson, libpcre2-8, libutf8proc, libpng,
# libjpeg, FFTW, Open MPI's ...: every non-glibc dependency) under lib/.
# On the GPU machine, from the repository root:
#   mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
#   export LD_LIBRARY_PATH=/tmp/b/lib:$LD_LIBRARY_PATH BIN=/tmp/b PATH=/tmp/b:$PATH
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
# spirv-val for test_vk_coopmat_spirv (the GPU machine has no spirv-tools):
# runs put /tmp/b on PATH
if command -v spirv-val > /dev/null; then cp "$(command -v spirv-val)" "$stage/"; fi
# every shared library the programs link that a bare machine may lack (not
# glibc's, libstdc++/libgcc_s, nor the Vulkan loader that .device/ brings)
for f in "$stage"/*; do
  [ -f "$f" ] && ldd "$f" 2>/dev/null
done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u | while read -r name path; do
  case $name in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++.so*|libgcc_s.so*|libvulkan.so*|ld-linux*) ;;
    *) cp -L "$path" "$stage/lib/" ;;
  esac
done
tar -C "$stage" -cJf .devbin/devbin.tar.xz .
if [ ! -d .device ]; then cp -r ../shared/device .device; fi
ls -la .devbin/devbin.tar.xz
