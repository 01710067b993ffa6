#!/usr/bin/env bash
# python_mnist.sh PYTHON SRC_DIR BIN MIN_ACCURACY [EXAMPLE FLAGS] - examples/python/mnist.py
# reaches MIN_ACCURACY on the MNIST cache (`make data`), and `meganeura eval mnist`
# reports the same accuracy for the checkpoint it saved.
set -euo pipefail
py=$1 src=$2 bin=$3 min=$4
shift 4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$py" "$src/examples/python/mnist.py" --checkpoint "$dir/py.safetensors" --min-accuracy "$min" "$@" \
  >"$dir/out" 2>"$dir/err" || { cat "$dir/err" "$dir/out" >&2; echo "python_mnist: below $min% or failed" >&2; exit 1; }
cat "$dir/out"
acc=$(sed -n 's/^test accuracy \([0-9.]*\)%.*/\1/p' "$dir/out")
"$bin" eval mnist --checkpoint "$dir/py.safetensors" >"$dir/eval.out"
grep -q "^test accuracy $acc%" "$dir/eval.out" || {
  echo "python_mnist: meganeura eval says $(cat "$dir/eval.out"), Python said $acc%" >&2; exit 1; }
echo "python_mnist: accuracy $acc% >= $min%, meganeura eval agrees: 2 passed, 0 failed"
