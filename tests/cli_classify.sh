#!/usr/bin/env bash
# cli_classify.sh BIN SRC_DIR [--backend vulkan] - `meganeura classify` end to end
# on the committed tiny ResNet (tests/fixtures/resnet, written by
# `test_resnet --write-fixture`): each class's picture gets its own class first,
# with and without a labels file, at its own size and through the default
# 256/224 transform; hostile images are reported and skipped (exit 1) while the
# others are still classified; a model that is not a ResNet, a short labels file
# and bad flags give clear errors.
set -uo pipefail
bin=$1 src=$2
shift 2
fx="$src/tests/fixtures"
r="$fx/resnet"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
die() { echo "cli_classify: $*" >&2; exit 1; }
cls=("$bin" classify --model "$r/tiny-resnet.safetensors" "$@")

"${cls[@]}" --labels "$r/labels.txt" --resize 32 --crop 32 --top 2 "$r"/class{0,1,2,3}.png >"$dir/out" 2>"$dir/err" || {
  cat "$dir/err" >&2; die "classify failed"; }
cat "$dir/out"
names=("top left" "top right" "bottom left" "bottom right")
for k in 0 1 2 3; do
  grep -A1 "class$k.png" "$dir/out" | grep -q "^  1  [0-9.]*  $k  ${names[$k]}$" || die "class$k.png: class $k is not first"
done
[ "$(grep -c '^  [12]  ' "$dir/out")" = 8 ] || die "expected two classes per image"
"${cls[@]}" "$r/class2.png" >"$dir/def" 2>"$dir/err" || { cat "$dir/err" >&2; die "the default transform failed"; }
[ "$(grep -c '^  [1-5]  ' "$dir/def")" = 4 ] || die "the 4-class model should print 4 lines with --top 5"
awk 'NR>1 {s += $2} END {exit !(s > 0.999 && s < 1.001)}' "$dir/def" || die "probabilities do not sum to 1"

# a hostile image among good ones: reported, skipped, exit 1
"${cls[@]}" --resize 32 --crop 32 "$r/class0.png" "$fx/images/hostile-truncated.jpg" "$r/class3.png" \
  "$dir/missing.png" >"$dir/out" 2>"$dir/err"
[ $? = 1 ] || die "a bad image should give exit status 1"
grep -q "class0.png" "$dir/out" && grep -q "class3.png" "$dir/out" || die "good images after a bad one were not classified"
grep -q "hostile-truncated.jpg.*Premature end" "$dir/err" || die "the truncated JPEG is not explained: $(cat "$dir/err")"
grep -q "missing.png.*No such file" "$dir/err" || die "the missing image is not explained"

# models and flags
"$bin" classify --model "$fx/images/reference.safetensors" "$r/class0.png" 2>"$dir/err" >/dev/null
[ $? = 1 ] && grep -q "not a torchvision ResNet" "$dir/err" || die "a non-ResNet model: $(cat "$dir/err")"
printf 'only one\n' >"$dir/labels"
"${cls[@]}" --labels "$dir/labels" "$r/class0.png" 2>"$dir/err" >/dev/null
[ $? = 1 ] && grep -q "1 lines, but the model has 4 classes" "$dir/err" || die "a short labels file: $(cat "$dir/err")"
"$bin" classify "$r/class0.png" 2>"$dir/err"
[ $? = 2 ] && grep -q -- "--model" "$dir/err" || die "a missing --model should be a usage error"
"${cls[@]}" --resize 20 --crop 30 "$r/class0.png" 2>"$dir/err"
[ $? = 2 ] || die "--crop > --resize should be a usage error"
"${cls[@]}" --top 0 "$r/class0.png" 2>/dev/null
[ $? = 2 ] || die "--top 0 should be a usage error"
"$bin" classify --help | grep -q "state_dict" || die "no help"
echo "cli_classify: ok"
