#!/usr/bin/env bash
# Run AH (2026-12-06; issue 12): after (a) the coopmat kernel runs weight
# gradients split into partial sums (they ran on the FMA kernel with
# per-element rounding: 46% of ResNet-50's batch-32 bf16 step in run AG) and
# (b) the coopmat tile table takes 128x256x32/64x64 wherever it is not much
# larger than the matrix (run AG's sweep): (1) the fast contract tests on
# the GPU (cooperative matrices, split weight gradients included); (2) bf16
# / f16 GEMM, auto tiles, with cuBLAS; (3) SmolLM2-135M 8 x 512 bf16
# training against PyTorch bf16 autocast (sdpa); (4) profiles of that and of
# ResNet-50 batch 32 bf16; (5) the model workloads in bf16, ours and PyTorch.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-} PATH=/tmp/b:$PATH
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 570 - ($(date +%s) - t0) )); }
cfg=tests/fixtures/configs
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,utilization.gpu --format=csv >> $o/log.txt 2>&1
for t in test_fast_contract test_vk_coopmat_spirv; do
  timeout 90 /tmp/b/$t >> $o/tests.txt 2>&1; echo "$t rc $? at $(left)" >> $o/log.txt
done
MEGANEURA_FAST_CAST=0 timeout 90 /tmp/b/test_fast_contract 2>&1 | tail -3 >> $o/tests.txt; echo "test_fast_contract nocast rc $? at $(left)" >> $o/log.txt
timeout 90 /tmp/b/meganeura_bench_gemm --backend vulkan --precision bf16 --shapes square,skinny --runs 10 >> $o/gemm.jsonl 2>> $o/log.txt; echo "gemm bf16 rc $? at $(left)" >> $o/log.txt
MEGANEURA_COOPMAT_ROUND=hw timeout 90 /tmp/b/meganeura_bench_gemm --backend vulkan --precision f16 --shapes square,skinny --runs 10 >> $o/gemm.jsonl 2>> $o/log.txt; echo "gemm f16 rc $? at $(left)" >> $o/log.txt
timeout 90 python3 bench/gemm_torch.py --shapes square,skinny --precision bf16,f16 --runs 10 >> $o/gemm.jsonl 2>> $o/log.txt; echo "torch gemm rc $? at $(left)" >> $o/log.txt
timeout 90 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 10 --precision bf16 >> $o/lm.jsonl 2>> $o/log.txt; echo "lm bf16 rc $? at $(left)" >> $o/log.txt
timeout 100 python3 bench/lm_torch.py train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 10 --autocast bf16 --attn sdpa >> $o/lm.jsonl 2>> $o/log.txt; echo "torch lm bf16 sdpa rc $? at $(left)" >> $o/log.txt
MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 3 --precision bf16 > /dev/null 2> $o/profile.txt; echo "lm profile rc $? at $(left)" >> $o/log.txt
MEGANEURA_PROFILE=1 timeout 80 /tmp/b/meganeura_bench --backend vulkan --models --only resnet50_b32 --precision bf16 --runs 20 --warmup 3 >> $o/profile.txt 2>&1; echo "resnet profile rc $? at $(left)" >> $o/log.txt
[ $(left) -gt 170 ] && { timeout $(( $(left) - 100 )) /tmp/b/meganeura_bench --backend vulkan --models --precision bf16 --runs 20 --warmup 5 > $o/ours.jsonl 2>> $o/log.txt; echo "ours rc $? at $(left)" >> $o/log.txt; }
[ $(left) -gt 30 ] && { timeout $(( $(left) - 10 )) python3 bench/torch_workloads.py --modes bf16 > $o/torch.jsonl 2>> $o/log.txt; echo "torch rc $? at $(left)" >> $o/log.txt; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,utilization.gpu --format=csv >> $o/log.txt 2>&1
