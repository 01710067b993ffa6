#!/usr/bin/env bash
# Run AI (2026-12-06; issue 12): the coopmat tile table back to run AG's
# (run AH's 128x256-everywhere slowed SmolLM2's backward), split weight
# gradients on the coopmat kernel kept: (1) the fast contract tests on the
# GPU; (2) ResNet-50 bf16 at batch 1, 4, 32 with the weight-gradient split
# (default) and without (MEGANEURA_WGRAD_SPLIT=0: every gradient one GEMM),
# with PyTorch bf16 autocast; (3) SmolLM2-135M 8 x 512 bf16 with PyTorch
# bf16 autocast (sdpa); (4) a profile of ResNet-50 batch 32 bf16.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-} PATH=/tmp/b:$PATH
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 400 - ($(date +%s) - t0) )); }
cfg=tests/fixtures/configs
nvidia-smi --query-gpu=name,clocks.sm,power.draw,utilization.gpu --format=csv >> $o/log.txt 2>&1
timeout 90 /tmp/b/test_fast_contract > $o/tests.txt 2>&1; echo "test_fast_contract rc $? at $(left)" >> $o/log.txt
for w in resnet50_b1 resnet50_b4 resnet50_b32; do
  timeout 60 /tmp/b/meganeura_bench --backend vulkan --models --only $w --precision bf16 --runs 20 --warmup 5 >> $o/ours.jsonl 2>> $o/log.txt; echo "$w rc $? at $(left)" >> $o/log.txt
  MEGANEURA_WGRAD_SPLIT=0 timeout 60 /tmp/b/meganeura_bench --backend vulkan --models --only $w --precision bf16 --runs 20 --warmup 5 | sed 's/"workload":"\([a-z0-9_]*\)"/"workload":"\1","wgrad_split":0/' >> $o/ours.jsonl 2>> $o/log.txt; echo "$w nosplit rc $? at $(left)" >> $o/log.txt
done
timeout 60 python3 bench/torch_workloads.py --modes bf16 --only resnet50_b1,resnet50_b4,resnet50_b32 > $o/torch.jsonl 2>> $o/log.txt; echo "torch resnet rc $? at $(left)" >> $o/log.txt
timeout 90 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 10 --precision bf16 >> $o/lm.jsonl 2>> $o/log.txt; echo "lm bf16 rc $? at $(left)" >> $o/log.txt
timeout 100 python3 bench/lm_torch.py train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 10 --autocast bf16 --attn sdpa >> $o/lm.jsonl 2>> $o/log.txt; echo "torch lm rc $? at $(left)" >> $o/log.txt
MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench --backend vulkan --models --only resnet50_b32 --precision bf16 --runs 20 --warmup 3 > $o/profile.txt 2>&1; echo "resnet profile rc $? at $(left)" >> $o/log.txt
