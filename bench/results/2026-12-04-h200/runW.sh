#!/usr/bin/env bash
# Run W (2026-12-04): embedding_bwd with row blocks in shared memory, against
# MEGANEURA_VK_EMBED_ROWS=1 (one row a workgroup), in SmolLM2-135M's 8 x 512
# and 1 x 128 training steps; the op tests on the H200.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
cfg=tests/fixtures/configs
for bt in "8 512" "1 128"; do
  set -- $bt
  MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch $1 --seq $2 --steps 10 >> $o/lm.jsonl 2>> $o/lm_profile.txt; echo "lm $1x$2 rc $?" >> $o/log.txt
  MEGANEURA_VK_EMBED_ROWS=1 MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch $1 --seq $2 --steps 10 >> $o/lm.jsonl 2>> $o/lm_profile_rows1.txt; echo "lm rows1 $1x$2 rc $?" >> $o/log.txt
done
timeout 200 /tmp/b/test_vulkan_ops > $o/gates.txt 2>&1; echo "vulkan_ops rc $?" >> $o/log.txt
timeout 100 /tmp/b/test_ops_transformer >> $o/gates.txt 2>&1; echo "ops_transformer rc $?" >> $o/log.txt
tail -c 20000 $o/gates.txt > $o/gates_tail.txt; rm -f $o/gates.txt
grep -h "embedding_bwd\|^  kernel" $o/lm_profile.txt $o/lm_profile_rows1.txt >> $o/log.txt
