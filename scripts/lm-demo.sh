#!/usr/bin/env bash
# lm-demo.sh BIN [STEPS] - trains a tiny Llama (examples/lm/tiny-llama.json, 3 layers,
# hidden 128) from scratch on the Jargon File and generates from it.
#
# Corpus: the Jargon File 4.4.7 (Debian package jargon-text), chosen because it is
# public domain (see /usr/share/doc/jargon-text/copyright), 1.3 MB of plain English
# prose once its glossary index and appendices are cut, and small to install (650 kB).
# The package is installed with apt-get when missing. Tokenizer: the committed
# tests/fixtures/tokenizer/js-smol.json (a SmolLM2-shaped byte-level BPE of 686 ids).
# Output: $XDG_CACHE_HOME/meganeura/lm-demo/{jargon.txt,ck.safetensors,model/}.
set -euo pipefail
bin=${1:-build/release/meganeura}
steps=${2:-600}
here=$(cd "$(dirname "$0")/.." && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/meganeura/lm-demo
gz=/usr/share/doc/jargon-text/jargon.txt.gz
mkdir -p "$cache"
if [ ! -f "$gz" ]; then
  echo "lm-demo: installing the Debian package jargon-text (the corpus)" >&2
  sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get install -y jargon-text >&2 || { echo "lm-demo: apt-get install jargon-text failed" >&2; exit 1; }
fi
txt="$cache/jargon.txt"
if [ ! -s "$txt" ]; then
  # the lexicon's entries (":term: ..." paragraphs), without the glossary index
  # before them and the appendices after; the 3-space indent removed
  zcat "$gz" | awk '/^   :/ { on = 1 } /^Appendix A\./ { on = 0 } on' | sed 's/^   //' | cat -s >"$txt"
fi
echo "lm-demo: corpus $txt ($(wc -c <"$txt") bytes)" >&2
"$bin" train lm --config "$here/examples/lm/tiny-llama.json" --tokenizer "$here/tests/fixtures/tokenizer/js-smol.json" \
  --data "$txt" --seq 64 --batch 8 --steps "$steps" --lr 3e-3 --warmup 50 --eval-every 100 \
  --checkpoint "$cache/ck.safetensors" --out "$cache/model"
"$bin" generate --model "$cache/model" --prompt ":hacker: n." --max-tokens 120 --temperature 0.8 --top-k 40 --seed 1
