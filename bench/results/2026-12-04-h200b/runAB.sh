#!/usr/bin/env bash
# Run AB (2026-12-04, second session): SmolLM2-135M 8 x 512 and 1 x 128
# training with the weight gradients' default of 8 parts (KSPLIT_TILES 512;
# the head's gradient stays one product), against PyTorch eager, twice,
# alternating.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
cfg=tests/fixtures/configs
for r in 1 2; do
  for bt in "8 512" "1 128"; do
    set -- $bt
    timeout 90 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch $1 --seq $2 --steps 10 >> $o/lm.jsonl 2>> $o/log.txt; echo "lm $1x$2 rc $?" >> $o/log.txt
    timeout 200 python3 bench/lm_torch.py train --config $cfg/smollm2-135m.json --batch $1 --seq $2 --steps 10 >> $o/torch.jsonl 2>> $o/log.txt; echo "torch $1x$2 rc $?" >> $o/log.txt
  done
done
MEGANEURA_PROFILE=1 timeout 90 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 5 > /dev/null 2> $o/profile.txt; echo "profile rc $?" >> $o/log.txt
