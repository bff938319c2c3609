#!/bin/bash
# packages.npm_scripts (sbx-policy(5), issue 40 item 2), with the real npm
# client in real node sessions against a real registry (verdaccio,
# tests/lib-npm.sh) in a network namespace this test makes.  Under deny, a
# package whose metadata declares a postinstall is refused before its
# tarball is fetched; one whose metadata says nothing but whose tarball
# carries a postinstall (the publisher sent the registry a manifest that
# is not the tarball's: "manifest confusion") is refused once the cache
# has read the tarball; a package without install scripts installs; every
# refusal names the script, the key and the policy, in what npm prints,
# packages.log and the audit trail; the guest's npm has ignore-scripts.
# Under allow (the control) the same postinstall runs, so the refusals
# above are what stopped it.  A wrong value fails the create with 3.
# sbx-ps --packages lists what was served and refused, with the exec that
# was running (issue 40 item 5).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib-npm.sh"
require_node_template
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
for t in ip curl jq base64 sha1sum python3 tar; do command -v $t >/dev/null || skip_all "needs $t"; done
[ -x "$SBX_BUILD/libexec/sbx/sbx-proxy" ] || skip_all "no sbx-proxy built"
S=$SBX_ROOT/var/lib/sbx/sessions
trap 'npm_registry_stop; _cleanup' EXIT

# ---- a wrong value: 3, nothing created ----
printf 'packages:\n  mode: allowlist\n  registries: [{type: npm, url: "http://198.51.100.1:4873/"}]\n  npm_scripts: maybe\n' \
	>"$TEST_TMP/bad.yaml"
out=$(sbx-create -q -t node -p "$TEST_TMP/bad.yaml" 2>&1)
is "$?" 3 "packages.npm_scripts: maybe is refused with 3"
like "$out" "bad\.yaml:4:[0-9]+: .*npm_scripts" "naming file:line:col and the key"
is "$(ls -A "$S" 2>/dev/null)" "" "and no session was created"

# ---- the registry ----
npm_registry_up npms

# sbx-plain: no install script.  sbx-post: a postinstall that leaves a
# mark in the guest, declared as npm publish declares it.
mkpkg() { # mkpkg NAME [SCRIPTS-JSON]
	local d=$TEST_TMP/src/$1
	mkdir -p "$d"
	jq -n --arg n "$1" --argjson s "${2:-{\}}" \
		'{name: $n, version: "1.0.0", main: "index.js", license: "MIT", scripts: $s}' >"$d/package.json"
	echo "module.exports = \"$1\";" >"$d/index.js"
	npm_registry_publish "$d" >>"$TEST_TMP/publish.log" 2>&1
}
mark='node -e "require(\"fs\").writeFileSync(\"/tmp/postinstall-ran\", process.env.npm_package_name)"'
mkpkg sbx-plain && mkpkg sbx-post "$(jq -n --arg m "$mark" '{postinstall: $m}')"
ok $? "sbx-plain and sbx-post published with the host's npm" || diag "$(cat "$TEST_TMP/publish.log")"

# sbx-liar: published the way any client may, with a manifest that names
# no script beside a tarball whose package.json has the postinstall.
d=$TEST_TMP/src/liar/package
mkdir -p "$d"
jq -n --arg m "$mark" '{name: "sbx-liar", version: "1.0.0", main: "index.js", license: "MIT", scripts: {postinstall: $m}}' \
	>"$d/package.json"
echo 'module.exports = "sbx-liar";' >"$d/index.js"
tar -C "$TEST_TMP/src/liar" -czf "$TEST_TMP/liar.tgz" package
liar_b64=$(base64 -w0 "$TEST_TMP/liar.tgz")
liar_sha1=$(sha1sum "$TEST_TMP/liar.tgz" | cut -d' ' -f1)
liar_int=sha512-$(python3 -c 'import base64, hashlib, sys
print(base64.b64encode(hashlib.sha512(open(sys.argv[1], "rb").read()).digest()).decode())' "$TEST_TMP/liar.tgz")
liar_sha=$(sha256sum "$TEST_TMP/liar.tgz" | cut -d' ' -f1)
tok=$(sed -n 's/.*_authToken=//p' "$NPM_USERCONFIG")
jq -n --arg b64 "$liar_b64" --arg sha1 "$liar_sha1" --arg int "$liar_int" --arg url "${NPM_REG_URL}sbx-liar/-/sbx-liar-1.0.0.tgz" \
	--argjson len "$(stat -c %s "$TEST_TMP/liar.tgz")" '{
	_id: "sbx-liar", name: "sbx-liar", "dist-tags": {latest: "1.0.0"},
	versions: {"1.0.0": {name: "sbx-liar", version: "1.0.0", main: "index.js", license: "MIT", _id: "sbx-liar@1.0.0",
		dist: {integrity: $int, shasum: $sha1, tarball: $url}}},
	_attachments: {"sbx-liar-1.0.0.tgz": {content_type: "application/octet-stream", data: $b64, length: $len}}}' \
	>"$TEST_TMP/liar.json"
