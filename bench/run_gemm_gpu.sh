#!/usr/bin/env bash
# run_gemm_gpu.sh - the fast contract's GEMM on the GPU machine (issue 12):
# bench_gemm (strict, bf16, f16 on square and skinny shapes, a sweep of
# cooperative-matrix tiles and both roundings, a bit check of the rounding)
# beside gemm_torch.py (cuBLAS) in the same run. From the repo root with
# .device/ (../shared/device) and BIN=folder of the built binaries
# (meganeura, meganeura_bench_gemm). Under $OUT:
#   devices.txt ours.jsonl torch.jsonl summary.txt profile.txt errors.log
# PARTS (default all; about 4 + 4 minutes on an H200, so two commands fit the
# 10-minute limit: PARTS="torch strict square" then PARTS="skinny nv profile"):
#   torch    gemm_torch.py, all shapes (and square without reduced-precision reductions)
#   strict   ours, f32 strict, all shapes
#   square   ours, bf16 and f16, square shapes: every tile of TILES, both ROUNDS, the rounding bit check
#   skinny   ours, bf16 and f16, skinny shapes: the tiles of SKINNY_TILES, ROUNDS
#   nv       ours, f16 through the NV form instead of KHR, square shapes
#   profile  MEGANEURA_PROFILE=1 of two bf16 products (per-kernel GPU time)
# The summary (summary.txt) is rewritten after each part from what is there.
set -uo pipefail
[ -f .device/vk-env.sh ] && . .device/vk-env.sh
out=${OUT:-gemm-out}
mkdir -p "$out"
bin=${BIN:-build/release}
bg="$bin/meganeura_bench_gemm"
[ -x "$bg" ] || bg="$bin/bench/meganeura_bench_gemm"
parts=" ${PARTS:-torch strict square skinny nv profile} "
has() { [[ "$parts" == *" $1 "* ]]; }
tiles=${TILES:-"auto;128x256x32/64x64/1;128x128x32/64x64/2;128x128x32/64x32/2;128x256x16/64x64/2;256x128x32/64x64/1;128x128x64/64x64/1;64x128x32/32x64/2;64x64x32/32x32/2"}
skinny_tiles=${SKINNY_TILES:-"auto;128x128x32/64x64/2;64x128x32/32x64/2;64x64x32/32x32/2;128x256x32/64x64/1"}
rounds=${ROUNDS:-"exact;hw"}
log() { echo "== $(date +%T) $*" >> "$out/errors.log"; }
ours() { "$bg" "$@" >> "$out/ours.jsonl" 2>>"$out/errors.log"; }
torch() { python3 bench/gemm_torch.py "$@" >> "$out/torch.jsonl" 2>>"$out/errors.log"; }
if [ ! -s "$out/devices.txt" ]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$out/devices.txt" 2>&1
  "$bin/meganeura" devices >> "$out/devices.txt" 2>&1
fi
if has torch; then
  log torch
  torch --shapes square,skinny --runs 10
  torch --shapes square --precision bf16,f16 --runs 10 --no-reduced-reduction
fi
if has strict; then log strict; ours --precision strict --shapes square,skinny; fi
if has square; then
  log square
  MEGANEURA_BENCH_TILES="$tiles" MEGANEURA_BENCH_ROUNDS="$rounds" ours --precision bf16,f16 --shapes square --round-check
  has torch && torch --shapes square --precision bf16,f16 --runs 10 # again: drift hits both
fi
if has skinny; then
  log skinny
  MEGANEURA_BENCH_TILES="$skinny_tiles" MEGANEURA_BENCH_ROUNDS="$rounds" ours --precision bf16,f16 --shapes skinny
fi
if has nv; then log nv; MEGANEURA_COOPMAT=nv ours --precision f16 --shapes square; fi
if has profile; then
  log profile
  MEGANEURA_PROFILE=1 "$bg" --precision bf16 --shapes 4096x4096x4096,4096x576x49152:nt --runs 3 \
    > /dev/null 2>> "$out/profile.txt"
fi
python3 bench/gemm_summary.py "$out/ours.jsonl" "$out/torch.jsonl" > "$out/summary.txt" 2>>"$out/errors.log"
echo done
