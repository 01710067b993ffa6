#!/usr/bin/env bash
# Run AK (2026-12-06; issue 12): attention in the fast contract (q, k, v,
# dout and the weights P, dS rounded; the forward in log2 units against an
# integer reference). The tests on the GPU's driver, then A/B against the
# binaries of 2020408 (attention unrounded in the fast contract, strict as
# before): SmolLM2-135M 8 x 512 bf16 training and the strict attention
# kernels, alternating twice.
set -u
mkdir -p /tmp/b /tmp/o && tar -C /tmp/b -xJf .devbin/devbin.tar.xz && tar -C /tmp/o -xJf .devbin/old.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-} PATH=/tmp/b:$PATH
. .device/vk-env.sh
o=$OUT cfg=tests/fixtures/configs
t0=$(date +%s)
left() { echo $(( 540 - ($(date +%s) - t0) )); }
nvidia-smi --query-gpu=name,clocks.sm,power.draw,utilization.gpu --format=csv >> $o/log.txt 2>&1
timeout 150 /tmp/b/test_fast_contract > $o/test_fast_contract.txt 2>&1; echo "test_fast_contract rc $? at $(left)" >> $o/log.txt
MN_TEST_DATA=tests/data timeout 90 /tmp/b/test_ops_transformer > $o/test_ops_transformer.txt 2>&1; echo "test_ops_transformer rc $? at $(left)" >> $o/log.txt
for rep in 1 2; do
  for v in new old; do
    bin=/tmp/b/meganeura_bench_lm; [ $v = old ] && bin=/tmp/o/meganeura_bench_lm_old
    timeout 60 $bin train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 10 --precision bf16 | sed "s/^{/{\"build\":\"$v\",\"rep\":$rep,/" >> $o/lm.jsonl 2>> $o/log.txt; echo "lm $v rc $? at $(left)" >> $o/log.txt
  done
  for v in new old; do
    bin=/tmp/b/meganeura_bench_attn; [ $v = old ] && bin=/tmp/o/meganeura_bench_attn_old
    timeout 40 $bin --only b8t512,b1t2048 | sed "s/^{/{\"build\":\"$v\",\"rep\":$rep,/" >> $o/attn.jsonl 2>> $o/log.txt; echo "attn $v rc $? at $(left)" >> $o/log.txt
  done
done
MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 3 --precision bf16 > /dev/null 2> $o/profile.txt; echo "profile rc $? at $(left)" >> $o/log.txt
[ $(left) -gt 100 ] && { MN_TEST_DATA=tests/data timeout 90 /tmp/b/test_transformer > $o/test_transformer.txt 2>&1; echo "test_transformer rc $? at $(left)" >> $o/log.txt; }
nvidia-smi --query-gpu=name,clocks.sm,power.draw,utilization.gpu --format=csv >> $o/log.txt 2>&1
