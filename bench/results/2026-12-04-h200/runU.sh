#!/usr/bin/env bash
# Run U (2026-12-04): vec4 global loads of plain products (matmul.glsl
# MM_VA/MM_VB) and a staging buffer sized to a step's inputs, on top of run
# T: bench_gemm strict (square and skinny) with the vec4 loads and with
# MEGANEURA_VK_GEMM_VEC=0, cuBLAS in the same lease; SmolLM2-135M and
# ResNet-50 training beside PyTorch eager; the ResNet-50 batch-32 profile;
# test_vulkan_ops, test_fast_contract and test_workloads on the H200.
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT
t0=$(date +%s)
left() { echo $(( 560 - ($(date +%s) - t0) )); }
timeout 120 /tmp/b/meganeura_bench_gemm --backend vulkan --precision strict --shapes square,skinny > $o/gemm.jsonl 2>>$o/log.txt; echo "gemm rc $? $(left) s left" >> $o/log.txt
MEGANEURA_VK_GEMM_VEC=0 timeout 90 /tmp/b/meganeura_bench_gemm --backend vulkan --precision strict --shapes square,skinny --runs 5 >> $o/gemm.jsonl 2>>$o/log.txt; echo "vec0 rc $? $(left) s left" >> $o/log.txt
timeout 90 python3 bench/gemm_torch.py --precision strict --shapes square,skinny >> $o/gemm.jsonl 2>>$o/log.txt; echo "cublas rc $? $(left) s left" >> $o/log.txt
cfg=tests/fixtures/configs
for bt in "8 512" "1 128"; do
  set -- $bt
  timeout 60 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch $1 --seq $2 --steps 10 >> $o/lm.jsonl 2>>$o/log.txt; echo "lm $1x$2 rc $? $(left) s left" >> $o/log.txt
  MEGANEURA_VK_GEMM_VEC=0 timeout 60 /tmp/b/meganeura_bench_lm train --config $cfg/smollm2-135m.json --batch $1 --seq $2 --steps 10 >> $o/lm.jsonl 2>>$o/log.txt; echo "lm vec0 $1x$2 rc $? $(left) s left" >> $o/log.txt
  timeout 60 python3 bench/lm_torch.py train --config $cfg/smollm2-135m.json --batch $1 --seq $2 --steps 10 >> $o/lm.jsonl 2>>$o/log.txt; echo "lm torch $1x$2 rc $? $(left) s left" >> $o/log.txt
done
for m in resnet50_b1 resnet50_b32; do
  timeout 60 /tmp/b/meganeura_bench --backend vulkan --only $m >> $o/models.jsonl 2>>$o/log.txt; echo "$m rc $? $(left) s left" >> $o/log.txt
done
MEGANEURA_PROFILE=1 timeout 40 /tmp/b/meganeura_bench --backend vulkan --only resnet50_b32 --runs 20 > /dev/null 2> $o/r50_profile.txt
timeout 60 python3 bench/torch_workloads.py --modes f32 --only resnet50_b1,resnet50_b32 > $o/torch.jsonl 2>>$o/log.txt; echo "torch rc $? $(left) s left" >> $o/log.txt
l=$(left); [ $l -gt 30 ] && timeout $(( l / 2 )) /tmp/b/test_vulkan_ops > $o/gates.txt 2>&1; echo "vulkan_ops rc $? $(left) s left" >> $o/log.txt
l=$(left); [ $l -gt 20 ] && timeout $(( l / 2 )) /tmp/b/test_fast_contract >> $o/gates.txt 2>&1; echo "fast rc $? $(left) s left" >> $o/log.txt
l=$(left); [ $l -gt 10 ] && timeout $(( l - 5 )) /tmp/b/test_workloads >> $o/gates.txt 2>&1; echo "workloads rc $? $(left) s left" >> $o/log.txt
tail -c 20000 $o/gates.txt > $o/gates_tail.txt; rm -f $o/gates.txt
