#!/bin/bash
# apt through the package cache against Debian's real archive (issue 40
# item 3): {type: apt} with no url serves the archive the host's own apt
# uses for the template's suite (bookworm: bookworm, bookworm-updates and
# bookworm-security, as /etc/apt names them), each InRelease verified with
# the host's keyring; apt-get install jq in a python session installs jq
# and exactly its dependencies, each allowed by name in packages.allow.apt
# and logged by name, version and architecture; a package outside the list
# is refused.  The one network this test reaches is Debian's archive,
# through the session's cache.
. "$(dirname "$0")/lib.sh"
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root"
ls "$SBX_TEMPLATES"/python@*/manifest.json >/dev/null 2>&1 || skip_all "no python template built (make python-image)"
for t in curl jq gpgv; do command -v $t >/dev/null || skip_all "needs $t"; done
grep -rqs bookworm /etc/apt/sources.list /etc/apt/sources.list.d/ || skip_all "the host's apt sources name no bookworm archive"
url=$(grep -rhos 'http://deb\.debian\.org/debian\b' /etc/apt/sources.list /etc/apt/sources.list.d/ | head -1)
[ -n "$url" ] || skip_all "the host's apt sources do not use deb.debian.org"
curl -sf --max-time 20 -o /dev/null "$url/dists/bookworm/InRelease" ||
	skip_all "Debian's archive ($url) cannot be reached from here"
S=$SBX_ROOT/var/lib/sbx/sessions

printf 'resources:\n  exec_timeout: {default: 10m, max: 1h}\npackages:\n  mode: allowlist\n  registries: [{type: apt}]\n  allow: {apt: [jq, libjq1, libonig5]}\n' \
	>"$TEST_TMP/debian.yaml"
a=$(sbx-create -q -t python -p "$TEST_TMP/debian.yaml")
ok $? "a python session with {type: apt}: the host's own archive"
is "$(jq -r '[.limits.packages.registries[] | select(.type == "apt") | .suite] | join(" ")' "$S/$a/session.json")" \
	"bookworm bookworm-updates bookworm-security" "the record: the host's three bookworm suites"
is "$(jq -r '[.limits.packages.registries[] | .host] | unique | join(" ")' "$S/$a/session.json")" true \
	"each named by the host's sources"
cmp -s /usr/share/keyrings/debian-archive-keyring.gpg "$S/$a/apt-0.gpg"
ok $? "checked with the host's keyring (Signed-By), copied beside the record"
src=$(sbx-exec "$a" -- cat /etc/apt/sources.list)
like "$src" $'deb http://10.0.2.2:3141/apt/0 bookworm main\ndeb http://10.0.2.2:3141/apt/1 bookworm-updates main\ndeb http://10.0.2.2:3141/apt/2 bookworm-security main' \
	"the guest's sources: the cache, its own keys still checking (no trusted=yes)"

out=$(sbx-exec -u root "$a" -- apt-get update --error-on=any 2>&1)
ok $? "apt-get update through the cache" || diag "$out"
log=$S/$a/packages.log
is "$(jq -r 'select(.kind == "release") | [.registry, .verdict, .verified] | join(" ")' "$log" | sort | tr '\n' ',')" \
	"apt/0 ok signature,apt/1 ok signature,apt/2 ok signature," "each InRelease verified with gpgv"
out=$(sbx-exec -u root "$a" -- apt-get install -y --no-install-recommends jq 2>&1)
ok $? "apt-get install jq" || diag "$out"
like "$(sbx-exec "$a" -- jq --version)" '^jq-1\.' "jq runs"
is "$(jq -r 'select(.kind == "deb" and .verdict == "ok") | .package' "$log" | sort -u | tr '\n' ' ')" "jq libjq1 libonig5 " \
	"packages.log: jq and its two dependencies"
is "$(jq -r 'select(.kind == "deb" and .package == "jq") | [.arch, (.version | test("^1\\.6")), (.registry_hash | startswith("sha256:"))] | map(tostring) | join(" ")' "$log")" \
	"amd64 true true" "  by version and architecture, checked against the index's SHA-256"
out=$(sbx-exec -u root "$a" -- apt-get install -y --no-install-recommends tree 2>&1)
ok $(test $? -ne 0; echo $?) "apt-get install tree, not in packages.allow.apt: refused" || diag "$out"
like "$out" "403 +tree matches no pattern of packages\.allow\.apt, in policy debian\.yaml" "  apt shows why"
is "$(sbx-audit --type package.fetch --session "$a" --jsonl | jq -r 'select(.kind == "deb") | [.package, .verdict] | join(":")' | sort -u | tr '\n' ' ')" \
	"jq:ok libjq1:ok libonig5:ok tree:refused " "the audit trail has each .deb"
sbx-kill -q "$a" >/dev/null 2>&1

done_testing
