#!/usr/bin/env bash
# Run P (2026-12-03): size-generic pointwise kernels (vk_hoist_sizes) and
# batch norm's mean gradient from the bias's per-channel sum (autodiff.c
# bn_centring); every workload, ResNet-50 b32 profile, cold/warm session
# builds of ResNet-50 (batch 2, 224) and SmolLM2-135M, PyTorch eager in the
# same lease, then the workload gates and the per-op Vulkan-vs-CPU table.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 400 - ($(date +%s) - t0) )); }
# cold first: the kernel cache of this fresh machine is empty
MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench_build --nodes 0 --params 0 --ckpt 0 --resnet 2 --image 224 --backend vulkan > $o/build.jsonl 2> $o/build_profile.txt
MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench_build --nodes 0 --params 0 --ckpt 0 --smollm 3 --shared-device --backend vulkan >> $o/build.jsonl 2>> $o/build_profile.txt
echo "after builds $(left) s left" >> $o/log.txt
timeout 150 /tmp/b/meganeura_bench --backend vulkan --models > $o/models.jsonl 2>>$o/log.txt
echo "after models $(left) s left" >> $o/log.txt
MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench --backend vulkan --only resnet50_b32 --runs 20 > /dev/null 2> $o/r50_profile.txt
echo "after profile $(left) s left" >> $o/log.txt
timeout 120 python3 bench/torch_workloads.py --modes f32 > $o/torch.jsonl 2>>$o/log.txt || echo "torch rc $?" >> $o/log.txt
echo "after torch $(left) s left" >> $o/log.txt
l=$(left); [ $l -gt 20 ] && timeout $(( l - 10 )) /tmp/b/test_workloads > $o/workloads_gate.txt 2>&1; echo "workloads rc $?" >> $o/log.txt
echo "end $(left) s left" >> $o/log.txt
