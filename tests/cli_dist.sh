#!/usr/bin/env bash
# cli_dist.sh BIN CKPT_DIFF SRC_DIR [--backend vulkan] - data-parallel training
# through mpirun (Open MPI, 2 ranks, --oversubscribe: CI has 2 cores):
#  - `mpirun -np 2 train mnist --batch 64 --epochs 1` == `train mnist --batch 128
#    --epochs 1` (checkpoints to 1e-6 on the CPU; rel L2 1e-5 per tensor on
#    Vulkan, where 8 steps instead of an epoch keep it short), rank 0 alone
#    prints results;
#  - `train lm`: 2 ranks x batch 2 == 1 process x batch 4 after 6 steps (1e-5); a
#    2-rank run stopped after its step-3 checkpoint (a rank killed) resumes
#    in one process and ends equal to the uninterrupted run (step count and
#    data position kept);
#  - (CPU only) a rank killed and a rank that hangs (sleeps past MEGANEURA_DIST_TIMEOUT
#    = 3 s) end the job within 30 s with a clear error on every rank.
# Needs the MNIST cache (`make data`).
set -euo pipefail
bin=$1 diff=$2 src=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpi=(mpirun --oversubscribe --mca btl self,vader -np 2)
die() { echo "cli_dist: $*" >&2; exit 1; }
# mnist to 1e-6 (the issue's bound). lm: 1e-5: its first AdamW step moves each
# weight by lr * g / (|g| + eps), and for gradients near eps the last bit of the
# ranks' f32 partial sums shows up at ~1e-6 (measured 1.2e-6 after one step).
# On lavapipe (2 processes sharing 2 cores, ~0.4 s a step) mnist runs 8 steps.
tol=(--abs 1e-6) lmtol=(--abs 1e-5 --rel 1e-5) len=(--epochs 1)
if [ "${1:-}" = "--backend" ] && [ "${2:-}" = "vulkan" ]; then
  tol=(--abs 1 --rel 1e-5) lmtol=(--abs 1 --rel 1e-5) len=(--steps 8)
fi
pass=0

# ---- mnist: 2 x 64 == 128
"${mpi[@]}" "$bin" train mnist --batch 64 "${len[@]}" --checkpoint "$dir/dp.safetensors" "$@" \
  >"$dir/dp.out" 2>"$dir/dp.err" || { cat "$dir/dp.err" >&2; die "mpirun train mnist failed"; }
"$bin" train mnist --batch 128 "${len[@]}" --checkpoint "$dir/sp.safetensors" "$@" \
  >"$dir/sp.out" 2>"$dir/sp.err" || { cat "$dir/sp.err" >&2; die "train mnist failed"; }
"$diff" "$dir/dp.safetensors" "$dir/sp.safetensors" "${tol[@]}" || die "mnist: 2 ranks differ from one process"
[ "$(grep -c '^test accuracy' "$dir/dp.out")" = 1 ] || die "mnist: not exactly one accuracy line (rank 0 alone)"
grep -q "global batch 128" "$dir/dp.err" || die "mnist: no data-parallel header"
grep -q "all-reduce calls" "$dir/dp.err" || die "mnist: no communication report"
pass=$((pass + 1))

# ---- lm: 2 x 2 == 4, and a resume from 2 ranks on 1
fx="$src/tests/fixtures"
lm=(train lm --config "$fx/lm/tiny-smol.json" --tokenizer "$fx/tokenizer/js-smol.json"
    --data "$fx/tokenizer_corpus.txt" --seq 16 --lr 3e-3 --steps 6 --eval-every 3)
"${mpi[@]}" "$bin" "${lm[@]}" --batch 2 --checkpoint "$dir/lm2.safetensors" "$@" >"$dir/lm2.out" 2>"$dir/lm2.err" ||
  { cat "$dir/lm2.err" >&2; die "mpirun train lm failed"; }
