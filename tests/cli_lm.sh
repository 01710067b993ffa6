#!/usr/bin/env bash
# cli_lm.sh BIN SRC_DIR [--backend vulkan] - `train lm` and `generate` end to end on a
# tiny model: 20 steps from scratch with a checkpoint and an export, a resume that
# continues to 30 steps, generate from the exported folder (seeded runs repeat,
# temperature 0 equals greedy), the --log and --plot files of the first run, and
# clear errors for missing files and bad flags.
set -euo pipefail
bin=$1 src=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fx="$src/tests/fixtures"
common=(--config "$fx/lm/tiny-smol.json" --tokenizer "$fx/tokenizer/js-smol.json"
        --data "$fx/tokenizer_corpus.txt" --seq 32 --batch 4 --lr 3e-3 --checkpoint "$dir/ck.safetensors")
die() { echo "cli_lm: $*" >&2; exit 1; }

"$bin" train lm "${common[@]}" --steps 20 --out "$dir/model" --log "$dir/lm.jsonl" --plot "$dir/lm.svg" "$@" \
  >"$dir/train.out" 2>"$dir/train.err" || { cat "$dir/train.err" >&2; die "train lm failed"; }
cat "$dir/train.out"
grep -q "eval loss" "$dir/train.err" || die "no eval loss line"
# the JSON-lines log (20 steps, an evaluation every 2) and the chart (tests/metrics_check.py)
py=${MN_PYTHON:-/usr/bin/python3}
"$py" "$src/tests/metrics_check.py" log "$dir/lm.jsonl" tokens_per_s 20 10 || die "bad --log"
rsvg-convert -o "$dir/lm.png" "$dir/lm.svg" || die "rsvg-convert cannot render the --plot chart"
"$py" "$src/tests/metrics_check.py" png "$dir/lm.svg" "$dir/lm.png" "train loss" "eval loss" "train accuracy" ||
  die "bad --plot chart"
for f in config.json model.safetensors tokenizer.json; do [ -s "$dir/model/$f" ] || die "export lacks $f"; done
[ -s "$dir/ck.safetensors" ] || die "no checkpoint"
grep -q '"LlamaForCausalLM"' "$dir/model/config.json" || die "config.json lacks the architecture"
grep -q '"torch_dtype":[[:space:]]*"float32"' "$dir/model/config.json" || die "config.json lacks the dtype"
if grep -q lm_head "$dir/model/model.safetensors"; then die "a tied model exported lm_head.weight"; fi

"$bin" train lm "${common[@]}" --steps 30 --resume "$@" >"$dir/resume.out" 2>"$dir/resume.err" || {
  cat "$dir/resume.err" >&2; die "resume failed"; }
grep -q "resumed from .* at step 20" "$dir/resume.err" || die "resume did not start at step 20"
grep -q "trained 10 steps" "$dir/resume.out" || die "resume did not train the 10 remaining steps"

# the fast f16 contract: dynamic loss scaling from 65536 by default, kept in the checkpoint
"$bin" train lm "${common[@]}" --steps 4 --precision f16 --checkpoint "$dir/ck16.safetensors" "$@" \
  >"$dir/f16.out" 2>"$dir/f16.err" || { cat "$dir/f16.err" >&2; die "train lm --precision f16 failed"; }
grep -q "^loss scale 65536 at the end; 0 steps skipped" "$dir/f16.out" || die "f16: no loss-scale line: $(cat "$dir/f16.out")"
"$bin" inspect "$dir/ck16.safetensors" >"$dir/ck16.txt" 2>&1 || die "inspect of the f16 checkpoint failed"
grep -q "meganeura.loss_scale.*65536" "$dir/ck16.txt" || die "the f16 checkpoint lacks meganeura.loss_scale"
for bad in "--loss-scale 3" "--loss-scale 0.5" "--precision fp8"; do
  set +e
  # shellcheck disable=SC2086
  "$bin" train lm "${common[@]}" --steps 1 $bad 2>"$dir/bad.err"; rc=$?
  set -e
  [ "$rc" = 2 ] || die "$bad: exit $rc, want 2 (usage)"
  grep -q -- "${bad%% *}" "$dir/bad.err" || die "$bad: unclear error: $(cat "$dir/bad.err")"
done

gen=("$bin" generate --model "$dir/model" --prompt "The cat" --max-tokens 10 "$@")
"${gen[@]}" --seed 5 >"$dir/g1" 2>"$dir/g1.err" || { cat "$dir/g1.err" >&2; die "generate failed"; }
"${gen[@]}" --seed 5 >"$dir/g2" 2>/dev/null
cmp -s "$dir/g1" "$dir/g2" || die "the same seed gave different text"
grep -q "^The cat" "$dir/g1" || die "the output does not start with the prompt"
grep -q "tokens/s" "$dir/g1.err" || die "no tokens/s on stderr"
"${gen[@]}" --temperature 0 >"$dir/t0" 2>/dev/null
"${gen[@]}" --top-k 1 --seed 9 >"$dir/k1" 2>/dev/null
cmp -s "$dir/t0" "$dir/k1" || die "top-k 1 differs from temperature 0"

! "$bin" generate --model "$dir/nope" --prompt x 2>"$dir/e1" || die "a missing folder was accepted"
grep -q "not a folder" "$dir/e1" || die "unclear error: $(cat "$dir/e1")"
mkdir "$dir/empty"
! "$bin" generate --model "$dir/empty" --prompt x 2>"$dir/e2" || die "an empty folder was accepted"
grep -q "config.json: missing" "$dir/e2" && grep -q "model.safetensors: missing" "$dir/e2" &&
  grep -q "tokenizer.json: missing" "$dir/e2" || die "unclear error: $(cat "$dir/e2")"
set +e
"$bin" generate --model "$dir/model" --prompt x --top-p 2 2>/dev/null; rc=$?
set -e
[ "$rc" = 2 ] || die "--top-p 2: exit $rc, want 2 (usage)"
echo "cli_lm: ok"
