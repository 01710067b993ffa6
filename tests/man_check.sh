#!/usr/bin/env bash
# man_check.sh BIN MANPAGE - the manual page is true to the program's help: every
# command that `meganeura --help` lists has its own section (.SS "meganeura CMD"),
# every option that `meganeura --help` or a command's --help names appears in the
# page, and groff reads the page without a warning.
set -euo pipefail
bin=$1 page=$2
fail=0 checked=0
die() { echo "man_check: $*" >&2; fail=$((fail + 1)); }
# the page's text with roff's escapes for '-' and fonts removed
text=$(sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' "$page")
sections=$(grep '^\.SS ' "$page" | sed -e 's/^\.SS "\(.*\)"$/\1/' -e 's/\\-/-/g')

# "  train mnist     train a digit ..." -> "train mnist"; "  inspect FILE ..." -> "inspect"
cmds=$("$bin" --help | sed -n '/^Commands:/,/^$/p' | sed -n 's/^  \([a-z][a-z ]*[a-z]\)\( [A-Z][A-Z.]*\)*  .*/\1/p')
[ -n "$cmds" ] || die "no commands found in 'meganeura --help'"
while IFS= read -r cmd; do
  checked=$((checked + 1))
  grep -qx "meganeura $cmd" <<<"$sections" || die "command '$cmd' of --help has no section .SS \"meganeura $cmd\""
  # shellcheck disable=SC2086
  help=$("$bin" $cmd --help) || die "'meganeura $cmd --help' failed"
  for opt in $(grep -o -- '--[a-z][a-z0-9-]*' <<<"$help" | sort -u); do
    checked=$((checked + 1))
    # the option inside the command's own section
    sec=$(awk -v s=".SS \"meganeura $cmd\"" 'index($0, s) == 1 {on = 1; next} /^\.S[SH] / {on = 0} on' "$page" |
          sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g')
    grep -q -- "$opt\b" <<<"$sec" || die "option $opt of 'meganeura $cmd --help' is not in its section of the page"
  done
done <<<"$cmds"
for opt in $("$bin" --help | grep -o -- '--[a-z][a-z0-9-]*' | sort -u); do
  checked=$((checked + 1))
  grep -q -- "$opt\b" <<<"$text" || die "option $opt of 'meganeura --help' is not in the page"
done
if command -v groff >/dev/null; then
  warn=$(groff -man -ww -z "$page" 2>&1) || true
  checked=$((checked + 1))
  [ -z "$warn" ] || die "groff warns: $warn"
else
  die "groff is missing (scripts/deps.sh installs groff-base)"
fi
echo "man_check: $((checked - fail)) passed, $fail failed"
[ "$fail" = 0 ]
