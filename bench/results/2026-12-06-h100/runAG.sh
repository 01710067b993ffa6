#!/usr/bin/env bash
# Run AG (2026-12-06; issue 12): (1) test_vk_coopmat_spirv with spirv-val
# packed; (2) the coopmat tile sweep with a device per session
# (bench_gemm --device per-run, the new default) and, square only, with one
# shared device (the bimodal timings of runs AD/AF); cuBLAS in the same run;
# (3) SmolLM2-135M 8 x 512 training bf16 against PyTorch bf16 autocast with
# eager and sdpa attention; (4) profiles of that step and of ResNet-50 batch
# 32 in bf16; (5) the model workloads in bf16, ours and PyTorch.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-} PATH=/tmp/b:$PATH
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 570 - ($(date +%s) - t0) )); }
cfg=tests/fixtures/configs
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,utilization.gpu --format=csv >> $o/log.txt 2>&1
timeout 60 /tmp/b/test_vk_coopmat_spirv > $o/tests.txt 2>&1; echo "test_vk_coopmat_spirv rc $? at $(left)" >> $o/log.txt
T="auto;128x256x32/64x64/1;128x128x32/32x64/2;128x128x32/32x32/2;256x128x32/64x32/1;64x128x32/32x64/2;128x64x32/32x32/2"
MEGANEURA_BENCH_TILES="$T" MEGANEURA_BENCH_ROUNDS="exact" timeout 150 /tmp/b/meganeura_bench_gemm --backend vulkan --precision bf16 --shapes square,skinny --runs 10 >> $o/gemm.jsonl 2>> $o/log.txt; echo "gemm per-run rc $? at $(left)" >> $o/log.txt
MEGANEURA_BENCH_TILES="$T" MEGANEURA_BENCH_ROUNDS="exact" timeout 60 /tmp/b/meganeura_bench_gemm --backend vulkan --precision bf16 --shapes square --runs 10 --device shared >> $o/gemm.jsonl 2>> $o/log.txt; echo "gemm shared rc $? at $(left)" >> $o/log.txt
MEGANEURA_BENCH_TILES="auto;128x256x32/64x64/1;256x128x32/64x32/1;128x128x32/32x64/2" MEGANEURA_BENCH_ROUNDS="hw" timeout 60 /tmp/b/meganeura_bench_gemm --backend vulkan --precision f16 --shapes square,skinny --runs 10 >> $o/gemm.jsonl 2>> $o/log.txt; echo "gemm f16 rc $? at $(left)" >> $o/log.txt
timeout 90 python3 bench/gemm_torch.py --shapes square,skinny --precision bf16,f16 --runs 10 >> $o/gemm_torch.jsonl 2>> $o/log.txt; echo "torch gemm rc $? at $(left)" >> $o/log.txt
timeout 90 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 10 --precision bf16 >> $o/lm.jsonl 2>> $o/log.txt; echo "lm bf16 rc $? at $(left)" >> $o/log.txt
for at in sdpa eager; do
  timeout 100 python3 bench/lm_torch.py train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 10 --autocast bf16 --attn $at >> $o/lm.jsonl 2>> $o/log.txt; echo "torch lm bf16 $at rc $? at $(left)" >> $o/log.txt
done
MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 3 --precision bf16 > /dev/null 2> $o/profile.txt; echo "lm profile rc $? at $(left)" >> $o/log.txt
MEGANEURA_PROFILE=1 timeout 80 /tmp/b/meganeura_bench --backend vulkan --models --only resnet50_b32 --precision bf16 --runs 20 --warmup 3 >> $o/profile.txt 2>&1; echo "resnet profile rc $? at $(left)" >> $o/log.txt
[ $(left) -gt 170 ] && { timeout $(( $(left) - 100 )) /tmp/b/meganeura_bench --backend vulkan --models --precision bf16 --runs 20 --warmup 5 > $o/ours.jsonl 2>> $o/log.txt; echo "ours rc $? at $(left)" >> $o/log.txt; }
[ $(left) -gt 30 ] && { timeout $(( $(left) - 10 )) python3 bench/torch_workloads.py --modes bf16 > $o/torch.jsonl 2>> $o/log.txt; echo "torch rc $? at $(left)" >> $o/log.txt; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,utilization.gpu --format=csv >> $o/log.txt 2>&1
