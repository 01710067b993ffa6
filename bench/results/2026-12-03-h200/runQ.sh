#!/usr/bin/env bash
# Run Q (2026-12-03): run P's build plus size-generic bn_moment and the
# unary backward from the output (relu, rsqrt: batch norm's affine add and
# ReLU fold into one kernel); every workload and PyTorch eager in the same
# lease, ResNet-50 b32 profile, session builds, the workload gates and the
# per-op Vulkan-vs-CPU table on NVIDIA's driver.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 230 - ($(date +%s) - t0) )); }
MEGANEURA_PROFILE=1 timeout 40 /tmp/b/meganeura_bench_build --nodes 0 --params 0 --ckpt 0 --resnet 2 --image 224 --backend vulkan > $o/build.jsonl 2> $o/build_profile.txt
timeout 100 /tmp/b/meganeura_bench --backend vulkan --models > $o/models.jsonl 2>>$o/log.txt
echo "after models $(left) s left" >> $o/log.txt
MEGANEURA_PROFILE=1 timeout 30 /tmp/b/meganeura_bench --backend vulkan --only resnet50_b32 --runs 20 > /dev/null 2> $o/r50_profile.txt
timeout 80 python3 bench/torch_workloads.py --modes f32 > $o/torch.jsonl 2>>$o/log.txt || echo "torch rc $?" >> $o/log.txt
echo "after torch $(left) s left" >> $o/log.txt
timeout 30 /tmp/b/test_workloads > $o/workloads_gate.txt 2>&1; echo "workloads rc $?" >> $o/log.txt
l=$(left); [ $l -gt 15 ] && timeout $(( l - 5 )) /tmp/b/test_vulkan_ops > $o/vulkan_ops.txt 2>&1; echo "vulkan_ops rc $?" >> $o/log.txt
echo "end $(left) s left" >> $o/log.txt
