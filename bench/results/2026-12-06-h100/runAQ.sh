#!/usr/bin/env bash
# Run AQ (2026-12-06; issue 12): the tensor-core attention with the next tile prefetched
# into registers: the gates, then MEGANEURA_ATTN_PREFETCH=0 against 1, alternating,
# and SmolLM2-135M bf16 8 x 512 (tiles against the tensor-core kernel).
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-} PATH=/tmp/b:$PATH
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 560 - ($(date +%s) - t0) )); }
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv >> $o/log.txt 2>&1
timeout 240 /tmp/b/test_fast_contract > $o/test_fast.txt 2>&1; echo "test_fast_contract rc $? at $(left)" >> $o/log.txt
grep -v '^ok' $o/test_fast.txt | tail -20 > $o/test_fast_tail.txt; rm $o/test_fast.txt
for pf in 0 1 0 1; do
  MEGANEURA_ATTN_PREFETCH=$pf timeout 60 /tmp/b/meganeura_bench_attn --precision bf16 --only b8t512,b1t2048 --runs 10 --warmup 3 >> $o/attn.jsonl 2>> $o/log.txt
  echo "attn prefetch $pf rc $? at $(left)" >> $o/log.txt
done
[ $(left) -gt 100 ] && for k in tiles auto tiles auto; do
  MEGANEURA_ATTN=$k timeout 60 /tmp/b/meganeura_bench_lm train --config tests/fixtures/configs/smollm2-135m.json --batch 8 --seq 512 --steps 10 --precision bf16 >> $o/lm.jsonl 2>> $o/log.txt
  echo "lm $k rc $? at $(left)" >> $o/log.txt
done
[ $(left) -gt 60 ] && { MEGANEURA_PROFILE=1 timeout 50 /tmp/b/meganeura_bench_attn --precision bf16 --only b8t512 --runs 3 --warmup 1 > /dev/null 2> $o/prof.txt; echo "prof rc $? at $(left)" >> $o/log.txt; }
