#!/bin/bash
# What a session may install (sbx-policy(5) packages.lock, pins, allow,
# deny, require_hashes), with real clients in real sessions.  pip installs a
# --hash requirements file through the cache from the PEP 503 registry this
# test builds (as t1400 does, in a network namespace); a version outside
# the lock, a package not in it, a file whose hash is not the lock's and a
# tampered file are refused and logged.  Name rules refuse before anything
# is fetched upstream.  require_hashes leaves unhashed files out of the
# index and refuses them.  Hostile locks fail the create with 3 and leave
# nothing.  With the node template, npm ci installs a small real project
# (tests/fixtures/npm-lock) from registry.npmjs.org through the cache, and
# a version outside its lock is refused.
. "$(dirname "$0")/lib.sh"
if ! ls "$SBX_TEMPLATES"/python@*/manifest.json >/dev/null 2>&1; then
	[ "${SBX_REQUIRE_PYTHON:-0}" = 1 ] || skip_all "no python template built (make python-image)"
	ok 1 "a python template in $SBX_TEMPLATES (make python-image)"
	done_testing
fi
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
for t in ip python3 jq sha256sum; do command -v $t >/dev/null || skip_all "needs $t"; done
[ -x "$SBX_BUILD/libexec/sbx/sbx-proxy" ] || skip_all "no sbx-proxy built"
S=$SBX_ROOT/var/lib/sbx/sessions
FIX=$(cd "$(dirname "$0")/fixtures" && pwd)

# ---- the registry ----
test_net_hosts lock 1
REG=${NET_IP[0]}
trap '[ -n "${WEBPID:-}" ] && kill "$WEBPID" 2>/dev/null; rm -rf "${IN:-}"; _cleanup' EXIT
UP=$TEST_TMP/registry
python3 "$(dirname "$0")/tools/pkg-index.py" --out "$UP" --base "http://$REG:8000" \
	--wheel sbxlock:1.0 --wheel sbxlock:2.0 --wheel sbxother:1.0 --wheel sbxbad:1.0::tamper \
	--wheel sbxwrong:1.0 --wheel sbxnohash:1.0::nohash >"$TEST_TMP/packages.jsonl"
ok $? "the test registry is built"
want() { jq -r --arg n "$1" --arg v "$2" "select(.name == \$n and .version == \$v) | .$3" "$TEST_TMP/packages.jsonl"; }
(cd "$UP" && exec ip netns exec "$NET_NS" python3 -m http.server --bind "$REG" 8000 >"$TEST_TMP/http.log" 2>&1) &
WEBPID=$!
up=1
for _ in $(seq 100); do
	python3 -c "import urllib.request as u; u.urlopen('http://$REG:8000/simple/sbxlock/', timeout=1)" \
		2>/dev/null && up=0 && break
	sleep 0.1
done
ok $up "the registry answers on $REG:8000"

# The tenant's files live outside SBX_ROOT; its lock is read only beneath
# its host_paths root.
IN=$(mktemp -d /tmp/sbx-t1430.XXXXXX)
mkdir -p "$IN/acme" "$SBX_ROOT/etc/sbx"
printf 'host_paths:\n  read: ["%s/{tenant}"]\n' "$IN" >"$SBX_ROOT/etc/sbx/sbx.yaml"
LOCK=$IN/acme/requirements.txt
cat >"$LOCK" <<EOF
# what sessions of this policy may install
sbxlock==1.0 \\
    --hash=sha256:$(want sbxlock 1.0 sha256)
sbxbad==1.0 --hash=sha256:$(want sbxbad 1.0 sha256)
sbxwrong==1.0 --hash=sha256:$(printf '%064d' 7)
EOF
lock_sha=$(sha256sum "$LOCK" | cut -d' ' -f1)
policy() { # policy FILE [EXTRA-LINES]: a pypi registry, then the lines
	printf 'resources:\n  exec_timeout: {default: 10m, max: 1h}\npackages:\n  mode: allowlist\n' >"$1"
	printf '  registries:\n    - {type: pypi, url: "http://%s:8000/simple"}\n' "$REG" >>"$1"
	printf '%s\n' "${2:-}" >>"$1"
}
policy "$TEST_TMP/locked.yaml" "  lock: {pypi: \"$LOCK\"}"

