#!/usr/bin/env bash
# gemm_sweep.sh - strict-f32 GEMM tile sweep on the GPU machine (issue 10):
# every tile in TILES (bm,bn,bk,tm,tn; "auto" = the generator's choice) at
# every shape in SHAPES (M,N,K), then cuBLAS at the same shapes.
#   BIN=/tmp/b OUT=... bash bench/gemm_sweep.sh
# Writes $OUT/gemm_sweep.jsonl (ours, one line per tile and shape; a tile
# that does not fit the device falls back to auto and is reported as asked)
# and $OUT/gemm_torch.jsonl.
set -uo pipefail
out=${OUT:-gemm-out}
bin=${BIN:-build/release/bench}
mkdir -p "$out"
SHAPES=${SHAPES:-"4096,4096,4096 8192,8192,8192 2048,2048,2048 128,1536,576 512,1536,576 4096,1536,576 4096,576,1536 512,49152,576 4096,49152,576 4096,576,49152 512,8192,2048"}
TILES=${TILES:-"auto 128,64,16,8,8 64,128,16,8,8 128,128,8,8,8 128,128,16,8,8 128,64,8,8,8 64,64,16,4,8 64,64,32,8,4 256,64,8,8,8 128,32,16,8,4"}
args=()
for s in $SHAPES; do args+=(--gemm-shape "$s"); done
for t in $TILES; do
  if [ "$t" = auto ]; then unset MEGANEURA_VK_GEMM_TILE; else export MEGANEURA_VK_GEMM_TILE=$t; fi
  "$bin/meganeura_bench" --backend vulkan "${args[@]}" >> "$out/gemm_sweep.jsonl" 2>>"$out/errors.log"
done
unset MEGANEURA_VK_GEMM_TILE
python3 bench/torch_gemm.py $SHAPES --dtypes f32 > "$out/gemm_torch.jsonl" 2>>"$out/errors.log"
