#!/usr/bin/env bash
# Run F (2026-12-02, 4th lease): build phases (issue 8), prefill trace (issue 9),
# ResNet-50 b1 / mnist inference vs torch compiled / eager (issue 13)
set -u
mkdir -p /tmp/b && tar -C /tmp/b -xJf .devbin/devbin.tar.xz
export LD_LIBRARY_PATH=/tmp/b/lib:${LD_LIBRARY_PATH:-} BIN=/tmp/b
. .device/vk-env.sh
o=$OUT; t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
st() { echo "== $(el) s: $*" >> $o/log.txt; }
left() { echo $(( 575 - $(el) )); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $o/log.txt 2>&1
nproc >> $o/log.txt
st build
for r in 1 2; do
MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench_build --nodes 0 --params 0 --ckpt 0 --smollm 3 --backend vulkan >> $o/build.txt 2>&1
MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench_build --nodes 0 --params 0 --ckpt 0 --smollm 3 --shared-device --backend vulkan >> $o/build.txt 2>&1
done
st ours_models
for w in mnist_mlp_b64 resnet50_b1; do
  timeout 60 /tmp/b/meganeura_bench --backend vulkan --models --only $w --runs 50 --warmup 5 --nonfinite unchecked >> $o/ours.jsonl 2>>$o/log.txt
done
timeout 60 /tmp/b/meganeura_bench --backend vulkan --only mnist_mlp_b64 --runs 50 --warmup 5 >> $o/ours.jsonl 2>>$o/log.txt
MEGANEURA_TRACE=/tmp/r50.json timeout 60 /tmp/b/meganeura_bench --backend vulkan --models --only resnet50_b1 --runs 20 --warmup 2 --nonfinite unchecked > /dev/null 2>>$o/log.txt
python3 bench/trace_summary.py /tmp/r50.json --last 2 > $o/traces.txt 2>&1
st gen_llama
python3 tests/fixtures/gen_llama.py --full tests/fixtures/configs/smollm2-135m.json --out /tmp/mn-smol > /dev/null 2>>$o/log.txt
cp tests/fixtures/tokenizer/js-smol.json /tmp/mn-smol/tokenizer.json
st lm
timeout 90 /tmp/b/meganeura_bench_lm infer --model /tmp/mn-smol --prefill 512 --decode 64 --forward 128 --runs 10 >> $o/ours.jsonl 2>>$o/log.txt
MEGANEURA_TRACE=/tmp/pf.json timeout 60 /tmp/b/meganeura_bench_lm infer --model /tmp/mn-smol --prefill 512 --decode 2 --forward 0 --runs 2 > /dev/null 2>>$o/log.txt
python3 bench/trace_summary.py /tmp/pf.json --last 4 >> $o/traces.txt 2>&1
MEGANEURA_PROFILE=1 timeout 60 /tmp/b/meganeura_bench_lm infer --model /tmp/mn-smol --prefill 512 --decode 2 --forward 0 --runs 2 > $o/lm_profile.txt 2>&1
st torch_eager
timeout 120 python3 bench/torch_workloads.py --only mnist_mlp_b64,resnet50_b1 --modes f32 --runs 50 > $o/torch.jsonl 2>>$o/log.txt
st torch_compiled
timeout $(( $(left) - 150 )) python3 bench/torch_workloads.py --only mnist_mlp_b64,resnet50_b1 --modes f32 --runs 50 --compile >> $o/torch.jsonl 2>>$o/log.txt
st torch_ro
timeout $(( $(left) - 10 )) python3 bench/torch_workloads.py --only mnist_mlp_b64,resnet50_b1 --modes f32 --runs 50 --compile --compile-mode reduce-overhead >> $o/torch.jsonl 2>>$o/log.txt
st done
