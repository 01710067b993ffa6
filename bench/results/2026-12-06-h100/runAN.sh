#!/usr/bin/env bash
# Run AN (2026-12-06; issue 12): the five workloads in bf16 with attention
# in the fast contract (a371a1a), PyTorch bf16 autocast eager in the same
# run, PyTorch first and last.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-} PATH=/tmp/b:$PATH
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 560 - ($(date +%s) - t0) )); }
nvidia-smi --query-gpu=name,clocks.sm,power.draw,utilization.gpu --format=csv >> $o/log.txt 2>&1
timeout 150 python3 bench/torch_workloads.py --modes bf16 > $o/torch1.jsonl 2>> $o/log.txt; echo "torch rc $? at $(left)" >> $o/log.txt
timeout 250 /tmp/b/meganeura_bench --backend vulkan --models --precision bf16 --runs 20 --warmup 5 > $o/ours.jsonl 2>> $o/log.txt; echo "ours rc $? at $(left)" >> $o/log.txt
[ $(left) -gt 40 ] && { timeout $(( $(left) - 20 )) python3 bench/torch_workloads.py --modes bf16 > $o/torch2.jsonl 2>> $o/log.txt; echo "torch rc $? at $(left)" >> $o/log.txt; }
nvidia-smi --query-gpu=name,clocks.sm,power.draw,utilization.gpu --format=csv >> $o/log.txt 2>&1
