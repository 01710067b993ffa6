#!/usr/bin/env bash
# Run AJ (2026-12-06; issue 12): A/B of split weight gradients on the
# coopmat kernel (default) against the FMA kernel with rounding
# (MEGANEURA_COOPMAT_SPLIT=0, before this change), ResNet-50 bf16 at batch
# 1, 4, 32, alternating twice, with PyTorch bf16 autocast before and after.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-} PATH=/tmp/b:$PATH
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 300 - ($(date +%s) - t0) )); }
nvidia-smi --query-gpu=name,clocks.sm,power.draw,utilization.gpu --format=csv >> $o/log.txt 2>&1
timeout 60 python3 bench/torch_workloads.py --modes bf16 --only resnet50_b1,resnet50_b4,resnet50_b32 >> $o/torch.jsonl 2>> $o/log.txt; echo "torch rc $? at $(left)" >> $o/log.txt
for rep in 1 2; do
  for w in resnet50_b1 resnet50_b4 resnet50_b32; do
    for s in 1 0; do
      MEGANEURA_COOPMAT_SPLIT=$s timeout 40 /tmp/b/meganeura_bench --backend vulkan --models --only $w --precision bf16 --runs 20 --warmup 5 | sed "s/\"workload\":\"\([a-z0-9_]*\)\"/\"workload\":\"\1\",\"coopmat_split\":$s,\"rep\":$rep/" >> $o/ours.jsonl 2>> $o/log.txt; echo "$w $s rc $? at $(left)" >> $o/log.txt
    done
  done
done
timeout 60 python3 bench/torch_workloads.py --modes bf16 --only resnet50_b1,resnet50_b4,resnet50_b32 >> $o/torch.jsonl 2>> $o/log.txt; echo "torch rc $? at $(left)" >> $o/log.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw,utilization.gpu --format=csv >> $o/log.txt 2>&1
