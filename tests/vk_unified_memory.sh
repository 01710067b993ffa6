#!/usr/bin/env bash
# vk_unified_memory.sh - lavapipe is a unified-memory device: its arenas must
# be mapped and written in place (vk_memory.c), and MEGANEURA_VK_DIRECT=0
# must keep the staging path. Reads the profile line of meganeura_bench
# (MEGANEURA_PROFILE=1) after a tiny training and inference run.
# Usage: vk_unified_memory.sh PATH/TO/meganeura_bench
set -u
bench=${1:?usage: vk_unified_memory.sh PATH/TO/meganeura_bench}
run() { MEGANEURA_PROFILE=1 "$bench" --backend vulkan --only mlp_ci_b16 --runs 2 --warmup 1 2>&1 >/dev/null; }
out=$(run) || { echo "$out" | tail -20; echo "vk_unified_memory: the benchmark failed"; exit 1; }
if [[ "$out" == *"no Vulkan device"* ]]; then echo "vk_unified_memory: no Vulkan device"; exit 77; fi
line=$(grep -m1 "arenas written in place" <<<"$out")
[[ "$line" == *"(unified memory): 4 of 4"* ]] || { echo "vk_unified_memory: direct writes not taken: '$line'"; exit 1; }
out=$(MEGANEURA_VK_DIRECT=0 run) || { echo "$out" | tail -20; echo "vk_unified_memory: the staged run failed"; exit 1; }
line=$(grep -m1 "arenas written in place" <<<"$out")
[[ "$line" == *"(unified memory): 0 of 4"* ]] || { echo "vk_unified_memory: MEGANEURA_VK_DIRECT=0 ignored: '$line'"; exit 1; }
# --only takes a list, and one that matches nothing is an error (it once
# printed nothing and exited 0)
n=$("$bench" --backend vulkan --only mlp_ci_b16,mnist_mlp --runs 1 --warmup 0 2>/dev/null | grep -c '"workload"' || true)
[ "$n" -eq 2 ] || { echo "vk_unified_memory: --only mlp_ci_b16,mnist_mlp ran $n workloads, not 2"; exit 1; }
if "$bench" --backend vulkan --only no_such_workload --runs 1 > /dev/null 2>&1; then
  echo "vk_unified_memory: --only no_such_workload exited 0"; exit 1
fi
echo "vk_unified_memory: ok (4 of 4 arenas in place; 0 with MEGANEURA_VK_DIRECT=0)"
