#!/usr/bin/env bash
# run_fuzz.sh - run a built fuzz target for a while; keep what it finds.
#
# Usage: tests/fuzz/run_fuzz.sh PATH/TO/fuzz_<name> [SECONDS=60] [CORPUS_DIR] [DICT]
#
# Does: copies the target's corpus to a temporary folder (new corpus entries
# do not land in git), runs the fuzzer there with -max_total_time, artifacts
# in a temporary folder. Every crash/leak/timeout/oom artifact is copied into
# the corpus folder as <kind>-<sha1> (crash-<sha1> for crashes), where the
# target's replay test runs it; the script then exits non-zero.
# Prints one summary line either way.
# Corpus and dictionary by target name, unless given: fuzz_safetensors uses
# tests/fuzz/corpus and tests/fuzz/safetensors.dict (replayed by
# test_safetensors); any other fuzz_<name> uses tests/fuzz/corpus_<name> and
# tests/fuzz/<name>.dict if that exists (fuzz_graph: corpus_graph, replayed
# by test_fuzz_graph_corpus).
# Does not: build anything (configure with -DMN_FUZZ=ON and clang, or build
# by hand with clang -fsanitize=fuzzer,address,undefined).
set -u

bin=${1:?usage: run_fuzz.sh PATH/TO/fuzz_binary [SECONDS] [CORPUS_DIR] [DICT]}
secs=${2:-60}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
name=$(basename -- "$bin")
target=${name#fuzz_}
if [[ "$name" == fuzz_safetensors ]]; then
    corpus="$here/corpus"
    dict="$here/safetensors.dict"
else
    corpus="$here/corpus_${target}"
    dict="$here/${target}.dict"
fi
corpus=${3:-$corpus}
dict=${4:-$dict}

if [[ ! -x "$bin" ]]; then
    echo "run_fuzz: '$bin' is not an executable fuzz binary" >&2
    exit 2
fi
if ! [[ "$secs" =~ ^[0-9]+$ ]] || (( secs < 1 )); then
    echo "run_fuzz: SECONDS must be a positive integer, got '$secs'" >&2
    exit 2
fi
if [[ ! -d "$corpus" ]]; then
    echo "run_fuzz: corpus folder '$corpus' does not exist" >&2
    exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/mn-fuzz.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/artifacts"
cp -- "$corpus"/* "$work/corpus/" 2>/dev/null || true
seeds=$(find "$work/corpus" -type f | wc -l)

args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
      -artifact_prefix="$work/artifacts/")
[[ -f "$dict" ]] && args+=(-dict="$dict")

"$bin" "${args[@]}" "$work/corpus" >"$work/log" 2>&1
rc=$?

execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n 1)
elapsed=$(sed -n 's/^stat::.*//;s/.*Done \([0-9]*\) runs in \([0-9]*\) second.*/\2/p' "$work/log" | tail -n 1)
grown=$(find "$work/corpus" -type f | wc -l)
shown=${corpus#"$PWD"/}

found=0
kept=()
for a in "$work"/artifacts/*; do
    [[ -f "$a" ]] || continue
    base=$(basename -- "$a")
    kind=${base%%-*}
    case "$kind" in crash|leak|timeout|oom) ;; *) kind=crash ;; esac
    hash=$(sha1sum -- "$a" | cut -c1-40)
    cp -- "$a" "$corpus/$kind-$hash"
    kept+=("$kind-$hash")
    found=$((found + 1))
done

if (( found > 0 || rc != 0 )); then
    tail -n 60 "$work/log" >&2
    echo "$name: FAILED (exit $rc) after ${execs:-?} execs in ${elapsed:-?} s;" \
         "kept ${found} input(s) in $shown: ${kept[*]:-none}"
    exit 1
fi
echo "$name: ok, ${execs:-?} execs in ${elapsed:-$secs} s, corpus $seeds -> $grown files, no crashes"
