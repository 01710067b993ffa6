#!/usr/bin/env bash
# Run B: attention kernels (tiles vs rows vs sdpa), SmolLM2 gates/train/infer
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-} BIN=/tmp/b
. .device/vk-env.sh
o=$OUT; t0=$(date +%s)
st() { echo "== $(( $(date +%s) - t0 )) s: $*" >> $o/log.txt; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $o/log.txt 2>&1
st attn
mkdir -p /tmp/attn
OUT=/tmp/attn PARTS="main profile" timeout 200 bash bench/run_attn_gpu.sh >> $o/log.txt 2>&1; echo "attn exit $?" >> $o/log.txt
cat /tmp/attn/ours.jsonl > $o/attn_ours.jsonl; cat /tmp/attn/torch.jsonl >> $o/attn_torch.jsonl
tail -c 20000 /tmp/attn/profile.txt > $o/attn_profile.txt; tail -30 /tmp/attn/errors.log >> $o/log.txt
st lm
mkdir -p /tmp/lm
OUT=/tmp/lm PARTS="gates train infer" timeout $(( 570 - ($(date +%s) - t0) )) bash bench/run_lm_gpu.sh >> $o/log.txt 2>&1; echo "lm exit $?" >> $o/log.txt
cp /tmp/lm/ours.jsonl $o/lm_ours.jsonl; cp /tmp/lm/torch.jsonl $o/lm_torch.jsonl; tail -c 6000 /tmp/lm/gates.txt > $o/lm_gates.txt
tail -30 /tmp/lm/errors.log >> $o/log.txt
st done
