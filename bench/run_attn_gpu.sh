#!/usr/bin/env bash
# run_attn_gpu.sh - the attention kernels on the GPU machine (issue 10's
# attention item, issue 9's prefill): meganeura_bench_attn with the tile
# kernels (default), with the row kernels of before (MEGANEURA_ATTN=rows),
# and PyTorch's scaled_dot_product_attention (bench/attn_torch.py) at the
# same shapes, alternating; a per-kernel profile; a sweep of the tuning
# knobs (docs/PERF.md, "Attention kernels"). From the repo root with
# .device/ and BIN=folder of the built binaries (meganeura_bench_attn).
# Under $OUT:
#   ours.jsonl torch.jsonl profile.txt sweep.jsonl sweep_profile.txt errors.log
# PARTS (default "main profile sweep"):
#   main     ours (tiles), ours (rows), PyTorch; then ours (tiles) and PyTorch again
#   profile  MEGANEURA_PROFILE=1 of the 1x128, 8x512 and decoding cases
#   sweep    one knob setting at a time at 8x512 and 1x2048, each with its profile
set -uo pipefail
out=${OUT:-attn-out}
mkdir -p "$out"
bin=${BIN:-build/release}
parts=" ${PARTS:-main profile sweep} "
has() { [[ "$parts" == *" $1 "* ]]; }
log() { echo "== $(date +%T) $*" >> "$out/errors.log"; }
ours() { "$bin/meganeura_bench_attn" "$@" >> "$out/ours.jsonl" 2>>"$out/errors.log"; }
torch() { python3 bench/attn_torch.py "$@" >> "$out/torch.jsonl" 2>>"$out/errors.log"; }
if has main; then
  log main
  ours
  MEGANEURA_ATTN=rows ours
  torch
  ours
  torch
fi
if has profile; then
  log profile
  MEGANEURA_PROFILE=1 "$bin/meganeura_bench_attn" --only b1t128,b8t512,dec2048 --runs 10 >> "$out/profile.txt" 2>&1
  MEGANEURA_ATTN=rows MEGANEURA_PROFILE=1 "$bin/meganeura_bench_attn" --only b1t128,b8t512,dec2048 --runs 10 \
    >> "$out/profile.txt" 2>&1
fi
if has sweep; then
  log sweep
  # VAR=VALUE settings, one at a time (the others at their defaults); the
  # H200 defaults are fwd=64x32x4x16 lse=64x32x4x8 dq=32x32x4x16 dkv=32x32x4x16
  # run 4 prefetch 1
  for kv in \
      MEGANEURA_ATTN_TILE=fwd=32x32x2x8 MEGANEURA_ATTN_TILE=fwd=64x16x4x8 MEGANEURA_ATTN_TILE=fwd=64x16x8x8 \
      MEGANEURA_ATTN_TILE=fwd=64x32x2x16 MEGANEURA_ATTN_TILE=lse=64x64x4x8 \
      MEGANEURA_ATTN_TILE=dq=32x16x2x8 MEGANEURA_ATTN_TILE=dq=64x16x4x8 MEGANEURA_ATTN_TILE=dq=64x16x2x8 \
      MEGANEURA_ATTN_TILE=dkv=32x16x2x8 MEGANEURA_ATTN_TILE=dkv=16x32x1x8 \
      MEGANEURA_ATTN_RUN=1 MEGANEURA_ATTN_RUN=2 MEGANEURA_ATTN_RUN=8 MEGANEURA_ATTN_RUN=full \
      MEGANEURA_ATTN_PREFETCH=0; do
    echo "## $kv" >> "$out/sweep_profile.txt"
    env "$kv" MEGANEURA_PROFILE=1 "$bin/meganeura_bench_attn" --only b8t512,b1t2048 --runs 10 \
      >> "$out/sweep.jsonl" 2>> "$out/sweep_profile.txt"
  done
fi
log done
