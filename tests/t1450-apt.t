#!/bin/bash
# apt through the package cache (sbx-policy(5), issue 40 item 3), with the
# real apt-get in a real python session (Debian bookworm) against a real
# signed archive this test serves from a network namespace
# (tests/lib-apt.sh, its own key): the cache verifies the InRelease with
# gpgv and the policy's keyring, each index against the Release's SHA-256,
# each .deb against its index's; a bad signature, another key, a tampered
# index and a tampered .deb are each refused and logged; packages.allow.apt
# names what may be installed, dependencies included; installs are logged
# by name, version and architecture.  Bad policies fail the create with 3,
# and a session with no apt and no network has apt refused in the guest,
# with the reason, and the host records each such refusal as
# guest-reported, at a bounded rate.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib-apt.sh"
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
ls "$SBX_TEMPLATES"/python@*/manifest.json >/dev/null 2>&1 || skip_all "no python template built (make python-image)"
for t in ip curl jq gpg gpgv dpkg-deb dpkg-scanpackages; do command -v $t >/dev/null || skip_all "needs $t"; done
[ -x "$SBX_BUILD/libexec/sbx/sbx-proxy" ] || skip_all "no sbx-proxy built"
S=$SBX_ROOT/var/lib/sbx/sessions
trap 'apt_archive_stop; _cleanup' EXIT

apt_archive_up apts
pol() { # pol NAME REGISTRY-LINES [EXTRA-LINES]
	printf 'resources:\n  exec_timeout: {default: 10m, max: 1h}\npackages:\n  mode: allowlist\n  registries:\n%s\n%s\n' \
		"$2" "${3:-}" >"$TEST_TMP/$1.yaml"
}

# ---- policies that cannot be: 3, nothing created ----
refused() { # refused POLICY-NAME TEMPLATE REGEX WHAT
	local out
	out=$(sbx-create -q -t "$2" -p "$TEST_TMP/$1.yaml" 2>&1)
	is "$?" 3 "$4: refused with 3"
	like "$out" "$3" "  saying why"
}
pol nokey "    - {type: apt, url: \"$APT_URL\"}"
refused nokey python "needs the keyring that signs it" "an archive by url without a keyring"
pol keyonly "    - {type: apt, keyring: \"$APT_KEYRING\"}"
refused keyonly python "keyring without url" "a keyring without a url"
pol lock "    - {type: apt, url: \"$APT_URL\", keyring: \"$APT_KEYRING\"}" "  lock: {apt: /etc/hostname}"
refused lock python "apt has no lock file format" "packages.lock.apt"
pol anyname "    - {type: apt, url: \"$APT_URL\", keyring: \"$APT_KEYRING\"}" "  allow: {apt: ['*']}"
refused anyname python "matches every name" "an allow pattern that matches every name"
pol host "    - {type: apt}"
refused host default "needs a template built from a Debian suite" "apt on a template that is not Debian's (default: busybox)"
mkdir -p "$TEST_TMP/etc-apt/sources.list.d"
printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\n' \
	>"$TEST_TMP/etc-apt/sources.list.d/debian.sources"
out=$(SBX_APT_ETC=$TEST_TMP/etc-apt sbx-create -q -t python -p "$TEST_TMP/host.yaml" 2>&1)
is "$?" 3 "{type: apt} for a suite the host's sources do not name: refused with 3"
like "$out" "suite, bookworm, and the host's apt sources .* name no archive for it" "  naming the suite"
printf '%s' "-----BEGIN PGP PUBLIC KEY BLOCK-----" >"$TEST_TMP/armored.asc"
pol armored "    - {type: apt, url: \"$APT_URL\", keyring: \"$TEST_TMP/armored.asc\"}"
refused armored python "armored key; gpgv takes a binary keyring" "an armored keyring"
is "$(ls -A "$S" 2>/dev/null)" "" "and no session was created"

