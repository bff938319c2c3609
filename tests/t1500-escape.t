#!/bin/bash
# Escapes above the TCP layer and around the deny list, probed from inside
# a session with an egress allowlist (security review findings 9, 11, 12):
# a keep-alive or pipelined request that switches Host, absolute-form
# targets for another host, decimal, octal and IPv6 literals, 192.0.0.0/24
# and 198.18.0.0/15 destinations, a neighbour on one of the host's own
# subnets, and a connection whose audit record cannot be written.  Every
# probe must fail and be logged.  The remote hosts are one network
# namespace this test makes, serving every name on every address it holds
# (shared hosting, as on a CDN); nothing is sent anywhere else.
. "$(dirname "$0")/lib.sh"
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
command -v ip >/dev/null && command -v python3 >/dev/null || skip_all "needs ip and python3"
S=$SBX_ROOT/var/lib/sbx/sessions
A=$SBX_ROOT/var/lib/sbx/audit.log

# ---- the test hosts: 198.51.100.o..o+15, routed and on-link ----
NS=sbxt1500-$$
VETH=sbxe$$
base=
# The search and the set-up under test_net_hosts's lock (tests/lib.sh), so
# a test running beside this one never picks the same addresses.
# 192.0.0.8 and 198.18.0.5 are routed host-wide for the whole run, not
# only while the addresses are laid out: a second t1500 (another suite on
# this machine) waits for this one to end.
exec {fixed_lock}>/run/lock/sbx-test-t1500.lock
flock "$fixed_lock"
exec {net_lock}>/run/lock/sbx-test-net.lock
flock "$net_lock"
for o in $(seq 128 16 240); do
	used=0
	for k in $(seq 0 15); do
		ip route show | grep -q "^198\.51\.100\.$((o + k))[/ ]" && used=1
		ip -br addr | grep -q "198\.51\.100\.$((o + k))/" && used=1
	done
	[ $used = 0 ] && base=$o && break
done
[ -n "$base" ] || skip_all "no free /28 in 198.51.100.0/24"
HOSTIP=198.51.100.$((base + 1)) WEB=198.51.100.$((base + 2))
LANHOST=198.51.100.$((base + 9)) LAN=198.51.100.$((base + 10)) # a /29 on the link
IETF=192.0.0.8 BENCH=198.18.0.5
net_cleanup() {
	[ -n "${WEBPID:-}" ] && kill "$WEBPID" 2>/dev/null
	ip link del "$VETH" 2>/dev/null
	ip netns del "$NS" 2>/dev/null
}
trap 'net_cleanup; _cleanup' EXIT
# The routed hosts are /32s with a route each (as in t1300); LAN shares a
# /29 with the host's end.  192.0.0.8 and 198.18.0.5 live in the namespace
# too, so that a proxy that does connect to them reaches only this test.
ip netns add "$NS" && ip link add "$VETH" type veth peer name eth0 netns "$NS" &&
	ip addr add "$HOSTIP/32" dev "$VETH" && ip addr add "$LANHOST/29" dev "$VETH" && ip link set "$VETH" up &&
	ip -n "$NS" link set eth0 up && ip -n "$NS" link set lo up &&
	ip -n "$NS" addr add "$LAN/29" dev eth0 || skip_all "cannot make the test hosts"
for a in $WEB $IETF $BENCH; do
	ip route add "$a/32" dev "$VETH" && ip -n "$NS" addr add "$a/32" dev eth0 || skip_all "cannot route to $a"
done
ip -n "$NS" route add "$HOSTIP/32" dev eth0 || skip_all "cannot route back"
exec {net_lock}>&- # the host's end now holds the /28's addresses: the next search skips them
# An HTTP/1.1 server with keep-alive that serves any Host, and writes down
# every request it reads ("HOST PATH").
cat >"$TEST_TMP/srv.py" <<'EOF'
import socket, sys, threading
log = sys.argv[1]
def serve(c):
    f = c.makefile('rb')
    while True:
        line = f.readline()
        if not line:
            break
        if line in (b'\r\n', b'\n'):
            continue
        host, length, close = '-', 0, False
        while True:
            h = f.readline()
            if h in (b'\r\n', b'\n', b''):
                break
            k, _, v = h.partition(b':')
            k = k.strip().lower()
            if k == b'host':
                host = v.strip().decode('latin-1')
            elif k == b'content-length':
                length = int(v)
            elif k == b'connection' and v.strip().lower() == b'close':
                close = True
        if length:
            f.read(length)
        parts = line.split()
        path = parts[1].decode('latin-1') if len(parts) > 1 else '?'
        with open(log, 'a') as o:
            o.write('%s %s\n' % (host, path))
        body = ('served %s %s\n' % (host, path)).encode()
        c.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n' % len(body) + body)
        if close:
            break
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', 80))
s.listen(64)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
EOF
SRVLOG=$TEST_TMP/served.log
ip netns exec "$NS" python3 "$TEST_TMP/srv.py" "$SRVLOG" &
WEBPID=$!
for _ in $(seq 50); do timeout 1 bash -c "exec 3<>/dev/tcp/$WEB/80" 2>/dev/null && break; sleep 0.1; done
: >"$SRVLOG"

