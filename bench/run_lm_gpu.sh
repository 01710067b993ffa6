#!/usr/bin/env bash
# run_lm_gpu.sh - the language-model run on the GPU machine (issues 8, 9, 10,
# 13): full-size SmolLM2-135M gates, training and inference speed beside
# PyTorch, kernel counts with and without fusion, a per-kernel profile,
# memory peaks, a ~1B Llama training step, session creation, and an exported
# folder loaded by transformers. From the repo root with .device/
# (../shared/device) and BIN=folder of the built binaries (meganeura,
# meganeura_bench_lm, meganeura_bench_build, test_llama_hf). Under $OUT:
#   gates.txt ours.jsonl torch.jsonl profile.txt build.txt export.txt errors.log
# PARTS (default all): any of
#   gates     test_llama_hf on the full-size architecture (random bf16 weights)
#   train     SmolLM2-135M training steps, batch 1x128 and 8x512, ours and PyTorch
#   fusion    the same 1x128 step with MEGANEURA_FUSION=0, =pointwise and =nomulti (the
#             per-parameter optimizer kernels) (kernel counts, time)
#   profile   MEGANEURA_PROFILE=1 of the 8x512 step and of inference (profile.txt)
#   big       a ~1B Llama training step, ours and PyTorch
#   infer     prefill 512, decode 128, forward 128: ours and PyTorch eager
#   compiled  PyTorch with static cache + torch.compile (minutes of compiling)
#   build     session build times (bench_build)
#   export    train a tiny model, export it, load it with transformers
set -uo pipefail
out=${OUT:-lm-out}
mkdir -p "$out"
bin=${BIN:-build/release}
parts=" ${PARTS:-gates train fusion profile big infer compiled build export} "
has() { [[ "$parts" == *" $1 "* ]]; }
cfg=tests/fixtures/configs
smol=/tmp/mn-smol
log() { echo "== $(date +%T) $*" >> "$out/errors.log"; }
ours() { "$bin/meganeura_bench_lm" "$@" >> "$out/ours.jsonl" 2>>"$out/errors.log"; }
torch() { python3 bench/lm_torch.py "$@" >> "$out/torch.jsonl" 2>>"$out/errors.log"; }
if [ ! -f $smol/reference.safetensors ]; then
  log gen_llama --full
  python3 tests/fixtures/gen_llama.py --full $cfg/smollm2-135m.json --out $smol >> "$out/gates.txt" 2>>"$out/errors.log"
  cp tests/fixtures/tokenizer/js-smol.json $smol/tokenizer.json
fi
if has gates; then
  log gates
  MN_LLAMA_HF_DIR=$smol "$bin/test_llama_hf" >> "$out/gates.txt" 2>>"$out/errors.log"
  echo "test_llama_hf exit $?" >> "$out/gates.txt"
fi
if has train; then
  log train
  for bt in "1 128" "8 512"; do
    set -- $bt
    ours train --config $cfg/smollm2-135m.json --batch $1 --seq $2 --steps 10
    torch train --config $cfg/smollm2-135m.json --batch $1 --seq $2 --steps 10
  done
fi
if has fusion; then
  log fusion
  for f in 0 pointwise nomulti; do
    MEGANEURA_FUSION=$f ours train --config $cfg/smollm2-135m.json --batch 1 --seq 128 --steps 10
  done
fi
if has profile; then
  log profile
  MEGANEURA_PROFILE=1 "$bin/meganeura_bench_lm" train --config $cfg/smollm2-135m.json --batch 8 --seq 512 --steps 3 \
    >> "$out/profile.txt" 2>&1
  MEGANEURA_PROFILE=1 "$bin/meganeura_bench_lm" train --config $cfg/smollm2-135m.json --batch 1 --seq 128 --steps 10 \
    >> "$out/profile.txt" 2>&1
fi
if has big; then
  log big
  ours train --config $cfg/llama-3.2-1b.json --batch 1 --seq 512 --steps 5
  torch train --config $cfg/llama-3.2-1b.json --batch 1 --seq 512 --steps 5
fi
if has infer; then
  log infer
  ours infer --model $smol --prefill 512 --decode 128 --forward 128 --runs 5
  torch infer --model $smol --prefill 512 --decode 128 --forward 128
  if has profile; then
    MEGANEURA_PROFILE=1 "$bin/meganeura_bench_lm" infer --model $smol --prefill 512 --decode 2 --forward 0 --runs 5 \
      >> "$out/profile.txt" 2>&1
  fi
fi
if has compiled; then
  log compiled
  torch infer --model $smol --prefill 512 --decode 128 --forward 128 --compile
  ours infer --model $smol --prefill 512 --decode 128 --forward 128 --runs 5
fi
if has build; then
  log build
  "$bin/meganeura_bench_build" --nodes 0 --params 0 --ckpt 0 --smollm 3 --backend vulkan >> "$out/build.txt" 2>&1
fi
if has export; then
  log export
  exp=/tmp/mn-export
  cat README.md docs/*.md > /tmp/mn-corpus.txt
  "$bin/meganeura" train lm --config tests/fixtures/lm/tiny-smol.json --tokenizer tests/fixtures/tokenizer/js-smol.json \
    --data /tmp/mn-corpus.txt --seq 64 --batch 8 --steps 300 --lr 3e-3 --out $exp --backend vulkan >> "$out/export.txt" 2>&1
  prompt="The session"
  "$bin/meganeura" generate --model $exp --prompt "$prompt" --temperature 0 --max-tokens 24 --backend vulkan > /tmp/mn-ours.txt 2>>"$out/export.txt"
  python3 bench/lm_torch.py export-check --dir $exp --prompt "$prompt" --tokens 24 --ours /tmp/mn-ours.txt >> "$out/export.txt" 2>>"$out/errors.log"
fi
log done