# ---- hostile locks: exit 3, nothing created ----
# refused DESCRIPTION MESSAGE-REGEX LOCK-FILE [sbx-create options]
refused() {
	local d=$1 re=$2 f=$3
	shift 3
	policy "$TEST_TMP/bad.yaml" "  lock: {pypi: \"$f\"}"
	out=$(sbx-create -q -t python -p "$TEST_TMP/bad.yaml" "$@" 2>&1)
	is "$?" 3 "$d: exit 3"
	like "$out" "$re" "$d: $re"
	is "$(ls -A "$S" 2>/dev/null)" "" "$d: no session was created"
}
printf 'sbxlock==1.0\n' >"$IN/acme/nohash.txt"
refused "a requirement without --hash" "nohash\.txt:1: sbxlock==1\.0 has no --hash" "$IN/acme/nohash.txt"
out=$(sbx-create --dry-run -p "$TEST_TMP/bad.yaml" 2>&1 >/dev/null)
is "$?" 3 "sbx-create --dry-run reads and refuses the lock too"
like "$out" "nohash\.txt:1:" "with the same message"
printf '# ok\nsbxlock>=1.0 --hash=sha256:%064d\n' 1 >"$IN/acme/range.txt"
refused "a range, not a pin" "range\.txt:2: 'sbxlock>=1\.0' is not pinned" "$IN/acme/range.txt"
printf '%s\n' "-r /etc/passwd" >"$IN/acme/include.txt"
refused "an include" "include\.txt:1: option -r is not allowed" "$IN/acme/include.txt"
printf 'sbx\001lock==1.0 --hash=sha256:%064d\n' 1 >"$IN/acme/ctl.txt"
refused "a control character" "ctl\.txt:1: a control character" "$IN/acme/ctl.txt"
python3 -c "
for i in range(100000): print('p%d==1.0 --hash=sha256:%s' % (i, '0' * 64))" >"$IN/acme/huge.txt"
refused "a lock of 100k packages" "larger than 8 MiB" "$IN/acme/huge.txt"
python3 -c "
for i in range(9000): print('p%d==1 --hash=sha256:%s' % (i, '0' * 64))" >"$IN/acme/many.txt"
refused "a lock of 9000 packages" "more than 8192 locked files" "$IN/acme/many.txt"
refused "a lock that is not there" "packages\.lock\.pypi" "$IN/acme/missing.txt"
refused "a directory" "packages\.lock\.pypi: .* is not a regular file" "$IN/acme"
refused "a tenant's lock outside its host_paths" "packages\.lock\.pypi.*host_paths\.read" /etc/passwd --tenant acme
refused "another tenant's lock" "packages\.lock\.pypi.*host_paths\.read" "$LOCK" --tenant other
is "$(sbx-audit --type policy.refused --jsonl | jq -r .reason | grep -c 'nohash\.txt:1')" 1 \
	"the refusal is in the audit trail (policy.refused)"
printf 'packages:\n  mode: allowlist\n  registries: [{type: pypi, url: "http://%s:8000/simple"}]\n  allow: {pypi: ["*"]}\n' \
	"$REG" >"$TEST_TMP/star.yaml"
out=$(sbx-create -q -t python -p "$TEST_TMP/star.yaml" 2>&1)
is "$?" 3 "packages.allow '*' is refused with 3"
like "$out" "star\.yaml:4:[0-9]+: packages\.allow\.pypi\[0\]: '\*' matches every name" "naming file:line:col and the key"

