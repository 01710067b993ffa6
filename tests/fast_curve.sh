#!/usr/bin/env bash
# fast_curve.sh BIN SRC_DIR [--backend vulkan] - the fast contract's training
# gate (issue 12): the tiny Llama of tests/fixtures/lm trained for 200 steps by
# `meganeura train lm` in strict f32, with bf16 operands, and with f16 operands
# and dynamic loss scaling (the default of --precision f16), same seed and
# data. Every 20-step mean of the training loss of a fast run must lie within
# 2% of the strict run's, the loss must fall (the strict curve's last window
# below 60% of its first), and the f16 run must report its loss scale.
set -euo pipefail
bin=$1 src=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fx="$src/tests/fixtures"
die() { echo "fast_curve: $*" >&2; exit 1; }
for p in strict bf16 f16; do
  "$bin" train lm --config "$fx/lm/tiny-smol.json" --tokenizer "$fx/tokenizer/js-smol.json" \
    --data "$fx/tokenizer_corpus.txt" --seq 32 --batch 4 --lr 3e-3 --steps 200 --seed 1 --precision "$p" \
    --log "$dir/$p.jsonl" "$@" >"$dir/$p.out" 2>"$dir/$p.err" || { cat "$dir/$p.err" >&2; die "$p run failed"; }
done
grep -q "^loss scale " "$dir/f16.out" || die "the f16 run reports no loss scale: $(cat "$dir/f16.out")"
"${MN_PYTHON:-/usr/bin/python3}" - "$dir" <<'EOF'
import json, sys
d = sys.argv[1]
def windows(p):
    loss = [r["loss"] for r in map(json.loads, open("%s/%s.jsonl" % (d, p))) if r["type"] == "train"]
    assert len(loss) == 200, (p, len(loss))
    return [sum(loss[i:i + 20]) / 20 for i in range(0, 200, 20)]
ref = windows("strict")
bad = []
assert ref[-1] < 0.6 * ref[0], "the strict run did not learn: %s" % ref
for p in ("bf16", "f16"):
    w = windows(p)
    worst = max(abs(a - b) / b for a, b in zip(w, ref))
    print("fast_curve: %s: worst 20-step window %.3f%% from strict (%.3f -> %.3f)" % (p, 100 * worst, w[0], w[-1]))
    if worst > 0.02:
        bad.append(p)
if bad:
    sys.exit("fast_curve: %s beyond 2%% of the strict curve" % ", ".join(bad))
EOF
echo "fast_curve: ok"
