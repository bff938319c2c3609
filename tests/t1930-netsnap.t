#!/bin/bash
# Snapshots and suspend of real agent sessions (issue 15.6): a session
# under policies/coding-agent.yaml (its NIC, its proxy, HTTPS to pypi.org
# only) reaches a test host through its proxy before and after a save, in
# the sessions restored from that snapshot (each in a namespace, TAP and
# proxy of its own, with the MAC its memory image expects), and after a
# suspend and resume of a restored one.  A restore needs a policy with a
# NIC for a snapshot with one (3, nothing made); two live restores of one
# snapshot never share a namespace (nothing names one, so no name can be
# taken).  The test host is a network namespace of 198.51.100.0/24
# (tests/lib.sh) that SBX_HOSTS_FILE names pypi.org; nothing is sent
# anywhere else.
. "$(dirname "$0")/lib.sh"
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
command -v ip >/dev/null && command -v python3 >/dev/null && command -v openssl >/dev/null ||
	skip_all "needs ip, python3 and openssl"
ls -d "$SBX_TEMPLATES"/python@* >/dev/null 2>&1 || skip_all "no python template (make python-image)"
L=$SBX_ROOT/var/lib/sbx
A=$L/audit.log
POL=$(cd "$(dirname "$0")/.." && pwd)/policies/coding-agent.yaml
rec() { jq -r "$2" "$L/sessions/$1/session.json"; }
state() { sbx-ps --json "$1" | jq -r '.[0].state'; }

# ---- the test host: HTTPS on 443, answering with a line that counts ----
test_net_hosts nsnp 1
WEB=${NET_IP[0]}
openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=pypi.org -days 1 \
	-keyout "$TEST_TMP/key.pem" -out "$TEST_TMP/cert.pem" >/dev/null 2>&1 || skip_all "openssl cannot make a certificate"
ip netns exec "$NET_NS" python3 -c '
import socket, ssl, sys, threading
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 443)); s.listen(16)
def serve(c):
    try:
        t = ctx.wrap_socket(c, server_side=True)
        t.recv(4096)
        t.sendall(b"HTTP/1.0 200 OK\r\n\r\nhello from the test host\n")
        t.close()
    except Exception:
        c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
' "$TEST_TMP/cert.pem" "$TEST_TMP/key.pem" >"$TEST_TMP/https.log" 2>&1 &
WEBPID=$!
trap 'kill "$WEBPID" 2>/dev/null; _cleanup' EXIT
for _ in $(seq 50); do timeout 1 bash -c "exec 3<>/dev/tcp/$WEB/443" 2>/dev/null && break; sleep 0.1; done
export SBX_HOSTS_FILE=$TEST_TMP/hosts
echo "$WEB pypi.org" >"$SBX_HOSTS_FILE"

# fetch ID: HTTPS to pypi.org from the guest, through DNS and the proxy.
fetch() {
	local o
	o=$(fetch_once "$1")
	[ "$o" = "$HELLO" ] || net_diag "$L/sessions/$1"
	echo "$o"
}
fetch_once() {
	sbx-exec --timeout 90s "$1" -- python3 -c '
import socket, ssl
c = ssl.create_default_context(); c.check_hostname = False; c.verify_mode = ssl.CERT_NONE
s = c.wrap_socket(socket.create_connection(("pypi.org", 443), timeout=30), server_hostname="pypi.org")
s.sendall(b"GET / HTTP/1.0\r\nHost: pypi.org\r\n\r\n")
print(s.makefile("rb").read().split(b"\r\n\r\n", 1)[1].decode().strip())
' 2>&1
}
allowed() { grep "\"proto\":\"tcp\"" "$L/sessions/$1/net.log" | grep -c "\"domain\":\"pypi.org\".*\"verdict\":\"allow\""; }
netns_of() { readlink "/proc/$(rec "$1" .vmm_process.pid)/ns/net"; }
HELLO="hello from the test host"

# ---- a coding-agent session, saved ----
src=$(sbx-create -q -t python -p "$POL"); ok $? "a session under coding-agent.yaml"
is "$(fetch "$src")" "$HELLO" "it reaches the test host (pypi.org:443) through its proxy"
mac=$(rec "$src" .net.mac)
out=$(sbx-snapshot save --json "$src" agent); ok $? "sbx-snapshot save of a session with a NIC exits 0"
ref=$(jq -r .snapshot <<<"$out")
M=$L/snapshots/_/$(jq -r '.name + "@" + .version' <<<"$out")/manifest.json
is "$(jq -c '[.devices.network, .devices.mac]' "$M")" "[true,\"$mac\"]" "the manifest records the NIC and its MAC"
is "$(sbx-snapshot list --json agent | jq -r '.[0].network')" true "sbx-snapshot list says it has a network device"
is "$(fetch "$src")" "$HELLO" "the source reaches the test host after the save"
is "$(allowed "$src")" 2 "both connections are in its net.log"