# ---- the test archive, signed with its own key ----
pol local "    - {type: apt, url: \"$APT_URL\", keyring: \"$APT_KEYRING\"}" "  allow: {apt: [sbx-hello, sbx-dep]}"
a=$(sbx-create -q -t python -p "$TEST_TMP/local.yaml")
ok $? "a python session whose policy names the test archive and its keyring"
is "$(jq -c '.limits.packages.registries[0] | [.type, .suite, .components, .host, (.keyring_sha256 | length)]' "$S/$a/session.json")" \
	'["apt","bookworm","main",false,64]' "the record: one apt entry, suite bookworm, the keyring's SHA-256"
cmp -s "$APT_KEYRING" "$S/$a/apt-0.gpg"
ok $? "the keyring is copied beside the record"
like "$(sbx-exec "$a" -- cat /etc/apt/sources.list)" "deb \[trusted=yes\] http://10.0.2.2:3141/apt/0 bookworm main" \
	"the guest's apt goes to the cache"
log=$S/$a/packages.log
last() { jq -r --arg k "$1" 'select(.kind == $k) | [.verdict, .status, .reason // "-"] | join(" | ")' "$log" | tail -1; }
update() { sbx-exec -u root "$a" -- apt-get update --error-on=any 2>&1; } # any failed index is an error

apt_tamper_release
out=$(update)
ok $(test $? -ne 0; echo $?) "a tampered InRelease: apt-get update fails" || diag "$out"
like "$out" "502 .*InRelease of bookworm from apt archive apt/0 does not verify" "  apt shows the cache's reason"
like "$(last release)" "^bad-signature \| 502 \| .*does not verify with $APT_KEYRING" "  packages.log: bad-signature"
apt_restore
apt_resign_with_other_key
out=$(update)
ok $(test $? -ne 0; echo $?) "an InRelease signed with another key: refused" || diag "$out"
like "$(last release)" "^bad-signature \| 502 \|" "  logged as bad-signature"
apt_restore
apt_tamper_index
out=$(update)
ok $(test $? -ne 0; echo $?) "a tampered index: apt-get update fails" || diag "$out"
like "$(last index)" "^hash-mismatch \| 502 \| sha256 mismatch" "  packages.log: hash-mismatch against the Release"
apt_restore
out=$(update)
ok $? "the pristine archive: apt-get update" || diag "$out"
is "$(last release)" "ok | 200 | -" "  its InRelease verified and served"

apt_tamper_deb sbx-dep
out=$(sbx-exec -u root "$a" -- apt-get install -y sbx-hello 2>&1)
ok $(test $? -ne 0; echo $?) "a tampered .deb (sbx-dep): apt-get install sbx-hello fails" || diag "$out"
like "$(jq -r 'select(.package == "sbx-dep") | [.verdict, .status] | join(" ")' "$log" | tail -1)" "^hash-mismatch 502$" \
	"  packages.log: hash-mismatch for sbx-dep"
apt_restore
out=$(sbx-exec -u root "$a" -- apt-get install -y sbx-hello 2>&1)
ok $? "apt-get install sbx-hello (and its dependency sbx-dep)" || diag "$out"
is "$(sbx-exec "$a" -- sbx-hello)" "hello from sbx-hello" "it runs"
is "$(jq -r 'select(.kind == "deb" and .verdict == "ok") | [.package, .version, .arch] | join(" ")' "$log" | sort -u | tr '\n' ',')" \
	"sbx-dep 1.0-1 all,sbx-hello 1.0-1 all," "packages.log: each .deb by name, version and architecture"
out=$(sbx-exec -u root "$a" -- apt-get install -y sbx-other 2>&1)
ok $(test $? -ne 0; echo $?) "sbx-other, not in packages.allow.apt: refused" || diag "$out"
like "$out" "403 +sbx-other matches no pattern of packages\.allow\.apt, in policy local\.yaml" "  apt shows the key and the policy"
is "$(sbx-audit --type package.fetch --session "$a" --jsonl |
	jq -r 'select(.kind == "deb") | [.package, .verdict] | join(":")' | sort -u | tr '\n' ' ')" \
	"sbx-dep:hash-mismatch sbx-dep:ok sbx-hello:ok sbx-other:refused " "the audit trail has every .deb, served or refused"
