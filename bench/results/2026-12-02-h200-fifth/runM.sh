#!/usr/bin/env bash
# Run M: batch_norm2d through bn_mean and bn_meansq (per-channel
# reductions) on top of runs K and L; every workload, ResNet-50 b32
# profile, PyTorch eager in the same lease
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 560 - ($(date +%s) - t0) )); }
timeout 150 /tmp/b/meganeura_bench --backend vulkan --models > $o/models.jsonl 2>>$o/log.txt
echo "after models $(left) s left" >> $o/log.txt
MEGANEURA_PROFILE=1 timeout 100 /tmp/b/meganeura_bench --backend vulkan --only resnet50_b32 --runs 20 > /dev/null 2> $o/r50_profile.txt
echo "after profile $(left) s left" >> $o/log.txt
timeout $(( $(left) - 5 )) python3 bench/torch_workloads.py --modes f32 > $o/torch.jsonl 2>>$o/log.txt || echo "torch rc $?" >> $o/log.txt
echo "end $(left) s left" >> $o/log.txt
