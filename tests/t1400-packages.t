#!/bin/bash
# Governed package installs (packages: in sbx-policy(5)): pip in the python
# template installs through the session's pull-through cache, every file is
# logged and verified, a second session is served from the cache, a
# tampered file and a download past max_download are refused, npm metadata
# and tarballs go through the cache too, and offline mode refuses at once,
# naming the policy and the key.  The registries are in a network namespace
# this test makes (veth, a 198.51.100.0/24 address): a static PEP 503 tree
# of wheels it builds itself under `python3 -m http.server` (the way PyPI
# mirrors are served), and a real npm registry (verdaccio, tests/lib-npm.sh)
# it publishes a package to; nothing is sent elsewhere.  npm's own client
# is in t1420-npm.t.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib-npm.sh"
if ! ls "$SBX_TEMPLATES"/python@*/manifest.json >/dev/null 2>&1; then
	[ "${SBX_REQUIRE_PYTHON:-0}" = 1 ] || skip_all "no python template built (make python-image)"
	ok 1 "a python template in $SBX_TEMPLATES (make python-image)"
	done_testing
fi
[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
command -v ip >/dev/null && command -v python3 >/dev/null || skip_all "needs ip and python3"
[ -x "$SBX_BUILD/libexec/sbx/sbx-proxy" ] || skip_all "no sbx-proxy built"
S=$SBX_ROOT/var/lib/sbx/sessions
CACHE=$SBX_ROOT/var/lib/sbx/pkgcache

# ---- the registry: one namespace on a /29 no one uses ----
# The /29 on the host's end is the route from the host's namespace to the
# registry's; the cache fetches from the host.
test_net_hosts pkg 1
NS=$NET_NS HOSTIP=$NET_HOSTIP REG=${NET_IP[0]}
pkg_cleanup() {
	[ -n "${WEBPID:-}" ] && kill "$WEBPID" 2>/dev/null
	npm_registry_stop
}
trap 'pkg_cleanup; _cleanup' EXIT
UP=$TEST_TMP/registry
python3 "$(dirname "$0")/tools/pkg-index.py" --out "$UP" --base "http://$REG:8000" \
	--wheel sbxdemo:1.0 --wheel sbxbad:1.0::tamper --wheel sbxbig:1.0:1600000 >"$TEST_TMP/packages.jsonl"
ok $? "the test registry is built (wheels and their index)"
want() { jq -r --arg n "$1" "select(.name == \$n) | .$2" "$TEST_TMP/packages.jsonl"; }
(cd "$UP" && exec ip netns exec "$NS" python3 -m http.server --bind "$REG" 8000 >"$TEST_TMP/http.log" 2>&1) &
WEBPID=$!
up=1
for _ in $(seq 100); do
	python3 -c "import urllib.request as u; u.urlopen('http://$REG:8000/simple/sbxdemo/', timeout=1)" \
		2>/dev/null && up=0 && break
	sleep 0.1
done
ok $up "the registry answers on $REG:8000"
npm_registry_install && npm_registry_start "$NS" "$REG" 4873 && npm_registry_user && {
	mkdir -p "$TEST_TMP/sbx-demo"
	echo '{"name": "sbx-demo", "version": "1.0.0", "main": "index.js", "license": "MIT"}' \
		>"$TEST_TMP/sbx-demo/package.json"
	echo 'module.exports = "sbx-demo-1.0.0-ok";' >"$TEST_TMP/sbx-demo/index.js"
	npm_registry_publish "$TEST_TMP/sbx-demo" >"$TEST_TMP/publish.log" 2>&1
}
ok $? "an npm registry on $REG:4873 with sbx-demo 1.0.0 published to it ${NPM_WHY:-}"
npm_tgz=$NPM_REG_STORAGE/sbx-demo/sbx-demo-1.0.0.tgz

cat >"$TEST_TMP/pkgs.yaml" <<EOF
resources:
  exec_timeout: {default: 10m, max: 1h}
packages:
  mode: allowlist
  registries:
    - {type: pypi, url: "http://$REG:8000/simple"}
    - {type: npm, url: "$NPM_REG_URL"}
  max_download: 1M
EOF
cat >"$TEST_TMP/no-installs.yaml" <<EOF
resources:
  exec_timeout: {default: 10m, max: 1h}
packages:
  mode: offline
EOF

# ---- a policy the parser refuses changes nothing ----
printf 'packages:\n  mode: allowlist\n  registries:\n    - {type: pip, url: "http://%s/"}\n' "$REG" \
	>"$TEST_TMP/bad.yaml"
out=$(sbx-create -q -t python -p "$TEST_TMP/bad.yaml" 2>&1)
is $? 3 "a registry of an unknown type is refused with 3"
like "$out" 'bad\.yaml:4:[0-9]+: .*type' "naming file:line:col and the key"
printf 'packages:\n  mode: allowlist\n' >"$TEST_TMP/bad2.yaml"
out=$(sbx-create -q -t python -p "$TEST_TMP/bad2.yaml" 2>&1)
is $? 3 "allowlist without registries is refused with 3"
is "$(ls "$S" 2>/dev/null | wc -l)" 0 "and no session was made"

# ---- offline (the default): refused at once, naming the policy and key ----
off=$(sbx-create -q -t python -p "$TEST_TMP/no-installs.yaml")
ok $? "a session with packages.mode: offline"
is "$(sbx-exec "$off" -- ls /sys/class/net | tr '\n' ' ')" "lo " "it has no network device"
out=$(sbx-exec "$off" -- pip install --target /workspace/lib sbxdemo 2>&1)
rc=$?
ok $(test "$rc" -ne 0; echo $?) "pip install fails (status $rc)"
like "$out" 'packages\.mode: offline in policy no-installs\.yaml' \
	"pip's output names the key and the policy"
like "$(sbx-exec "$off" -- cat /etc/pip.conf)" 'index-url = http://127\.0\.0\.1:3141/pypi/0/simple' \
	"its pip.conf points at the guest's own refusal"
out=$(sbx-exec "$off" -- python3 -c '
import urllib.request, urllib.error
try:
    urllib.request.urlopen("http://127.0.0.1:3141/npm/0/left-pad", timeout=10)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())' 2>&1)
like "$out" '^403 \{"error":"package installs are refused: packages\.mode: offline in policy no-installs\.yaml"\}' \
	"npm's registry answers 403 with the reason as npm's error"
sbx-kill "$off" >/dev/null

# ---- allowlist: pip through the cache ----
a=$(sbx-create -q -t python -p "$TEST_TMP/pkgs.yaml")
ok $? "a session with packages.mode: allowlist (and network.egress: none)"
like "$(sbx-exec "$a" -- cat /etc/pip.conf)" 'index-url = http://10\.0\.2\.2:3141/pypi/0/simple' \
	"its pip.conf points at the cache"
out=$(sbx-exec "$a" -- pip install --target /workspace/lib sbxdemo 2>&1)
ok $? "pip install sbxdemo through the cache"
like "$out" 'Successfully installed sbxdemo-1\.0' "pip says it installed sbxdemo 1.0"
is "$(sbx-exec "$a" -- python3 -c 'import sys; sys.path.insert(0, "/workspace/lib"); import sbxdemo; print(sbxdemo.VALUE)')" \
	"sbxdemo-1.0-ok" "the package imports and is the one the registry built"
log=$S/$a/packages.log
rec=$(jq -c 'select(.kind == "file" and .package == "sbxdemo")' "$log")
is "$(jq -r '[.registry, .version, .size, .sha256, .cache, .verdict] | join(" ")' <<<"$rec")" \
	"pypi/0 1.0 $(want sbxdemo size) $(want sbxdemo sha256) miss ok" \
	"packages.log: registry, version, size, sha256, a miss, ok"
is "$(jq -r .registry_url <<<"$rec")" "http://$REG:8000/simple" "and the registry's URL"
ok $(test -f "$CACHE/shared/sha256-$(want sbxdemo sha256)"; echo $?) "the file is kept under its hash"
is "$(sbx-audit --type package.fetch --session "$a" --jsonl | head -1 | jq -r '[.package, .version, .sha256, .verdict] | join(" ")')" \
	"sbxdemo 1.0 $(want sbxdemo sha256) ok" "the audit trail has package.fetch"

# A registry whose file does not match its own index: refused, not kept.
out=$(sbx-exec "$a" -- pip install --target /workspace/lib2 sbxbad 2>&1)
rc=$?
ok $(test "$rc" -ne 0; echo $?) "pip install of a tampered file fails (status $rc)"
like "$out" 'HTTP error 502 .*sha256 mismatch: sbxbad-1\.0-py3-none-any\.whl' "pip shows why: sha256 mismatch"
is "$(jq -r 'select(.package == "sbxbad" and .kind == "file") | .verdict' "$log")" hash-mismatch \
	"packages.log says hash-mismatch"
ok $(test ! -e "$CACHE/shared/sha256-$(want sbxbad sha256)"; echo $?) "and nothing was kept"

# max_download (1M): a 1.6 MB wheel does not fit.
out=$(sbx-exec "$a" -- python3 -c '
import urllib.request, urllib.error
try:
    urllib.request.urlopen("http://10.0.2.2:3141/pypi/0/files/sbxbig/sbxbig-1.0-py3-none-any.whl", timeout=120)
    print("served")
except urllib.error.HTTPError as e:
    print(e.code, e.reason)' 2>&1)
like "$out" '^403 packages\.max_download of policy pkgs\.yaml exceeded: sbxbig-1\.0-py3-none-any\.whl is larger than' \
	"a file past packages.max_download is refused with 403 naming the key"
is "$(jq -r 'select(.package == "sbxbig") | .verdict' "$log")" refused "packages.log says refused"
used=$(jq -r .bytes "$S/$a/pkgbudget.json")
ok $(test "$used" -gt 0 -a "$used" -le 1048576; echo $?) "the budget counts what was sent ($used bytes), at most 1M"

# Not a general proxy: only registry routes, names, no URLs.
out=$(sbx-exec "$a" -- python3 -c '
import urllib.request, urllib.error
for p in ["/http://'"$REG"':8000/files/", "/pypi/0/files/sbxdemo/..%2f..%2fetc", "/pypi/1/simple/sbxdemo/",
          "/pypi/0/files/sbxdemo/sbxbad-1.0-py3-none-any.whl"]:
    try:
        urllib.request.urlopen("http://10.0.2.2:3141" + p, timeout=60)
        print("served", p)
    except urllib.error.HTTPError as e:
        print(e.code)' 2>&1 | tr '\n' ' ')
is "$out" "404 404 404 404 " "URLs, traversal, an unknown registry and a file of another project: 404"

# npm: metadata rewritten to the cache, the tarball verified (sha512).
out=$(sbx-exec "$a" -- python3 -c '
import hashlib, json, urllib.request
m = json.load(urllib.request.urlopen("http://10.0.2.2:3141/npm/0/sbx-demo", timeout=120))
url = m["versions"]["1.0.0"]["dist"]["tarball"]
data = urllib.request.urlopen(url, timeout=120).read()
print(url, len(data), hashlib.sha256(data).hexdigest())' 2>&1)
is "$out" "http://10.0.2.2:3141/npm/0/tarball/sbx-demo/1.0.0 $(stat -c %s "$npm_tgz") $(sha256sum "$npm_tgz" | cut -d' ' -f1)" \
	"npm metadata points the tarball at the cache, which serves the registry's bytes"
is "$(jq -r 'select(.kind == "tarball") | [.package, .version, .cache, .verdict, .registry_hash[0:7]] | join(" ")' "$log")" \
	"sbx-demo 1.0.0 miss ok sha512:" "packages.log has the tarball, checked against dist.integrity"

# ---- a second session is served from the cache ----
b=$(sbx-create -q -t python -p "$TEST_TMP/pkgs.yaml")
ok $? "a second session under the same policy"
out=$(sbx-exec "$b" -- pip install --target /workspace/lib sbxdemo 2>&1)
ok $? "pip install sbxdemo again"
is "$(jq -r 'select(.kind == "file" and .package == "sbxdemo") | [.cache, .verdict, .sha256] | join(" ")' "$S/$b/packages.log")" \
	"hit ok $(want sbxdemo sha256)" "packages.log of the second session says hit"

# Another tenant does not share the first one's cache.
c=$(sbx-create -q --tenant other -t python -p "$TEST_TMP/pkgs.yaml")
ok $? "a session of another tenant"
sbx-exec "$c" -- python3 -c '
import urllib.request
urllib.request.urlopen("http://10.0.2.2:3141/pypi/0/files/sbxdemo/sbxdemo-1.0-py3-none-any.whl", timeout=120).read()'
ok $? "fetches sbxdemo through the cache"
is "$(jq -r 'select(.kind == "file") | [.cache, .tenant] | join(" ")' "$S/$c/packages.log")" "miss other" \
	"from the registry, not from another tenant's cache"
ok $(test -f "$CACHE/tenant-other/sha256-$(want sbxdemo sha256)"; echo $?) "and keeps it in its own"

# A cache entry that no longer verifies is never served.
printf 'garbage' >"$CACHE/shared/sha256-$(want sbxdemo sha256)"
sbx-exec "$b" -- python3 -c '
import hashlib, urllib.request
d = urllib.request.urlopen("http://10.0.2.2:3141/pypi/0/files/sbxdemo/sbxdemo-1.0-py3-none-any.whl", timeout=120).read()
assert hashlib.sha256(d).hexdigest() == "'"$(want sbxdemo sha256)"'"'
ok $? "a corrupted cache entry is fetched again, and the right bytes served"
is "$(jq -r 'select(.kind == "file") | .cache' "$S/$b/packages.log" | tail -1)" miss "as a miss"

done_testing