export SBX_HOSTS_FILE=$TEST_TMP/hosts
cat >"$SBX_HOSTS_FILE" <<EOF
$WEB web.example.test
$WEB other.example.test
$IETF ietf.example.test
$BENCH bench.example.test
$LAN lan.example.test
EOF
cat >"$TEST_TMP/net.yaml" <<EOF
network:
  egress: allowlist
  allow:
    - {domain: web.example.test, ports: [80]}
    - {domain: ietf.example.test, ports: [80]}
    - {domain: bench.example.test, ports: [80]}
    - {domain: lan.example.test, ports: [80]}
    - {cidr: 192.0.0.0/24, ports: [80]}
    - {cidr: 198.18.0.0/15, ports: [80]}
    - {cidr: $LAN/32, ports: [80]}
EOF
id=$(sbx-create -q -p "$TEST_TMP/net.yaml")
ok $? "a session with an allowlist is created"
L=$S/$id/net.log
probe() { # probe NAME GUEST-SHELL-COMMAND: its output in $TEST_TMP/NAME
	sbx-exec --timeout 60s "$id" -- sh -c "$2" >"$TEST_TMP/$1" 2>&1
}
req() { # req HOST [PATH [EXTRA-HEADER]]: one request head, as printf's format
	printf 'GET %s HTTP/1.1\\r\\nHost: %s\\r\\n%s\\r\\n' "${2:-/}" "$1" "${3:+$3\\r\\n}"
}
served() { grep -c "$1" "$SRVLOG"; }

# ---- the control: keep-alive for the allowed host works ----
probe ctl "printf '$(req web.example.test /a)$(req web.example.test /b 'Connection: close')' | timeout 30 nc web.example.test 80"
is "$(grep -c '^served web.example.test /[ab]' "$TEST_TMP/ctl")" 2 \
   "control: two keep-alive requests for the allowed host are both served"

# ---- HTTP above the first request ----
probe pipe "printf '$(req web.example.test /p1)$(req other.example.test /p2 'Connection: close')' | timeout 30 nc web.example.test 80"
like "$(cat "$TEST_TMP/pipe")" "served web.example.test /p1" "a pipelined pair: the first request, for the allowed host, is served"
is "$(served 'other.example.test /p2')" 0 "the second, for another host on the same address, never reaches it"
probe keep "{ printf '$(req web.example.test /k1)'; sleep 2; printf '$(req other.example.test /k2 'Connection: close')'; } | timeout 30 nc web.example.test 80"
is "$(served 'other.example.test /k2')" 0 "a keep-alive request that switches Host later does not either"
probe abs1 "printf '$(req web.example.test http://other.example.test/a1 'Connection: close')' | timeout 30 nc web.example.test 80"
is "$(served /a1)" 0 "an absolute-form request for another host (Host the allowed one) is refused"
probe abs2 "printf '$(req web.example.test /a2)$(req web.example.test http://other.example.test/a3 'Connection: close')' | timeout 30 nc web.example.test 80"
is "$(served /a3)" 0 "so is one later on a connection"
probe cl "printf 'POST /c1 HTTP/1.1\\r\\nHost: web.example.test\\r\\nContent-Length: 5\\r\\n\\r\\nhello$(req other.example.test /c2 'Connection: close')' | timeout 30 nc web.example.test 80"
is "$(served 'web.example.test /c1') $(served /c2)" "1 0" "the request after a body is checked too"

