#!/bin/bash
# The whole test suite, from a fresh clone: packages, build, guest images
# (the default and python templates, cached under /var/cache/sbx), unit and
# microVM tests, man page lint, and the same suite again under ASan/UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "test.sh: run as root" >&2; exit 1; }
# Every prove pass (QEMU, Cloud Hypervisor, both again under ASan) adds
# its counts here; the last line of the run is their sum, whether it
# passed or not, so a run that skipped everything says so.
SBX_TOTALS=$(mktemp /tmp/sbx-totals.XXXXXX)
export SBX_TOTALS
totals() {
	local rc=$?
	awk '{ p += $1; f += $2; s += $3 } END { printf "%d passed, %d failed, %d skipped\n", p, f, s }' "$SBX_TOTALS"
	rm -f "$SBX_TOTALS"
	exit "$rc"
}
trap totals EXIT
scripts/deps.sh
make -j"$(nproc)" all
make image
# Minutes the first time (debootstrap), seconds once cached.
make python-image
# t0900-python.t fails, not skips, without it.
export SBX_REQUIRE_PYTHON=1
make lint-man
make check
# The fuzz targets over their corpora plus a short run each: hostile inputs
# to every parser (frames, policies, tar streams, audit log, records).
FUZZ_SECONDS=${FUZZ_SECONDS:-10} scripts/fuzz.sh
if [ "${SBX_SKIP_ASAN:-0}" != 1 ]; then
	make asan
fi
