# make bench: npm ci of a real locked project (tests/fixtures/npm-project:
# 25 packages) in a node session, through the session's package cache
# from npm's registry under packages.lock.npm: cold (the cache scope
# emptied first) and warm (what the cold run left), beside the floor: the
# same npm ci in a session whose npm goes straight to registry.npmjs.org
# through the egress proxy (network.allow, --registry), nothing checked
# but by npm itself.  Each figure is the wall time of one sbx-exec of npm
# ci, the session up and the project copied in; the three alternate,
# BENCH_NPM_CI_RUNS times (3; 0 leaves it out).  Needs the node template
# and npm's registry; else it says so and adds nothing.
bench_npm_ci() {
	local raw=$1 out=$2 runs=${BENCH_NPM_CI_RUNS:-3} t i s kind fix reg
	[ "$runs" -gt 0 ] || return 0
	ls -d "$SBX_TEMPLATES"/node@* >/dev/null 2>&1 || { echo "bench: npm ci: no node template" >&2; return 0; }
	curl -sf --max-time 20 -o /dev/null https://registry.npmjs.org/ms ||
		{ echo "bench: npm ci: npm's registry cannot be reached" >&2; return 0; }
	t=$(dirname "${BASH_SOURCE[0]}")/bench-time.py
	fix=$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/fixtures/npm-project" && pwd)
	printf 'resources:\n  exec_timeout: {default: 10m, max: 1h}\npackages:\n  mode: allowlist\n  registries: [{type: npm, url: "https://registry.npmjs.org/"}]\n  lock: {npm: "%s"}\n' \
		"$fix/package-lock.json" >"$raw/npmci-cache.yaml"
	printf 'resources:\n  exec_timeout: {default: 10m, max: 1h}\nnetwork:\n  egress: allowlist\n  allow: [{domain: registry.npmjs.org, ports: [443]}]\n' \
		>"$raw/npmci-direct.yaml"
	echo "bench: npm ci of a 25-package project: $runs x (cold, warm, direct)" >&2
	: >"$raw/npmci-cold.txt"
	: >"$raw/npmci-warm.txt"
	: >"$raw/npmci-direct.txt"
	for i in $(seq "$runs"); do
		for kind in cold warm direct; do
			[ "$kind" != cold ] || rm -rf "$SBX_ROOT/var/lib/sbx/pkgcache"
			reg=
			[ "$kind" != direct ] || reg=--registry=https://registry.npmjs.org/
			s=$(sbx-create -q -t node -p "$raw/npmci-$([ $kind = direct ] && echo direct || echo cache).yaml") || return 1
			sbx-cp "$fix/package.json" "$s:/workspace/package.json" && sbx-cp "$fix/package-lock.json" "$s:/workspace/package-lock.json" ||
				{ sbx-kill "$s"; return 1; }
			# The floor trusts what the host trusts, as the cache does:
			# the host's own added CAs (a TLS-inspecting egress, as on
			# our machines), handed to the guest's npm.
			local ca=""
			if [ "$kind" = direct ] && cat /usr/local/share/ca-certificates/*.crt >"$raw/host-ca.pem" 2>/dev/null; then
				sbx-cp "$raw/host-ca.pem" "$s:/workspace/host-ca.pem" && ca="NODE_EXTRA_CA_CERTS=/workspace/host-ca.pem"
			fi
			"$t" 1 sbx-exec "$s" -- sh -c "cd /workspace && $ca npm ci --no-audit --no-fund --no-progress $reg >/dev/null" \
				>>"$raw/npmci-$kind.txt"
			sbx-exec "$s" -- test -d /workspace/node_modules/yargs ||
				{ echo "bench: npm ci: the $kind install failed" >&2; sbx-kill "$s"; return 1; }
			sbx-kill "$s" >/dev/null
		done
	done
	python3 "$(dirname "${BASH_SOURCE[0]}")/benchstats.py" cold-warm-floor "$raw" "$out" npmci \
		"npm ci (25 packages)" "floor: npm ci straight from npm's registry" npm_ci
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	SBX_BUILD=${SBX_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
	export PATH="$SBX_BUILD/bin:$PATH" SBX_TEMPLATES=${SBX_TEMPLATES:-$SBX_BUILD/templates}
	export SBX_ROOT=$(mktemp -d /tmp/sbx-bench-npm-ci.XXXXXX)
	. "$(dirname "$0")/lib-root.sh"
	trap root_cleanup EXIT
	raw=$SBX_ROOT/raw
	mkdir -p "$raw"
	bench_npm_ci "$raw" "$SBX_BUILD/bench.json"
fi
