#!/bin/bash
# Network egress (network.egress: allowlist): a session reaches exactly the
# hosts its policy allows, by name, through its own proxy and resolver;
# everything else is refused and every attempt is logged.  The remote hosts
# are network namespaces this test makes (veth, 198.51.100.0/24 addresses,
# names from SBX_HOSTS_FILE); nothing is sent anywhere else.
. "$(dirname "$0")/lib.sh"
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
command -v ip >/dev/null && command -v python3 >/dev/null || skip_all "needs ip and python3"
S=$SBX_ROOT/var/lib/sbx/sessions
A=$SBX_ROOT/var/lib/sbx/audit.log

# ---- the test hosts: one namespace, two addresses (tests/lib.sh) ----
test_net_hosts net 2
NS=$NET_NS HOSTIP=$NET_HOSTIP WEB=${NET_IP[0]} OTHER=${NET_IP[1]}
net_cleanup() {
	[ -n "${WEBPID:-}" ] && kill "$WEBPID" 2>/dev/null
	[ -n "${UDPPID:-}" ] && kill "$UDPPID" 2>/dev/null
	[ -n "${HOLDPID:-}" ] && kill "$HOLDPID" 2>/dev/null
}
trap 'net_cleanup; _cleanup' EXIT
WWW=$TEST_TMP/www
mkdir -p "$WWW" && echo "hello from the allowed host" >"$WWW/index.html"
(cd "$WWW" && exec ip netns exec "$NS" python3 -m http.server 80 >"$TEST_TMP/http.log" 2>&1) &
WEBPID=$!
# Any UDP datagram that reaches the test hosts is written down.
ip netns exec "$NS" python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 9999))
while True:
    d, a = s.recvfrom(2048)
    open(sys.argv[1], "a").write("%s %r\n" % (a, d))
' "$TEST_TMP/udp.log" &
UDPPID=$!
for _ in $(seq 50); do timeout 1 bash -c "exec 3<>/dev/tcp/$WEB/80" 2>/dev/null && break; sleep 0.1; done

export SBX_HOSTS_FILE=$TEST_TMP/hosts
cat >"$SBX_HOSTS_FILE" <<EOF
$WEB web.example.test
$OTHER other.example.test
127.0.0.1 loop.example.test
10.1.2.3 private.example.test
$HOSTIP self.example.test
EOF
cat >"$TEST_TMP/net.yaml" <<EOF
network:
  egress: allowlist
  allow:
    - {domain: web.example.test, ports: [80]}
    - {domain: loop.example.test, ports: [80]}
    - {domain: private.example.test, ports: [80]}
    - {domain: self.example.test, ports: [80]}
    - {cidr: 169.254.169.254/32, ports: [80]}
    - {cidr: 10.0.0.0/8, ports: [8080]}
  max_connections: 8
EOF

# ---- no network unless asked for ----
plain=$(sbx-create -q)
ok $? "a session under the default policy is created"
is "$(sbx-exec "$plain" -- ls /sys/class/net | tr '\n' ' ')" "lo " "it has no network device, only loopback"
is "$(jq -r '.net // "none"' "$S/$plain/session.json")" none "and its record has no network"

# A mount on the host while the proxy starts (another session's, another
# test's, an operator's disk): the proxy must not hold a copy of it.
FOREIGN=$TEST_TMP/foreign
mkdir -p "$FOREIGN" && mount -t tmpfs -o size=1m sbx-t1300-foreign "$FOREIGN"
ok $? "a tmpfs mounted on the host (standing for another tenant's mount)"
id=$(sbx-create -q -p "$TEST_TMP/net.yaml")
ok $? "a session with network.egress: allowlist is created"
umount -l "$FOREIGN"
mac=$(jq -r .net.mac "$S/$id/session.json")
like "$mac" '^[0-9a-f][26ae]:([0-9a-f]{2}:){4}[0-9a-f]{2}$' "its record has a locally administered unicast MAC"
is "$(sbx-exec "$id" -- cat /sys/class/net/eth0/address)" "$mac" "which is the guest's eth0"
is "$(sbx-exec "$id" -- sh -c 'ip -4 addr show eth0 | grep -o "inet [0-9./]*"; ip route | grep -o "^default via [0-9.]*"')" \
   "inet 10.0.2.15/24
