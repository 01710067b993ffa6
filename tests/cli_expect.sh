#!/usr/bin/env bash
# cli_expect.sh [--vulkan CLI] [--status N] -- CMD [ARGS...] - runs CMD and
# passes if it exits with status N (default 0). Used instead of ctest's
# WILL_FAIL, which would also pass a run that a sanitizer ended, and for the
# CLI runs that need a Vulkan device: with --vulkan, `CLI devices` must list
# one first, else the test is skipped (exit 77, "SKIP: no Vulkan device"),
# or fails when MN_REQUIRE_VULKAN=1 (as in `make test`).
# Does not: check the output (ctest's regular expressions do that).
set -uo pipefail
cli="" want=0
while [ $# -gt 0 ]; do
  case $1 in
    --vulkan) cli=$2; shift 2 ;;
    --status) want=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "cli_expect.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: cli_expect.sh [--vulkan CLI] [--status N] -- CMD [ARGS...]" >&2; exit 2; }
if [ -n "$cli" ]; then
  if ! probe=$("$cli" devices 2>&1) || ! grep -q "subgroup size" <<<"$probe"; then
    reason=$(grep -v '^$' <<<"$probe" | head -1)
    if [ "${MN_REQUIRE_VULKAN:-}" = 1 ]; then
      echo "FAIL: no Vulkan device (MN_REQUIRE_VULKAN=1): $reason"; exit 1
    fi
    echo "SKIP: no Vulkan device: $reason"; exit 77
  fi
fi
"$@"
rc=$?
[ "$rc" -eq "$want" ] && exit 0
echo "cli_expect.sh: '$*' exited with $rc, expected $want" >&2
exit 1
