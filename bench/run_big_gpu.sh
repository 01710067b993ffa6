#!/usr/bin/env bash
# run_big_gpu.sh - single tensors above 2^31 and 2^32 elements on the H200
# (issue 8): meganeura_bench_big's logits (32768 x 2048 @ 2048 x 128256 and
# cross-entropy, forward and backward, 4.2G logits) and eltwise (2^32 + 2^24
# elements) cases, checked against the CPU on samples; then the same
# logits at 16384 rows (2.1G, below 2^31: 32-bit kernels on paged operands)
# with the default limit and with every kernel in its 64-bit index form
# (MEGANEURA_VK_INDEX_MAX=1), which measures what 64-bit indices cost. From
# the repo root with .device/ (../shared/device) and BIN=folder of the built
# binaries (default build/release/bench). Under $OUT: big.jsonl, errors.log
# (stderr: progress, per-row errors), devices.txt. Exit status 0 when every
# case passed; bench_big's status otherwise (1 failed check, 3 refused).
set -uo pipefail
[ -f .device/vk-env.sh ] && . .device/vk-env.sh
out=${OUT:-big-out}
mkdir -p "$out"
bin=${BIN:-build/release/bench}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/devices.txt" 2>&1
free -g >> "$out/devices.txt" 2>&1
rc=0
run() {
  echo "== $(date +%T) $*" >> "$out/errors.log"
  "$@" >> "$out/big.jsonl" 2>> "$out/errors.log"
  local s=$?
  echo "exit $s" >> "$out/errors.log"
  [ $s -ne 0 ] && [ $rc -eq 0 ] && rc=$s
}
run "$bin/meganeura_bench_big" logits eltwise
run "$bin/meganeura_bench_big" logits --rows 16384
run env MEGANEURA_VK_INDEX_MAX=1 "$bin/meganeura_bench_big" logits --rows 16384
exit $rc