default via 10.0.2.2" "eth0 is 10.0.2.15/24 with the gateway 10.0.2.2"
is "$(sbx-exec "$id" -- cat /etc/resolv.conf)" "nameserver 10.0.2.2" "the resolver is the gateway"
ppid=$(jq -r .proxy_process.pid "$S/$id/session.json")
pstart=$(jq -r .proxy_process.start_time "$S/$id/session.json")
is "$(tr '\0' ' ' </proc/"$ppid"/cmdline 2>/dev/null | cut -d' ' -f1-3)" "sbx-proxy --id $id" \
   "the record names the session's proxy"
is "$(readlink /proc/"$ppid"/ns/net)" \
   "$(readlink /proc/self/ns/net)" "the proxy runs in the host's network namespace"
vmm=$(jq -r .vmm_process.pid "$S/$id/session.json")
# The proxy parses the guest's bytes: it holds no capability, cannot gain
# one, is filtered, counts against the session's host cgroup and sees the
# host's files read-only.
is "$(grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/"$ppid"/status | tr -s '\t ' ' ' | tr '\n' ' ')" \
   "CapPrm: 0000000000000000 CapEff: 0000000000000000 CapBnd: 0000000000000000 NoNewPrivs: 1 Seccomp: 2 " \
   "the proxy has no capabilities, no_new_privs and a seccomp filter"
is "$(cat /proc/"$ppid"/cgroup)" "$(cat /proc/"$vmm"/cgroup)" "it is in the session's host cgroup, with the VMM"
[ "$(readlink /proc/"$ppid"/ns/mnt)" != "$(readlink /proc/self/ns/mnt)" ]
ok $? "it has a mount namespace of its own"
nsenter -t "$ppid" -m touch /var/tmp/sbx-t1300-$$ 2>/dev/null
ok $((! $?)) "in which the host's files are read-only"
rm -f /var/tmp/sbx-t1300-$$
# Its root is built, not copied: the system files it reads (resolver
# configuration, libraries, CA certificates) and nothing else.  A copy of
# the host's mount table would keep every mount of that moment alive (an
# unmounted disk stays busy) and show other tenants' paths.
grep -q "$FOREIGN" /proc/"$ppid"/mountinfo
ok $((! $?)) "it holds no copy of a host mount made before it started (another tenant's)"
is "$(awk '$5 == "/" { print $4 }' /proc/"$ppid"/mountinfo)" / "its root is a mount of its own"
is "$(ls /proc/"$ppid"/root/ | grep -cvx -e etc -e usr -e run -e 'lib.*' -e bin -e sbin)" 0 \
   "holding only /etc, /usr, (resolv.conf's) /run and the library and binary links ($(ls /proc/"$ppid"/root/ | tr '\n' ' '))"
[ ! -e /proc/"$ppid"/root/"$SBX_ROOT" ] && [ ! -e /proc/"$ppid"/root/var/lib ] && [ ! -e /proc/"$ppid"/root/home ]
ok $? "no state directory, /var or /home by path"
awk '$6 !~ /(^|,)nodev(,|$)/' /proc/"$ppid"/mountinfo | grep -q .
ok $((! $?)) "and no device node it could open (nodev everywhere)"
# Its network half (the parsers of the guest's bytes) is a child with a uid
# of its own; the recorded process (the package cache) runs as the cache's
# uid; a second child, the writer, keeps uid 0 (it owns the audit trail)
# and writes the records both send it (t1565 looks at each closely).
pnet= pw=
for k in $(cat /proc/"$ppid"/task/"$ppid"/children); do
	if [ "$(awk '/^Uid:/ { print $2 }' /proc/"$k"/status)" = 0 ]; then pw=$k; else pnet=$k; fi