"$bin" "${lm[@]}" --batch 4 --checkpoint "$dir/lm1.safetensors" "$@" >"$dir/lm1.out" 2>"$dir/lm1.err" ||
  { cat "$dir/lm1.err" >&2; die "train lm failed"; }
"$diff" "$dir/lm2.safetensors" "$dir/lm1.safetensors" "${lmtol[@]}" || die "lm: 2 ranks differ from one process"
pass=$((pass + 1))
set +e
# rank 1 dies before step 4 (0-based): rank 0 saved the step-3 checkpoint
# before it joined step 3's all-reduce
MEGANEURA_FAULT_DIST=kill:1:4 "${mpi[@]}" "$bin" "${lm[@]}" --batch 2 --checkpoint "$dir/lmr.safetensors" "$@" \
  >"$dir/lmr.out" 2>"$dir/lmr.err"
rc=$?
set -e
[ "$rc" != 0 ] || die "lm: the job with a killed rank exited 0"
"$bin" inspect "$dir/lmr.safetensors" >"$dir/lmr.txt"
grep -q '^meganeura.step = 3$' "$dir/lmr.txt" || { cat "$dir/lmr.txt" >&2; die "lm: the checkpoint is not at step 3"; }
grep -q '^lm.data_offset = 12$' "$dir/lmr.txt" || { cat "$dir/lmr.txt" >&2; die "lm: data position not saved"; }
"$bin" "${lm[@]}" --batch 4 --checkpoint "$dir/lmr.safetensors" --resume "$@" >"$dir/lmr1.out" 2>"$dir/lmr1.err" ||
  { cat "$dir/lmr1.err" >&2; die "resume in one process failed"; }
grep -q "resumed from .* at step 3" "$dir/lmr1.err" || die "lm: resume did not start at step 3"
"$diff" "$dir/lmr.safetensors" "$dir/lm1.safetensors" "${lmtol[@]}" || die "lm: resumed run differs"
pass=$((pass + 1))

# ---- failures end the job with a message on every rank, within 30 s (the
# backend plays no part: CPU only)
if [ "${tol[*]}" != "--abs 1e-6" ]; then echo "cli_dist: $pass passed, 0 failed"; exit 0; fi
t0=$(date +%s)
set +e
MEGANEURA_FAULT_DIST=kill:1:5 "${mpi[@]}" "$bin" train mnist --batch 64 --epochs 1 \
  --checkpoint "$dir/k.safetensors" "$@" >"$dir/k.out" 2>"$dir/k.err"
rc=$?
set -e
t=$(( $(date +%s) - t0 ))
[ "$rc" != 0 ] || die "killed rank: exit 0"
[ "$t" -le 30 ] || die "killed rank: the job took $t s to end"
grep -q "rank 1 kills itself" "$dir/k.err" && grep -q "error: rank 0:" "$dir/k.err" ||
  { cat "$dir/k.err" >&2; die "killed rank: no error from rank 0"; }
pass=$((pass + 1))
t0=$(date +%s)
set +e
MEGANEURA_DIST_TIMEOUT=3 MEGANEURA_FAULT_DIST=sleep:1:5:120 "${mpi[@]}" "$bin" train mnist --batch 64 --epochs 1 \
  --checkpoint "$dir/h.safetensors" "$@" >"$dir/h.out" 2>"$dir/h.err"
rc=$?
set -e
t=$(( $(date +%s) - t0 ))
[ "$rc" != 0 ] || die "hanging rank: exit 0"
[ "$t" -le 30 ] || die "hanging rank: the job took $t s to end"
grep -q "error: rank 0: .*no answer from the other ranks within 3 s" "$dir/h.err" ||
  { cat "$dir/h.err" >&2; die "hanging rank: no timeout message from rank 0"; }
grep -q "error: rank 1: ended by SIGTERM" "$dir/h.err" || { cat "$dir/h.err" >&2; die "hanging rank: rank 1 silent"; }
pass=$((pass + 1))
echo "cli_dist: $pass passed, 0 failed"
