#!/usr/bin/env bash
# vk_skip_check.sh TEST CLI - the skip convention, with no Vulkan driver
# (VK_ICD_FILENAMES / VK_DRIVER_FILES name a missing file): the test program
# TEST (one that needs Vulkan, through th_require_vulkan) and the CLI wrapper
# tests/cli_expect.sh --vulkan exit 77 and say "SKIP: no Vulkan device", and
# with MN_REQUIRE_VULKAN=1 they fail (exit 1) instead.
# Does not: run anything on a device.
set -uo pipefail
test_bin=$1 cli=$2
here=$(dirname "$0")
export VK_ICD_FILENAMES=/nonexistent.json VK_DRIVER_FILES=/nonexistent.json
passed=0 failed=0
expect() { # NAME WANT_RC WANT_TEXT REQUIRE CMD...
  local name=$1 want=$2 text=$3 req=$4 out rc
  shift 4
  out=$(MN_REQUIRE_VULKAN=$req "$@" 2>&1)
  rc=$?
  if [ "$rc" -eq "$want" ] && grep -q "$text" <<<"$out"; then
    passed=$((passed + 1)); echo "ok: $name (exit $rc)"
  else
    failed=$((failed + 1)); echo "FAIL: $name: exit $rc (want $want), output:"; echo "$out" | tail -5
  fi
}
expect "test skips"             77 "^SKIP: no Vulkan device" 0 "$test_bin"
expect "test fails if required" 1  "MN_REQUIRE_VULKAN=1"     1 "$test_bin"
expect "cli skips"              77 "^SKIP: no Vulkan device" 0 "$here/cli_expect.sh" --vulkan "$cli" -- "$cli" devices
expect "cli fails if required"  1  "MN_REQUIRE_VULKAN=1"     1 "$here/cli_expect.sh" --vulkan "$cli" -- "$cli" devices
echo "vk_skip_check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