done
like "$pnet $pw" '^[0-9]+ [0-9]+$' "the proxy has two children, its network half and its writer"
is "$(awk '/^Uid:/ { print $2 }' /proc/"$ppid"/status)" $((0x5b000000 + 3 * (1 << 22))) \
   "the proxy itself runs as the package cache's uid"
cmp -s /proc/"$ppid"/mountinfo /proc/"$pnet"/mountinfo && ! grep -q "$FOREIGN" /proc/"$pnet"/mountinfo
ok $? "which has the same built root"
is "$(awk '/^Uid:/ {print ($2 == 0 || $3 == 0 || $4 == 0) ? "root" : "unprivileged"}' /proc/"$pnet"/status)" \
   unprivileged "which runs as an unprivileged uid"
is "$(grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/"$pnet"/status | tr -s '\t ' ' ' | tr '\n' ' ')" \
   "CapPrm: 0000000000000000 CapEff: 0000000000000000 CapBnd: 0000000000000000 NoNewPrivs: 1 Seccomp: 2 " \
   "with no capabilities, no_new_privs and the filter"
# (A sanitized build's report files too, make asan's: jail.c.)
san=$(sed -n 's/.*log_path=\([^:]*\).*/\1/p' <<<"${ASAN_OPTIONS:-}")
is "$(ls /proc/"$pnet"/fd 2>/dev/null | wc -l)" "$(ls -l /proc/"$pnet"/fd | grep -c -e socket: -e net.log -e /dev/null -e proxy.log -e pipe: -e signalfd -e hosts -e anon_inode ${san:+-e "$san."})" \
   "holding only sockets, net.log, the hosts file and its stdio (pipes the monitor bounds; no state directory)"
[ "$(readlink /proc/"$vmm"/ns/net)" != "$(readlink /proc/self/ns/net)" ]
ok $? "the VMM runs in the session's own namespace"
is "$(nsenter --net=/proc/"$vmm"/ns/net ip -o route | wc -l)" 1 \
   "whose only route is the guest's subnet (no way out but the proxy)"

