#!/usr/bin/env bash
# Run AL (2026-12-06; issue 12): where the attention rounding of the first
# runAK attempt went (SmolLM2-135M 8 x 512 bf16, MEGANEURA_PROFILE): the
# binaries of a temporary patch (not in the tree) whose MN_TMP_ATRND chose
# full (q, k, v, dout rounded in the loads and the weights), none, in (the
# loads only), w (the weights only), sel (a select form of the bf16
# rounding), strictsm (the rounding with the strict softmax). Result: the
# loads cost it all, hence the casts of q, k, v, dout.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-} PATH=/tmp/b:$PATH
. .device/vk-env.sh
o=$OUT cfg=tests/fixtures/configs
for v in full none in w sel strictsm; do
  echo "== $v" >> $o/prof.txt
  MN_TMP_ATRND=$v MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 3 --precision bf16 > /dev/null 2> $o/p.txt
  grep -E '^  attention' $o/p.txt >> $o/prof.txt
done
rm -f $o/p.txt