# ---- a locked session (tenant acme, the lock beneath its root) ----
a=$(sbx-create -q -t python --tenant acme -p "$TEST_TMP/locked.yaml")
ok $? "a session under a pip lock, for a tenant whose host_paths hold it"
is "$(jq -r '.limits.packages.locks.pypi | [.file, .sha256, .entries] | join(" ")' "$S/$a/session.json")" \
	"$LOCK $lock_sha 3" "its record names the lock, its SHA-256 and its 3 files"
is "$(sbx-audit --type session.create --session "$a" --jsonl | jq -r '.packages.locks.pypi | [.file, .sha256] | join(" ")')" \
	"$LOCK $lock_sha" "and so does its session.create in the audit trail"
rules_sha=$(jq -r .limits.packages.rules "$S/$a/session.json")
is "$(sha256sum "$S/$a/pkgrules.json" | cut -d' ' -f1)" "$rules_sha" "the compiled rules beside it are the ones it names"
printf 'sbxlock==1.0 --hash=sha256:%s\n' "$(want sbxlock 1.0 sha256)" >"$TEST_TMP/req.txt"
put() { # put SESSION FILE GUEST-PATH: a small text file, as the guest's user
	sbx-exec "$1" -- sh -c 'printf "%s\n" "$1" >"$2"' sh "$(cat "$2")" "$3"
}
put "$a" "$TEST_TMP/req.txt" /workspace/req.txt
out=$(sbx-exec "$a" -- pip install --target /workspace/lib --require-hashes -r /workspace/req.txt 2>&1)
ok $? "pip install -r with --hash through the cache" || diag "$out"
like "$out" 'Successfully installed sbxlock-1\.0' "pip installed the locked version"
log=$S/$a/packages.log
is "$(jq -r 'select(.kind == "file" and .package == "sbxlock") | [.version, .sha256, .verdict] | join(" ")' "$log")" \
	"1.0 $(want sbxlock 1.0 sha256) ok" "packages.log: the locked file, its hash, ok"
fetch() { # fetch SESSION PATH: "STATUS BODY" (the body's first line)
	sbx-exec "$1" -- python3 -c '
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen("http://10.0.2.2:3141" + sys.argv[1], timeout=120)
    print(r.status, r.read().decode(errors="replace").replace("\n", " "))
except urllib.error.HTTPError as e:
    print(e.code, e.reason)' "$2" 2>&1
}
idx=$(fetch "$a" /pypi/0/simple/sbxlock/)
like "$idx" '^200 .*sbxlock-1\.0-py3-none-any\.whl' "the index lists the locked version"
ok $(grep -q 'sbxlock-2\.0' <<<"$idx"; test $? -ne 0; echo $?) "and not the other one"
out=$(sbx-exec "$a" -- pip install --target /workspace/lib2 sbxlock==2.0 2>&1)
ok $(test $? -ne 0; echo $?) "pip install of a version outside the lock fails"
is "$(fetch "$a" /pypi/0/files/sbxlock/sbxlock-2.0-py3-none-any.whl)" \
	"403 sbxlock 2.0 is not in the lock $LOCK (packages.lock.pypi), in policy locked.yaml" \
	"its file is refused with 403, naming the lock and the policy"
is "$(jq -r 'select(.kind == "file" and .version == "2.0") | .verdict' "$log")" refused "packages.log says refused"
out=$(sbx-exec "$a" -- pip install --target /workspace/lib3 sbxother 2>&1)
ok $(test $? -ne 0; echo $?) "pip install of a package not in the lock fails"
is "$(fetch "$a" /pypi/0/simple/sbxother/)" "403 sbxother is not in the lock $LOCK (packages.lock.pypi), in policy locked.yaml" \
	"its index is refused with 403, naming the lock"