# ---- allowed ----
# (nslookup -type=a: busybox's nslookup sends its A and AAAA queries with
# the same ID when the guest clock is coarse, as under TCG, and then drops
# the second answer as a duplicate and waits 5 s.)
out=$(sbx-exec --timeout 60s "$id" -- wget -O- http://web.example.test/ 2>/dev/null)
is "$out" "hello from the allowed host" "an allowed host is reached by name over HTTP"
out=$(sbx-exec "$id" -- nslookup -type=a web.example.test 2>&1)
like "$out" "Address: $WEB" "the resolver answers an allowed name with its address"

# ---- refused ----
out=$(sbx-exec "$id" -- nslookup -type=a other.example.test 2>&1)
like "$out" "REFUSED" "the resolver refuses a name that is not allowed"
sbx-exec --timeout 60s "$id" -- sh -c "printf 'GET / HTTP/1.0\r\nHost: other.example.test\r\n\r\n' | nc $OTHER 80" \
	>"$TEST_TMP/o" 2>&1
is "$(grep -c 'allowed host' "$TEST_TMP/o")" 0 "a host that is not allowed is not reached (asked for by name)"
sbx-exec --timeout 60s "$id" -- wget -O- "http://$WEB/" >"$TEST_TMP/o" 2>&1
ok $((! $?)) "a raw IP address is not reached, even one an allowed name resolves to"
is "$(grep -c 'allowed host' "$TEST_TMP/o")" 0 "and nothing of it came back"
sbx-exec --timeout 60s "$id" -- wget -O- http://169.254.169.254/ >/dev/null 2>&1
ok $((! $?)) "169.254.169.254 is not reached, although a cidr rule lists it"
for n in loop private self; do
	out=$(sbx-exec "$id" -- nslookup -type=a $n.example.test 2>&1)
	like "$out" "REFUSED" "an allowed name that resolves only to a denied address is refused ($n)"
done
sbx-exec --timeout 60s "$id" -- sh -c "printf 'GET / HTTP/1.0\r\nHost: loop.example.test\r\n\r\n' | nc $WEB 80" \
	>"$TEST_TMP/o" 2>&1
is "$(grep -c 'allowed host' "$TEST_TMP/o")" 0 "and a connection asking for it by name is refused"
sbx-exec --timeout 60s "$id" -- sh -c "echo datagram | nc -u -w 1 $WEB 9999; echo datagram | nc -u -w 1 10.0.2.2 9999" \
	>/dev/null 2>&1
sbx-exec -u root --timeout 60s "$id" -- ping -c 1 -W 2 "$WEB" >/dev/null 2>&1
ok $((! $?)) "ICMP does not leave the session"
sleep 1
is "$(cat "$TEST_TMP/udp.log" 2>/dev/null | wc -l)" 0 "UDP other than DNS does not leave the session"

# Another session: its guest has the same address in its own namespace, and
# neither reaches the other (a cidr rule for 10.0.0.0/8 changes nothing).
id2=$(sbx-create -q -p "$TEST_TMP/net.yaml")
ok $? "a second networked session is created"
sbx-exec -d "$id2" -- sh -c 'echo from-session-2 | nc -l -p 8080' >/dev/null
sleep 1
# Its own address is its own (the packets never leave the guest); the way
# out, the gateway, leads to the proxy, which refuses private addresses.
sbx-exec --timeout 60s "$id" -- sh -c 'echo hi | nc -w 3 10.0.2.15 8080; echo hi | nc -w 3 10.0.2.2 8080' \
	>"$TEST_TMP/o" 2>&1
is "$(grep -c from-session-2 "$TEST_TMP/o")" 0 "another session is not reached"

# ---- the record of it all ----
sleep 1 # the proxy writes a connection's line when it closes
L=$S/$id/net.log
jq -e . "$L" >/dev/null
ok $? "net.log is JSON lines"
q() { jq -r "select($1) | .verdict + \" \" + (.reason // \"-\")" "$L" | head -1; }
is "$(q '.proto=="tcp" and .domain=="web.example.test" and .verdict=="allow"' | cut -d' ' -f1)" allow \
   "the allowed connection is logged with its verdict"
like "$(jq -r 'select(.proto=="tcp" and .domain=="web.example.test") | "\(.address):\(.port) \(.bytes_in) \(.bytes_out)"' "$L" | head -1)" \
   "^$WEB:80 [1-9][0-9]* [1-9][0-9]*\$" "with the address, port and bytes both ways"
like "$(q '.proto=="tcp" and .domain=="other.example.test"')" "^deny not in the allowlist" \
   "the host that is not allowed is logged as denied"
like "$(q ".proto==\"tcp\" and .domain==null and .address==\"$WEB\"")" "^deny raw address" \
   "the raw address is logged as denied"
like "$(q '.proto=="tcp" and .address=="169.254.169.254"')" "^deny link-local" \
   "169.254.169.254 is logged as denied (link-local)"
like "$(q '.proto=="tcp" and .domain=="loop.example.test"')" "^deny loopback" \
   "the name that resolves to loopback is logged as denied"
like "$(q '.proto=="tcp" and .address=="10.0.2.2"')" "^deny private" \
   "a private address is logged as denied, although a cidr rule lists it"
like "$(q '.proto=="dns" and .domain=="other.example.test"')" "^deny not in the allowlist" \
   "DNS queries are logged with their verdict"
like "$(q '.proto=="dns" and .domain=="self.example.test"')" "^deny an address of the host" \
   "a name resolving to the host's own address is refused"
ntcp=$(jq -r 'select(.proto=="tcp")' "$L" | jq -s length)
is "$ntcp" 6 "every connection attempt has one line (1 allowed, 5 refused)"
is "$(grep '"type":"net.connect"' "$A" | grep -c "\"session\":\"$id\"")" 1 \
   "the admitted connection's verdict is in the audit trail (net.connect)"