# ---- literals ----
IFS=. read -r o1 o2 o3 o4 <<<"$WEB"
dec=$((((o1 * 256 + o2) * 256 + o3) * 256 + o4))
oct=$(echo "$WEB" | awk -F. '{ printf "0%o.0%o.0%o.0%o", $1, $2, $3, $4 }')
for lit in "$dec" "$oct" "[::ffff:$WEB]" "[64:ff9b::$WEB]"; do
	probe lit "printf '$(req "$lit" /lit 'Connection: close')' | timeout 30 nc $WEB 80; wget -q -O- http://$lit/lit"
done
is "$(served /lit)" 0 "decimal, octal, IPv4-mapped and NAT64 IPv6 literals reach nothing"
out=$(sbx-exec "$id" -- nslookup -type=a "$dec" 2>&1)
like "$out" "REFUSED" "a decimal literal is not a name the resolver answers"

# ---- the deny list ----
for n in ietf bench lan; do
	probe "$n" "printf '$(req $n.example.test /deny-$n 'Connection: close')' | timeout 30 nc $WEB 80"
	out=$(sbx-exec "$id" -- nslookup -type=a "$n.example.test" 2>&1)
	like "$out" "REFUSED" "the resolver refuses an allowed name that resolves to a denied address ($n)"
done
for a in $IETF $BENCH $LAN; do
	probe raw "printf '$(req "$a" /raw-$a 'Connection: close')' | timeout 30 nc $a 80"
done
is "$(served '/deny-\|/raw-')" 0 "192.0.0.8, 198.18.0.5 and a neighbour on the host's subnet are reached neither by name nor by cidr rule"

# ---- the record of it ----
is "$(wc -l <"$SRVLOG")" 6 "the test hosts saw only the 6 allowed requests (control 2, and the first of 4 probes)"
# A refusal's line is written as its connection closes: wait for the last.
for _ in $(seq 100); do jq -e "select(.address==\"$LAN\" and .domain==null)" "$L" >/dev/null 2>&1 && break; sleep 0.1; done
r() { jq -r "select(.proto==\"tcp\" and ($1)) | .reason" "$L" | head -1; }
like "$(r '.domain=="web.example.test" and (.reason // "" | test("another host"))')" \
   "asks for another host \(other.example.test\)" "the switched Host is logged, naming the host"
for _ in $(seq 50); do [ "$(jq -s "[.[] | select(.type==\"net.refused\" and .session==\"$id\") | .refusals[] | select(.reason | test(\"another host|target\")) | .count] | add // 0" "$A")" -ge 5 ] && break; sleep 0.1; done
is "$(jq -s "[.[] | select(.type==\"net.refused\" and .session==\"$id\") | .refusals[] | select(.reason | test(\"another host|target\")) | .count] | add // 0" "$A")" 5 \
   "and each refused request is counted in the audit trail (net.refused)"
like "$(r '.sniff=="conflict"')" "target names another host" "a conflicting absolute-form target is logged as such"
like "$(r '.reason // "" | test("target")')" "target" "and a later one"
like "$(r ".address==\"$WEB\" and .domain==null")" "raw address" "literals are logged as raw addresses"
like "$(r '.domain=="ietf.example.test"')" "192.0.0.0/24" "192.0.0.0/24 is logged as denied"
like "$(r '.domain=="bench.example.test"')" "198.18.0.0/15" "198.18.0.0/15 is logged as denied"
like "$(r '.domain=="lan.example.test"')" "subnet of the host" "the on-link neighbour is logged as denied"
like "$(r ".address==\"$BENCH\" and .domain==null")" "198.18.0.0/15" "so is the raw 198.18.0.5, though a cidr rule lists it"
like "$(r ".address==\"$LAN\" and .domain==null")" "subnet of the host" "and the raw neighbour"
nprobe=$(jq -r 'select(.proto=="tcp" and .reason != null) | .reason' "$L" | wc -l)
ndeny=$(jq -r 'select(.proto=="tcp" and (.reason // "" | test("another host|target"))) | .reason' "$L" | wc -l)
is "$ndeny" 5 "every HTTP probe is logged (pipelined, keep-alive, absolute-form twice, after a body)"
[ "$nprobe" -ge 17 ]
ok $? "every probe is logged ($nprobe refusals in net.log, 17 expected)"
[ "$nprobe" -ge 17 ] || jq -c 'select(.proto=="tcp") | [.domain, .address, .verdict, .reason]' "$L" | sed 's/^/#   /' 

