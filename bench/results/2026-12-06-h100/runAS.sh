#!/usr/bin/env bash
# Run AS (2026-12-06; issue 12): run AR's A/B again after views of casts (autodiff's
# K-split weight gradients read the forward's cast): the gate, SmolLM2-135M 8 x 512
# bf16 training new / MEGANEURA_FUSION=nocast / bb5eb71 (.devbin/old.tar.xz)
# alternating twice, a profile, ResNet-50 bf16 (batch 1, 32) the same three ways,
# PyTorch bf16 autocast for both.
set -u
mkdir -p /tmp/b /tmp/o && tar -C /tmp/b -xJf .devbin/devbin.tar.xz && tar -C /tmp/o -xJf .devbin/old.tar.xz
. .device/vk-env.sh
base_ld=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=/tmp/b/lib:$base_ld
old="env LD_LIBRARY_PATH=/tmp/o/lib:$base_ld"
o=$OUT
t0=$(date +%s)
left() { echo $(( 560 - ($(date +%s) - t0) )); }
cfg=tests/fixtures/configs/smollm2-135m.json
tag() { sed "s/^{/{\"variant\": \"$1\", /"; }
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv >> $o/log.txt 2>&1
timeout 240 /tmp/b/test_fast_contract > $o/test_fast.txt 2>&1; echo "test_fast_contract rc $? at $(left)" >> $o/log.txt
grep -v '^ok' $o/test_fast.txt | tail -20 > $o/test_fast_tail.txt; rm $o/test_fast.txt
lm() { timeout 60 "$@" train --config $cfg --batch 8 --seq 512 --steps 10 --precision bf16 2>> $o/log.txt; }
for rep in 1 2; do
  lm /tmp/b/meganeura_bench_lm | tag new >> $o/lm.jsonl; echo "lm new rc $? at $(left)" >> $o/log.txt
  MEGANEURA_FUSION=nocast lm /tmp/b/meganeura_bench_lm | tag nocast >> $o/lm.jsonl; echo "lm nocast rc $? at $(left)" >> $o/log.txt
  lm $old /tmp/o/meganeura_bench_lm | tag old >> $o/lm.jsonl; echo "lm old rc $? at $(left)" >> $o/log.txt
  timeout 100 python3 bench/lm_torch.py train --config $cfg --batch 8 --seq 512 --steps 10 --autocast bf16 --attn sdpa >> $o/lm_torch.jsonl 2>> $o/log.txt; echo "torch lm rc $? at $(left)" >> $o/log.txt
done
MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench_lm train --config $cfg --batch 8 --seq 512 --steps 6 --warmup 0 --precision bf16 > /dev/null 2> $o/prof.txt; echo "prof rc $? at $(left)" >> $o/log.txt
w=resnet50_b1,resnet50_b32
for rep in 1 2; do
  for v in new nocast old; do
    [ $(left) -gt 80 ] || break
    case $v in
      new) timeout 70 /tmp/b/meganeura_bench --backend vulkan --models --only $w --precision bf16 --runs 20 --warmup 5 ;;
      nocast) MEGANEURA_FUSION=nocast timeout 70 /tmp/b/meganeura_bench --backend vulkan --models --only $w --precision bf16 --runs 20 --warmup 5 ;;
      old) timeout 70 $old /tmp/o/meganeura_bench --backend vulkan --models --only resnet50_b1 --precision bf16 --runs 20 --warmup 5;
           timeout 70 $old /tmp/o/meganeura_bench --backend vulkan --models --only resnet50_b32 --precision bf16 --runs 20 --warmup 5 ;;
    esac 2>> $o/log.txt | sed "s/^{/{\"variant\":\"$v\",\"rep\":$rep,/" >> $o/models.jsonl; echo "models $v rc $? at $(left)" >> $o/log.txt
  done
  [ $(left) -gt 40 ] && { timeout 35 python3 bench/torch_workloads.py --modes bf16 --only $w >> $o/torch_models.jsonl 2>> $o/log.txt; echo "torch models rc $? at $(left)" >> $o/log.txt; }
done
