#!/usr/bin/env bash
# Run E: ONNX PyTorch fixtures, torch SmolVLA/Whisper eager, torch compiled SmolLM2 inference
set -u
. .device/vk-env.sh
o=$OUT; t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
st() { echo "== $(el) s: $*" >> $o/log.txt; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $o/log.txt 2>&1
st gen_onnx
timeout 120 python3 tests/fixtures/gen_onnx.py --out /tmp/onnxfx >> $o/log.txt 2>&1; echo "exit $?" >> $o/log.txt
tar -C /tmp -czf $o/onnx_fixtures.tgz onnxfx
st torch_models
timeout 120 python3 bench/torch_workloads.py --only smolvla_chunk50_b1,whisper_tiny_enc_b1 --modes f32 --runs 20 > $o/models.jsonl 2>>$o/log.txt
st gen_llama
python3 tests/fixtures/gen_llama.py --full tests/fixtures/configs/smollm2-135m.json --out /tmp/mn-smol > /dev/null 2>>$o/log.txt
st torch_compiled
timeout $(( 560 - $(el) )) python3 bench/lm_torch.py infer --model /tmp/mn-smol --prefill 512 --decode 128 --forward 128 --compile > $o/torch_compiled.jsonl 2>>$o/log.txt
echo "exit $?" >> $o/log.txt
st done