# ---- an admitted connection whose audit record cannot be written ----
# The proxy holds no capability: a trail it may not write (mode 0400) is
# one it cannot record in, while the monitor (root) still can.
sbx-exec -d "$id" -- sh -c 'for i in $(seq 60); do
	printf "GET /fail-closed HTTP/1.1\r\nHost: web.example.test\r\nConnection: close\r\n\r\n" | timeout 10 nc web.example.test 80
	sleep 0.5; done' >/dev/null
for _ in $(seq 100); do [ "$(served /fail-closed)" -ge 1 ] && break; sleep 0.2; done
[ "$(served /fail-closed)" -ge 1 ]
ok $? "control: the guest's connections are served while the trail is writable"
chmod 0400 "$A"
for _ in $(seq 200); do grep -q 'cannot write the audit trail' "$L" && break; sleep 0.1; done
before=$(served /fail-closed)
n0=$(grep -c 'cannot write the audit trail' "$L")
for _ in $(seq 200); do [ "$(grep -c 'cannot write the audit trail' "$L")" -ge $((n0 + 2)) ] && break; sleep 0.1; done
after=$(served /fail-closed)
chmod 0600 "$A"
like "$(jq -r 'select(.reason // "" | test("audit trail")) | .verdict' "$L" | sort -u)" "^error$" \
   "a connection whose net.connect record cannot be written is refused (logged as an error)"
is "$(jq -r 'select(.reason // "" | test("audit trail")) | .bytes_out + .bytes_in' "$L" | sort -u)" 0 \
   "and not a byte moved"
is "$after" "$before" "the server saw no request while the trail was unwritable"
sbx-audit verify >/dev/null 2>&1
ok $? "the audit trail still verifies"

# ---- violations are signals: the exec's own record says what it ran into ----
out=$(sbx-exec --json "$id" -- sh -c 'for h in 198.18.0.5 other.example.test 192.0.0.8; do
	printf "GET / HTTP/1.0\r\nHost: $h\r\n\r\n" | timeout 10 nc $h 80; done; nslookup -type=a refused.example.test 10.0.2.2' 2>/dev/null)
like "$(printf '%s' "$out" | jq -r '.violations.egress.denied')" '^[1-9]' "the exec's record counts the connections refused while it ran"
like "$(printf '%s' "$out" | jq -r '.violations.egress.first | join(" ")')" '198\.18\.0\.5' \
   "and names the first destinations"
like "$(printf '%s' "$out" | jq -r '.violations.dns.denied')" '^[1-9]' "refused DNS queries too"
is "$(printf '%s' "$out" | jq -c '[.violations.oom, .violations.pids_limit, .violations.timeout]')" "[false,false,false]" \
   "no OOM, pids limit or timeout"
# The start of what an exec ran into is read before the guest can start
# it: the privileged half's read of the log's size, held back a second
# (strace), holds the command back, never the other way round (read after
# the EXEC went out, it missed a fast command's refusals on a loaded host).
if command -v strace >/dev/null; then
	mp=$(jq -r .monitor.pid "$S/$id/session.json")
	strace -qq -o /dev/null -p "$mp" -e trace=newfstatat -e inject=newfstatat:delay_enter=1000000 &
	sp=$!
	# Attached once the monitor has a tracer (else the check would prove nothing).
	for _ in $(seq 100); do [ "$(awk '/^TracerPid:/ {print $2}' /proc/"$mp"/status)" != 0 ] && break; sleep 0.05; done
	sleep 0.2 # past the attach itself
	out=$(sbx-exec --json "$id" -- sh -c 'printf "GET / HTTP/1.0\r\n\r\n" | timeout 10 nc 198.18.0.5 80' 2>/dev/null)
	kill "$sp"; wait "$sp" 2>/dev/null
	like "$(printf '%s' "$out" | jq -r '.violations.egress.denied')" '^[1-9]' \
	     "a refusal in a command's first moments is counted, however late the host reads the log's size"
else
	ok 0 "# SKIP strace not installed"
fi
out=$(sbx-exec --json "$id" -- true 2>/dev/null)
is "$(printf '%s' "$out" | jq -c '[.violations.egress.denied, .violations.dns.denied, .violations.packages.refused]')" \
   "[0,0,0]" "an exec that tried nothing has none"
top=$(cd "$(dirname "$0")/.." && pwd)
printf '%s' "$out" | python3 "$top/tests/tools/json-schema-check.py" validate --strict "$top/docs/schema" exec-result.json >/dev/null 2>&1
ok $? "sbx-exec --json with violations matches its schema"

sbx-kill "$id"
done_testing
