#!/usr/bin/env bash
# dist_overhead.sh [BIN] - communication cost per data-parallel step on the
# CPU backend, 2 ranks (docs/PERF.md, "Data-parallel training"): the MNIST
# MLP (one epoch, batch 64 per rank) and a Llama of 103M parameters
# (bench/dist_100m.json: 8 layers, hidden 1024; 3 steps of 1 x 16 tokens per
# rank). Prints the program's own report line of each run:
#   data parallel: 2 ranks, S steps of T ms; per step K all-reduce calls of M MB
#   in all: C ms communicating, W ms of it not overlapped with the backward
#   pass, X ms copying gradients
# and the step time of the same per-rank batch in one process. Needs the
# MNIST cache (`make data`) and Open MPI. Runs as root too.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/release/meganeura}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fx=tests/fixtures
echo "== mnist mlp, batch 64 per rank, 1 epoch"
"$bin" train mnist --batch 64 --epochs 1 --checkpoint "$out/a.st" 2>&1 >"$out/sp.out" | grep -v '^epoch' || true
grep "train time" "$out/sp.out" | sed 's/^/one process: /'
mpirun --oversubscribe -np 2 "$bin" train mnist --batch 64 --epochs 1 --checkpoint "$out/b.st" 2>&1 >/dev/null |
  grep "^data parallel: 2 ranks, [0-9]"
lm=(train lm --config bench/dist_100m.json --tokenizer "$fx/tokenizer/js-smol.json" --data "$fx/tokenizer_corpus.txt"
    --seq 16 --batch 1 --steps 3 --eval-every 1000)
echo "== llama 103M (bench/dist_100m.json), 1 x 16 tokens per rank, 3 steps"
mpirun --oversubscribe -np 2 "$bin" "${lm[@]}" 2>&1 >/dev/null | grep "^data parallel: 2 ranks, [0-9]"
