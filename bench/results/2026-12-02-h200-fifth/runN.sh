#!/usr/bin/env bash
# Run N: the day's changes on the H200's driver (lavapipe runs dispatches in
# order): the fast contract (cooperative matrices; split weight gradients
# take the tiled GEMM), the workload gates, Vulkan vs CPU per op; ResNet-50
# batch 4 profile
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
timeout 150 /tmp/b/test_fast_contract > $o/fast_contract.txt 2>&1; echo "exit $?" >> $o/fast_contract.txt
timeout 150 /tmp/b/test_workloads > $o/workloads_gate.txt 2>&1; echo "exit $?" >> $o/workloads_gate.txt
timeout 100 /tmp/b/test_resnet > $o/resnet.txt 2>&1; echo "exit $?" >> $o/resnet.txt
timeout 100 /tmp/b/test_vulkan_ops > $o/vulkan_ops.txt 2>&1; echo "exit $?" >> $o/vulkan_ops.txt
MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench --backend vulkan --only resnet50_b4 --runs 20 > $o/r50b4.jsonl 2> $o/r50b4_profile.txt
