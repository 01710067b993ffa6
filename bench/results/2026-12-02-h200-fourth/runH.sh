#!/usr/bin/env bash
# Run H: after the GEMM table change: SmolLM2 (prefill, decode, forward, train), ResNet-50, mnist, GEMM auto picks;
# PyTorch compiled SmolLM2 inference in the same lease
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-}
. .device/vk-env.sh
o=$OUT; t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
st() { echo "== $(el) s: $*" >> $o/log.txt; }
left() { echo $(( 580 - $(el) )); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $o/log.txt 2>&1
st gen_llama
python3 tests/fixtures/gen_llama.py --full tests/fixtures/configs/smollm2-135m.json --out /tmp/mn-smol > /dev/null 2>>$o/log.txt
cp tests/fixtures/tokenizer/js-smol.json /tmp/mn-smol/tokenizer.json
st ours_lm
timeout 90 /tmp/b/meganeura_bench_lm infer --model /tmp/mn-smol --prefill 512 --decode 64 --forward 128 --runs 10 >> $o/ours.jsonl 2>>$o/log.txt
timeout 90 /tmp/b/meganeura_bench_lm infer --model /tmp/mn-smol --prefill 512 --decode 64 --forward 128 --runs 10 >> $o/ours.jsonl 2>>$o/log.txt
timeout 60 /tmp/b/meganeura_bench_lm train --config tests/fixtures/configs/smollm2-135m.json --batch 1 --seq 128 --steps 10 >> $o/ours.jsonl 2>>$o/log.txt
timeout 90 /tmp/b/meganeura_bench_lm train --config tests/fixtures/configs/smollm2-135m.json --batch 8 --seq 512 --steps 10 >> $o/ours.jsonl 2>>$o/log.txt
st ours_models
for w in mnist_mlp_b64 resnet50_b1 resnet50_b32; do
  timeout 90 /tmp/b/meganeura_bench --backend vulkan --models --only $w --runs 20 --warmup 3 --nonfinite unchecked >> $o/ours.jsonl 2>>$o/log.txt
done
st gemm
SH=512x576x576:nt,512x576x192:nt,512x576x1536:nt,512x1536x576:nt,128x576x1536:nt,128x1536x576:nt,4096x4096x4096,512x512x512,64x784x128
timeout 90 /tmp/b/meganeura_bench_gemm --backend vulkan --precision strict --shapes $SH --runs 20 >> $o/gemm.jsonl 2>>$o/log.txt
st torch_compiled
timeout $(left) python3 bench/lm_torch.py infer --model /tmp/mn-smol --prefill 512 --decode 128 --forward 128 --compile > $o/torch_lm.jsonl 2>$o/torch_lm.err; echo "torch exit $?" >> $o/log.txt
st done