code=$(curl -s -o "$TEST_TMP/liar.out" -w '%{http_code}' -X PUT -H "authorization: Bearer $tok" \
	-H 'content-type: application/json' --data-binary @"$TEST_TMP/liar.json" "${NPM_REG_URL}sbx-liar")
is "$code" 201 "sbx-liar published with a manifest that names no script"
is "$(curl -sf -H 'accept: application/vnd.npm.install-v1+json' "${NPM_REG_URL}sbx-liar" |
	jq -c '.versions["1.0.0"] | [.hasInstallScript // false, .scripts // {}]')" '[false,{}]' \
	"the registry's metadata of it declares no install script"

registries="  registries:
    - {type: npm, url: \"$NPM_REG_URL\"}"
printf 'resources:\n  exec_timeout: {default: 10m, max: 1h}\npackages:\n  mode: allowlist\n%s\n  npm_scripts: deny\n' \
	"$registries" >"$TEST_TMP/noscripts.yaml"
printf 'resources:\n  exec_timeout: {default: 10m, max: 1h}\npackages:\n  mode: allowlist\n%s\n' \
	"$registries" >"$TEST_TMP/scripts.yaml"
npm_says() { sed -n "s/^npm \(ERR!\|error\) $1 //p" | head -1; }
ran() { sbx-exec "$1" -- sh -c 'cat /tmp/postinstall-ran 2>/dev/null || echo none'; }

# ---- deny ----
a=$(sbx-create -q -t node -p "$TEST_TMP/noscripts.yaml")
ok $? "a node session under packages.npm_scripts: deny"
is "$(jq -r .limits.packages.npm_scripts "$S/$a/session.json")" deny "its record says so"
is "$(sbx-exec "$a" -- npm config get ignore-scripts)" true "the guest's npm has ignore-scripts"
out=$(sbx-exec "$a" -- npm install --no-progress sbx-plain 2>&1)
ok $? "npm install sbx-plain (no install script)" || diag "$out"
is "$(sbx-exec "$a" -- node -p 'require("sbx-plain")')" sbx-plain "it runs"

out=$(sbx-exec "$a" -- npm install --no-progress --ignore-scripts=false sbx-post 2>&1)
ok $(test $? -ne 0; echo $?) "npm install sbx-post fails, even with --ignore-scripts=false"
is "$(npm_says 403 <<<"$out")" \
	"403 Forbidden - GET http://10.0.2.2:3141/npm/0/tarball/sbx-post/1.0.0 - sbx-post@1.0.0 has an install script (hasInstallScript in the registry's metadata) and policy noscripts.yaml sets packages.npm_scripts: deny" \
	"npm shows why: the metadata's install script, the key and the policy"
log=$S/$a/packages.log
row() { jq -r --arg p "$2" 'select(.kind == "tarball" and .package == $p) | [.verdict, .status, .reason] | join(" | ")' "$1" | head -1; }
like "$(row "$log" sbx-post)" "^refused \| 403 \| sbx-post@1\.0\.0 has an install script" "packages.log: refused, 403, the reason"
is "$(jq -r 'select(.package == "sbx-post" and .kind == "tarball") | .size // 0' "$log" | head -1)" 0 \
	"and nothing of its tarball was fetched"

out=$(sbx-exec "$a" -- npm install --no-progress --ignore-scripts=false sbx-liar 2>&1)
ok $(test $? -ne 0; echo $?) "npm install sbx-liar fails, even with --ignore-scripts=false"
is "$(npm_says 403 <<<"$out")" \
	"403 Forbidden - GET http://10.0.2.2:3141/npm/0/tarball/sbx-liar/1.0.0 - sbx-liar@1.0.0 has an install script (postinstall in its package.json) and policy noscripts.yaml sets packages.npm_scripts: deny" \
	"the tarball's own postinstall is found, though the metadata names none"
like "$(row "$log" sbx-liar)" "^refused \| 403 \| sbx-liar@1\.0\.0 has an install script \(postinstall in its package\.json\)" \
	"packages.log: refused, with the reason"
is "$(jq -r 'select(.package == "sbx-liar" and .kind == "tarball") | .sha256' "$log" | head -1)" "$liar_sha" \
	"naming the tarball's sha256 (it was fetched and verified, then read)"
is "$(sbx-audit --type package.fetch --session "$a" --jsonl | jq -r 'select(.verdict == "refused") | .package' | sort -u | tr '\n' ' ')" \
	"sbx-liar sbx-post " "both refusals are in the audit trail"
is "$(ran "$a")" none "no postinstall ran in the guest"
is "$(sbx-exec "$a" -- sh -c 'ls node_modules | tr "\n" " "')" "sbx-plain " "and only sbx-plain was installed"
# A second request for the tarball, now in the cache: read again, refused again.
out=$(sbx-exec "$a" -- npm install --no-progress --prefer-online sbx-liar 2>&1)
like "$(npm_says 403 <<<"$out")" "sbx-liar@1\.0\.0 has an install script" "from the cache too"
is "$(jq -r 'select(.package == "sbx-liar" and .kind == "tarball") | .cache' "$log" | tr '\n' ' ')" "miss hit " \
	"(a miss, then a hit)"

# ---- sbx-ps --packages: what was installed and refused, by which exec ----
top=$(cd "$(dirname "$0")/.." && pwd)
sbx-ps --packages "$a" --json >"$TEST_TMP/pk.json"
ok $? "sbx-ps --packages"
python3 "$top/tests/tools/json-schema-check.py" validate --strict "$top/docs/schema" ps-packages.json <"$TEST_TMP/pk.json" >"$TEST_TMP/pk.check" 2>&1
ok $? "its JSON matches docs/schema/ps-packages.json" || diag "$(head -5 "$TEST_TMP/pk.check")"
is "$(jq -r '.[] | [.package, .version, .verdict, .cache // "-"] | join(" ")' "$TEST_TMP/pk.json")" "sbx-plain 1.0.0 ok miss
sbx-post 1.0.0 refused -
sbx-liar 1.0.0 refused miss
sbx-liar 1.0.0 refused hit" "every tarball served or refused, oldest first (served metadata left out)"
xid() { sbx-ps --execs "$a" --json | jq -r --arg w "$1" '.[] | select(.request.argv | index($w)) | .exec'; }
is "$(jq -r '.[0].execs | join(",")' "$TEST_TMP/pk.json")" "$(xid sbx-plain)" "sbx-plain: installed by the exec that ran npm install sbx-plain"
is "$(jq -r '.[1].execs | join(",")' "$TEST_TMP/pk.json")" "$(xid sbx-post)" "sbx-post: refused in the exec that asked for it"
like "$(sbx-ps --packages "$a" | head -2)" $'^TIME\tEXECS\tREGISTRY\tPACKAGE\tVERSION\tVERDICT\tCACHE\tSIZE\tREASON\n[^\t]+\te[0-9]+\tnpm/0\tsbx-plain\t1\.0\.0\tok\tmiss\t[0-9]+\t-$' \
	"the text: a header, then a line per request"
sbx-ps --packages "$a" --tenant other >/dev/null 2>&1
is "$?" 4 "another tenant's view: no such session (4)"
sbx-ps --packages s-000000000000 >/dev/null 2>&1
is "$?" 4 "a session that does not exist: 4"
sbx-kill "$a" >/dev/null

# ---- allow: the same packages, and their scripts run ----
b=$(sbx-create -q -t node -p "$TEST_TMP/scripts.yaml")
ok $? "a node session under the default, allow"
is "$(jq -r .limits.packages.npm_scripts "$S/$b/session.json")" allow "its record says so"
is "$(sbx-exec "$b" -- npm config get ignore-scripts)" false "the guest's npm runs scripts"
out=$(sbx-exec "$b" -- npm install --no-progress sbx-post 2>&1)
ok $? "npm install sbx-post" || diag "$out"
is "$(ran "$b")" sbx-post "its postinstall ran: the refusal above is what stopped it"
sbx-exec "$b" -- rm -f /tmp/postinstall-ran
out=$(sbx-exec "$b" -- npm install --no-progress sbx-liar 2>&1)
ok $? "npm install sbx-liar" || diag "$out"
# npm (7 and later) goes by the metadata's hasInstallScript, at install
# and at rebuild; a client that reads the package.json it unpacked (yarn,
# pnpm) runs the tarball's script.  The cache refuses both halves.
is "$(ran "$b")" none "npm install trusted the metadata and ran nothing"
out=$(sbx-exec "$b" -- npm rebuild sbx-liar 2>&1)
is "$(ran "$b")" none "nor did npm rebuild"
out=$(sbx-exec "$b" -- sh -c 'cd node_modules/sbx-liar && npm run postinstall' 2>&1)
ok $? "npm run postinstall in the unpacked package" || diag "$out"
is "$(ran "$b")" sbx-liar "the tarball's own postinstall is live code: what reads its package.json at install runs it"
sbx-kill "$b" >/dev/null

done_testing