# Refusals are counted once a second (net.refused), not a record each.
refused() { jq -s "[.[] | select(.type==\"net.refused\" and .session==\"$id\") | .refusals[] | select($1) | .count] | add // 0" "$A"; }
for _ in $(seq 50); do [ "$(refused '.proto=="tcp"')" -ge 5 ] && break; sleep 0.1; done
is "$(refused '.proto=="tcp"')" 5 "the 5 refused connections are counted in the audit trail (net.refused)"
is "$(refused '.proto=="tcp" and .domain=="other.example.test" and .reason=="not in the allowlist"')" 1 \
   "by destination and reason"
is "$(grep '"type":"net.close"' "$A" | grep -c web.example.test)" 1 \
   "the allowed connection's bytes are in the audit trail (net.close)"
like "$(grep '"type":"dns.query"' "$A" | grep -c web.example.test)" '^[1-9]' "answered DNS queries are in the audit trail"
like "$(refused '.proto=="dns" and .domain=="other.example.test"')" '^[1-9]' "refused ones are counted (net.refused)"
out=$(sbx-ps --net "$id")
like "$(echo "$out" | head -1)" "^TIME	PROTO	VERDICT	DOMAIN	ADDRESS	PORT" "sbx-ps --net prints the log as a table"
like "$(echo "$out" | grep web.example.test | grep tcp)" "allow	web.example.test	$WEB	80	" \
   "one line per attempt"
is "$(sbx-ps --net "$id" --json | jq 'length')" "$(wc -l <"$L")" "sbx-ps --net --json gives every record"
sbx-ps --net no-such-session >/dev/null 2>&1
is $? 4 "sbx-ps --net of a missing session exits 4"
top=$(cd "$(dirname "$0")/.." && pwd)
schema() { # REF DESCRIPTION <JSON
	local out
	out=$(python3 "$top/tests/tools/json-schema-check.py" validate --strict "$top/docs/schema" "$1" 2>&1)
	ok $? "$2"
	[ -z "$out" ] || printf '%s\n' "$out" | head -10 | sed 's/^/#   /'
}
sbx-ps --net "$id" --json >"$TEST_TMP/net.json"
schema ps-net.json "sbx-ps --net --json matches docs/schema/ps-net.json" <"$TEST_TMP/net.json"
sbx-audit --json >"$TEST_TMP/audit.json"
schema audit.json "the audit trail, net.* and dns.query included, matches docs/schema/audit.json" \
	<"$TEST_TMP/audit.json"

# ---- the caps ----
head -c 3000000 /dev/urandom >"$WWW/big"
# A server that keeps each connection open until $TEST_TMP/release exists
# (at most 120 s), then closes it.
ip netns exec "$NS" python3 -c '
import os, socket, sys, threading, time
def hold(c):
    for _ in range(1200):
        if os.path.exists(sys.argv[1]):
            break
        time.sleep(0.1)
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 81))
s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=hold, args=(c,), daemon=True).start()
' "$TEST_TMP/release" &
HOLDPID=$!
# Until the audit trail holds a TYPE record of SESSION's for PORT (at most
# 60 s): what the proxy did, rather than a guess at how long it takes.
wait_audit() { # TYPE SESSION PORT
	local i
	for i in $(seq 600); do
		grep "\"type\":\"$1\"" "$A" | grep "\"session\":\"$2\"" | grep -q "\"port\":$3[,}]" && return 0
		sleep 0.1
	done
	return 1
}
cat >"$TEST_TMP/caps.yaml" <<EOF
network:
  egress: allowlist
  allow:
    - {domain: web.example.test, ports: [80, 81]}
  max_connections: 1
  max_bytes: 1M
EOF
cap=$(sbx-create -q -p "$TEST_TMP/caps.yaml")
ok $? "a session with max_connections: 1 and max_bytes: 1M is created"
# One connection held open (admitted: its net.connect is in the trail), and
# a second one meanwhile.
sbx-exec -d "$cap" -- sh -c "printf 'GET / HTTP/1.1\r\nHost: web.example.test\r\n\r\n' |
	nc web.example.test 81" >/dev/null
