#!/usr/bin/env bash
# Run D: decode attention (batched loads), SmolLM2 inference, the >2^32 eltwise fix,
# an 8x512 training profile, workload gates on the H200, torch for SmolVLA/Whisper
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-} BIN=/tmp/b
. .device/vk-env.sh
o=$OUT; t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
st() { echo "== $(el) s: $*" >> $o/log.txt; }
left() { echo $(( 570 - $(el) )); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $o/log.txt 2>&1
st attn
/tmp/b/meganeura_bench_attn --only b1t128,b8t512,dec512,dec2048 > $o/attn.jsonl 2>>$o/log.txt
MEGANEURA_PROFILE=1 /tmp/b/meganeura_bench_attn --only dec2048 --runs 10 > $o/prof.txt 2>&1
st big_eltwise
timeout 100 /tmp/b/meganeura_bench_big eltwise > $o/big.jsonl 2>>$o/log.txt; echo "big exit $?" >> $o/log.txt
st gen_llama
python3 tests/fixtures/gen_llama.py --full tests/fixtures/configs/smollm2-135m.json --out /tmp/mn-smol > /dev/null 2>>$o/log.txt
cp tests/fixtures/tokenizer/js-smol.json /tmp/mn-smol/tokenizer.json
st infer
timeout 90 /tmp/b/meganeura_bench_lm infer --model /tmp/mn-smol --prefill 512 --decode 128 --forward 128 --runs 5 >> $o/lm.jsonl 2>>$o/log.txt
timeout 60 /tmp/b/meganeura_bench_lm infer --model /tmp/mn-smol --prefill 16 --decode 128 --forward 0 --runs 3 >> $o/lm.jsonl 2>>$o/log.txt
echo "#### decode profile, prefill 512" >> $o/prof.txt
MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench_lm infer --model /tmp/mn-smol --prefill 512 --decode 4 --forward 0 --runs 1 2>&1 | tail -40 >> $o/prof.txt
st train_profile
echo "#### train profile 8x512" >> $o/prof.txt
MEGANEURA_PROFILE=1 timeout 90 /tmp/b/meganeura_bench_lm train --config tests/fixtures/configs/smollm2-135m.json --batch 8 --seq 512 --steps 3 2>&1 | grep -v "^step" | tail -45 >> $o/prof.txt
st workloads_gate
timeout 120 /tmp/b/test_workloads > $o/workloads_gate.txt 2>&1; echo "exit $?" >> $o/workloads_gate.txt
st torch_models
[ $(left) -gt 60 ] && timeout $(( $(left) - 10 )) python3 bench/torch_workloads.py --only smolvla_chunk50_b1,whisper_tiny_enc_b1 --modes f32 --runs 20 > $o/models.jsonl 2>>$o/log.txt
st done
