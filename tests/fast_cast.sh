#!/usr/bin/env bash
# fast_cast.sh BIN SRC_DIR - the fast contract's operand casts on a real
# model (issue 12): the tiny Llama of tests/fixtures/lm trained 30 steps by
# `meganeura train lm --precision bf16 --backend vulkan` with the casts
# forced on (MEGANEURA_FAST_CAST=1: lavapipe has no cooperative matrices, so
# auto leaves them off) and off, and forced on with the casts kept in f32
# containers (MEGANEURA_CAST_STORAGE=f32) instead of packed two 16-bit values
# a word (the default where the backend packs: Vulkan). The casts must be in
# the schedule, the products' packed and attention's in f32 words, one cast
# a tensor, each a kernel that may take in its producer (which then stores
# the 16-bit values itself) beside unchanged others (the products keep their
# fused epilogues), and the loss of every step, train and eval, must be the
# same number in all four runs (the fourth: casts never stored by their
# producer's kernel, MEGANEURA_FUSION=nocast): rounding a product's operand
# by a cast node gives the bits the product's own rounding gives, and
# packing keeps them.
set -euo pipefail
bin=$1 src=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fx="$src/tests/fixtures"
die() { echo "fast_cast: $*" >&2; exit 1; }
train() {
  "$bin" train lm --config "$fx/lm/tiny-smol.json" --tokenizer "$fx/tokenizer/js-smol.json" \
    --data "$fx/tokenizer_corpus.txt" --seq 32 --batch 4 --lr 3e-3 --steps "$2" --seed 1 --precision bf16 \
    --backend vulkan --log "$dir/$1.jsonl" >"$dir/$1.out" 2>"$dir/$1.err" || { cat "$dir/$1.err" >&2; die "$1 run failed"; }
}
MEGANEURA_FAST_CAST=1 MEGANEURA_DUMP=schedule train dump 1
n=$(grep -c " cast" "$dir/dump.err" || true)
[ "$n" -gt 0 ] || die "MEGANEURA_FAST_CAST=1 put no cast in the schedule"
p=$(grep " cast" "$dir/dump.err" | grep -c " packed16" || true)
[ "$p" -gt 0 ] || die "none of the $n casts is packed"
# the casts that are not packed round attention's q, k, v, dout (f32 words:
# its kernels' loads), and every one of them feeds an attention kernel
for c in $(grep " = cast(" "$dir/dump.err" | grep -v " packed16" | grep -o "%[0-9]* = cast" | grep -o "%[0-9]*"); do
  grep -E " = attention(_bwd_q|_bwd_kv|_lse)?\(.*$c[,)]" "$dir/dump.err" > /dev/null ||
    die "cast $c is in f32 containers but feeds no attention kernel"
done
# one cast a tensor: in a Llama the backward reads every product operand
# (activations and parameters) only through the cast the forward made
d=$(grep -o " = cast(%[0-9]*)" "$dir/dump.err" | sort | uniq -d | head -3)
[ -z "$d" ] || die "tensors cast twice:$d"
# each cast is a kernel, and nothing else changes but this: a producer whose
# only reader is now a cast (the backward reads the cast the forward made)
# folds into that cast's kernel, which stores the 16-bit values itself
# (kir fuse_store16: lavapipe has 16-bit storage); with MEGANEURA_FUSION=
# nocast only permutes fold into casts (attention's, in f32 words). The
# products the casts feed keep their fused epilogues.
MEGANEURA_FAST_CAST=0 MEGANEURA_DUMP=kernels train k0 1
MEGANEURA_FAST_CAST=1 MEGANEURA_DUMP=kernels train k1 1
MEGANEURA_FUSION=nocast MEGANEURA_FAST_CAST=1 MEGANEURA_DUMP=kernels train k2 1
# (each cast that takes in its producer's kernel, "kernel %c cast: ...",
# removes that kernel)
kernels() { grep -o "^kernels: [0-9]*" "$dir/$1.err" | grep -o "[0-9]*$"; }
folded() { grep -c "^  kernel %[0-9]* cast: " "$dir/$1.err" || true; }
k0=$(kernels k0) k1=$(kernels k1) k2=$(kernels k2) f1=$(folded k1) f2=$(folded k2)
[ -n "$k0" ] && [ "$k1" -eq $((k0 + n - f1)) ] && [ "$k2" -eq $((k0 + n - f2)) ] ||
  die "$k1 / $k2 kernels with the $n casts ($f1 / $f2 of them with their producer), $k0 without"
grep "^  kernel %[0-9]* cast: " "$dir/k1.err" | grep -q "rms_norm -> " ||
  die "no RMSNorm stores its cast's 16-bit values"
[ "$(grep "^  kernel %[0-9]* cast: " "$dir/k2.err" | grep -vc "permute -> " || true)" -eq 0 ] ||
  die "MEGANEURA_FUSION=nocast: a cast took in a producer that is not a permute"
epi() { grep -c "^  kernel %[0-9]* add: .*matmul" "$dir/$1.err" || true; }
[ "$(epi k0)" -eq "$(epi k1)" ] && [ "$(epi k0)" -gt 0 ] ||
  die "$(epi k1) products with a fused epilogue with the casts, $(epi k0) without"
MEGANEURA_FAST_CAST=0 train off 30
MEGANEURA_FAST_CAST=1 train on 30
MEGANEURA_FAST_CAST=1 MEGANEURA_CAST_STORAGE=f32 train f32 30
MEGANEURA_FUSION=nocast MEGANEURA_FAST_CAST=1 train nocast 30
losses() { grep -o '"\(eval_\)\?loss":[^,}]*' "$dir/$1.jsonl"; }
[ "$(losses off | wc -l)" -ge 30 ] || die "the run logged $(losses off | wc -l) losses, not 30"
diff <(losses off) <(losses on) >&2 || die "the losses with packed casts differ from those without casts"
diff <(losses off) <(losses nocast) >&2 || die "the losses with casts in kernels of their own differ from those without casts"
diff <(losses off) <(losses f32) >&2 || die "the losses with f32 casts differ from those without casts"
echo "fast_cast: ok ($n casts in the schedule, $p packed, $f1 producers folded into them; $(losses on | wc -l) losses equal in the four runs)"
