#!/bin/sh
# The C unit tests (tests/unit, built by make into build/tests): each prints
# TAP; their assertions are passed through here renumbered as one stream,
# so prove counts every one.  A unit test that exits non-zero without a
# failing line (a crash) is a failure of its own.
B=${SBX_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
set -- "$B"/tests/test-*
[ -x "$1" ] || { echo "1..0 # SKIP unit tests not built"; exit 0; }
i=0
for t in "$@"; do
	case $t in *.d) continue ;; esac # make's header dependencies
	name=$(basename "$t")
	out=$("$t" 2>&1)
	rc=$?
	echo "# $name"
	printf '%s\n' "$out" | awk -v i="$i" -v name="$name" -v count="${TMPDIR:-/tmp}/sbx-unit.$$" '
		/^ok [0-9]+/ || /^not ok [0-9]+/ {
			neg = /^not /; sub(/^(not )?ok [0-9]+( - )?/, ""); i++
			printf "%sok %d - %s: %s\n", neg ? "not " : "", i, name, $0; next }
		/^1\.\.0 # SKIP/ { i++; sub(/^1\.\.0 # SKIP */, ""); printf "ok %d - %s # SKIP %s\n", i, name, $0; next }
		/^1\.\./ { next }
		{ print "# " $0 }
		END { print i > count }'
	i=$(cat "${TMPDIR:-/tmp}/sbx-unit.$$")
	if [ "$rc" -ne 0 ] && ! printf '%s\n' "$out" | grep -q '^not ok'; then
		i=$((i + 1))
		echo "not ok $i - $name exited $rc"
	fi
done
rm -f "${TMPDIR:-/tmp}/sbx-unit.$$"
echo "1..$i"