# ---- restores: each its own namespace, TAP and proxy; the same MAC ----
n0=$(ls "$L/sessions" | wc -l)
sbx-create -q -s agent 2>"$TEST_TMP/err"; is "$?" 3 "a restore under a policy without a NIC is refused (3)"
like "$(cat "$TEST_TMP/err")" "saved with a network device: restore it under a policy with" "saying why"
is "$(ls "$L/sessions" | wc -l)" "$n0" "and nothing is left behind"
r1=$(sbx-create -q -s agent -p "$POL"); ok $? "a restore under coding-agent.yaml"
is "$(rec "$r1" .net.mac)" "$mac" "its record has the snapshot's MAC"
is "$(sbx-exec "$r1" -- cat /sys/class/net/eth0/address)" "$mac" "which its guest's eth0 has"
is "$(sbx-exec "$r1" -- hostname)" "$r1" "the restored guest knows who it is"
is "$(fetch "$r1")" "$HELLO" "the restored session reaches the test host through its own proxy"
# The gateway's MAC is the same in every namespace, so the ARP entry the
# source's guest learnt (in the image) holds in the new one.
is "$(sbx-exec "$r1" -- awk '$1 == "10.0.2.2" { print $4 }' /proc/net/arp)" 02:73:62:78:00:02 \
   "its gateway has the fixed MAC of every session's sbx0"
is "$(allowed "$r1")" 1 "the connection is in the restored session's net.log"
p1=$(rec "$r1" .proxy_process.pid)
[ "$p1" != "$(rec "$src" .proxy_process.pid)" ] && kill -0 "$p1"; ok $? "its proxy is its own (pid $p1)"
grep "\"net.connect\"" "$A" | grep -q "\"$r1\""; ok $? "audited as its own (net.connect)"
# A second restore while the first lives: the same MAC and guest address,
# in another namespace (anonymous: there is no name to collide on).
r2=$(sbx-create -q -s agent -p "$POL"); ok $? "a second restore of the same snapshot while the first runs"
ns_src=$(netns_of "$src") ns1=$(netns_of "$r1") ns2=$(netns_of "$r2")
[ "$ns1" != "$ns2" ] && [ "$ns1" != "$ns_src" ] && [ "$ns2" != "$ns_src" ]
ok $? "three sessions, three network namespaces ($ns_src $ns1 $ns2)"
is "$(fetch "$r2")" "$HELLO" "the second restore reaches the test host"
is "$(fetch "$r1")" "$HELLO" "and so does the first, still"

# ---- a restored session suspended and resumed ----
p1=$(rec "$r1" .proxy_process.pid)
sbx-snapshot suspend "$r1"; ok $? "the restored session is suspended"
is "$(state "$r1")" suspended "it is suspended"
! kill -0 "$p1" 2>/dev/null; ok $? "its proxy is gone"
is "$(fetch "$r1")" "$HELLO" "an exec resumes it and it reaches the test host through a new proxy"
[ "$(rec "$r1" .proxy_process.pid)" != "$p1" ]; ok $? "a new one"
diag "QEMU/TCG, coding-agent.yaml (1 GiB, 2 vCPUs): restore boot_ms $(rec "$r1" .boot_ms)," \
	"suspend_ms $(grep '"session.suspend"' "$A" | grep "\"$r1\"" | tail -1 | jq .suspend_ms)," \
	"resume_ms $(rec "$r1" .lifecycle.resume_ms)"
grep "\"session.resume\"" "$A" | grep "\"$r1\"" | grep -q "\"ok\":true"; ok $? "the resume is audited"

# ---- the source, suspended in turn: coding-agent.yaml through it all ----
sbx-snapshot suspend "$src"; ok $? "the coding-agent source session is suspended"
sbx-snapshot resume "$src" >/dev/null; ok $? "and resumed"
is "$(fetch "$src")" "$HELLO" "it reaches the test host after the resume"

sbx-kill "$src" "$r1" "$r2" >/dev/null; ok $? "the sessions are removed"
sbx-snapshot rm agent >/dev/null; ok $? "and the snapshot"
done_testing
