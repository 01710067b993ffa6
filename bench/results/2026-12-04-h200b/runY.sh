#!/usr/bin/env bash
# Run Y (2026-12-04, second session): the attention forward writing the lse
# its backward reads (kir.h KIR_SAVED) and the 16-invocations-a-row backward
# tiles of run X: attention against SDPA, SmolLM2-135M training against
# eager in the same lease (MEGANEURA_FUSION=nosaved: the lse kernel of
# before), a second tile sweep, and the op gates on the H200.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 570 - $(date +%s) + t0 )); }
A=/tmp/b/meganeura_bench_attn
cfg=tests/fixtures/configs
L="/tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json"
timeout 60 $A --only b8t512,b1t2048,b1t128 --runs 20 > $o/attn.jsonl 2>> $o/log.txt; echo "attn rc $?" >> $o/log.txt
MEGANEURA_FUSION=nosaved timeout 60 $A --only b8t512,b1t2048,b1t128 --runs 20 | sed 's/^{/{"fusion":"nosaved",/' >> $o/attn.jsonl 2>> $o/log.txt; echo "attn nosaved rc $?" >> $o/log.txt
timeout 120 python3 bench/attn_torch.py --only b8t512,b1t2048,b1t128 > $o/torch.jsonl 2>> $o/log.txt; echo "torch attn rc $?" >> $o/log.txt
for bt in "8 512" "1 128"; do
  set -- $bt
  timeout 90 $L --batch $1 --seq $2 --steps 10 >> $o/lm.jsonl 2>> $o/log.txt; echo "lm $1x$2 rc $?" >> $o/log.txt
  MEGANEURA_FUSION=nosaved timeout 90 $L --batch $1 --seq $2 --steps 10 | sed 's/^{/{"fusion":"nosaved",/' >> $o/lm.jsonl 2>> $o/log.txt; echo "lm nosaved $1x$2 rc $?" >> $o/log.txt
  timeout 200 python3 bench/lm_torch.py train --config $cfg/smollm2-135m.json --batch $1 --seq $2 --steps 10 >> $o/torch.jsonl 2>> $o/log.txt; echo "torch lm $1x$2 rc $?" >> $o/log.txt
  timeout 90 $L --batch $1 --seq $2 --steps 10 >> $o/lm.jsonl 2>> $o/log.txt; echo "lm again $1x$2 rc $?" >> $o/log.txt
done
MEGANEURA_PROFILE=1 timeout 90 $L --batch 8 --seq 512 --steps 5 > /dev/null 2> $o/lm_profile.txt; echo "lm profile rc $?" >> $o/log.txt
for kv in fwd=32x32x4x16 fwd=64x32x4x16 dq=64x16x8x16 dq=32x32x2x16 dkv=32x32x2x16; do
  echo "## $kv" >> $o/sweep_profile.txt
  MEGANEURA_ATTN_TILE=$kv MEGANEURA_PROFILE=1 timeout 60 $A --only b8t512,b1t2048 --runs 10 2>> $o/sweep_profile.txt \
    | sed "s/^{/{\"tile\":\"$kv\",/" >> $o/sweep.jsonl
  echo "sweep $kv rc $?" >> $o/log.txt
done
for t in test_ops_transformer test_vulkan_ops test_transformer test_workloads; do
  l=$(left); [ $l -gt 20 ] || { echo "$t skipped: $l s left" >> $o/log.txt; continue; }
  timeout $(( l - 10 )) /tmp/b/$t > /tmp/$t.txt 2>&1; echo "$t rc $? $(tail -1 /tmp/$t.txt)" >> $o/log.txt
  grep -m5 FAIL /tmp/$t.txt >> $o/log.txt
done
