#!/usr/bin/env bash
# host_app.sh CLI HOST_APP - the embedding example end to end: trains the
# MNIST MLP for one epoch with the CLI (CPU backend), then runs
# examples/host_app on that checkpoint with its own Vulkan device under the
# validation layer with synchronisation validation (also across
# submissions); it exits 0 only if every frame's classes equal the CPU
# backend's and the layer reported nothing. Needs the MNIST cache (`make data`).
set -uo pipefail
cli=$1 app=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$cli" train mnist --epochs 1 --checkpoint "$dir/mlp.safetensors" > "$dir/train.log" 2>&1 || {
  cat "$dir/train.log"; echo "host_app.sh: training failed"; exit 1; }
VK_LAYER_ENABLES=VALIDATION_CHECK_ENABLE_SYNCHRONIZATION_VALIDATION_QUEUE_SUBMIT \
  "$app" --checkpoint "$dir/mlp.safetensors" --frames 8 --validate
