#!/usr/bin/env bash
# Run I: head-layout folds (permutes around attention folded): SmolLM2 prefill/decode/forward/train,
# the full-size gate, PyTorch compiled inference in the same lease
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT; t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
st() { echo "== $(el) s: $*" >> $o/log.txt; }
left() { echo $(( 585 - $(el) )); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $o/log.txt 2>&1
st gen_llama
python3 tests/fixtures/gen_llama.py --full tests/fixtures/configs/smollm2-135m.json --out /tmp/mn-smol > /dev/null 2>>$o/log.txt
cp tests/fixtures/tokenizer/js-smol.json /tmp/mn-smol/tokenizer.json
st ours_lm
for r in 1 2; do
timeout 90 /tmp/b/meganeura_bench_lm infer --model /tmp/mn-smol --prefill 512 --decode 64 --forward 128 --runs 10 >> $o/ours.jsonl 2>>$o/log.txt
done
timeout 60 /tmp/b/meganeura_bench_lm train --config tests/fixtures/configs/smollm2-135m.json --batch 1 --seq 128 --steps 10 >> $o/ours.jsonl 2>>$o/log.txt
st gate
MN_LLAMA_HF_DIR=/tmp/mn-smol timeout 120 /tmp/b/test_llama_hf > $o/gate.txt 2>&1; echo "exit $?" >> $o/gate.txt
st torch_compiled
timeout $(left) python3 bench/lm_torch.py infer --model /tmp/mn-smol --prefill 512 --decode 128 --forward 128 --compile > $o/torch_lm.jsonl 2>$o/torch_lm.err; echo "torch exit $?" >> $o/log.txt
st done
