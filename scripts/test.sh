#!/bin/bash
# The whole test suite, from a fresh clone: packages, build, guest images
# (the default, python and node templates, cached under /var/cache/sbx), unit and
# microVM tests, man page lint, and the same suite again under ASan/UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "test.sh: run as root" >&2; exit 1; }
# Every prove pass (QEMU, Cloud Hypervisor, both again under ASan) adds
# its counts here; the last line of the run is their sum, whether it
# passed or not, so a run that skipped everything says so.
. scripts/lib-root.sh # root_cgroups_remove
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
# The default and python templates (templates/*.yaml, sbx-template build).
# python: minutes the first time (debootstrap, apt), seconds once cached.
make image
make python-image
# t0900-python.t fails, not skips, without it.
export SBX_REQUIRE_PYTHON=1
# The node template (templates/node.yaml) for t1420-npm.t, and the base
# template (templates/base.yaml: E2B's default) for sbx-serve's tests.  A
# build takes minutes (Debian's packages installed afresh; only the
# bootstrap is cached), so the last one is kept in SBX_CACHE/templates and
# copied in (seconds) while it was built from this spec over the current
# template it is built from (kernel, guest-init); else it is built, and
# replaces the cached one.  In a state root of its own: the machine's
# /var/lib/sbx is not touched.
cached_template() { # NAME FROM
	local name=$1 from=$2 cache=${SBX_CACHE:-/var/cache/sbx}/templates spec_sha base have root
	root=$(mktemp -d /tmp/sbx-$name-tpl.XXXXXX)
	export SBX_TEMPLATES=$PWD/build/templates SBX_ROOT=$root
	spec_sha=$(sha256sum "templates/$name.yaml" | cut -d' ' -f1)
	base=$(build/bin/sbx-template inspect --json "$from" | jq -r .template)
	current() { # DIR: the template in DIR built from this spec over $base
		local m
		for m in "$1/$name"@*/manifest.json; do
			[ -f "$m" ] && jq -e --arg s "$spec_sha" --arg b "$base" \
				'.source.sha256 == $s and .base == $b' "$m" >/dev/null &&
				jq -r '.name + "@" + .version' "$m" && return 0
		done
		return 0
	}
	have=$(current build/templates)
	if [ -z "$have" ]; then
		have=$(current "$cache")
		if [ -n "$have" ]; then
			rm -rf "build/templates/.$have.tmp"
			cp -a "$cache/$have" "build/templates/.$have.tmp"
			mv "build/templates/.$have.tmp" "build/templates/$have"
			echo "test.sh: $have from $cache" >&2
		else
			have=$(build/bin/sbx-template build "$name" -f "templates/$name.yaml")
			mkdir -p "$cache"
			rm -rf "$cache/.$have.tmp"
			cp -a "build/templates/$have" "$cache/.$have.tmp"
			find "$cache" -mindepth 1 -maxdepth 1 -name "$name@*" -exec rm -rf {} +
			mv "$cache/.$have.tmp" "$cache/$have"
			echo "test.sh: built $have (kept in $cache)" >&2
		fi
	fi
	# Older versions of this build directory go (not in use here).
	build/bin/sbx-template list -q "$name" | grep -vxF "$have" | xargs -r build/bin/sbx-template rm || true
	root_cgroups_remove || true
	rm -rf "$root"
	unset SBX_TEMPLATES SBX_ROOT
}
cached_template node default
cached_template base python
# t2000-serve.t fails, not skips, without base.
export SBX_REQUIRE_BASE=1
# t1420-npm.t fails, not skips, without it.
export SBX_REQUIRE_NODE=1
make lint-man
# make check, whose image targets were made above (a remake is half a minute).
SBX_BUILD=$PWD/build scripts/check.sh -v --timer
# The fuzz targets over their corpora plus a short run each: hostile inputs
# to every parser (frames, policies, tar streams, audit log, records).
FUZZ_SECONDS=${FUZZ_SECONDS:-10} scripts/fuzz.sh
if [ "${SBX_SKIP_ASAN:-0}" != 1 ]; then
	make asan
fi
