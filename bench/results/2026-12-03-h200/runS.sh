#!/usr/bin/env bash
# Run S (2026-12-03): the strided input gradient by stride classes
# (MM_SUBPIX) and the convolutions' GPU tile table (conv_pick): bench_conv
# with both and with MEGANEURA_VK_CONV_SUBPIX=0 on the strided shapes,
# ResNet-50 training and inference and PyTorch eager in the same lease, the
# batch-32 profile, the workload gates and the per-op table on NVIDIA's driver.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 330 - ($(date +%s) - t0) )); }
timeout 90 /tmp/b/meganeura_bench_conv --batch 32 > $o/conv.jsonl 2>>$o/log.txt; echo "conv rc $? $(left) s left" >> $o/log.txt
MEGANEURA_VK_CONV_SUBPIX=0 timeout 60 /tmp/b/meganeura_bench_conv --batch 32 --only 6,8,12,14,18,20 >> $o/conv.jsonl 2>>$o/log.txt; echo "subpix0 rc $? $(left) s left" >> $o/log.txt
for m in resnet50_b1 resnet50_b4 resnet50_b32; do
  timeout 60 /tmp/b/meganeura_bench --backend vulkan --only $m >> $o/models.jsonl 2>>$o/log.txt; echo "$m rc $? $(left) s left" >> $o/log.txt
done
MEGANEURA_PROFILE=1 timeout 40 /tmp/b/meganeura_bench --backend vulkan --only resnet50_b32 --runs 20 > /dev/null 2> $o/r50_profile.txt
timeout 80 python3 bench/torch_workloads.py --modes f32 --only resnet50 > $o/torch.jsonl 2>>$o/log.txt; echo "torch rc $? $(left) s left" >> $o/log.txt
timeout 40 /tmp/b/test_workloads > $o/gates.txt 2>&1; echo "workloads rc $?" >> $o/log.txt
l=$(left); [ $l -gt 15 ] && timeout $(( l - 5 )) /tmp/b/test_vulkan_ops > $o/vulkan_ops.txt 2>&1; echo "vulkan_ops rc $? $(left) s left" >> $o/log.txt
