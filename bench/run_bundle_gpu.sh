#!/usr/bin/env bash
# run_bundle_gpu.sh - inference bundles on the GPU machine (issue 17):
# session build with cold kernel caches, warm caches, and from a bundle with
# empty caches and shaderc forbidden, for the MNIST MLP and CNN and the
# SmolLM2-135M decoding graph (1 and 128 tokens per run); each also checks
# the bundle's session computes the exporting session's bits. From the repo
# root with .device/ (../shared/device) and BIN=folder of the built binaries
# (meganeura_bench_bundle). Writes $OUT/bundle.jsonl and $OUT/errors.log;
# the bundles go to a scratch folder under /tmp (the SmolLM2 one is 540 MB)
# and are removed.
set -uo pipefail
out=${OUT:-bundle-out}
mkdir -p "$out"
bin=${BIN:-build/release}
[ -f .device/vk-env.sh ] && . .device/vk-env.sh
run() {
  echo "== $(date +%T) $*" >> "$out/errors.log"
  "$bin/meganeura_bench_bundle" "$@" >> "$out/bundle.jsonl" 2>>"$out/errors.log" ||
    echo "exit $? for $*" >> "$out/errors.log"
}
run --model mlp
run --model cnn
run --config tests/fixtures/configs/smollm2-135m.json --seq 1
run --config tests/fixtures/configs/smollm2-135m.json --seq 128
cat "$out/bundle.jsonl"
