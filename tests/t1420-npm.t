#!/bin/bash
# The governed package path with the real npm client (sbx-policy(5),
# packages): `npm install` in a node session goes through the session's
# pull-through cache to a real npm registry (verdaccio, tests/lib-npm.sh)
# in a network namespace this test makes, seeded with packages the test
# publishes to it.  Each tarball is logged (name, version, registry,
# sha256, hit/miss) and audited; offline mode's refusal is what npm prints;
# a tarball that no longer matches its registry's integrity is refused and
# not kept; a second session is served from the cache with the registry
# stopped.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib-npm.sh"
require_node_template
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
for t in ip curl jq; do command -v $t >/dev/null || skip_all "needs $t"; done
[ -x "$SBX_BUILD/libexec/sbx/sbx-proxy" ] || skip_all "no sbx-proxy built"
S=$SBX_ROOT/var/lib/sbx/sessions
CACHE=$SBX_ROOT/var/lib/sbx/pkgcache
trap 'npm_registry_stop; _cleanup' EXIT

# ---- the registry ----
npm_registry_up npm

# Three packages: sbx-left in two versions, sbx-app depending on ^1.0.0 of
# it (so the newer one), and sbx-bad, whose stored tarball is altered after
# it is published.
mkpkg() { # mkpkg NAME VERSION [DEP-JSON]
	local d=$TEST_TMP/src/$1-$2
	mkdir -p "$d"
	jq -n --arg n "$1" --arg v "$2" --argjson deps "${3:-{\}}" \
		'{name: $n, version: $v, main: "index.js", license: "MIT", dependencies: $deps}' >"$d/package.json"
	if [ "$1" = sbx-app ]; then
		echo 'module.exports = "app-" + require("sbx-left");' >"$d/index.js"
	else
		echo "module.exports = \"$1-$2\";" >"$d/index.js"
	fi
	npm_registry_publish "$d" >"$TEST_TMP/publish.log" 2>&1
}
mkpkg sbx-left 1.0.0 && mkpkg sbx-left 1.1.0 && mkpkg sbx-app 1.0.0 '{"sbx-left": "^1.0.0"}' &&
	mkpkg sbx-bad 1.0.0
ok $? "four versions of three packages published with the host's npm" || diag "$(cat "$TEST_TMP/publish.log")"
tgz=$NPM_REG_STORAGE
sha() { sha256sum "$1" | cut -d' ' -f1; }
left_sha=$(sha "$tgz/sbx-left/sbx-left-1.1.0.tgz")
app_sha=$(sha "$tgz/sbx-app/sbx-app-1.0.0.tgz")
bad_integrity=$(curl -sf "${NPM_REG_URL}sbx-bad" | jq -r '.versions["1.0.0"].dist.integrity')
# Tampered: the registry keeps serving the published integrity, but the
# bytes are another package's.
cp "$tgz/sbx-left/sbx-left-1.0.0.tgz" "$tgz/sbx-bad/sbx-bad-1.0.0.tgz"
tampered_sha=$(sha "$tgz/sbx-bad/sbx-bad-1.0.0.tgz")
tampered_sha512=$(sha512sum "$tgz/sbx-bad/sbx-bad-1.0.0.tgz" | cut -d' ' -f1)

cat >"$TEST_TMP/npm.yaml" <<EOF
resources:
  exec_timeout: {default: 10m, max: 1h}
packages:
  mode: allowlist
  registries:
    - {type: npm, url: "$NPM_REG_URL"}
EOF
cat >"$TEST_TMP/no-installs.yaml" <<EOF
resources:
  exec_timeout: {default: 10m, max: 1h}
packages:
  mode: offline
EOF

# ---- offline: npm shows the refusal, naming the key and the policy ----
off=$(sbx-create -q -t node -p "$TEST_TMP/no-installs.yaml")
ok $? "a node session with packages.mode: offline"
out=$(sbx-exec "$off" -- npm install --no-progress sbx-app 2>&1)
rc=$?
ok $(test "$rc" -ne 0; echo $?) "npm install fails (status $rc)"
# What follows npm's "npm ERR! STATUS " (npm 9; "npm error STATUS " since npm 10).
npm_says() { sed -n "s/^npm \(ERR!\|error\) $1 //p" | head -1; }
is "$(npm_says 403 <<<"$out")" \
	"403 Forbidden - GET http://127.0.0.1:3141/npm/0/sbx-app - package installs are refused: packages.mode: offline in policy no-installs.yaml" \
	"npm prints the refusal once, naming the key and the policy"
sbx-kill "$off" >/dev/null

# ---- allowlist: npm install through the cache ----
a=$(sbx-create -q -t node -p "$TEST_TMP/npm.yaml")
ok $? "a node session with packages.mode: allowlist"
like "$(sbx-exec "$a" -- npm config get registry)" '^http://10\.0\.2\.2:3141/npm/0/$' "npm's registry is the cache"
out=$(sbx-exec "$a" -- npm install --no-progress sbx-app 2>&1)
ok $? "npm install sbx-app in /workspace" || diag "$out"
like "$out" 'added 2 packages' "npm added it and its dependency"
is "$(sbx-exec "$a" -- node -p 'require("sbx-app")')" "app-sbx-left-1.1.0" \
	"it runs, with the newest sbx-left that ^1.0.0 allows"
