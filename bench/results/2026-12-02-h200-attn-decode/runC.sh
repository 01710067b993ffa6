#!/usr/bin/env bash
# Run C: decode attention after the bank-conflict fix, SmolLM2 inference + decode profile,
# fast contract on tensor cores, Whisper fixture, workloads vs torch eager, big tensors, coopmat GEMM
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-} BIN=/tmp/b
. .device/vk-env.sh
o=$OUT; t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
st() { echo "== $(el) s: $*" >> $o/log.txt; }
left() { echo $(( 575 - $(el) )); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $o/log.txt 2>&1
st attn
/tmp/b/meganeura_bench_attn --only b1t128,dec512,dec2048 > $o/attn.jsonl 2>>$o/log.txt
MEGANEURA_PROFILE=1 /tmp/b/meganeura_bench_attn --only dec2048 --runs 10 > $o/attn_prof.txt 2>&1
st gen_llama
python3 tests/fixtures/gen_llama.py --full tests/fixtures/configs/smollm2-135m.json --out /tmp/mn-smol > /dev/null 2>>$o/log.txt
cp tests/fixtures/tokenizer/js-smol.json /tmp/mn-smol/tokenizer.json
st infer
timeout 90 /tmp/b/meganeura_bench_lm infer --model /tmp/mn-smol --prefill 512 --decode 128 --forward 128 --runs 5 >> $o/lm.jsonl 2>>$o/log.txt
timeout 60 /tmp/b/meganeura_bench_lm infer --model /tmp/mn-smol --prefill 16 --decode 128 --forward 0 --runs 3 >> $o/lm.jsonl 2>>$o/log.txt
MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench_lm infer --model /tmp/mn-smol --prefill 512 --decode 4 --forward 0 --runs 1 > $o/attn_prof2.txt 2>&1
cat $o/attn_prof2.txt | tail -60 >> $o/attn_prof.txt; rm $o/attn_prof2.txt
st fast_contract
timeout 120 /tmp/b/test_fast_contract > $o/fast_contract.txt 2>&1; echo "exit $?" >> $o/fast_contract.txt
st whisper
timeout 90 python3 tests/fixtures/gen_workloads.py --only whisper --out /tmp/wl > $o/wl_gen.txt 2>&1; echo "exit $?" >> $o/wl_gen.txt
tar -C /tmp/wl -czf $o/whisper_fixture.tgz whisper 2>> $o/wl_gen.txt
st models
W=resnet50_b1,resnet50_b32,sd_unet_small_b2,smolvla_chunk50_b1,whisper_tiny_enc_b1
timeout 100 python3 bench/torch_workloads.py --only $W --modes f32 --runs 20 > $o/models.jsonl 2>>$o/log.txt
for w in resnet50_b1 resnet50_b32 sd_unet_small_b2 smolvla_chunk50_b1 whisper_tiny_enc_b1; do
  [ $(left) -lt 150 ] && break
  timeout 60 /tmp/b/meganeura_bench --backend vulkan --models --only $w --runs 10 --warmup 3 --nonfinite unchecked >> $o/models.jsonl 2>>$o/log.txt
done
st big
if [ $(left) -gt 100 ]; then
OUT=/tmp/big timeout $(( $(left) - 60 )) bash bench/run_big_gpu.sh >> $o/log.txt 2>&1; echo "big exit $?" >> $o/log.txt
cp /tmp/big/big.jsonl $o/big.jsonl 2>/dev/null; tail -15 /tmp/big/errors.log >> $o/log.txt
fi
st gemm
if [ $(left) -gt 40 ]; then
mkdir -p /tmp/gemm
TILES="auto" ROUNDS="exact;hw" OUT=/tmp/gemm PARTS="torch square" timeout $(( $(left) - 5 )) bash bench/run_gemm_gpu.sh >> $o/log.txt 2>&1
cat /tmp/gemm/summary.txt >> $o/log.txt 2>/dev/null; tail -5 /tmp/gemm/errors.log >> $o/log.txt 2>/dev/null
fi
st done
