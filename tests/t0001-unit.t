#!/bin/sh
# The C unit tests print TAP themselves; run each as one subtest.
B=${SBX_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
set -- "$B"/tests/test-*
[ -x "$1" ] || { echo "1..0 # SKIP unit tests not built"; exit 0; }
echo "1..$#"
i=0
for t in "$@"; do
	i=$((i + 1))
	if out=$("$t" 2>&1); then echo "ok $i - $(basename "$t")"; else
		echo "not ok $i - $(basename "$t")"; printf '%s\n' "$out" | sed 's/^/#   /'; fi
done