log=$S/$a/packages.log
row() { jq -r --arg p "$2" 'select(.kind == "tarball" and .package == $p) |
	[.package, .version, .registry, .registry_url, .sha256, .cache, .verdict] | join(" ")' "$1"; }
is "$(row "$log" sbx-app)" "sbx-app 1.0.0 npm/0 $NPM_REG_URL $app_sha miss ok" \
	"packages.log: sbx-app's name, version, registry, sha256, a miss"
is "$(row "$log" sbx-left)" "sbx-left 1.1.0 npm/0 $NPM_REG_URL $left_sha miss ok" "and sbx-left's"
is "$(sbx-audit --type package.fetch --session "$a" --jsonl | jq -r '[.package, .version, .sha256, .verdict] | join(" ")' | sort | tr '\n' ' ')" \
	"sbx-app 1.0.0 $app_sha ok sbx-left 1.1.0 $left_sha ok " "the audit trail has both as package.fetch"

# ---- a tampered tarball: refused, with the reason npm shows, and not kept ----
# npm retries a 502 after 10 s then 60 s by default; one retry a second
# later shows the same (every try refused) without the minute of waiting.
retry=(--fetch-retries=1 --fetch-retry-mintimeout=1000 --fetch-retry-maxtimeout=1000)
out=$(sbx-exec "$a" -- npm install --no-progress "${retry[@]}" sbx-bad 2>&1)
rc=$?
ok $(test "$rc" -ne 0; echo $?) "npm install of a tampered tarball fails (status $rc)"
bad_hex=$(printf '%s' "${bad_integrity#sha512-}" | base64 -d | od -An -v -tx1 | tr -d ' \n')
is "$(npm_says 502 <<<"$out")" \
	"Bad Gateway - GET http://10.0.2.2:3141/npm/0/tarball/sbx-bad/1.0.0 - sha512 mismatch: sbx-bad-1.0.0.tgz from registry npm/0 is not the file its index names (sha512 $bad_hex, got $tampered_sha512)" \
	"npm shows why: the cache's sha512 mismatch, both hashes"
# npm tries a 502 again: every try is refused.
is "$(jq -r 'select(.kind == "tarball" and .package == "sbx-bad") | .verdict' "$log" | sort | uniq -c | tr -s ' ')" " 2 hash-mismatch" \
	"packages.log says hash-mismatch, for npm's try and its retry"
ok $(test ! -e "$CACHE/shared/sha512-$bad_hex"; echo $?) "no cache entry under the registry's hash"
is "$(find "$CACHE" -type f -exec sha256sum {} + | grep -c "^$tampered_sha ")" 0 "nor the tampered bytes under any name"
is "$(sbx-exec "$a" -- sh -c 'test -e node_modules/sbx-bad && echo there || echo absent')" absent \
	"and nothing was installed"

# ---- the registry stops; a second session is served from the cache ----
npm_registry_stop
ok $(curl -s --max-time 3 "${NPM_REG_URL}-/ping" >/dev/null; test $? -ne 0; echo $?) "the registry is stopped"
b=$(sbx-create -q -t node -p "$TEST_TMP/npm.yaml")
ok $? "a second session under the same policy"
out=$(sbx-exec "$b" -- npm install --no-progress sbx-app 2>&1)
ok $? "npm install sbx-app again, with no registry" || diag "$out"
is "$(sbx-exec "$b" -- node -p 'require("sbx-app")')" "app-sbx-left-1.1.0" "the same packages"
is "$(row "$S/$b/packages.log" sbx-app)" "sbx-app 1.0.0 npm/0 $NPM_REG_URL $app_sha hit ok" \
	"packages.log of the second session says hit for sbx-app"
is "$(row "$S/$b/packages.log" sbx-left)" "sbx-left 1.1.0 npm/0 $NPM_REG_URL $left_sha hit ok" "and for sbx-left"
is "$(jq -r 'select(.kind == "metadata") | [.package, .cache] | join(" ")' "$S/$b/packages.log" | sort -u | tr '\n' ' ')" \
	"sbx-app stale sbx-left stale " "their metadata as kept with the tarballs, logged as stale"
out=$(sbx-exec "$b" -- npm install --no-progress "${retry[@]}" sbx-left@1.0.0 2>&1)
rc=$?
ok $(test "$rc" -ne 0; echo $?) "a version never fetched is not there to serve (status $rc)"
like "$(npm_says 502 <<<"$out")" "^Bad Gateway - GET http://10\.0\.2\.2:3141/npm/0/tarball/sbx-left/1\.0\.0 - cannot fetch" \
	"npm says the cache cannot fetch it"
out=$(sbx-exec "$b" -- npm install --no-progress "${retry[@]}" sbx-bad 2>&1)
like "$(npm_says 502 <<<"$out")" "^Bad Gateway - GET http://10\.0\.2\.2:3141/npm/0/sbx-bad - cannot fetch the metadata of sbx-bad" \
	"a refused tarball left no metadata behind to serve"

done_testing
