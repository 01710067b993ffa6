#!/usr/bin/env bash
# cli_metrics.sh BIN SRC_DIR [--quick] - `train mnist --log FILE.jsonl --plot FILE.svg`
# on a small synthetic MNIST file: the log is JSON lines with the documented records
# and fields (tests/metrics_check.py), the chart renders to PNG (rsvg-convert) with
# its axes, legend and curves, the last evaluation is the accuracy the command
# prints, and (not with --quick, which sanitizer builds use: one epoch there takes a
# minute) a run without the flags trains the same model; hostile --log / --plot
# paths are refused before training starts.
set -euo pipefail
bin=$1 src=$2
quick=${3:-}
epochs=2
[ "$quick" = --quick ] && epochs=1
py=${MN_PYTHON:-/usr/bin/python3}
check=$src/tests/metrics_check.py
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
n=0
die() { echo "cli_metrics: $*" >&2; exit 1; }
command -v rsvg-convert >/dev/null || die "rsvg-convert is missing (scripts/deps.sh installs librsvg2-bin)"

"$py" "$check" synth-mnist "$dir/s.bin"
run=("$bin" train mnist --data "$dir/s.bin" --epochs $epochs --checkpoint "$dir/ck.safetensors")
"${run[@]}" --log "$dir/m.jsonl" --plot "$dir/m.svg" >"$dir/out" 2>"$dir/err" || { cat "$dir/err" >&2; die "train failed"; }
# 8,000 training images (800 of the 810 per digit) / batch 64 = 125 steps per epoch
"$py" "$check" log "$dir/m.jsonl" images_per_s $((125 * epochs)) $epochs || die "bad log"; n=$((n + 1))
rsvg-convert -o "$dir/m.png" "$dir/m.svg" || die "rsvg-convert cannot render the chart"
"$py" "$check" png "$dir/m.svg" "$dir/m.png" "train loss" "test loss" "train accuracy" "test accuracy" ||
  die "bad chart"; n=$((n + 1))
printed=$(sed -n 's/^test accuracy \([0-9.]*\)%.*/\1/p' "$dir/out")
logged=$("$py" -c 'import json, sys
ev = [r for r in map(json.loads, open(sys.argv[1])) if r["type"] == "eval"]
print("%.2f" % (100 * ev[-1]["eval_accuracy"]))' "$dir/m.jsonl")
[ -n "$printed" ] && [ "$printed" = "$logged" ] || die "the log's last test accuracy $logged% is not the printed $printed%"
n=$((n + 1))
# the same run without --log/--plot trains the same model
if [ "$quick" != --quick ]; then
  "${run[@]}" --checkpoint "$dir/ck2.safetensors" >/dev/null 2>&1 || die "train without --log failed"
  cmp -s "$dir/ck.safetensors" "$dir/ck2.safetensors" || die "--log/--plot changed the trained model"
  n=$((n + 1))
fi

# hostile paths: refused (exit 1, naming the flag) before any training, nothing touched
mkdir "$dir/adir"
mkfifo "$dir/fifo"
ln -s "$dir/target" "$dir/link"
for bad in "--log $dir/adir" "--plot $dir/adir" "--log $dir/fifo" "--plot $dir/link" "--log $dir/link" \
           "--log $dir/no/such/dir/x.jsonl" "--log $dir/ck3.safetensors --checkpoint $dir/ck3.safetensors" \
           "--log $dir/same --plot $dir/same"; do
  set +e
  # shellcheck disable=SC2086
  "${run[@]}" $bad >/dev/null 2>"$dir/e"
  rc=$?
  set -e
  [ "$rc" = 1 ] || die "$bad: exit $rc, want 1"
  grep -q -- "--log\|--plot" "$dir/e" || die "$bad: the error does not name the flag: $(cat "$dir/e")"
  if grep -q "^train mnist:" "$dir/e"; then die "$bad: training started before the path was refused"; fi
  n=$((n + 1))
done
[ ! -e "$dir/target" ] || die "a symbolic link was followed"
[ ! -e "$dir/same" ] || die "a refused --log was created"
echo "cli_metrics: $n passed, 0 failed"
