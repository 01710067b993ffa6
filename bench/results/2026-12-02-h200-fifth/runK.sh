#!/usr/bin/env bash
# Run K: conv weight gradients split over K (partial sums), staged reduce_to,
# row reductions by workgroup (issues 10, 11): ResNet-50 b32 with and without
# the split, profile, every workload, PyTorch eager in the same lease
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 560 - ($(date +%s) - t0) )); }
timeout 120 /tmp/b/meganeura_bench --backend vulkan --only resnet50_b32 > $o/r50_split.jsonl 2>>$o/log.txt
MEGANEURA_WGRAD_SPLIT=0 timeout 120 /tmp/b/meganeura_bench --backend vulkan --only resnet50_b32 > $o/r50_nosplit.jsonl 2>>$o/log.txt
MEGANEURA_PROFILE=1 timeout 100 /tmp/b/meganeura_bench --backend vulkan --only resnet50_b32 --runs 20 > /dev/null 2> $o/r50_profile.txt
echo "after r50 $(left) s left" >> $o/log.txt
timeout $(( $(left) - 150 )) /tmp/b/meganeura_bench --backend vulkan --models > $o/models.jsonl 2>>$o/log.txt
echo "after models $(left) s left" >> $o/log.txt
timeout $(( $(left) - 5 )) python3 bench/torch_workloads.py --modes f32 > $o/torch.jsonl 2>>$o/log.txt || echo "torch rc $?" >> $o/log.txt
echo "end $(left) s left" >> $o/log.txt
