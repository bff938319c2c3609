# make bench: apt-get install of a small package (jq and its two
# libraries) in a python session (Debian bookworm), through the session's
# package cache from Debian's archive ({type: apt}, the host's own
# sources): cold (the cache scope emptied first) and warm (what the cold
# run left; the InReleases are fetched and verified again, the indexes
# and .debs come from the cache), beside the floor: the same install in a
# session whose apt goes straight to deb.debian.org through the egress
# proxy (network.allow, the template's own sources), nothing verified but
# by the guest's apt.  Each figure is the wall time of one sbx-exec of
# `apt-get update && apt-get install -y jq`, the session already up; the
# three alternate, BENCH_APT_RUNS times (3; 0 leaves it out).  Needs the
# python template and Debian's archive; else it says so and adds nothing.
bench_apt() {
	local raw=$1 out=$2 runs=${BENCH_APT_RUNS:-3} t i s kind
	[ "$runs" -gt 0 ] || return 0
	ls -d "$SBX_TEMPLATES"/python@* >/dev/null 2>&1 || { echo "bench: apt: no python template" >&2; return 0; }
	curl -sf --max-time 20 -o /dev/null http://deb.debian.org/debian/dists/bookworm/InRelease ||
		{ echo "bench: apt: Debian's archive cannot be reached" >&2; return 0; }
	t=$(dirname "${BASH_SOURCE[0]}")/bench-time.py
	printf 'resources:\n  exec_timeout: {default: 10m, max: 1h}\npackages:\n  mode: allowlist\n  registries: [{type: apt}]\n  allow: {apt: [jq, libjq1, libonig5]}\n' \
		>"$raw/apt-cache.yaml"
	printf 'resources:\n  exec_timeout: {default: 10m, max: 1h}\nnetwork:\n  egress: allowlist\n  allow: [{domain: deb.debian.org, ports: [80]}]\n' \
		>"$raw/apt-direct.yaml"
	echo "bench: apt-get install jq: $runs x (cold, warm, direct)" >&2
	: >"$raw/apt-cold.txt"
	: >"$raw/apt-warm.txt"
	: >"$raw/apt-direct.txt"
	for i in $(seq "$runs"); do
		for kind in cold warm direct; do
			[ "$kind" != cold ] || rm -rf "$SBX_ROOT/var/lib/sbx/pkgcache"
			s=$(sbx-create -q -t python -p "$raw/apt-$([ $kind = direct ] && echo direct || echo cache).yaml") || return 1
			"$t" 1 sbx-exec -u root "$s" -- sh -c 'apt-get update -q >/dev/null && apt-get install -q -y --no-install-recommends jq >/dev/null' \
				>>"$raw/apt-$kind.txt" || { echo "bench: apt: the $kind install failed" >&2; sbx-kill "$s"; return 1; }
			sbx-kill "$s" >/dev/null
		done
	done
	python3 "$(dirname "${BASH_SOURCE[0]}")/benchstats.py" cold-warm-floor "$raw" "$out" apt \
		"apt-get install jq" "floor: apt-get install jq straight from Debian" apt
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	SBX_BUILD=${SBX_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
	export PATH="$SBX_BUILD/bin:$PATH" SBX_TEMPLATES=${SBX_TEMPLATES:-$SBX_BUILD/templates}
	export SBX_ROOT=$(mktemp -d /tmp/sbx-bench-apt.XXXXXX)
	. "$(dirname "$0")/lib-root.sh"
	trap root_cleanup EXIT
	raw=$SBX_ROOT/raw
	mkdir -p "$raw"
	bench_apt "$raw" "$SBX_BUILD/bench.json"
fi
