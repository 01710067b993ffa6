#!/usr/bin/env bash
# Run AF (2026-12-06; issue 12; run AE of 2026-12-05 with packed casts): the fast contract with product operands
# rounded once by cast nodes (MEGANEURA_FAST_CAST=auto; 16-bit operand
# storage, no per-element rounding in the coopmat kernels). (1) the fast
# contract tests on the H200; (2) the coopmat GEMM over tiles, square and the
# workloads' skinny shapes, casts on and off, against cuBLAS; (3) SmolLM2-135M
# 8 x 512 training bf16 / f16 / strict against PyTorch bf16 autocast and f32;
# (4) the model workloads in bf16 against torch_workloads.py --modes bf16.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 570 - ($(date +%s) - t0) )); }
cfg=tests/fixtures/configs
for t in test_fast_contract test_vk_coopmat_spirv; do
  timeout 60 /tmp/b/$t > $o/tests.txt.$t 2>&1; echo "$t rc $? at $(left)" >> $o/log.txt
done
cat $o/tests.txt.* > $o/tests.txt 2>/dev/null; rm -f $o/tests.txt.*
MEGANEURA_BENCH_TILES="auto;128x256x32/64x64/1;128x128x32/32x64/2;128x128x32/32x32/2;256x128x32/64x32/1;64x128x32/32x64/2;128x64x32/32x32/2" \
MEGANEURA_BENCH_ROUNDS="exact" timeout 150 /tmp/b/meganeura_bench_gemm --backend vulkan --precision bf16 --shapes square,skinny --runs 10 >> $o/gemm.jsonl 2>> $o/log.txt; echo "gemm sweep rc $? at $(left)" >> $o/log.txt
MEGANEURA_FAST_CAST=0 MEGANEURA_BENCH_TILES="auto" MEGANEURA_BENCH_ROUNDS="exact" timeout 60 /tmp/b/meganeura_bench_gemm --backend vulkan --precision bf16 --shapes square,skinny --runs 10 | sed 's/"round":"exact"/"round":"exact-nocast"/' >> $o/gemm.jsonl 2>> $o/log.txt; echo "gemm nocast rc $? at $(left)" >> $o/log.txt
MEGANEURA_BENCH_TILES="auto;128x256x32/64x64/1;256x128x32/64x32/1" MEGANEURA_BENCH_ROUNDS="hw" timeout 60 /tmp/b/meganeura_bench_gemm --backend vulkan --precision f16 --shapes square,skinny --runs 10 >> $o/gemm.jsonl 2>> $o/log.txt; echo "gemm f16 rc $? at $(left)" >> $o/log.txt
timeout 90 python3 bench/gemm_torch.py --shapes square,skinny --precision bf16,f16 --runs 10 >> $o/gemm_torch.jsonl 2>> $o/log.txt; echo "torch gemm rc $? at $(left)" >> $o/log.txt
for p in bf16 f16 strict; do
  timeout 90 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 10 --precision $p >> $o/lm.jsonl 2>> $o/log.txt; echo "lm $p rc $? at $(left)" >> $o/log.txt
done
for a in bf16 off; do
  timeout 120 python3 bench/lm_torch.py train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 10 --autocast $a >> $o/lm_torch.jsonl 2>> $o/log.txt; echo "torch lm $a rc $? at $(left)" >> $o/log.txt
done
MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 3 --precision bf16 > /dev/null 2> $o/lm_profile.txt; echo "profile rc $? at $(left)" >> $o/log.txt
[ $(left) -gt 200 ] && { timeout $(( $(left) - 120 )) /tmp/b/meganeura_bench --backend vulkan --models --precision bf16 --runs 20 --warmup 5 > $o/ours.jsonl 2>> $o/log.txt; echo "ours rc $? at $(left)" >> $o/log.txt; }
[ $(left) -gt 30 ] && { timeout $(( $(left) - 10 )) python3 bench/torch_workloads.py --modes bf16 > $o/torch.jsonl 2>> $o/log.txt; echo "torch rc $? at $(left)" >> $o/log.txt; }
