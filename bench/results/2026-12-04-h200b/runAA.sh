#!/usr/bin/env bash
# Run AA (2026-12-04, second session): SmolLM2-135M 8 x 512 training with
# the weight gradients in 2, 4 (default) and 8 parts (MEGANEURA_MATMUL_KSPLIT)
# and with dq tiles of 32x32x2x16; PyTorch eager in the same lease.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
cfg=tests/fixtures/configs
L="/tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 10"
for r in 1 2; do
  timeout 90 $L >> $o/lm.jsonl 2>> $o/log.txt; echo "lm rc $?" >> $o/log.txt
  for p in 2 8; do
    MEGANEURA_MATMUL_KSPLIT=$p timeout 90 $L | sed "s/^{/{\"ksplit\":$p,/" >> $o/lm.jsonl 2>> $o/log.txt; echo "lm ksplit$p rc $?" >> $o/log.txt
  done
  MEGANEURA_ATTN_TILE=dq=32x32x2x16 timeout 90 $L | sed 's/^{/{"tile":"dq=32x32x2x16",/' >> $o/lm.jsonl 2>> $o/log.txt; echo "lm dq rc $?" >> $o/log.txt
done
timeout 200 python3 bench/lm_torch.py train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 10 >> $o/torch.jsonl 2>> $o/log.txt; echo "torch rc $?" >> $o/log.txt
timeout 200 python3 bench/lm_torch.py train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 10 --attn sdpa | sed 's/^{/{"attn":"sdpa",/' >> $o/torch.jsonl 2>> $o/log.txt; echo "torch sdpa rc $?" >> $o/log.txt
MEGANEURA_MATMUL_KSPLIT=8 MEGANEURA_PROFILE=1 timeout 90 $L > /dev/null 2> $o/profile_ksplit8.txt; echo "profile rc $?" >> $o/log.txt
