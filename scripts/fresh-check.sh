#!/usr/bin/env bash
# fresh-check.sh - runs the README's two commands, `make demo` then
# `make test`, on a fresh Debian 12 machine: a minimal bookworm root made with
# debootstrap (variant minbase), entered with chroot (/proc, /sys and /dev
# mounted), holding a clone of this checkout's HEAD commit.
#
# Usage: scripts/fresh-check.sh [--keep] [--targets "demo test"]
#   --keep       keep the root (and the set-up log) for debugging
#   --targets T  the make targets to run, in order (default: "demo test")
#
# Carried into the root, and nothing else: the apt sources (and the keyrings
# they name), /etc/resolv.conf, the extra CA certificates under
# /usr/local/share/ca-certificates (installed with update-ca-certificates),
# /etc/npmrc, NODE_EXTRA_CA_CERTS and SSL_CERT_FILE, plus the packages the
# README names as prerequisites (git, make) and ca-certificates. Everything
# else must come from the project's own `make` (scripts/deps.sh).
#
# Prints pass/fail and the time of each step, then a closing
#   fresh-check: PASS (demo 45 s, test 620 s, total 700 s)
#   fresh-check: 2 passed, 0 failed
# and exits non-zero if any target failed or the root could not be made.
# Needs root. The root lives in a mktemp folder under ${TMPDIR:-/tmp} and is
# unmounted and deleted on exit, failure or Ctrl-C (unless --keep).
#
# Does not: check uncommitted changes (it clones HEAD; it warns if the tree
# is dirty), cache the debootstrap download, or isolate the network.
set -euo pipefail

keep=0
targets="demo test"
while [ $# -gt 0 ]; do
  case $1 in
    --keep) keep=1 ;;
    --targets) [ $# -ge 2 ] || { echo "fresh-check: --targets needs a value" >&2; exit 2; }
               targets=$2; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "fresh-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

say() { echo "fresh-check: $*"; }
die() { echo "fresh-check: error: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot, mount)"
src=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel) || die "not inside a git checkout"
head=$(git -C "$src" rev-parse HEAD)
[ -z "$(git -C "$src" status --porcelain --untracked-files=no)" ] ||
  say "warning: $src has uncommitted changes; checking the commit ${head:0:12} only"

if ! command -v debootstrap >/dev/null 2>&1; then
  say "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; } ||
    die "cannot install debootstrap"
fi

# The Debian mirror: the first bookworm (not -security) URI of this machine's
# apt sources, deb822 or one-line format.
mirror=""
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  mirror=$(awk 'BEGIN{RS=""; FS="\n"}
    { uri=""; ok=0
      for (i = 1; i <= NF; i++) {
        if ($i ~ /^URIs:/)   { split($i, a, /[ \t]+/); uri = a[2] }
        if ($i ~ /^Suites:/) { if ($i ~ /[ \t]bookworm([ \t]|$)/) ok = 1 }
        if ($i ~ /^Types:/)  { if ($i !~ /[ \t]deb([ \t]|$)/) ok = -1 }
      }
      if (ok == 1 && uri != "") { print uri; exit } }' "$f")
  [ -n "$mirror" ] && break
done
if [ -z "$mirror" ]; then
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    mirror=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) { if ($(i+1) == "bookworm") { print $i; exit } break } }' "$f")
    [ -n "$mirror" ] && break
  done
fi
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian

work=$(mktemp -d "${TMPDIR:-/tmp}/fresh-check.XXXXXX")
root=$work/root
log=$work/log

