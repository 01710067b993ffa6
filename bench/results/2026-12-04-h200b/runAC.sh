#!/usr/bin/env bash
# Run AC (2026-12-04, second session): every workload of meganeura_bench
# (--models) after the attention and weight-gradient changes, against
# bench/torch_workloads.py eager f32 in the same lease.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
timeout 280 /tmp/b/meganeura_bench --backend vulkan --models > $o/ours.jsonl 2>> $o/log.txt; echo "ours rc $?" >> $o/log.txt
timeout 280 python3 bench/torch_workloads.py --modes f32 > $o/torch.jsonl 2>> $o/log.txt; echo "torch rc $?" >> $o/log.txt
