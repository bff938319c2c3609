#!/bin/bash
# The package cache cannot be used to make the host download, store or hash
# without limit (issue 11 item 4): HEAD is answered from the cache only, a
# download past packages.max_download is refused before its body is taken
# and two downloads cannot overdraw the budget together, a verified entry
# is not hashed again while its inode is unchanged, a cache scope keeps at
# most sbx.yaml's packages.cache_quota (least recently used evicted first),
# index pages past the budget are refused, and at most 4 upstream fetches
# of a session run at once.  The registries are network namespaces this
# test makes (as in t1400-packages.t); nothing is sent elsewhere.
. "$(dirname "$0")/lib.sh"
if ! ls "$SBX_TEMPLATES"/python@*/manifest.json >/dev/null 2>&1; then
	[ "${SBX_REQUIRE_PYTHON:-0}" = 1 ] || skip_all "no python template built (make python-image)"
	ok 1 "a python template in $SBX_TEMPLATES (make python-image)"
	done_testing
fi
[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces, /proc/PID/io)"
command -v ip >/dev/null && command -v python3 >/dev/null || skip_all "needs ip and python3"
[ -x "$SBX_BUILD/libexec/sbx/sbx-proxy" ] || skip_all "no sbx-proxy built"
S=$SBX_ROOT/var/lib/sbx/sessions
CACHE=$SBX_ROOT/var/lib/sbx/pkgcache
C="http://10.0.2.2:3141"

# ---- the registries: one namespace on a /29 no one uses ----
test_net_hosts pkgb 1
NS=$NET_NS HOSTIP=$NET_HOSTIP REG=${NET_IP[0]}
pkg_cleanup() {
	[ -n "${WEBPID:-}" ] && kill "$WEBPID" 2>/dev/null
	[ -n "${SLOWPID:-}" ] && kill "$SLOWPID" 2>/dev/null
}
trap 'pkg_cleanup; _cleanup' EXIT
UP=$TEST_TMP/registry
python3 "$(dirname "$0")/tools/pkg-index.py" --out "$UP" --base "http://$REG:8000" \
	--wheel sbxa:1.0:400000 --wheel sbxb:1.0:400000 --wheel sbxc:1.0:400000 \
	--wheel sbxd:1.0:600000 --wheel sbxe:1.0:600000 --wheel sbxbig:1.0:1600000 >"$TEST_TMP/packages.jsonl"
ok $? "the test registry is built"
want() { jq -r --arg n "$1" "select(.name == \$n) | .$2" "$TEST_TMP/packages.jsonl"; }
(cd "$UP" && exec ip netns exec "$NS" python3 -m http.server --bind "$REG" 8000 >"$TEST_TMP/http.log" 2>&1) &
WEBPID=$!

