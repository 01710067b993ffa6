#!/usr/bin/env bash
# cli_transcribe.sh BIN TEST_WHISPER SRC_DIR [--backend vulkan] - `meganeura transcribe`
# end to end on a tiny random Whisper folder (written by `test_whisper --write-folder`,
# with the committed GPT-2-style tokenizer): the espeak-ng speech of tests/fixtures/audio
# gives one line per file, the same text on every run, 22050 Hz input is resampled;
# hostile WAV files are reported and skipped (exit 1) while the others are still
# transcribed; missing files, folders and flags give clear errors. (The text of a random
# model is noise; tests/test_workloads.c checks real decoding against transformers.)
set -uo pipefail
bin=$1 tw=$2 src=$3
shift 3
fx="$src/tests/fixtures"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
die() { echo "cli_transcribe: $*" >&2; exit 1; }
"$tw" --write-folder "$dir/model" >/dev/null || die "test_whisper --write-folder failed"
cp "$fx/tokenizer/js-gpt2.json" "$dir/model/tokenizer.json"
tr=("$bin" transcribe --model "$dir/model" --max-tokens 8 "$@")

"${tr[@]}" "$fx/audio/speech.wav" "$fx/audio/speech-22k.wav" >"$dir/a" 2>"$dir/err" || { cat "$dir/err" >&2; die "transcribe failed"; }
[ "$(wc -l <"$dir/a")" = 2 ] || die "expected one line per file: $(cat "$dir/a")"
"${tr[@]}" "$fx/audio/speech.wav" "$fx/audio/speech-22k.wav" >"$dir/b" 2>/dev/null
cmp -s "$dir/a" "$dir/b" || die "two runs gave different text"

"${tr[@]}" "$fx/audio/speech.wav" "$fx/audio/hostile-truncated.wav" "$fx/audio/speech-8.wav" "$dir/none.wav" \
  >"$dir/out" 2>"$dir/err"
[ $? = 1 ] || die "a bad file should give exit status 1"
[ "$(wc -l <"$dir/out")" = 2 ] || die "the good files after a bad one were not transcribed"
grep -q "hostile-truncated.wav.*truncated" "$dir/err" || die "the truncated WAV is not explained: $(cat "$dir/err")"
grep -q "none.wav.*No such file" "$dir/err" || die "the missing file is not explained"

"$bin" transcribe "$fx/audio/speech.wav" 2>"$dir/err"
[ $? = 2 ] && grep -q -- "--model" "$dir/err" || die "a missing --model should be a usage error"
"$bin" transcribe --model "$dir/nothere" "$fx/audio/speech.wav" 2>"$dir/err"
[ $? = 1 ] && grep -q "nothere" "$dir/err" || die "a missing folder: $(cat "$dir/err")"
rm "$dir/model/tokenizer.json"
"$bin" transcribe --model "$dir/model" "$fx/audio/speech.wav" 2>"$dir/err"
[ $? = 1 ] && grep -q "tokenizer.json" "$dir/err" || die "a missing tokenizer: $(cat "$dir/err")"
"$bin" transcribe --max-tokens 0 --model "$dir/model" x.wav 2>/dev/null
[ $? = 2 ] || die "--max-tokens 0 should be a usage error"
"$bin" transcribe --help | grep -q "generation_config" || die "no help"
echo "cli_transcribe: ok"
