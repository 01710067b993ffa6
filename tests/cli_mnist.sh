#!/usr/bin/env bash
# cli_mnist.sh BIN MODEL MIN_ACCURACY [EXTRA FLAGS] - the MNIST demo end to end: train
# reaches the accuracy, eval of the saved checkpoint reports the same
# accuracy, inspect lists the checkpoint. Needs the MNIST cache (`make data`).
set -euo pipefail
bin=$1 model=$2 min=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ck="$dir/$model.safetensors"
"$bin" train mnist --model "$model" --checkpoint "$ck" "$@" >"$dir/train.out" 2>"$dir/train.err" || {
  cat "$dir/train.err" >&2; exit 1; }
cat "$dir/train.out"
acc=$(sed -n 's/^test accuracy \([0-9.]*\)%.*/\1/p' "$dir/train.out")
[ -n "$acc" ] || { echo "no accuracy line in the output" >&2; exit 1; }
awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a >= m) }' || {
  echo "accuracy $acc% is below $min%" >&2; exit 1; }
"$bin" eval mnist --checkpoint "$ck" "$@" >"$dir/eval.out"
cat "$dir/eval.out"
grep -q "^test accuracy $acc%" "$dir/eval.out" || { echo "eval does not reproduce $acc%" >&2; exit 1; }
"$bin" inspect "$ck" | grep -q "fc1.weight\|conv1.weight" || { echo "inspect lists no weights" >&2; exit 1; }
echo "cli_mnist $model: accuracy $acc% >= $min%, eval agrees: 1 passed, 0 failed"
