#!/usr/bin/env bash
# run_gpu.sh - the GPU benchmark run (on the benchmark machine, from the repo
# root, with .device/ = ../shared/device plus libcjson.so.1 and
# torch_anchors.py, and build/release built here). Writes under $OUT:
#   devices.txt, ours.jsonl, ours_checked.jsonl, ours_gemm.jsonl, torch.jsonl,
#   torch_gemm.jsonl, profile.txt, errors.log (at most 8 files come back)
# ours.jsonl runs without the non-finite check (--nonfinite unchecked), the
# step PyTorch's anchor times; ours_checked.jsonl with the library's default
# (skip), which adds the check's kernels and one read-back per step.
# PARTS=models (issue 11) instead runs the model workloads of
# bench/bench_models.c (ResNet-50 b1/b4/b32, the U-Nets, the SmolVLA action
# expert, the Whisper-tiny encoder; `meganeura_bench --list`) and writes devices.txt,
# ours_models.jsonl, ours_models_checked.jsonl, torch_models.jsonl (PyTorch
# eager and torch.compile with compile_s, strict f32, from
# bench/torch_workloads.py), profile_models.txt
# and errors.log.
set -uo pipefail
. .device/vk-env.sh
out=${OUT:-bench-out}
mkdir -p "$out"
bin=build/release/meganeura
bench=build/release/bench/meganeura_bench
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/devices.txt" 2>&1
"$bin" devices >> "$out/devices.txt" 2>&1
if [ "${PARTS:-mlp}" = models ]; then
  W=resnet50_b1,resnet50_b4,resnet50_b32,sd_unet_small_b2,sd_unet_small_b16,sd_unet_cond_b2,smolvla_chunk50_b1,smolvla_chunk50_b8,whisper_tiny_enc_b1,whisper_tiny_enc_b8
  python3 bench/torch_workloads.py --only $W --modes f32 --runs 20 > "$out/torch_models.jsonl" 2>>"$out/errors.log"
  "$bench" --backend vulkan --models --runs 20 --warmup 5 --nonfinite unchecked > "$out/ours_models.jsonl" 2>>"$out/errors.log"
  python3 bench/torch_workloads.py --only $W --modes f32 --runs 20 --compile >> "$out/torch_models.jsonl" 2>>"$out/errors.log"
  "$bench" --backend vulkan --models --runs 20 --warmup 5 > "$out/ours_models_checked.jsonl" 2>>"$out/errors.log"
  for w in resnet50_b4 sd_unet_small_b2 smolvla_chunk50_b1 whisper_tiny_enc_b1; do
    MEGANEURA_PROFILE=1 "$bench" --backend vulkan --only $w --runs 5 --warmup 2 > /dev/null 2>> "$out/profile_models.txt"
  done
  echo done
  exit 0
fi
# PyTorch and ours alternate so drift on a shared machine hits both alike
python3 .device/torch_anchors.py --only mlp_ci,mnist_mlp --modes f32 --runs 50 > "$out/torch.jsonl" 2>>"$out/errors.log"
"$bench" --backend vulkan --runs 50 --warmup 10 --nonfinite unchecked > "$out/ours.jsonl" 2>>"$out/errors.log"
python3 .device/torch_anchors.py --only mlp_ci,mnist_mlp --modes f32 --runs 50 >> "$out/torch.jsonl" 2>>"$out/errors.log"
"$bench" --backend vulkan --runs 50 --warmup 10 --nonfinite unchecked >> "$out/ours.jsonl" 2>>"$out/errors.log"
"$bench" --backend vulkan --runs 50 --warmup 10 > "$out/ours_checked.jsonl" 2>>"$out/errors.log"
"$bench" --backend vulkan --gemm > "$out/ours_gemm.jsonl" 2>>"$out/errors.log"
python3 .device/torch_anchors.py --gemm > "$out/torch_gemm.jsonl" 2>>"$out/errors.log"
MEGANEURA_PROFILE=1 "$bench" --backend vulkan --runs 20 --only mnist > /dev/null 2> "$out/profile.txt"
MEGANEURA_PROFILE=1 "$bench" --backend vulkan --gemm > /dev/null 2>> "$out/profile.txt"
echo done