# A second registry whose index pages answer only when told to, counting
# how many requests it holds at once; and one project, chunky, whose 2 MB
# file comes chunked, without a Content-Length.
cat >"$TEST_TMP/slow.py" <<'EOF'
import hashlib, http.server, os, random, sys, threading
d = sys.argv[2]
lock = threading.Lock()
now = top = 0
data = random.Random(1).randbytes(2000000)
digest = hashlib.sha256(data).hexdigest()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        global now, top
        if self.path == "/slow/chunky/":
            body = ('<html><body><a href="/files/chunky-1.0-py3-none-any.whl#sha256=%s">c</a></body></html>\n'
                    % digest).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path.startswith("/files/chunky-"):
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for i in range(0, len(data), 65536):
                    c = data[i:i + 65536]
                    self.wfile.write(b"%x\r\n" % len(c) + c + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass
            return
        with lock:
            now += 1
            top = max(top, now)
            open(d + "/top.tmp", "w").write(f"{now} {top}\n")
            os.replace(d + "/top.tmp", d + "/top")
        while not os.path.exists(d + "/release"):
            threading.Event().wait(0.05)
        with lock:
            now -= 1
        body = b"<html><body></body></html>\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer((sys.argv[1], 8001), H).serve_forever()
EOF
mkdir -p "$TEST_TMP/slow"
ip netns exec "$NS" python3 "$TEST_TMP/slow.py" "$REG" "$TEST_TMP/slow" >"$TEST_TMP/slow.log" 2>&1 &
SLOWPID=$!
up=1
for _ in $(seq 100); do
	python3 -c "import urllib.request as u; u.urlopen('http://$REG:8000/simple/sbxa/', timeout=1)" \
		2>/dev/null && up=0 && break
	sleep 0.1
done
ok $up "the registry answers on $REG:8000"
requests() { grep -cE '"(GET|HEAD) ' "$TEST_TMP/http.log"; }

# The host's cache quota: 1M per scope, so three 400 KB wheels do not fit.
mkdir -p "$SBX_ROOT/etc/sbx"
printf 'packages:\n  cache_quota: 1M\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
policy() { # policy FILE MAX_DOWNLOAD
	cat >"$1" <<EOF
resources:
  exec_timeout: {default: 10m, max: 1h}
packages:
  mode: allowlist
  registries:
    - {type: pypi, url: "http://$REG:8000/simple"}
    - {type: pypi, url: "http://$REG:8001/slow"}
  max_download: $2
EOF
}
policy "$TEST_TMP/big.yaml" 4M
policy "$TEST_TMP/small.yaml" 1M

# In the guest: fetch each URL (HEAD when it starts with "HEAD "), one line
# per URL: status, and bytes read.
cat >"$TEST_TMP/get.py" <<'EOF'
import sys, urllib.request, urllib.error
for a in sys.argv[1:]:
    m = "GET"
    if a.startswith("HEAD "):
        m, a = "HEAD", a[5:]
    try:
        r = urllib.request.urlopen(urllib.request.Request("http://10.0.2.2:3141" + a, method=m), timeout=300)
        print(r.status, len(r.read()), r.headers.get("Content-Length"))
    except urllib.error.HTTPError as e:
        print(e.code, e.reason)
EOF
fetch() { # fetch SESSION URL...
	local s=$1
	shift
	sbx-exec "$s" -- python3 -c "$(cat "$TEST_TMP/get.py")" "$@" 2>&1
}
file_url() { echo "/pypi/0/files/$1/$(want "$1" file)"; }
entry() { echo "$CACHE/shared/sha256-$(want "$1" sha256)"; }

a=$(sbx-create -q -t python -p "$TEST_TMP/big.yaml")
ok $? "a session with packages.mode: allowlist"
log=$S/$a/packages.log
proxy=$(jq -r .proxy_process.pid "$S/$a/session.json")
ok $(test -d "/proc/$proxy"; echo $?) "its proxy runs (pid $proxy)"
rchar() { awk '/^rchar:/ {print $2}' "/proc/$proxy/io"; }

# ---- HEAD is answered from the cache only ----
n0=$(requests)
out=$(fetch "$a" "HEAD $(file_url sbxa)" "HEAD /pypi/0/simple/sbxa/")
like "$out" '^404 sbxa-1\.0-py3-none-any\.whl is not in the package cache \(HEAD is answered from the cache only\)' \
	"HEAD of a file not in the cache: 404, saying why"
like "$out" $'\n''404 the index of sbxa is not cached' "HEAD of an index page: 404"
is "$(requests)" "$n0" "and the registry was asked nothing"
ok $(test ! -e "$(entry sbxa)"; echo $?) "nothing was kept"
is "$(jq -r .bytes "$S/$a/pkgbudget.json" 2>/dev/null || echo 0)" 0 "nothing was charged"

# ---- a second hit is not hashed again ----
size=$(want sbxa size)
out=$(fetch "$a" "$(file_url sbxa)")
is "$out" "200 $size $size" "GET sbxa: served"
is "$(jq -r 'select(.kind == "file" and .package == "sbxa" and .method == null) | [.cache, .verified] | join(" ")' "$log")" \
	"miss hashed" "a miss, hashed as it was downloaded"
ok $(test -f "$(entry sbxa)"; echo $?) "and kept under its hash"
n1=$(requests)
r0=$(rchar)
out=$(fetch "$a" "HEAD $(file_url sbxa)" "HEAD $(file_url sbxa)")
r1=$(rchar)
is "$out" "200 0 $size"$'\n'"200 0 $size" "HEAD of a cached file: 200 with its length, twice"
is "$(requests)" "$n1" "the registry was asked nothing"
is "$(jq -r 'select(.method == "HEAD" and .verdict == "ok") | .verified' "$log" | tr '\n' ' ')" "cached cached " \
	"packages.log: verified: cached (the recorded hash of an unchanged inode)"
ok $(test $((r1 - r0)) -lt "$size"; echo $?) "the proxy read $((r1 - r0)) bytes for both, less than the file ($size)"
touch "$(entry sbxa)" # a new ctime: the record no longer stands for the content
r0=$(rchar)
fetch "$a" "HEAD $(file_url sbxa)" >/dev/null
r1=$(rchar)
is "$(jq -r 'select(.method == "HEAD" and .verdict == "ok") | .verified' "$log" | tail -1)" rehashed \
	"an entry whose inode changed is hashed again"
ok $(test $((r1 - r0)) -ge "$size"; echo $?) "reading all of it ($((r1 - r0)) bytes)"
r0=$(rchar)
fetch "$a" "HEAD $(file_url sbxa)" >/dev/null
r1=$(rchar)
is "$(jq -r 'select(.method == "HEAD" and .verdict == "ok") | .verified' "$log" | tail -1)" cached "and then not again"
ok $(test $((r1 - r0)) -lt "$size"; echo $?) "($((r1 - r0)) bytes read)"
echo garbage >"$(entry sbxa)"
is "$(fetch "$a" "HEAD $(file_url sbxa)" | cut -d' ' -f1)" 404 "a corrupted entry does not answer HEAD"
ok $(test ! -e "$(entry sbxa)"; echo $?) "and is removed"

# ---- the quota: least recently used entries go first ----
out=$(fetch "$a" "$(file_url sbxa)" "$(file_url sbxb)" "$(file_url sbxa)" "$(file_url sbxc)" | cut -d' ' -f1 | tr '\n' ' ')
is "$out" "200 200 200 200 " "GET a, b, a again, c"
is "$(jq -r 'select(.kind == "file" and .verdict == "ok" and .method == null) | .package + ":" + .cache' "$log" |
	tail -4 | tr '\n' ' ')" "sbxa:miss sbxb:miss sbxa:hit sbxc:miss " "misses, and a hit for a"
