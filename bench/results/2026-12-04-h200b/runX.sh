#!/usr/bin/env bash
# Run X (2026-12-04, second session): a sweep of the attention tile
# configurations (MEGANEURA_ATTN_TILE, one op at a time) at SmolLM2's 8 x 512
# and 1 x 2048, with PyTorch's SDPA in the same lease, and the per-kernel
# profile of each setting.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
A=/tmp/b/meganeura_bench_attn
timeout 60 $A --only b8t512,b1t2048 --runs 20 > $o/attn.jsonl 2>> $o/log.txt; echo "attn rc $?" >> $o/log.txt
timeout 120 python3 bench/attn_torch.py --only b8t512,b1t2048 >> $o/torch.jsonl 2>> $o/log.txt; echo "torch rc $?" >> $o/log.txt
for kv in \
  fwd=64x16x4x4 fwd=64x32x8x16 fwd=32x32x2x8 \
  lse=64x64x4x8 lse=128x32x8x8 lse=64x32x8x8 \
  dq=64x16x4x4 dq=64x16x4x8 dq=32x32x4x16 dq=64x16x8x8 \
  dkv=32x16x2x4 dkv=32x16x2x8 dkv=48x16x3x8 dkv=32x32x4x16 dkv=48x16x3x4 dkv=16x32x1x8; do
  echo "## $kv" >> $o/sweep_profile.txt
  MEGANEURA_ATTN_TILE=$kv MEGANEURA_PROFILE=1 timeout 60 $A --only b8t512,b1t2048 --runs 10 2>> $o/sweep_profile.txt \
    | sed "s/^{/{\"tile\":\"$kv\",/" >> $o/sweep.jsonl
  echo "sweep $kv rc $?" >> $o/log.txt
done
timeout 60 $A --only b8t512,b1t2048 --runs 20 >> $o/attn.jsonl 2>> $o/log.txt; echo "attn2 rc $?" >> $o/log.txt