wait_audit net.connect "$cap" 81 || diag "the held connection was not admitted within 60 s"
sbx-exec --timeout 60s "$cap" -- wget -O- http://web.example.test/ >/dev/null 2>&1
ok $((! $?)) "a second connection at once is refused (network.max_connections)"
touch "$TEST_TMP/release"
wait_audit net.close "$cap" 81 || diag "the held connection did not end within 60 s"
sbx-exec --timeout 60s "$cap" -- sh -c 'wget -O /tmp/big http://web.example.test/big' >/dev/null 2>&1
got=$(sbx-exec "$cap" -- sh -c 'wc -c </tmp/big 2>/dev/null || echo 0')
[ "$got" -lt 3000000 ] && [ "$got" -le 1048576 ]
ok $? "a download past network.max_bytes is cut ($got of 3000000 bytes)"
sleep 1
CL=$S/$cap/net.log
like "$(jq -r 'select(.proto=="tcp" and .verdict=="deny") | .reason' "$CL" | head -1)" "max_connections" \
   "the refusal names max_connections"
like "$(jq -r 'select(.proto=="tcp") | .reason // empty' "$CL" | grep max_bytes | head -1)" "network.max_bytes reached" \
   "the cut names max_bytes"
sbx-kill "$cap"

# ---- the proxy's life ----
kill -9 "$ppid"
sleep 1
is "$(jq -r .net.lost "$S/$id/session.json")" "proxy killed by signal 9" "a dead proxy is recorded (net.lost)"
grep -q '"type":"net.lost"' "$A"
ok $? "and audited"
sbx-exec --timeout 60s "$id" -- wget -O- http://web.example.test/ >/dev/null 2>&1
ok $((! $?)) "the session has no network after that"
is "$(sbx-exec "$id" -- echo still-here)" still-here "but runs on"
ppid2=$(jq -r .proxy_process.pid "$S/$id2/session.json")
pstart2=$(jq -r .proxy_process.start_time "$S/$id2/session.json")
sbx-kill "$id2"
[ "$(awk '$3 != "Z" {print $22}' /proc/"$ppid2"/stat 2>/dev/null)" != "$pstart2" ]
ok $? "sbx-kill ends the session's proxy"

# A monitor killed with -9: its proxy dies with it (PR_SET_PDEATHSIG), and
# sbx-gc reclaims the rest (it would also end a proxy whose recorded pid
# and start time still match).
id3=$(sbx-create -q -p "$TEST_TMP/net.yaml")
p3=$(jq -r .proxy_process.pid "$S/$id3/session.json")
p3start=$(jq -r .proxy_process.start_time "$S/$id3/session.json")
kill -9 "$(jq -r .monitor.pid "$S/$id3/session.json")"
sleep 1
sbx-gc --grace 0 >/dev/null
alive() { [ "$(awk '$3 != "Z" {print $22}' /proc/"$1"/stat 2>/dev/null)" = "$2" ]; }
for _ in $(seq 30); do alive "$p3" "$p3start" || break; sleep 0.1; done
! alive "$p3" "$p3start"
ok $? "no proxy is left after its monitor was killed and sbx-gc ran"
[ ! -e "$S/$id3" ]
ok $? "and the session is reclaimed"

# ---- bad input ----
printf 'network:\n  egress: allowlist\n  allow:\n    - {domain: "*"}\n' >"$TEST_TMP/bad.yaml"
sbx-create -q -p "$TEST_TMP/bad.yaml" >/dev/null 2>&1
is $? 3 "a malformed allowlist is refused with 3"
is "$(ls "$S" | sort | tr '\n' ' ')" "$(printf '%s\n' "$plain" "$id" | sort | tr '\n' ' ')" \
   "and creates nothing"
ca=$(sbx-create -q -p "$(dirname "$0")/../policies/coding-agent.yaml")
ok $? "a session under the shipped coding-agent policy is created"
is "$(jq -r .net.egress "$S/$ca/session.json")" allowlist "with egress through its proxy"
sbx-kill "$ca"

done_testing