is "$(jq -r 'select(.package == "sbxother") | .verdict' "$log" | sort -u)" refused "packages.log says refused"
is "$(grep -c 'GET /simple/sbxother/' "$TEST_TMP/http.log")" 0 "and the registry was never asked for it"
# (A reason phrase is cut at 200 bytes; packages.log has all of it.)
like "$(fetch "$a" /pypi/0/files/sbxwrong/sbxwrong-1.0-py3-none-any.whl)" \
	"^403 sbxwrong-1\.0-py3-none-any\.whl: its hash \(sha256:$(want sbxwrong 1.0 sha256)\) is not one the lock " \
	"a file whose index hash is not the lock's is refused with 403"
is "$(jq -r 'select(.package == "sbxwrong") | .reason' "$log")" \
	"sbxwrong-1.0-py3-none-any.whl: its hash (sha256:$(want sbxwrong 1.0 sha256)) is not one the lock $LOCK (packages.lock.pypi) names for sbxwrong 1.0, in policy locked.yaml" \
	"packages.log gives the whole reason, naming the lock and the policy"
is "$(sbx-audit --type package.fetch --session "$a" --jsonl | jq -r 'select(.package == "sbxwrong") | .verdict')" refused \
	"and audited as package.fetch"
printf 'sbxbad==1.0 --hash=sha256:%s\n' "$(want sbxbad 1.0 sha256)" >"$TEST_TMP/bad.txt"
put "$a" "$TEST_TMP/bad.txt" /workspace/bad.txt
out=$(sbx-exec "$a" -- pip install --target /workspace/lib4 --require-hashes -r /workspace/bad.txt 2>&1)
ok $(test $? -ne 0; echo $?) "pip install of a locked file the registry tampered with fails"
is "$(jq -r 'select(.package == "sbxbad" and .kind == "file") | .verdict' "$log")" hash-mismatch \
	"packages.log says hash-mismatch"

# ---- name rules and require_hashes (no lock) ----
policy "$TEST_TMP/rules.yaml" '  require_hashes: true
  allow: {pypi: ["SBX*"]}
  deny: {pypi: [SbxOther]}'
r=$(sbx-create -q -t python -p "$TEST_TMP/rules.yaml")
ok $? "a session with packages.allow, deny and require_hashes"
out=$(sbx-exec "$r" -- pip install --target /workspace/lib sbxlock 2>&1)
ok $? "pip install of an allowed name (any version)" || diag "$out"
like "$out" 'Successfully installed sbxlock-2\.0' "the newest, without a lock"
n=$(grep -c 'GET /simple/sbxother/' "$TEST_TMP/http.log")
is "$(fetch "$r" /pypi/0/simple/sbxother/)" "403 sbxother matches packages.deny.pypi 'sbxother', in policy rules.yaml" \
	"a denied name (patterns in PEP 503 form) is refused, naming the key"
is "$(grep -c 'GET /simple/sbxother/' "$TEST_TMP/http.log")" "$n" "before anything is fetched upstream"
is "$(fetch "$r" /pypi/0/simple/requests/)" "403 requests matches no pattern of packages.allow.pypi, in policy rules.yaml" \
	"a name no allow pattern matches is refused"
is "$(jq -r 'select(.kind == "index") | [.package, .verdict] | join(" ")' "$S/$r/packages.log" | sort -u | tr '\n' ' ')" \
	"requests refused sbxlock ok sbxother refused " "packages.log has each refusal"
idx=$(fetch "$r" /pypi/0/simple/sbxnohash/)
like "$idx" '^200 ' "require_hashes: the index of a project whose files have no hash is served"
ok $(grep -q 'sbxnohash-1\.0' <<<"$idx"; test $? -ne 0; echo $?) "without the unhashed file"
out=$(sbx-exec "$r" -- pip install --target /workspace/lib2 sbxnohash 2>&1)
ok $(test $? -ne 0; echo $?) "so pip cannot install it"
is "$(fetch "$r" /pypi/0/files/sbxnohash/sbxnohash-1.0-py3-none-any.whl)" \
	"403 sbxnohash-1.0-py3-none-any.whl: registry pypi/0 names no sha256 or sha512 for it and packages.require_hashes is set in policy rules.yaml" \
	"and the file itself is refused with 403, naming the key"