is "$(sbx-ps --packages "$a" --json | jq -r '[.[] | select(.kind == "deb" and .verdict == "ok") | .package] | unique | join(" ")')" \
	"sbx-dep sbx-hello" "sbx-ps --packages lists what was installed"
sbx-kill -q "$a" >/dev/null 2>&1

# ---- an archive that redirects: followed only to addresses not denied ----
# A server beside the archive answers every path with a redirect: /lo/ to
# this host's loopback (where a listener counts what reaches it), /md/ to
# the cloud metadata address, /ok/ to the archive itself.
cat >"$TEST_TMP/redir.py" <<'PY'
import http.server, sys
archive, lo = sys.argv[2], sys.argv[3]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        p = self.path
        to = {"/lo/": lo, "/md/": "http://169.254.169.254/", "/ok/": archive}
        for k, v in to.items():
            if p.startswith(k):
                self.send_response(302); self.send_header("Location", v + p[len(k):]); self.send_header("Content-Length", "0"); self.end_headers(); return
        self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer((sys.argv[1], 8081), H).serve_forever()
PY
lo_port=$((20000 + $$ % 20000))
/usr/bin/python3 -m http.server --bind 127.0.0.1 "$lo_port" >"$TEST_TMP/lo.log" 2>&1 &
LO_PID=$!
ip netns exec "$NET_NS" /usr/bin/python3 "$TEST_TMP/redir.py" "$APT_HOST" "${APT_URL%/}/" "http://127.0.0.1:$lo_port/" &
REDIR_PID=$!
trap 'kill "$LO_PID" "$REDIR_PID" 2>/dev/null; apt_archive_stop; _cleanup' EXIT
for _ in $(seq 100); do curl -s -o /dev/null "http://$APT_HOST:8081/" && break; sleep 0.1; done
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$lo_port/" && break; sleep 0.1; done
: >"$TEST_TMP/lo.log"
pol redir "    - {type: apt, url: \"http://$APT_HOST:8081/lo\", keyring: \"$APT_KEYRING\"}
    - {type: apt, url: \"http://$APT_HOST:8081/md\", keyring: \"$APT_KEYRING\"}
    - {type: apt, url: \"http://$APT_HOST:8081/ok\", keyring: \"$APT_KEYRING\"}"
c=$(sbx-create -q -t python -p "$TEST_TMP/redir.yaml")
ok $? "a session whose archives redirect"
get() { # get N: the status and reason of the cache's answer for apt/N's InRelease
	sbx-exec "$c" -- python3 -c '
import sys, urllib.request, urllib.error
try: r = urllib.request.urlopen("http://10.0.2.2:3141/apt/%s/dists/bookworm/InRelease" % sys.argv[1], timeout=60); print(r.status)
except urllib.error.HTTPError as e: print(e.code, e.reason)' "$1"
}
like "$(get 0)" "^502 cannot fetch the InRelease of bookworm from apt archive apt/0: address 127\.0\.0\.1 .*deny list" \
	"a redirect to the host's loopback: refused, naming the denied address"
is "$(wc -l <"$TEST_TMP/lo.log")" 0 "  and nothing reached the loopback listener"
like "$(get 1)" "^502 .*address 169\.254\.169\.254 .*deny list" "a redirect to the cloud metadata address: refused"
is "$(get 2)" 200 "a redirect to another host that is not denied: followed, and the InRelease verified"
like "$(jq -r 'select(.kind == "release" and .registry == "apt/2") | [.verdict, .verified, .url] | join(" ")' "$S/$c/packages.log")" \
	"^ok signature http://$APT_HOST:8081/ok/dists/bookworm/InRelease$" "  logged under the policy's URL"
sbx-kill -q "$c" >/dev/null 2>&1

# ---- packages.pins.apt: one version of a name ----
pol pins "    - {type: apt, url: \"$APT_URL\", keyring: \"$APT_KEYRING\"}" "  pins: {apt: [\"sbx-dep==1.0-1\", \"sbx-other==2:1.0-2\"]}"
e=$(sbx-create -q -t python -p "$TEST_TMP/pins.yaml")
ok $? "a session with packages.pins.apt (an epoch allowed in a version)"
out=$(sbx-exec -u root "$e" -- sh -c 'apt-get update -q >/dev/null && apt-get install -y sbx-dep' 2>&1)
ok $? "sbx-dep, pinned at the archive's version: installed" || diag "$out"
out=$(sbx-exec -u root "$e" -- apt-get install -y sbx-other 2>&1)
ok $(test $? -ne 0; echo $?) "sbx-other, pinned at another version: refused" || diag "$out"
like "$out" "403 +sbx-other 1\.0-1 is not in packages\.pins\.apt, in policy pins\.yaml" "  naming the pins"
out=$(sbx-exec -u root "$e" -- apt-get install -y sbx-hello 2>&1)
ok $(test $? -ne 0; echo $?) "sbx-hello, not pinned: refused" || diag "$out"
sbx-kill -q "$e" >/dev/null 2>&1
pol badpin "    - {type: apt, url: \"$APT_URL\", keyring: \"$APT_KEYRING\"}" "  pins: {apt: [\"Sbx_Dep==1.0\"]}"
refused badpin python "is not a apt package name" "a pin that is not a Debian package name"

# ---- a plain download beside the cache: in the install record too ----
pol fetch "    - {type: apt, url: \"$APT_URL\", keyring: \"$APT_KEYRING\"}" "  allow: {apt: [sbx-dep]}
network:
  egress: allowlist
  allow: [{cidr: $APT_HOST/32, ports: [8080]}]"
d=$(sbx-create -q -t python -p "$TEST_TMP/fetch.yaml")
ok $? "a session with the cache and an egress rule to the archive's host"
size=$(stat -c %s "$APT_DIR/pool/main/s/sbx-other/sbx-other_1.0-1_all.deb")
got=$(sbx-exec "$d" -- python3 -c '
import sys, urllib.request
print(len(urllib.request.urlopen(sys.argv[1], timeout=60).read()))' "${APT_URL}pool/main/s/sbx-other/sbx-other_1.0-1_all.deb")
is "$got" "$size" "a .deb downloaded straight from the archive's host (not through the cache)"
fx=$(sbx-ps --execs "$d" --json | jq -r '.[] | select(.request.argv[0] == "python3") | .exec')
row=$(sbx-ps --packages "$d" --json | jq -c '.[] | select(.kind == "fetch")')
is "$(jq -r '[.registry, .package, .url, .verdict] | join(" ")' <<<"$row")" "egress $APT_HOST tcp://$APT_HOST:8080/ ok" \
	"sbx-ps --packages lists it: kind fetch, by address and port"
ok $(jq -e --argjson n "$size" '.size >= $n' <<<"$row" >/dev/null; echo $?) "  with the bytes it brought (at least the file's $size)"
is "$(jq -r '.execs | join(",")' <<<"$row")" "$fx" "  and the exec that ran it"
sbx-ps --packages "$d" --json >"$TEST_TMP/pk.json"
top=$(cd "$(dirname "$0")/.." && pwd)
python3 "$top/tests/tools/json-schema-check.py" validate --strict "$top/docs/schema" ps-packages.json <"$TEST_TMP/pk.json" >"$TEST_TMP/pk.check" 2>&1
ok $? "its JSON matches docs/schema/ps-packages.json" || diag "$(head -5 "$TEST_TMP/pk.check")"
sbx-kill -q "$d" >/dev/null 2>&1

# ---- a warm-pool member that refused apt at boot, claimed by a session ----
# ---- whose policy leaves apt alone: the template's sources come back  ----
mkdir -p "$SBX_ROOT/etc/sbx"
printf 'pool:\n  templates:\n    python: {size: 1, network: 1, vcpus: 1, memory: 256M}\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
like "$(sbx-gc --pool-only)" "^pool-add	pool-" "a warm-pool member of the python template, with a NIC (booted with no apt and no network)"
m=$(sbx-ps --pool -q --state=pooled)
vmm=$(jq -r '.vmm_process.pid // 0' "$S/$m/session.json")
like "$(tr '\0' ' ' </proc/"$vmm"/cmdline 2>/dev/null)" " sbx\.apt=- " "  its guest was told to refuse apt (sources replaced at boot)"
printf 'network:\n  egress: allowlist\n  allow: [{cidr: %s/32, ports: [8080]}]\n' "$APT_HOST" >"$TEST_TMP/egress.yaml"
j=$(sbx-create --json -t python -p "$TEST_TMP/egress.yaml")
w=$(jq -r .id <<<"$j")
is "$(jq -r '.from_pool // false' <<<"$j")" true "a session with egress and no apt entry claims it"
is "$(sbx-exec "$w" -- sh -c 'grep -v "^#" /etc/apt/sources.list | head -1; ls /etc/apt/sbx-template 2>&1 | head -1')" \
	"deb http://deb.debian.org/debian bookworm main
ls: cannot access '/etc/apt/sbx-template': No such file or directory" "its apt has the template's own sources again"
sbx-kill -q "$w" >/dev/null 2>&1
rm -f "$SBX_ROOT/etc/sbx/sbx.yaml"
sbx-gc --pool-only >/dev/null 2>&1

# ---- no apt and no network: the guest says why ----
b=$(sbx-create -q -t python)
ok $? "a python session with the defaults (packages offline, no network)"
out=$(sbx-exec -u root "$b" -- apt-get update 2>&1)
ok $(test $? -ne 0; echo $?) "apt-get update fails" || diag "$out"
like "$out" "403 +package installs are refused: packages.mode: offline in policy defaults" "with the policy's reason"
blog=$S/$b/packages.log
is "$(jq -r 'select(.reported_by == "guest") | [.registry, .verdict, .status, .request, .reason] | join(" | ")' "$blog" | head -1)" \
	"apt | refused | 403 | GET /apt/refused/dists/sbx/InRelease | package installs are refused: packages.mode: offline in policy defaults" \
	"the guest's refusal is recorded on the host, marked guest-reported, in the host's words"
# An exec still running when the request is made is named with it.
bg=$(sbx-exec -d "$b" -- sleep 120)
is "$(sbx-ps --execs "$b" --json | jq -r --arg e "$bg" '.[] | select(.exec == $e) | [.state, (.started | test("^[0-9-]+T[0-9:.]+Z$"))] | map(tostring) | join(" ")')" \
	"running true" "sbx-ps --execs: a running exec has its start time"
out=$(sbx-exec "$b" -- pip download -q --no-deps -d /tmp/d six 2>&1)
ok $(test $? -ne 0; echo $?) "pip download in the same session: refused by the guest" || diag "$out"
pip_x=$(sbx-ps --execs "$b" --json | jq -r '.[] | select(.request.argv[0] == "pip") | .exec')
is "$(sbx-ps --packages "$b" --json | jq -r '.[] | select(.registry == "pypi") | .execs | sort | join(",")' | head -1)" \
	"$(printf '%s\n' "$bg" "$pip_x" | sort | paste -sd,)" "  attributed to the pip exec and to the one still running"
like "$(jq -r 'select(.reported_by == "guest" and .registry == "pypi") | .request' "$blog" | head -1)" "^GET /pypi/0/simple/six/" \
	"  and recorded as pypi's"
like "$(sbx-ps --packages "$b" | tail -1)" $'\tpypi\t-\t-\trefused\t-\t0\tpackage installs are refused' "sbx-ps --packages lists it"
# A guest asking as fast as it can: recorded at most 20 a second.
t0=$(date +%s)
sbx-exec "$b" -- python3 -c '
import urllib.request
for i in range(400):
    try: urllib.request.urlopen("http://127.0.0.1:3141/npm/0/x%d" % i, timeout=5)
    except Exception: pass'
t1=$(date +%s)
n=$(jq -r 'select(.reported_by == "guest" and .registry == "npm") | .request' "$blog" | wc -l)
ok $(test "$n" -ge 1 && test "$n" -le $((20 * (t1 - t0 + 1))) && test "$n" -le 400; echo $?) \
	"400 refusals in $((t1 - t0)) s: $n recorded, within 20 a second"
is "$(sbx-exec "$b" -- echo alive)" alive "and the session is none the worse"
sbx-kill -q "$b" >/dev/null 2>&1

done_testing