ok $(test -f "$(entry sbxa)" -a -f "$(entry sbxc)"; echo $?) "a (used last but one) and c (new) are kept"
ok $(test ! -e "$(entry sbxb)"; echo $?) "b, the least recently used, was evicted"
total=$(find "$CACHE/shared" -maxdepth 1 -name 'sha*' -type f -printf '%s\n' | awk '{t += $1} END {print t + 0}')
ok $(test "$total" -le 1048576; echo $?) "the scope holds $total bytes, within the 1M quota"
n2=$(requests)
is "$(fetch "$a" "HEAD $(file_url sbxb)" | cut -d' ' -f1)" 404 "HEAD of the evicted file: 404"
is "$(requests)" "$n2" "without asking the registry"

# ---- at most 4 upstream fetches at once ----
# The proxy's TCP connections to the slow registry (in the host's
# namespace, where it fetches), and its threads waiting for a slot.
IFS=. read -r r1 r2 r3 r4 <<<"$REG"
slowhex=$(printf '%02X%02X%02X%02X:1F41' "$r4" "$r3" "$r2" "$r1")
upstream() { awk -v r="$slowhex" '$3 == r && $4 == "01"' "/proc/$proxy/net/tcp" | wc -l; }
waiting() { cat /proc/"$proxy"/task/*/comm 2>/dev/null | grep -c '^pkgcache-wait$'; }
sbx-exec "$a" -- python3 -c '
import threading, urllib.request
def get(i):
    try:
        urllib.request.urlopen("http://10.0.2.2:3141/pypi/1/simple/slow%d/" % i, timeout=300).read()
    except Exception:
        pass
ts = [threading.Thread(target=get, args=(i,)) for i in range(8)]
[t.start() for t in ts]
[t.join() for t in ts]' >/dev/null 2>&1 &
EXECPID=$!
seen=1
for _ in $(seq 600); do
	# 4 requests upstream, 4 waiting for a slot.
	[ "$(waiting)" = 4 ] && [ "$(cut -d' ' -f1 "$TEST_TMP/slow/top" 2>/dev/null)" = 4 ] && seen=0 && break
	sleep 0.1
done
ok $seen "8 requests at once: 4 wait for a slot (threads named pkgcache-wait), the registry sees 4"
is "$(upstream)" 4 "and the proxy has 4 connections to it, no more"
is "$(cut -d' ' -f2 "$TEST_TMP/slow/top")" 4 "never more than 4 at once"
touch "$TEST_TMP/slow/release"
wait "$EXECPID"
is "$(cut -d' ' -f2 "$TEST_TMP/slow/top")" 4 "and the rest followed, still at most 4"
is "$(jq -r 'select(.registry == "pypi/1" and .kind == "index") | .verdict' "$log" | sort | uniq -c | awk '{print $1, $2}')" \
	"8 ok" "all 8 were served"

# ---- the budget (1M) ----
b=$(sbx-create -q -t python -p "$TEST_TMP/small.yaml")
ok $? "a session with max_download: 1M"
blog=$S/$b/packages.log
n3=$(requests)
out=$(fetch "$b" "$(file_url sbxbig)")
like "$out" '^403 packages\.max_download of policy small\.yaml exceeded: sbxbig-1\.0-py3-none-any\.whl is larger than' \
	"a 1.6 MB file is refused with 403 naming the key"
is "$(jq -r 'select(.package == "sbxbig" and .kind == "file") | [.verdict, .size] | join(" ")' "$blog")" "refused 0" \
	"refused with none of its body taken (size 0)"
used=$(jq -r .bytes "$S/$b/pkgbudget.json")
ok $(test "$used" -lt 10000; echo $?) "the budget holds only the index page ($used bytes)"
# Two 600 KB files at once: each fits alone, not both.
out=$(sbx-exec "$b" -- python3 -c '
import sys, threading, urllib.request, urllib.error
res = {}
def get(u):
    try:
        res[u] = str(len(urllib.request.urlopen("http://10.0.2.2:3141" + u, timeout=300).read()))
    except urllib.error.HTTPError as e:
        res[u] = str(e.code)
ts = [threading.Thread(target=get, args=(u,)) for u in sys.argv[1:]]
[t.start() for t in ts]
[t.join() for t in ts]
print(" ".join(sorted(res.values())))' "$(file_url sbxd)" "$(file_url sbxe)" 2>&1)
is "$out" "403 $(want sbxd size)" "two downloads that fit only one at a time: one served, one refused"
is "$(jq -r 'select(.kind == "file" and .verdict == "refused" and (.package == "sbxd" or .package == "sbxe")) | .size' "$blog")" \
	0 "the refused one took none of its body"
used=$(jq -r .bytes "$S/$b/pkgbudget.json")
ok $(test "$used" -le 1048576; echo $?) "the budget is not overdrawn ($used of 1048576)"
# Index pages count too: a 400 KB file, then index pages until the budget
# is spent.
is "$(fetch "$b" "$(file_url sbxa)" | cut -d' ' -f1)" 200 "a 400 KB file still fits"
out=$(sbx-exec "$b" -- python3 -c '
import urllib.request, urllib.error
n = 0
while n < 5000:
    try:
        urllib.request.urlopen("http://10.0.2.2:3141/pypi/0/simple/sbxbig/", timeout=60).read()
        n += 1
    except urllib.error.HTTPError as e:
        print(n > 0, e.code)
        break' 2>&1)
is "$out" "True 403" "index pages are served until the budget is spent, then refused with 403"
like "$(jq -r 'select(.kind == "index" and .verdict == "refused") | .reason' "$blog" | tail -1)" \
	'packages\.max_download of policy small\.yaml exceeded' "naming the key"
used=$(jq -r .bytes "$S/$b/pkgbudget.json")
ok $(test "$used" -le 1048576; echo $?) "still within the budget ($used of 1048576)"

# Without a Content-Length: taken only as far as the budget goes.
c=$(sbx-create -q -t python -p "$TEST_TMP/small.yaml")
ok $? "a third session with max_download: 1M"
entries() { find "$CACHE/shared" -maxdepth 1 -name 'sha*' | sort | tr '\n' ' '; }
kept=$(entries)
out=$(fetch "$c" /pypi/1/files/chunky/chunky-1.0-py3-none-any.whl)
like "$out" '^403 packages\.max_download of policy small\.yaml exceeded: chunky-1\.0-py3-none-any\.whl is larger than' \
	"a 2 MB file sent chunked is refused with 403"
got=$(jq -r 'select(.package == "chunky" and .kind == "file") | .size' "$S/$c/packages.log")
used=$(jq -r .bytes "$S/$c/pkgbudget.json")
ok $(test "$got" -lt 1048576 -a "$used" -le 1048576; echo $?) \
	"taking $got bytes of its body: the budget holds $used of 1048576"
is "$(entries)" "$kept" "nothing was kept"

sbx-kill "$a" "$b" "$c" >/dev/null

# ---- a tenant's own cache quota: quotas.tenants.T.cache_bytes ----
# The host's default stays large; tenant qt's scope may keep 1M, so of
# three 400 KB wheels it keeps two.
printf 'packages:\n  cache_quota: 64M\nquotas:\n  tenants:\n    qt: {cache_bytes: 1M}\n' \
	>"$SBX_ROOT/etc/sbx/sbx.yaml"
t=$(sbx-create -q -t python --tenant qt -p "$TEST_TMP/big.yaml")
ok $? "a session of tenant qt, whose cache quota is 1M"
out=$(fetch "$t" "$(file_url sbxa)" "$(file_url sbxb)" "$(file_url sbxc)" | cut -d' ' -f1 | tr '\n' ' ')
is "$out" "200 200 200 " "it fetches a, b and c"
total=$(find "$CACHE/tenant-qt" -maxdepth 1 -name 'sha*' -type f -printf '%s\n' | awk '{t += $1} END {print t + 0}')
ok $(test "$total" -gt 0 -a "$total" -le 1048576; echo $?) "its scope holds $total bytes, within its 1M"
ok $(test ! -e "$CACHE/tenant-qt/sha256-$(want sbxa sha256)"; echo $?) "a, the least recently used, was evicted"
sbx-kill "$t" >/dev/null
done_testing
