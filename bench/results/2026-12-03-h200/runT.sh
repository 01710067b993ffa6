#!/usr/bin/env bash
# Run T (2026-12-03): the image gathers by pixel (MM_PX) on top of run S,
# and uploads on 8 threads (mn_copy): bench_conv with MM_PX and with
# MEGANEURA_VK_CONV_PX=0, ResNet-50 and SmolLM2-135M training beside PyTorch
# eager in the same lease, the ResNet-50 batch-32 profile, the workload gates.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 420 - ($(date +%s) - t0) )); }
timeout 90 /tmp/b/meganeura_bench_conv --batch 32 > $o/conv.jsonl 2>>$o/log.txt; echo "conv rc $? $(left) s left" >> $o/log.txt
MEGANEURA_VK_CONV_PX=0 timeout 90 /tmp/b/meganeura_bench_conv --batch 32 --runs 5 >> $o/conv.jsonl 2>>$o/log.txt; echo "px0 rc $? $(left) s left" >> $o/log.txt
for m in resnet50_b1 resnet50_b4 resnet50_b32; do
  timeout 60 /tmp/b/meganeura_bench --backend vulkan --only $m >> $o/models.jsonl 2>>$o/log.txt; echo "$m rc $? $(left) s left" >> $o/log.txt
done
MEGANEURA_PROFILE=1 timeout 40 /tmp/b/meganeura_bench --backend vulkan --only resnet50_b32 --runs 20 > /dev/null 2> $o/r50_profile.txt
timeout 80 python3 bench/torch_workloads.py --modes f32 --only resnet50 > $o/torch.jsonl 2>>$o/log.txt; echo "torch rc $? $(left) s left" >> $o/log.txt
cfg=tests/fixtures/configs
for bt in "1 128" "8 512"; do
  set -- $bt
  l=$(left); [ $l -lt 60 ] && break
  timeout 60 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch $1 --seq $2 --steps 10 >> $o/lm.jsonl 2>>$o/log.txt; echo "lm $1x$2 rc $? $(left) s left" >> $o/log.txt
  timeout 60 python3 bench/lm_torch.py train --config $cfg/smollm2-135m.json --batch $1 --seq $2 --steps 10 >> $o/lm.jsonl 2>>$o/log.txt; echo "lm torch $1x$2 rc $? $(left) s left" >> $o/log.txt
done
l=$(left); [ $l -gt 40 ] && timeout $(( l - 5 )) /tmp/b/test_workloads > $o/gates.txt 2>&1; echo "workloads rc $? $(left) s left" >> $o/log.txt