is "$(jq -r 'select(.kind == "file" and .package == "sbxnohash") | .verdict' "$S/$r/packages.log")" refused \
	"packages.log says refused"
policy "$TEST_TMP/plain.yaml"
p=$(sbx-create -q -t python -p "$TEST_TMP/plain.yaml")
out=$(sbx-exec "$p" -- pip install --target /workspace/lib sbxnohash 2>&1)
ok $? "without require_hashes the unhashed file is installed" || diag "$out"
sbx-kill "$a" "$r" "$p" >/dev/null

# ---- npm ci of a real project locked by package-lock.json ----
if ! ls "$SBX_TEMPLATES"/node@*/manifest.json >/dev/null 2>&1; then
	[ "${SBX_REQUIRE_NODE:-0}" = 1 ] || { diag "no node template: npm not tested"; done_testing; }
	ok 1 "a node template in $SBX_TEMPLATES"
	done_testing
fi
NPMLOCK=$FIX/npm-lock/package-lock.json
cat >"$TEST_TMP/npm.yaml" <<EOF
resources:
  exec_timeout: {default: 10m, max: 1h}
packages:
  mode: allowlist
  registries:
    - {type: npm, url: "https://registry.npmjs.org/"}
  lock: {npm: "$NPMLOCK"}
EOF
n=$(sbx-create -q -t node -p "$TEST_TMP/npm.yaml")
ok $? "a node session under the fixture's package-lock.json"
is "$(jq -r '.limits.packages.locks.npm | [.sha256, .entries] | join(" ")' "$S/$n/session.json")" \
	"$(sha256sum "$NPMLOCK" | cut -d' ' -f1) 2" "its record names the lock and its 2 packages"
sbx-cp "$FIX/npm-lock/package.json" "$n:/workspace/package.json" &&
	sbx-cp "$NPMLOCK" "$n:/workspace/package-lock.json"
ok $? "the project and its lock are copied in"
out=$(sbx-exec "$n" -- sh -c 'cd /workspace && npm ci --no-audit --no-fund --no-progress' 2>&1)
ok $? "npm ci through the cache" || diag "$out"
is "$(sbx-exec "$n" -- sh -c 'cd /workspace && node -p "require(\"to-regex-range\")(1, 5)"')" "[1-5]" \
	"the locked project runs"
is "$(jq -r 'select(.kind == "tarball") | [.package, .version, .verdict, .registry_hash[0:7]] | join(" ")' "$S/$n/packages.log" | sort | tr '\n' ' ')" \
	"is-number 7.0.0 ok sha512: to-regex-range 5.0.1 ok sha512: " "packages.log: both tarballs, checked against the lock's sha512"
meta=$(fetch "$n" /npm/0/is-number)
is "$(sed 's/^200 //' <<<"$meta" | jq -r '[(.versions | keys | join(",")), .["dist-tags"].latest] | join(" ")')" "7.0.0 7.0.0" \
	"npm metadata lists only the locked version, and latest is it"
is "$(fetch "$n" /npm/0/tarball/is-number/6.0.0)" "403 Forbidden" "a version outside the lock is refused with 403"
like "$(jq -r 'select(.kind == "tarball" and .version == "6.0.0") | .reason' "$S/$n/packages.log")" \
	"^is-number 6\.0\.0 is not in the lock .*package-lock\.json \(packages\.lock\.npm\), in policy npm\.yaml" \
	"packages.log names the lock"
out=$(sbx-exec "$n" -- sh -c 'cd /workspace && npm install --no-audit --no-fund --no-progress left-pad' 2>&1)
ok $(test $? -ne 0; echo $?) "npm install of a package not in the lock fails"
like "$out" "403 Forbidden - GET http://10\.0\.2\.2:3141/npm/0/left-pad - left-pad is not in the lock" \
	"npm shows why"
sbx-kill "$n" >/dev/null

done_testing
