#!/usr/bin/env bash
# run_lm_gpu.sh - the language-model run on the GPU machine (issues 8 and 9):
# full-size SmolLM2-135M gates, inference and training speed beside
# PyTorch, memory peaks, a ~1B Llama training step, session creation, and an
# exported folder loaded by transformers. From the repo root with .device/
# (../shared/device) and BIN=folder of the built binaries (meganeura,
# meganeura_bench_lm, meganeura_bench_build, test_llama_hf). Under $OUT:
#   gates.txt ours.jsonl torch.jsonl build.txt export.txt errors.log
# PART=a|b|all: a = gates, training, memory, export; b = inference speed
# (PyTorch compiled takes minutes to compile).
set -uo pipefail
out=${OUT:-lm-out}
mkdir -p "$out"
bin=${BIN:-build/release}
part=${PART:-all}
cfg=tests/fixtures/configs
smol=/tmp/mn-smol
log() { echo "== $(date +%T) $*" >> "$out/errors.log"; }
if [ ! -f $smol/reference.safetensors ]; then
  log gen_llama --full
  python3 tests/fixtures/gen_llama.py --full $cfg/smollm2-135m.json --out $smol >> "$out/gates.txt" 2>>"$out/errors.log"
  cp tests/fixtures/tokenizer/js-smol.json $smol/tokenizer.json
fi
if [ "$part" != b ]; then
  log gates
  MN_LLAMA_HF_DIR=$smol "$bin/test_llama_hf" >> "$out/gates.txt" 2>>"$out/errors.log"
  echo "test_llama_hf exit $?" >> "$out/gates.txt"
  log train
  for bt in "1 128" "8 512"; do
    set -- $bt
    "$bin/meganeura_bench_lm" train --config $cfg/smollm2-135m.json --batch $1 --seq $2 --steps 10 >> "$out/ours.jsonl" 2>>"$out/errors.log"
    python3 bench/lm_torch.py train --config $cfg/smollm2-135m.json --batch $1 --seq $2 --steps 10 >> "$out/torch.jsonl" 2>>"$out/errors.log"
  done
  "$bin/meganeura_bench_lm" train --config $cfg/llama-3.2-1b.json --batch 1 --seq 512 --steps 5 >> "$out/ours.jsonl" 2>>"$out/errors.log"
  python3 bench/lm_torch.py train --config $cfg/llama-3.2-1b.json --batch 1 --seq 512 --steps 5 >> "$out/torch.jsonl" 2>>"$out/errors.log"
  log build
  "$bin/meganeura_bench_build" --nodes 0 --params 0 --ckpt 0 --smollm 3 --backend vulkan >> "$out/build.txt" 2>&1
  log export
  exp=/tmp/mn-export
  cat README.md docs/*.md > /tmp/mn-corpus.txt
  "$bin/meganeura" train lm --config tests/fixtures/lm/tiny-smol.json --tokenizer tests/fixtures/tokenizer/js-smol.json \
    --data /tmp/mn-corpus.txt --seq 64 --batch 8 --steps 300 --lr 3e-3 --out $exp --backend vulkan >> "$out/export.txt" 2>&1
  prompt="The session"
  "$bin/meganeura" generate --model $exp --prompt "$prompt" --temperature 0 --max-tokens 24 --backend vulkan > /tmp/mn-ours.txt 2>>"$out/export.txt"
  python3 bench/lm_torch.py export-check --dir $exp --prompt "$prompt" --tokens 24 --ours /tmp/mn-ours.txt >> "$out/export.txt" 2>>"$out/errors.log"
fi
if [ "$part" != a ]; then
  log infer
  "$bin/meganeura_bench_lm" infer --model $smol --prefill 512 --decode 128 --forward 128 --runs 5 >> "$out/ours.jsonl" 2>>"$out/errors.log"
  python3 bench/lm_torch.py infer --model $smol --prefill 512 --decode 128 --forward 128 >> "$out/torch.jsonl" 2>>"$out/errors.log"
  python3 bench/lm_torch.py infer --model $smol --prefill 512 --decode 128 --forward 128 --compile >> "$out/torch.jsonl" 2>>"$out/errors.log"
  "$bin/meganeura_bench_lm" infer --model $smol --prefill 512 --decode 128 --forward 128 --runs 5 >> "$out/ours.jsonl" 2>>"$out/errors.log"
fi
log done
