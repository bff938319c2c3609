#!/bin/bash
# npm ci of a real project of a few dozen packages (tests/fixtures/npm-project:
# yargs, chalk, commander, debug, semver and their dependencies, 25 in
# all, locked by package-lock.json v3) from npm's real registry, through the
# session's cache under packages.lock.npm (issue 40): every tarball served
# is the lock's, checked against the lock's sha512, and logged; a version
# outside the lock is refused naming the lock; a lock whose integrity for
# one package is not the registry's tarball (what a tampered tarball looks
# like to the lock) has that package refused and logged, the rest served
# from the cache the first session filled.  The one network this test
# reaches is npm's registry, through the cache.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib-npm.sh"
require_node_template
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root"
command -v jq >/dev/null || skip_all "needs jq"
curl -sf --max-time 20 -o /dev/null https://registry.npmjs.org/ms || skip_all "npm's registry cannot be reached from here"
S=$SBX_ROOT/var/lib/sbx/sessions
FIX=$(cd "$(dirname "$0")/fixtures/npm-project" && pwd)
LOCK=$FIX/package-lock.json
entries=$(jq '[.packages | keys[] | select(startswith("node_modules/"))] | length' "$LOCK")

policy() { # policy NAME LOCK
	printf 'resources:\n  exec_timeout: {default: 10m, max: 1h}\npackages:\n  mode: allowlist\n  registries:\n    - {type: npm, url: "https://registry.npmjs.org/"}\n  lock: {npm: "%s"}\n' \
		"$2" >"$TEST_TMP/$1.yaml"
}
project() { # project SESSION LOCK: the project and that lock in /workspace
	sbx-cp "$FIX/package.json" "$1:/workspace/package.json" && sbx-cp "$2" "$1:/workspace/package-lock.json"
}
ci() { sbx-exec "$1" -- sh -c 'cd /workspace && npm ci --no-audit --no-fund --no-progress' 2>&1; }

policy locked "$LOCK"
a=$(sbx-create -q -t node -p "$TEST_TMP/locked.yaml")
ok $? "a node session under the project's package-lock.json"
is "$(jq -r '.limits.packages.locks.npm.entries' "$S/$a/session.json")" "$entries" "its record names the lock's $entries packages"
project "$a" "$LOCK"
ok $? "the project and its lock are copied in"
out=$(ci "$a")
ok $? "npm ci of $entries packages through the cache" || diag "$out"
is "$(sbx-exec "$a" -- sh -c 'cd /workspace && node -e "
const y = require(\"yargs/yargs\"), semver = require(\"semver\"), chalk = require(\"chalk\");
console.log(semver.gt(\"1.2.3\", \"1.2.0\"), typeof y, typeof chalk.red)"')" "true function function" "the project runs"
log=$S/$a/packages.log
is "$(jq -r 'select(.kind == "tarball" and .verdict == "ok") | .package' "$log" | sort -u | wc -l)" "$entries" \
	"packages.log: all $entries tarballs served"
want=$(jq -r '.packages | to_entries[] | select(.key | startswith("node_modules/")) | "\(.key | ltrimstr("node_modules/")) \(.value.version)"' "$LOCK" | sort)
is "$(jq -r 'select(.kind == "tarball" and .verdict == "ok") | "\(.package) \(.version)"' "$log" | sort -u)" "$want" \
	"  each at the lock's version"
is "$(jq -r 'select(.kind == "tarball" and .verdict == "ok") | .registry_hash | split(":")[0]' "$log" | sort -u)" sha512 \
	"  each checked against a sha512"
out=$(sbx-exec "$a" -- sh -c 'cd /workspace && npm install --no-audit --no-fund --no-progress semver@7.6.0' 2>&1)
ok $(test $? -ne 0; echo $?) "npm install of semver@7.6.0, outside the lock: refused" || diag "$out"
like "$out" "No matching version found for semver@7\.6\.0" "  the cache's metadata lists only the lock's version"
is "$(sbx-exec "$a" -- node -e 'fetch("http://10.0.2.2:3141/npm/0/tarball/semver/7.6.0").then(r => console.log(r.status))')" 403 \
	"  and its tarball, asked for directly, is refused with 403"
like "$(jq -r 'select(.kind == "tarball" and .package == "semver" and .version == "7.6.0") | .reason' "$log")" \
	"^semver 7\.6\.0 is not in the lock .*package-lock\.json \(packages\.lock\.npm\)" "  packages.log names the lock"
sbx-kill "$a" >/dev/null

# A lock that names another sha512 for ms: what the lock says and what the
# registry serves differ, as they would for a tampered tarball.
jq --arg i "sha512-$(head -c 64 /dev/urandom | base64 -w0)" '.packages["node_modules/ms"].integrity = $i' "$LOCK" \
	>"$TEST_TMP/package-lock.json"
policy tampered "$TEST_TMP/package-lock.json"
b=$(sbx-create -q -t node -p "$TEST_TMP/tampered.yaml")
ok $? "a second session, under a lock whose sha512 for ms is not the registry's"
project "$b" "$TEST_TMP/package-lock.json"
out=$(ci "$b")
ok $(test $? -ne 0; echo $?) "npm ci fails" || diag "$out"
blog=$S/$b/packages.log
like "$(jq -r 'select(.kind == "tarball" and .package == "ms") | [.verdict, .status, .reason] | join(" | ")' "$blog" | head -1)" \
	"^refused \| 403 \| registry npm/0 gives ms@2\.1\.2 an integrity that is not the one the lock .* names" \
	"ms is refused, naming the lock, before its tarball is fetched"
is "$(sbx-audit --type package.fetch --session "$b" --jsonl | jq -r 'select(.verdict == "refused") | .package' | sort -u)" ms \
	"the refusal is in the audit trail"
hits=$(jq -r 'select(.kind == "tarball" and .verdict == "ok") | .cache' "$blog" | sort | uniq -c | awk '{print $2 "=" $1}' | tr '\n' ' ')
like "$hits" "^hit=[0-9]+ $" "what it did serve came from the cache the first session filled ($hits)"
sbx-kill "$b" >/dev/null

done_testing