# Everything mounted under the root, deepest first.
mounts_under_root() { awk -v r="$root" '$5 == r || index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r; }

# A long step runs in its own session, so that a signal to this script can
# end it (bash runs a trap only once a foreground child has finished).
bg=""
run_bg() {
  local rc=0
  setsid "$@" &
  bg=$!
  wait "$bg" || rc=$?
  bg=""
  return "$rc"
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e # clean up as much as possible, whatever fails
  [ -n "$bg" ] && kill -- "-$bg" 2>/dev/null
  # processes still running inside the root (a Ctrl-C mid-build): ours, end them
  local p pids=()
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && pids+=("${p#/proc/}")
  done
  if [ ${#pids[@]} -gt 0 ]; then
    kill "${pids[@]}" 2>/dev/null || true
    sleep 2
    kill -9 "${pids[@]}" 2>/dev/null || true
  fi
  local m
  for m in $(mounts_under_root); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || echo "fresh-check: cannot unmount $m" >&2
  done
  if [ "$keep" -eq 1 ]; then
    echo "fresh-check: kept the root at $root (log: $log)" >&2
  elif [ -n "$(mounts_under_root)" ]; then
    echo "fresh-check: something is still mounted under $root: not deleting $work" >&2
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

t_all=$(date +%s)
say "debootstrap bookworm (minbase) from $mirror into $root"
t=$(date +%s)
run_bg debootstrap --variant=minbase bookworm "$root" "$mirror" >"$log" 2>&1 ||
  { tail -20 "$log" >&2; die "debootstrap failed (log above)"; }
say "debootstrap: $(( $(date +%s) - t )) s"

# --- what every machine here already has -------------------------------------
rm -f "$root/etc/apt/sources.list"
[ -f /etc/apt/sources.list ] && cp /etc/apt/sources.list "$root/etc/apt/sources.list"
mkdir -p "$root/etc/apt/sources.list.d"
for f in /etc/apt/sources.list.d/*; do
  [ -f "$f" ] || continue
  cp "$f" "$root/etc/apt/sources.list.d/"
  case $f in
    *.list|*.sources)  # the keyrings it names, where the root lacks them
      for k in $(grep -oE '(Signed-By:|signed-by=)[[:space:]]*/[^] [:space:]]+' "$f" | sed -E 's/^(Signed-By:|signed-by=)[[:space:]]*//'); do
        [ -e "$root$k" ] || [ ! -f "$k" ] || { mkdir -p "$root$(dirname "$k")"; cp "$k" "$root$k"; }
      done ;;
  esac
done
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -R /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
[ -f /etc/npmrc ] && cp /etc/npmrc "$root/etc/npmrc"

mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --rbind /dev "$root/dev"
mount --make-rslave "$root/dev"

# A clean environment: a login's, plus the CA variables the machine sets.
envv=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
      LANG=C.UTF-8 TERM="${TERM:-dumb}")
for v in NODE_EXTRA_CA_CERTS SSL_CERT_FILE; do
  [ -n "${!v:-}" ] && envv+=("$v=${!v}")
done
in_root() { run_bg chroot "$root" /usr/bin/env -i "${envv[@]}" /bin/bash -c "$1"; }

t=$(date +%s)
say "installing the README's prerequisites in the root: git make (and ca-certificates)"
in_root 'export DEBIAN_FRONTEND=noninteractive
         apt-get update -qq && apt-get install -y -qq --no-install-recommends ca-certificates git make &&
         update-ca-certificates' >>"$log" 2>&1 ||
  { tail -20 "$log" >&2; die "apt-get in the root failed (log above)"; }
say "prerequisites: $(( $(date +%s) - t )) s"

git clone -q --no-hardlinks "$src" "$root/root/meganeura" || die "git clone of $src failed"
git -C "$root/root/meganeura" checkout -q --detach "$head" || die "cannot check out $head"
say "cloned $src at ${head:0:12} into /root/meganeura"

passed=0 failed=0 summary=""
for tgt in $targets; do
  say "make $tgt ..."
  t=$(date +%s)
  if in_root "cd /root/meganeura && make $tgt"; then r=PASS; passed=$((passed + 1))
  else r=FAIL; failed=$((failed + 1)); fi
  dt=$(( $(date +%s) - t ))
  say "make $tgt: $r ($dt s)"
  summary+="$tgt $dt s, "
done
total=$(( $(date +%s) - t_all ))
[ "$failed" -eq 0 ] && verdict=PASS || verdict=FAIL
say "$verdict (${summary}total $total s)"
say "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
